"""Batches on the supervisor thread: their schedule, their announcements
(start, group open/close, completion)."""

from __future__ import annotations

import time

from ..bus import _signals as sig
from ..bus._events import BatchComplete, BatchStart, ParallelComplete, ParallelStart
from ..bus._publisher import Emitter
from ..pipeline import BatchRun, Run
from ..scheduling import FULL_BARRIER, Resources, Schedule, call_resources, make_schedule

__all__ = ["announce_groups", "announce_start", "finish_batch", "schedule_batch"]


def schedule_batch(b: BatchRun, max_argument_bytes: int) -> Schedule:
    """The batch's schedule: by resource when one of its tools declares keys."""
    read_only = [r.read_only for r in b.runs]
    for r in b.runs:  # a loop, not any(...): a generator costs a Python call per run
        if r.tool is not None and r.tool.resource_keys:
            break
    else:
        return make_schedule(read_only)  # the barrier schedule, at no extra cost
    return make_schedule(read_only, [_resources(r, max_argument_bytes) for r in b.runs])


def _resources(run: Run, max_argument_bytes: int) -> Resources:
    if run.tool is None or not run.tool.resource_keys:
        return None
    # As the model sent them: pre-call hooks run later, on the call's own thread.
    arguments = run.origin.arguments
    if isinstance(arguments, str) and len(arguments) > max_argument_bytes:
        return FULL_BARRIER  # rejected at admission anyway: not worth parsing here
    return call_resources(run.tool.resource_keys, arguments)


def announce_start(b: BatchRun, em: Emitter) -> None:
    if em.wants(sig.BATCH_START):
        ro = sum(1 for r in b.runs if r.tool is not None and r.read_only)
        mut = sum(1 for r in b.runs if r.tool is not None and not r.read_only)
        em.emit(sig.BATCH_START, BatchStart(b.batch_id, len(b.runs), ro, mut))


def announce_groups(b: BatchRun, em: Emitter) -> None:
    """Announce the read-only groups that opened or closed since the last call."""
    assert b.schedule is not None
    transitions = b.schedule.transitions
    if not transitions:
        return
    now = time.monotonic()
    for what, g in transitions:
        if not g.read_only:
            continue
        if what == "open":
            b.group_started[g.index] = now
            if em.wants(sig.PARALLEL_START):
                em.emit(
                    sig.PARALLEL_START,
                    ParallelStart(
                        b.batch_id,
                        g.index,
                        g.size,
                        sum(1 for r in b.runs if r.tool is not None and r.read_only),
                        sum(1 for r in b.runs if r.tool is not None and not r.read_only),
                    ),
                )
        elif g.index in b.group_started and em.wants(sig.PARALLEL_COMPLETE):
            fails = b.group_failures.get(g.index, 0)
            em.emit(
                sig.PARALLEL_COMPLETE,
                ParallelComplete(
                    b.batch_id, g.index, g.size, g.size - fails, fails,
                    now - b.group_started[g.index],
                ),
            )  # fmt: skip
    transitions.clear()


def finish_batch(b: BatchRun, em: Emitter) -> None:
    """Announce completion and release the batch's caller, exactly once.

    Again on a batch done already, only its caller is released, if a signal's
    exception cut the first short before it was (`actors/_mend.py`)."""
    if b.done:
        waiter = b.waiter
        if waiter is not None:
            waiter.release(b)
            b.waiter = None
        return
    b.done = True
    if em.wants(sig.BATCH_COMPLETE):
        ok = sum(1 for r in b.runs if r.result is not None and r.result.status == "ok")
        em.emit(
            sig.BATCH_COMPLETE,
            BatchComplete(
                b.batch_id, len(b.runs), ok, len(b.runs) - ok, time.monotonic() - b.started
            ),
        )
    waiter = b.waiter
    if waiter is not None:
        # Let go of it once released (not before: a release cut short is done
        # again): released with the batch, it holds the batch (a cycle for
        # the garbage collector to find, every batch).
        waiter.release(b)
        b.waiter = None
