"""Messages between the executor, the supervisor and the workers.

Frozen and slotted: pykka passes messages by reference, so nothing a receiver
does can change what the sender sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..models import ErrorCode

if TYPE_CHECKING:
    from ._run import BatchRun, Run

__all__ = [
    "AfterTimeout",
    "Cancel",
    "Close",
    "Deadline",
    "Grace",
    "Invoke",
    "Report",
    "RetryDue",
    "StatusQuery",
    "Submit",
]


@dataclass(frozen=True, slots=True)
class Submit:
    """Executor -> supervisor: schedule these runs (a batch, or one call)."""

    runs: tuple[Run, ...]
    batch: BatchRun | None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Executor -> supervisor: end the unfinished runs of a batch or one run."""

    batch: BatchRun | None
    run: Run | None
    code: ErrorCode
    reason: str


@dataclass(frozen=True, slots=True)
class Invoke:
    """Supervisor -> worker: run attempt `attempt` of `run`."""

    run: Run
    attempt: int


@dataclass(frozen=True, slots=True)
class AfterTimeout:
    """Supervisor -> worker: attempt `attempt` timed out in `phase`; decide what follows."""

    run: Run
    attempt: int
    phase: str


@dataclass(frozen=True, slots=True)
class Report:
    """Worker -> supervisor: I am free again, and this is what became of the run."""

    worker: Any
    run: Run
    attempt: int
    kind: Literal["done", "retry", "lost", "late"]
    delay: float


@dataclass(frozen=True, slots=True)
class Deadline:
    """Timer -> supervisor: attempt `attempt` of `run` is due (stale unless `gen` is current)."""

    run: Run
    attempt: int
    gen: int


@dataclass(frozen=True, slots=True)
class Grace:
    """Timer -> supervisor: a settled attempt's hooks are overdue."""

    run: Run
    attempt: int
    gen: int


@dataclass(frozen=True, slots=True)
class RetryDue:
    """Timer -> supervisor: the backoff after attempt `attempt` is over."""

    run: Run
    attempt: int
    gen: int


@dataclass(frozen=True, slots=True)
class StatusQuery:
    """Executor -> supervisor (ask): a snapshot of counters."""


@dataclass(frozen=True, slots=True)
class Close:
    """Executor -> supervisor (ask): cancel everything unfinished and stop."""

    reason: str
