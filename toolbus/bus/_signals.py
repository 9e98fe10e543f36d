"""The lifecycle signals, one blinker signal per step, in toolbus's own namespace."""

from __future__ import annotations

from blinker import NamedSignal, Namespace

__all__ = [
    "ALL_SIGNALS",
    "BATCH_COMPLETE",
    "BATCH_START",
    "CANCELLED",
    "ERROR",
    "EXECUTED",
    "EXECUTING",
    "FINISHED",
    "LATE_RESULT",
    "PARALLEL_COMPLETE",
    "PARALLEL_START",
    "PROGRESS",
    "REJECTED",
    "RETRY_ATTEMPT",
    "RETRY_EXHAUSTED",
    "RETRY_SUCCESS",
    "TIMEOUT",
    "namespace",
    "signal",
]

EXECUTING = "tool:executing"
"""An attempt starts. Carries the masked arguments."""
EXECUTED = "tool:executed"
"""An attempt succeeded."""
ERROR = "tool:error"
"""An attempt failed with an error."""
TIMEOUT = "tool:timeout"
"""An attempt did not finish by its deadline."""
RETRY_ATTEMPT = "tool:retry-attempt"
"""A retry attempt starts (never before the first attempt)."""
RETRY_SUCCESS = "tool:retry-success"
"""A call that needed retries ended ok (once per such call)."""
RETRY_EXHAUSTED = "tool:retry-exhausted"
"""A call that was retried ended failed (once per such call)."""
BATCH_START = "tool:batch-start"
BATCH_COMPLETE = "tool:batch-complete"
PARALLEL_START = "tool:parallel-start"
"""A group of consecutive read-only calls of a batch is released to run together."""
PARALLEL_COMPLETE = "tool:parallel-complete"
REJECTED = "tool:rejected"
"""A call was refused before it ran (unknown tool, not allowed, bad arguments)."""
CANCELLED = "tool:cancelled"
"""A call was cancelled or aborted."""
PROGRESS = "tool:progress"
"""A running tool reported progress."""
FINISHED = "tool:finished"
"""A call ended; exactly once per call, whatever happened. Carries the result."""
LATE_RESULT = "tool:late-result"
"""An abandoned attempt finished after its call had moved on; its result was discarded."""

ALL_SIGNALS: tuple[str, ...] = (
    EXECUTING,
    EXECUTED,
    ERROR,
    TIMEOUT,
    RETRY_ATTEMPT,
    RETRY_SUCCESS,
    RETRY_EXHAUSTED,
    BATCH_START,
    BATCH_COMPLETE,
    PARALLEL_START,
    PARALLEL_COMPLETE,
    REJECTED,
    CANCELLED,
    PROGRESS,
    FINISHED,
    LATE_RESULT,
)

namespace = Namespace()

for _name in ALL_SIGNALS:
    namespace.signal(_name)


def signal(name: str) -> NamedSignal:
    """The toolbus signal called `name` (e.g. "tool:finished")."""
    if name not in ALL_SIGNALS:
        raise KeyError(f"no toolbus signal named {name!r}; known: {', '.join(ALL_SIGNALS)}")
    return namespace.signal(name)
