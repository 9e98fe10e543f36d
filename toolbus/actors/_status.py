"""The supervisor's numbers, as `Executor.stats()` reads them (`StatusQuery`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._capacity import MAX_PARALLEL, THREADS
from ._ticket import READY

if TYPE_CHECKING:
    from ._scheduler import Scheduler

__all__ = ["queues", "status"]


def _live_workers(scheduler: Scheduler) -> int:
    """Workers alive now: what each backend says (threads, processes, actors),
    or, for a custom backend of threads that does not say, its running jobs."""
    live = 0
    for b in scheduler.backends.values():
        n = getattr(b, "live_workers", None)
        if n is None and b.uses_threads:
            try:
                n = b.busy()
            except Exception:  # logged by the budget's count, as every count of it is
                n = 0
        live += n or 0
    return live


def queues(scheduler: Scheduler) -> dict[str, int]:
    """The calls waiting for capacity now, by what they wait for: a slot of
    `max_parallel` (always there, 0 or not), a capacity group (those with
    waiters), the thread budget (`threads`, when any wait)."""
    counts = {MAX_PARALLEL: 0}
    for run in scheduler.runs_open:
        t = run.ticket
        queued = t.queued
        if not queued:
            continue
        if queued == READY:
            name = MAX_PARALLEL
        else:
            name = t.waiting_on.name if t.waiting_on is not None else THREADS
        counts[name] = counts.get(name, 0) + 1
    return counts


def status(scheduler: Scheduler) -> dict[str, Any]:
    thread = scheduler.budget.backends[0] if scheduler.budget.backends else None
    waiting = queues(scheduler)
    _, abandoned = scheduler.budget.totals()
    idle = getattr(thread, "idle", None)
    return {
        **scheduler.counters,
        "in_flight": scheduler.slots.in_flight,
        "peak_in_flight": scheduler.slots.peak,
        "queued": sum(waiting.values()),
        "queues": waiting,
        "abandoned_workers": abandoned,
        "live_workers": _live_workers(scheduler),
        "workers_started": sum(getattr(b, "started", 0) for b in scheduler.budget.backends)
        + sum(getattr(b, "workers_started", 0) for b in scheduler.backends.values()),
        "pools": {
            p.tool.name: {
                "idle": idle(p.tool) if idle is not None else 0,
                "in_flight": p.in_flight,
                "abandoned": thread.abandoned(p.tool) if thread is not None else 0,
            }
            for p in scheduler.pools.values()
        },
        "timers": len(scheduler.timers),
        "killed_workers": scheduler.services.killed.value,
    }
