"""What an executor hands back besides results: its counters (`ExecutorStats`),
what its submission hooks see (`Submission`), and a batch's `BatchResult`."""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from .models import BatchResult, BatchSummary, ToolResult
from .pipeline import (
    BatchRun,
)


@dataclass(frozen=True, slots=True)
class Submission:
    """Calls handed to an executor, as its submission hooks see them (`Executor.on_submit`).

    `call_ids` in the order given; `batch_id` as in the calls' events (None for
    a single call); `timestamp` in epoch seconds, like events' timestamps.
    `context` is the copy of the caller's `contextvars` the calls' tools and
    hooks run in: read it (`context.get(var)`, `context.run(fn)`), but set
    nothing in it. `priority` is the calls' (`execute*(..., priority=N)`; a
    nested call given none has its caller's).
    """

    call_ids: tuple[str, ...]
    batch_id: str | None
    timestamp: float
    context: contextvars.Context
    priority: int = 0
    # toolbus's own: the calls' `_run` tokens, as their events carry them.
    _runs: tuple[int, ...] = field(default=(), repr=False, compare=False)


SubmitHook = Callable[[Submission], None]


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


def batch_result(batch: BatchRun) -> BatchResult:
    runs = batch.runs
    # Every run is closed now: break the batch <-> runs cycle, so the batch is
    # freed at once rather than by a (long) garbage collection.
    batch.runs = []
    results = tuple(r.result for r in runs if r.result is not None)
    return BatchResult(
        results=results,
        summary=summary(
            results,
            total=len(runs),
            read_only=sum(1 for r in runs if r.tool is not None and r.read_only),
            mutating=sum(1 for r in runs if r.tool is not None and not r.read_only),
            duration=time.monotonic() - batch.started,
        ),
    )


def summary(
    results: Sequence[ToolResult], *, total: int, read_only: int, mutating: int, duration: float
) -> BatchSummary:
    """The counts read from the results; the rest, which only the runs know, given.
    (The agent loop also uses it, for a batch merged with its re-run after approvals.)"""
    ok = sum(1 for r in results if r.status == "ok")
    deferred = sum(1 for r in results if r.status == "deferred")
    return BatchSummary(
        total=total,
        executed=sum(1 for r in results if r.attempts > 0),
        succeeded=ok,
        failed=len(results) - ok - deferred,
        deferred=deferred,
        read_only=read_only,
        mutating=mutating,
        duration=duration,
    )


def empty_batch() -> BatchResult:
    return BatchResult(
        results=(),
        summary=BatchSummary(
            total=0, executed=0, succeeded=0, failed=0, read_only=0, mutating=0, duration=0.0
        ),
    )
