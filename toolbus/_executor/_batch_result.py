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
    # Plain loops, not generator expressions: this runs once per call of every
    # batch, and a generator costs a Python call per item.
    found: list[ToolResult] = []
    read_only = mutating = 0
    for r in runs:
        if r.result is not None:
            found.append(r.result)
        if r.tool is not None:
            if r.read_only:
                read_only += 1
            else:
                mutating += 1
    results = tuple(found)
    return BatchResult(
        results=results,
        summary=summary(
            results,
            total=len(runs),
            read_only=read_only,
            mutating=mutating,
            duration=time.monotonic() - batch.started,
        ),
    )


def summary(
    results: Sequence[ToolResult], *, total: int, read_only: int, mutating: int, duration: float
) -> BatchSummary:
    """The counts read from the results; the rest, which only the runs know, given.
    (The agent loop also uses it, for a batch merged with its re-run after approvals.)"""
    ok = deferred = executed = 0
    for r in results:
        if r.status == "ok":
            ok += 1
        elif r.status == "deferred":
            deferred += 1
        if r.attempts > 0:
            executed += 1
    return BatchSummary(
        total=total,
        executed=executed,
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
