"""Mending what a signal's exception cut short in the scheduler's handlers.

A `KeyboardInterrupt` raised by Python's signal handler lands on the main
thread at any function call. When that thread holds the scheduler's lock,
handling messages (its own calls' or other threads'), the handler stops part
way: `Scheduler._handle` keeps the exception, and the thread raises it once it
lets go of the lock. What the handler did stands; what it left half done
would lose calls (a run settled by a cancel but never ended, a result made but
its caller never woken, the calls a batch's end lets start never queued). So
the thread mends it before it lets go (`mend`):

- the runs a handler was working on are read off the exception's traceback
  (the frames of toolbus's code and their locals): only an interrupt's path
  looks, the common call pays nothing for this;
- a run whose attempt the scheduler claimed (`SUPERVISOR`: a cancel, a
  deadline) but did not end ends as it was going to: `cancelled` with the
  cancel's reason, or `timeout`. Only a run the traceback shows a claiming
  handler (`_CLAIMS`) was working on (its `run`): a run merely seen by an
  interrupted frame (`stats()` looking at the queue, a retry being queued)
  is not being ended, whatever its mark says;
- a run with its result but not closed is closed, its `tool:finished`
  announced first if `finish` was cut before it announced it, and its end
  written to the journal if `finish` may have been cut before it wrote it
  (the journal session's `ended` writes a call's end once: again, nothing);
- a run closed part way (`_closed_run` takes it out of `runs_open` last) has
  the rest done: its slot, its caller woken, its batch's books (the calls its
  end let start are queued, those that waited for a deferred one end, the
  batch ends if it was the last);
- a run taken off a queue and not started, or left waiting for a timer it
  never armed, a slot given back to some of its groups only, a message
  whose handler had not begun, the reports of a grouped `Reports` after the
  one cut: found again (`_lost.py`);
- whatever other threads queued meanwhile is handled.

Each step looks at the run's state first, so mending twice does nothing more.
A second interrupt while mending leaves the mending owed (`OWED` in place of
the interrupt): the thread settles again once it let go of the lock
(`Scheduler._settle`), and so does whichever thread next lets go of it.

Any other exception while mending is a bug of toolbus's: logged as the
scheduler logs its own ("supervisor error"), the run it was mending left as
it is, and never raised to a caller, nor left owed.
"""

from __future__ import annotations

import dis
import logging
import os
import traceback
from typing import TYPE_CHECKING, Any

from .. import pipeline as _pipeline
from .._interrupts import interrupts_caller
from ..bus import _signals as sig
from ..bus._events import CallFinished
from ..models import ErrorCode
from ..pipeline import SUPERVISOR, Run, _results, ran_out
from ._batches import finish_batch
from ._lost import (
    finish_release,
    finish_take,
    note_left,
    rearm,
    redo_wait,
    requeue_lost,
    requeue_taken,
    unpark_free,
)
from ._messages import Grace, RetryDue

if TYPE_CHECKING:
    from ._scheduler import Scheduler

__all__ = ["OWED", "Owed", "Torn", "mend", "note_torn"]

log = logging.getLogger("toolbus.actors")

# Whose frames are read: toolbus's own.
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# How a run the scheduler claimed ends, by the handler that claimed it.
_TIMEOUTS = frozenset({"_on_deadline", "_spent_before_start", "_undecided", "_back_off"})
# The handlers that claim an attempt (`try_settle(n, SUPERVISOR)`) and then end
# the call (or park it for its retry), each on its local `run`.
_CLAIMS = _TIMEOUTS | {"_cancel_run", "_dispatch", "_on_grace"}
INTERRUPTED = "cancelled: the thread handling it was interrupted"
HANDING = "interrupted as it was handed to its backend"
# How many rounds of mending (each may be cut short and find more) before the
# rest is left to the next thread that lets go of the lock.
ROUNDS = 8


class Owed(BaseException):
    """In `Scheduler._interrupt`: mending is owed, but nothing is to be raised."""


OWED = Owed()


def _offset(code: Any, name: str) -> int:
    """The offset of the first instruction of `code` that loads `name`."""
    for ins in dis.get_instructions(code):
        if ins.argval == name and ins.opname in ("LOAD_METHOD", "LOAD_ATTR", "LOAD_GLOBAL"):
            return ins.offset
    raise LookupError(name)  # pragma: no cover (caught by the tests)


_FINISH = _results.finish.__code__
_FINISH_COMPLETE = _offset(_FINISH, "try_complete")  # its result set from here on
_FINISH_ANNOUNCE = _offset(_FINISH, "emit_later")  # its tool:finished from here on
_DETACH = "_detach"


class Torn:
    """What the traceback says of one run a handler was cut short on."""

    __slots__ = (
        "announce", "arm", "begun", "detached", "due", "ending", "journal", "redo",
        "released_to", "taken_to", "taking", "unsent",
    )  # fmt: skip

    def __init__(self) -> None:
        # How it ends if the scheduler claimed it: (status, code, reason);
        # None unless a claiming handler was cut short working on it.
        self.ending: tuple[str, ErrorCode, str] | None = None
        self.detached = False  # its job was being let go of (`_detach`)
        # The result `finish` made and was cut short before announcing.
        self.announce: Any = None
        # The result `finish` made and may have been cut short before journaling.
        self.journal: Any = None
        self.taking = False  # being taken off a queue and started (`_lost.TAKING`)
        self.due: RetryDue | None = None  # its retry being queued (`_on_retry_due`)
        self.unsent = False  # given its slot, its job not handed to its backend
        self.begun: int | None = None  # the attempt `_dispatch` counted, not started
        self.arm: tuple[Any, Any] | None = None  # `_arm`'s (delay, make), its timer not kept
        self.released_to: Any = None  # the group `Capacity.release` gave back last
        self.taken_to: tuple[Any] | None = None  # ... `Capacity.take` took last (or None)
        self.redo: tuple[str, Any] | None = None  # a wait cut before its timer (`_lost._REDO`)


def note_torn(error: BaseException, torn: dict[Run, Torn]) -> None:
    """Add to `torn` the runs on the frames of toolbus's code that `error`
    (and the interrupts it was raised while handling) came through."""
    try:
        _note_all(error, torn)
    except BaseException as e:  # (a bug: logged; a signal's, raised)
        if interrupts_caller(e):
            raise
        _bug("noting what an interrupt cut short", e)


def _bug(doing: str, e: BaseException) -> None:
    log.error("supervisor error %s:\n%s", doing, "".join(traceback.format_exception(e)))


def _note_all(error: BaseException, torn: dict[Run, Torn]) -> None:
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            code = frame.f_code
            if code.co_filename.startswith(_OURS):
                loc = frame.f_locals
                for value in list(loc.values()):
                    if isinstance(value, Run) and value.ticket is not None:
                        _note(torn.setdefault(value, Torn()), code, loc, tb, value)
                msg = loc.get("msg")
                if (
                    code.co_name == "_on_retry_due"
                    and type(msg) is RetryDue
                    and msg.run.ticket is not None
                ):
                    torn.setdefault(msg.run, Torn()).due = msg
            tb = tb.tb_next
        e = e.__context__


def _note(t: Torn, code: Any, loc: dict[str, Any], tb: Any, run: Run) -> None:
    name = code.co_name
    note_left(t, code, loc, tb.tb_lasti, run)
    if name in _CLAIMS:
        if loc.get("run") is not run:
            return  # (another run it had at hand: not the one it works on)
        cancel = run.ticket.cancel
        if name == "_cancel_run":
            t.ending = ("cancelled", loc["code"], loc["reason"])
        elif name in _TIMEOUTS or (name == "_on_grace" and cancel is None):
            t.ending = ("timeout", ErrorCode.CANCELLED, "")  # (its code and text: `ran_out`)
        elif cancel is not None:
            t.ending = ("cancelled", cancel[0], cancel[1])
        elif t.ending is None:
            t.ending = ("cancelled", ErrorCode.CANCELLED, INTERRUPTED)
    elif name == _DETACH:
        t.detached = True
    elif code is _FINISH and loc.get("run") is run:
        lasti = tb.tb_lasti
        result = loc.get("result")
        if lasti < _FINISH_COMPLETE or result is None:
            return
        if run.journaled and (lasti > _FINISH_COMPLETE or run.result is result):
            published = loc.get("published")  # (what `finish` journals: see there)
            t.journal = published if published is not None else result
        if lasti == _FINISH_COMPLETE or lasti < _FINISH_ANNOUNCE:
            if lasti > _FINISH_COMPLETE or run.result is result:
                t.announce = result
            return
        # In `emit_later` itself: announced once the announcer numbered it.
        inner = tb.tb_next
        while inner is not None:
            event = inner.tb_frame.f_locals.get("event")
            if type(event) is list and event and event[0] is CallFinished:
                if len(event) > 5:
                    return
                break
            inner = inner.tb_next
        t.announce = result


def mend(sv: Scheduler, first: BaseException) -> BaseException | None:
    """Under the lock, as the holder lets go after an interrupt: make every
    run the interrupted handlers left half done whole, and handle what is
    queued. Returns the interrupt to raise (None when `first` is `OWED`:
    another thread's, mended here). Leaves `OWED` if it could not finish
    (a signal's exception, again); raises only a signal's."""
    raised = None if first is OWED else first
    sv._interrupt = OWED
    torn = sv._torn
    pending = sv._pending
    for _ in range(ROUNDS):
        try:
            requeue_lost(sv)  # (first: its counts are what the rest goes by)
            while torn:
                run, t = next(iter(torn.items()))
                try:
                    _mend_run(sv, run, t)
                except BaseException as e:
                    if interrupts_caller(e):
                        raise  # (a signal's: that run is mended again)
                    _bug(f"mending call {run.call.id}", e)  # (left as it is)
                torn.pop(run, None)
            unpark_free(sv)
            sv._handle(None)  # (a pump: what the mending let start, starts)
            if pending:
                sv._drain()  # (an interrupt there is kept in `_interrupt`, its runs noted)
        except BaseException as e:  # a signal's, again
            if interrupts_caller(e):
                sv._interrupt = e
                note_torn(e, torn)
            else:  # (a bug: nothing is left owed for it)
                _bug("mending", e)
                torn.clear()
        now = sv._interrupt
        if now is not OWED:
            raised, sv._interrupt = now, OWED
            continue
        if not torn and not pending:
            sv._interrupt = None
            break
    return raised


def _mend_run(sv: Scheduler, run: Run, torn: Torn) -> None:
    t = run.ticket
    if torn.taken_to is not None:
        taken_to, torn.taken_to = torn.taken_to, None
        finish_take(sv, run, taken_to)
    if torn.unsent and t.slot and not t.closed and run.result is None:
        # As `_dispatch` does when interrupted as its backend takes the job.
        sv._cancel_run(run, ErrorCode.CANCELLED, HANDING, only_unstarted=False)
    elif torn.taking or torn.due is not None:
        requeue_taken(sv, run, torn.due, torn.begun)
    if torn.released_to is not None:
        at, torn.released_to = torn.released_to, None
        finish_release(sv, run, at)
    if torn.redo is not None:
        redo, torn.redo = torn.redo, None
        redo_wait(sv, run, redo)
    if torn.arm is not None:
        arm, torn.arm = torn.arm, None
        rearm(sv, run, arm)
    if run.result is None:
        ending = torn.ending
        if (
            ending is None  # no claiming handler was cut short on it
            or t.closed
            or run.settled != SUPERVISOR
            or t.armed is Grace
            or t.armed is RetryDue
        ):
            return  # open, and someone (a worker, a timer) will end it; or ended
        status, code, reason = ending
        if status == "timeout":
            code, reason = ran_out(run, t.timed_out_in)
        run.interrupt("closed" if sv.closed else "timeout" if status == "timeout" else "cancelled")
        if not torn.detached:
            torn.detached = True
            sv._detach(run)
        _pipeline.end_call(run, sv.services, status, code, reason)  # type: ignore[arg-type]
    else:
        if torn.journal is not None:
            _journal_end(sv, run, torn)
        if torn.announce is not None:
            result, torn.announce = torn.announce, None
            _announce_finished(sv, run, result)
    if not t.closed:
        sv._closed_run(run)
        return
    if run not in sv.runs_open:
        return  # closed whole
    # Closed part way: what follows the books in `_closed_run`, again.
    if t.timer is not None:
        sv.timers.cancel(t.timer)
        t.timer = None
    if t.due_timer is not None:
        sv.timers.cancel(t.due_timer)
        t.due_timer = None
    sv.slots.release(run)
    result = run.result
    if result is not None and run.waiter is not None:
        run.waiter.release(result)
    if t.nested is not None:
        sv._end_nested(run)
    b = run.batch
    if b is not None:
        schedule = b.schedule
        if schedule is not None and not schedule.finished(run.index):
            # Its books never began, or were cut before its schedule heard
            # of its end: done now (what they did before may be done again;
            # a failure cut after it was counted in its group counts twice).
            t.books_cut = False
            b.sv_busy += 1
            try:
                sv._batch_books(b, run, result)
            except BaseException:
                t.books_cut = True
                raise
            finally:
                b.sv_busy -= 1
        elif t.books_cut:
            t.books_cut = False
            _reopen(sv, b)
        if b.remaining == 0 and b.sv_busy == 0:
            finish_batch(b, sv.emitter)
    sv.runs_open.discard(run)


def _journal_end(sv: Scheduler, run: Run, torn: Torn) -> None:
    """`finish`'s journal write, which it may have been cut short before."""
    result, torn.journal = torn.journal, None
    journal = sv.services.journal
    if journal is not None:
        try:
            journal.ended(run, result)
        except Exception as e:  # the result stands; the journal's failure is logged
            _pipeline.log_contained(f"journal write failed for call {run.call.id}", e, run.scrubber)


def _announce_finished(sv: Scheduler, run: Run, result: Any) -> None:
    """`finish`'s `tool:finished`, which it was cut short before announcing."""
    em = sv.emitter
    if em.listening[sig.FINISHED]:
        bid = run.batch.batch_id if run.batch is not None else None
        em.emit_later(
            sig.FINISHED,
            CallFinished,
            (run.call.id, run.call.name, bid, result.attempts, result, run.masked),
            run.parent_call_id,
            run.token,
        )


def _reopen(sv: Scheduler, b: Any) -> None:
    """A batch's books were cut short as one of its runs closed: the calls its
    schedule lets start now are queued, and those that waited for a deferred
    one end (each only if that was not done)."""
    schedule = b.schedule
    if schedule is None:
        return
    for i, r in enumerate(b.runs):
        t = r.ticket
        if t is None:
            continue
        if r.result is not None and r.result.status == "deferred":
            sv._abort_waiters(b, r)
        elif (
            schedule.is_open(i)
            and not t.closed
            and r.result is None
            and not t.queued
            and not t.slot
            and r.attempt == 0
            and t.armed is None  # (not delayed by a policy, nor backing off)
            and t.waiting_on is None
        ):
            sv.slots.enqueue(r)
