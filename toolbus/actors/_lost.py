"""What a signal's exception can leave out of every queue, found again.

Mending (`_mend.py`) makes whole the runs an interrupted handler was working
on. What it could not see there is found here, on an interrupt's path only
(the common call pays nothing):

- a message whose handler the interrupt cut before it began (a signal's
  exception lands as a function is entered: nothing done yet), and the
  reports of a grouped `Reports` after the one it cut, would be lost with
  the message: they are queued again (`requeue`), and handled as the lock's
  holder drains the queue before letting go. What a handler began stands,
  and is mended;
- a run taken off a queue and not started: a signal's exception landing as
  a queue's `popleft` returned, before the run was even named (its ticket
  still says where it waited) and before the queue's count went down; or
  in the pump and the dispatch, before the run took its slot (a frame there
  has it). Every queue is counted again (`RunQueue.recount`), and such a
  run goes back to the front of the ready queue (`requeue_lost`,
  `requeue_taken`): the pump starts it, or parks it again;
- a retry whose `RetryDue` was cut before the run was queued: its timer is
  let go, as `_current` would have, and the run queued (`requeue_taken`).
"""

from __future__ import annotations

import dis
import logging
import os
import traceback
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Any

from ..pipeline import Run
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

__all__ = ["TAKING", "requeue", "requeue_lost", "requeue_taken"]

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
# The frames whose `run` is being taken off a queue and started: a run they
# hold that is in no queue, holds no slot and waits for no timer is lost.
TAKING = frozenset(
    {
        "_pump", "next_startable", "_pop_nested", "_dispatch", "_unpark_one", "_unpark_threads",
        "enqueue", "_park", "push", "_shed_one", "_park_for_thread", "park",
    }
)  # fmt: skip
_ENTRIES: dict[CodeType, int] = {}


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
    elif not _began(below):
        sv._pending.append(message)


def _queues(sv: Scheduler) -> list[RunQueue]:
    """Every queue a run may wait in: the ready queue, the thread budget's,
    and the waiting queue of each group an open run needs."""
    found: dict[int, RunQueue] = {}
    for run in sv.runs_open:
        t = run.ticket
        if t is not None:
            for g in t.groups:
                found[id(g)] = g.waiting
    return [sv.slots.ready, sv.budget.waiting, *found.values()]


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


def requeue_taken(sv: Scheduler, run: Run, due: RetryDue | None) -> None:
    """`run` was being taken off a queue and started (or, `due`, queued for
    its retry) when the handler was cut: queued again unless it is somewhere."""
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
        sv.slots.enqueue(run, front=True)
