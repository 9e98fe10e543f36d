"""A batch's `BatchResult`, read from its runs once every one has ended."""

from __future__ import annotations

import time
from collections.abc import Sequence

from ..models import BatchResult, BatchSummary, ToolResult
from ..pipeline import BatchRun

__all__ = ["batch_result", "empty_batch", "summary"]


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
