"""What a signal's exception can leave out of every queue, or waiting for
nothing, found again.

Mending (`_mend.py`) makes whole the runs an interrupted handler was working
on. What it could not see there is found here, on an interrupt's path only
(the common call pays nothing):

- a message whose handler the interrupt cut before it began (a signal's
  exception lands as a function is entered: nothing done yet), a timer's
  message cut before `_current` took it, and the reports of a grouped
  `Reports` after the one it cut, would be lost with the message: they are
  queued again (`requeue`), and handled as the lock's holder drains the
  queue before letting go. What a handler began stands, and is mended;
- a run taken off a queue and not started: a signal's exception landing as
  a queue's `popleft` returned, before the run was even named (its ticket
  still says where it waited) and before the queue's count went down; or
  in the pump and the dispatch, before the run took its slot (a frame there
  has it; an attempt counted there is counted again). Every queue is
  counted again (`RunQueue.recount`), and such a run goes back to the front
  of the ready queue (`requeue_lost`, `requeue_taken`): the pump starts it,
  or parks it again;
- a retry whose `RetryDue` was cut before the run was queued: its timer is
  let go, as `_current` would have, and the run queued (`requeue_taken`);
- a run that let go of its timer and was cut before it armed the next (a
  backoff's, a policy's delay, a deadline): `_back_off` or `_delayed` done
  again (`redo_wait`), or `_arm` (`rearm`);
- a slot taken in some of its groups only (`Capacity.take` cut in its
  loop): taken in the rest (`finish_take`), as the call is then ended;
- a slot given back to some of its groups only (`Capacity.release` cut in
  its loop): given back to the rest (`finish_release`), and the room of
  every group with runs waiting for it handed on (`unpark_free`).

What each frame says is noted as the interrupt's traceback is read
(`note_left`, from `_mend.note_torn`).
"""

from __future__ import annotations

import dis
import logging
import os
import traceback
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Any

from ..pipeline import Run
from ._capacity import Capacity
from ._messages import (
    BudgetSpent,
    Cancel,
    Deadline,
    Expired,
    Grace,
    LoopStalled,
    Report,
    Reports,
    RetryDue,
    UntilDone,
    WaitGivenUp,
)
from ._queue import RunQueue

if TYPE_CHECKING:
    from ._scheduler import Scheduler

__all__ = [
    "finish_release",
    "finish_take",
    "note_left",
    "rearm",
    "redo_wait",
    "requeue",
    "requeue_lost",
    "requeue_taken",
    "unpark_free",
]

log = logging.getLogger("toolbus.actors")

_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# The messages handled again when their handler had not begun: those posted
# for the scheduler to act on (a report, a timer's, a cancel). Not those asked
# for an answer (its asker is interrupted: it asks again, or not), nor a
# submission (`Admission._submission_interrupted` ends its calls).
_REDONE: frozenset[type] = frozenset(
    {
        Report, Reports, Deadline, Expired, LoopStalled, BudgetSpent, RetryDue, UntilDone,
        Grace, Cancel, WaitGivenUp,
    }
)  # fmt: skip
# The timers' messages: stale unless their `gen` is their run's.
_TIMED = (Deadline, Grace, RetryDue)
# ... and the messages handled as one (`Expired` as its `Deadline`).
_TIMERS = frozenset({Deadline, Grace, RetryDue, Expired})
# The frames whose `run` is being taken off a queue and started: a run they
# hold that is in no queue, holds no slot and waits for no timer is lost.
TAKING = frozenset(
    {
        "_pump", "next_startable", "_pop_nested", "_dispatch", "_unpark_one", "_unpark_threads",
        "enqueue", "_park", "push", "_shed_one", "_park_for_thread", "park",
    }
)  # fmt: skip
_ENTRIES: dict[CodeType, int] = {}
_RELEASE = Capacity.release.__code__
_TAKE = Capacity.take.__code__
# The handlers that let a run wait for its timer, with what they wait out:
# done again if cut short before they armed it.
_REDO = {"_back_off": "delay", "_delayed": "outcome"}


def _entry(code: CodeType) -> int:
    """The offset of `code`'s entry (its first `RESUME`): a signal's exception
    raised there was raised before the function did anything."""
    at = _ENTRIES.get(code)
    if at is None:
        at = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
        _ENTRIES[code] = at
    return at


def _began(below: TracebackType | None) -> bool:
    """Whether the handler `Scheduler._handle` called, whose frames are
    `below`, began: the first frame of toolbus's own code there went past
    its entry (the pump is after the handler: it ended). None of toolbus's
    (the interrupt landed in `_handle`, or in what stood in for the handler
    before calling it): not begun."""
    while below is not None:
        code = below.tb_frame.f_code
        if code.co_filename.startswith(_OURS):
            return code.co_name == "_pump" or below.tb_lasti > _entry(code)
        below = below.tb_next
    return False


def requeue(sv: Scheduler, message: Any, error: BaseException) -> None:
    """In `Scheduler._handle`, which caught `error` (a signal's) handling
    `message`: queue again what of it its handler had not begun. A bug here
    is logged as the scheduler logs its own, never raised to the caller."""
    try:
        _requeue(sv, message, error)
    except Exception as e:
        log.error(
            "supervisor error queueing again what was cut short:\n%s",
            "".join(traceback.format_exception(e)),
        )


def _requeue(sv: Scheduler, message: Any, error: BaseException) -> None:
    kind = type(message)
    tb = error.__traceback__
    if kind not in _REDONE or tb is None:
        return
    below = tb.tb_next
    if kind is Reports:
        reports: tuple[Any, ...] = message.reports
        job = tb.tb_frame.f_locals.get("job")  # (`_handle`'s: the report it was at)
        at = next((i for i, r in enumerate(reports) if r[0] is job), None)
        if at is None:
            rest = reports  # (cut before the first)
        elif below is None or _began(below):
            # Cut in `_handle` itself past the first: as its loop went on to
            # the next (that report was handled); or inside one: what it did stands.
            rest = reports[at + 1 :]
        else:
            rest = reports[at:]
        if rest:
            sv._pending.append(Reports(rest))
    elif kind is UntilDone:
        _requeue_dues(sv, message, below)
    elif not _began(below) or (kind in _TIMERS and _unconsumed(below)):
        sv._pending.append(message)


def _unconsumed(below: TracebackType | None) -> bool:
    """Whether a timer's message a handler below was cut short on is still
    its run's live one: `_current` had not taken it (it bumps the run's
    generation last, and nothing before that may not be done again)."""
    while below is not None:
        frame = below.tb_frame
        if frame.f_code.co_filename.startswith(_OURS):
            msg: Any = frame.f_locals.get("msg")
            if type(msg) in _TIMED:
                t = msg.run.ticket
                return t is not None and not t.closed and msg.gen == t.gen
        below = below.tb_next
    return False


def _requeue_dues(sv: Scheduler, message: UntilDone, below: TracebackType | None) -> None:
    """An `UntilDone` cut short: its calls' `RetryDue`s are posted (a stale
    one is dropped as it is handled); or the message, if it was not taken."""
    while below is not None:
        frame = below.tb_frame
        if frame.f_code.co_name == "_on_until_done" and frame.f_code.co_filename.startswith(_OURS):
            waiting = frame.f_locals.get("waiting")
            if waiting is not None:
                sv._pending.extend(waiting.dues)
                return
            break
        below = below.tb_next
    if message.future in sv._untils:
        sv._pending.append(message)


def note_left(t: Any, code: CodeType, loc: dict[str, Any], lasti: int, run: Run) -> None:
    """Note on `t` (the run's `_mend.Torn`) what a frame of toolbus's cut
    short working on `run` left undone of taking it off a queue and starting
    it, of arming its timer, or of giving its slot back."""
    if loc.get("run") is not run:
        return
    name = code.co_name
    if name in TAKING:
        t.taking = True
        if name == "_dispatch":
            if run.ticket.slot and lasti < _offset(code, "submit", "LOAD_METHOD"):
                t.unsent = True
            elif not run.ticket.slot and loc.get("n") is not None:
                t.begun = loc["n"]  # (counted as a retry, its attempt maybe begun)
    elif name in _REDO and lasti < _offset(code, "_arm", "LOAD_METHOD"):
        t.redo = (name, loc[_REDO[name]])
    elif name == "_arm" and lasti < _offset(code, "timer", "STORE_ATTR"):
        t.arm = (loc["delay"], loc["make"])
    elif name == "release" and code is _RELEASE and loc.get("g") is not None:
        t.released_to = loc["g"]
    elif name == "take" and code is _TAKE and lasti > _entry(code):
        t.taken_to = (loc.get("g"),)


def finish_take(sv: Scheduler, run: Run, taken_to: tuple[Any]) -> None:
    """`Capacity.take` was cut short once it counted `run` in flight, before
    it counted it in all its groups (`taken_to`: the last it did, or None):
    counted in the rest, so that giving the slot back leaves them right."""
    if not run.ticket.slot:
        return
    groups = run.ticket.groups
    at = taken_to[0]
    i = -1 if at is None else next((k for k, g in enumerate(groups) if g is at), len(groups))
    for g in groups[i + 1 :]:
        g.in_flight += 1


_OFFSETS: dict[tuple[CodeType, str], int] = {}


def _offset(code: CodeType, name: str, op: str) -> int:
    """The offset of `code`'s first `op` of `name`."""
    at = _OFFSETS.get((code, name))
    if at is None:
        ops = (op, "LOAD_ATTR") if op == "LOAD_METHOD" else (op,)
        at = next(
            i.offset for i in dis.get_instructions(code) if i.argval == name and i.opname in ops
        )
        _OFFSETS[code, name] = at
    return at


def finish_release(sv: Scheduler, run: Run, at: Any) -> None:
    """`Capacity.release` was cut short in its loop over `run`'s groups, at
    group `at` (given back): the groups after it are given back too (room
    left unused is handed on by `unpark_free`)."""
    groups = run.ticket.groups
    i = next((k for k, g in enumerate(groups) if g is at), len(groups))
    for g in groups[i + 1 :]:
        g.in_flight -= 1


def redo_wait(sv: Scheduler, run: Run, redo: tuple[str, Any]) -> None:
    """`_back_off` or `_delayed` was cut short before it armed the run's
    timer (the run let go of its slot and its timer, and waits for none):
    done again (what it did before may be done again)."""
    t = run.ticket
    if not t.closed and run.result is None and not t.queued and t.armed is None:
        name, arg = redo
        getattr(sv, name)(run, arg)


def rearm(sv: Scheduler, run: Run, arm: tuple[Any, Any]) -> None:
    """`_arm` was cut short before its timer was stored: armed again (a timer
    it made meanwhile fires stale: the generation it carries is taken by
    the first one)."""
    t = run.ticket
    if not t.closed and run.result is None:
        sv._arm(run, *arm)


def unpark_free(sv: Scheduler) -> None:
    """Hand on the room of every group that has some and runs waiting for
    it (room is never left unused: `_capacity.py`)."""
    for q, g in _groups(sv):
        free = q.size if g.limit is None else g.limit - g.in_flight
        while free > 0 and q.size - q.dead > 0:
            sv.slots._unpark_one(q)
            free -= 1


def _groups(sv: Scheduler) -> list[tuple[RunQueue, Any]]:
    found: dict[int, tuple[RunQueue, Any]] = {}
    for run in sv.runs_open:
        t = run.ticket
        if t is not None:
            for g in t.groups:
                found[id(g)] = (g.waiting, g)
    return list(found.values())


def _queues(sv: Scheduler) -> list[RunQueue]:
    """Every queue a run may wait in: the ready queue, the thread budget's,
    and the waiting queue of each group an open run needs."""
    return [sv.slots.ready, sv.budget.waiting, *(q for q, _ in _groups(sv))]


def requeue_lost(sv: Scheduler) -> None:
    """Count every queue again, and queue at the front of the ready queue
    each open run whose ticket says it waits where it is not."""
    present: set[int] = set()
    for q in _queues(sv):
        q.recount()
        present.update(id(r) for r in q)
    lost = []
    for run in sv.runs_open:
        t = run.ticket
        if t is not None and t.queued and id(run) not in present:
            t.queued = 0
            t.waiting_on = None
            if not t.closed:
                lost.append(run)
    for run in sorted(lost, key=_submitted, reverse=True):  # (at the front: the oldest first)
        sv.slots.enqueue(run, front=True)


def _submitted(run: Run) -> int:
    return run.token


def requeue_taken(sv: Scheduler, run: Run, due: RetryDue | None, begun: int | None) -> None:
    """`run` was being taken off a queue and started (or, `due`, queued for
    its retry) when the handler was cut: queued again unless it is somewhere.
    Cut in `_dispatch` once it counted attempt `begun` (a retry), and maybe
    began it, before it took its slot: not counted, not begun."""
    t = run.ticket
    if t.closed or run.result is not None:
        return
    if due is not None and due.gen == t.gen and t.armed is RetryDue:
        # Its `RetryDue` had not been taken (`_current`): it is, now.
        sv.timers.cancel(t.timer)
        t.timer = None
        t.armed = None
        t.gen += 1
    if not t.queued and not t.slot and t.armed is None and t.waiting_on is None:
        if begun is not None:
            if begun > 1:
                sv.counters["retries"] -= 1
            if run.attempt == begun:
                run.attempt = begun - 1  # (`begin_attempt` sets it first: dispatched again, it is)
        sv.slots.enqueue(run, front=True)
