"""`ExecutorStats`: a snapshot of an executor's counters, and how it is read."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["ExecutorStats", "stats_from"]


class ExecutorStats(BaseModel):
    """A snapshot of an executor's counters (no arguments, no outputs)."""

    model_config = ConfigDict(frozen=True)

    submitted: int
    batches: int
    ok: int
    error: int
    timeout: int
    cancelled: int
    rejected: int
    retries: int
    timeouts: int
    late_results: int
    in_flight: int
    peak_in_flight: int
    queued: int
    abandoned_workers: int
    abandoned_total: int
    live_workers: int
    workers_started: int
    timers: int
    pools: dict[str, dict[str, int]]
    events_dropped: int = 0
    """Events never delivered to a subscription (close's budget ran out; each one logged)."""
    killed_workers: int = 0
    """Processes killed with their process group (deadline, cancellation): each was a
    `tool:killed` event."""
    deferred: int = 0
    """Calls that ended `deferred`: they did not run and wait for an approval."""
    queues: dict[str, int] = {}
    """The calls waiting for capacity now (`queued`), by what they wait for:
    `"max_parallel"` (a slot of the executor's, always listed), each capacity
    group with waiters (`"tool:<name>"`, a named group, `"batch:<id>"`), and
    `"threads"` (the thread budget) when calls wait for a thread."""


def stats_from(data: dict[str, Any], events_dropped: int) -> ExecutorStats:
    """The snapshot of the scheduler's answer to a `StatusQuery` (all zeros if
    it failed to answer: logged there) and the bus's count of dropped events."""
    if not data:
        data = {name: 0 for name in ExecutorStats.model_fields if name not in ("pools", "queues")}
        data["pools"] = {}
        data["queues"] = {}
    return ExecutorStats(**{**data, "events_dropped": events_dropped})
