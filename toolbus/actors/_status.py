"""The supervisor's numbers, as `Executor.stats()` reads them (`StatusQuery`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._scheduler import Scheduler

__all__ = ["status"]


def status(scheduler: Scheduler) -> dict[str, Any]:
    thread = scheduler.budget.backends[0] if scheduler.budget.backends else None
    busy, abandoned = scheduler.budget.totals()
    idle = getattr(thread, "idle", None)
    return {
        **scheduler.counters,
        "in_flight": scheduler.slots.in_flight,
        "peak_in_flight": scheduler.slots.peak,
        "queued": sum(1 for r in scheduler.runs_open if r.sv_queued),
        "abandoned_workers": abandoned,
        "live_workers": busy
        + sum(idle(p.tool) for p in scheduler.pools.values() if idle is not None)
        + sum(getattr(b, "live_workers", 0) for b in scheduler.backends.values()),
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
