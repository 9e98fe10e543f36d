"""The payloads of the lifecycle signals.

Frozen slotted dataclasses rather than pydantic models: they are built on the
hot path whenever a signal has receivers, and cost a tenth as much. Every field
is already masked and scrubbed when an event is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models import ErrorCode, ToolResult

__all__ = [
    "BatchComplete",
    "BatchStart",
    "CallCancelled",
    "CallEvent",
    "CallFinished",
    "CallRejected",
    "Event",
    "Executed",
    "Executing",
    "Failed",
    "LateResult",
    "ParallelComplete",
    "ParallelStart",
    "Progress",
    "RetryAttempt",
    "RetryExhausted",
    "RetrySuccess",
    "TimedOut",
]


@dataclass(frozen=True, slots=True)
class CallEvent:
    """Fields every per-call event carries."""

    call_id: str
    tool: str
    batch_id: str | None
    attempt: int


@dataclass(frozen=True, slots=True)
class Executing(CallEvent):
    arguments: Any
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Executed(CallEvent):
    duration: float


@dataclass(frozen=True, slots=True)
class Failed(CallEvent):
    error: str
    error_code: ErrorCode
    duration: float


@dataclass(frozen=True, slots=True)
class TimedOut(CallEvent):
    timeout: float


@dataclass(frozen=True, slots=True)
class RetryAttempt(CallEvent):
    previous_error: str
    delay: float


@dataclass(frozen=True, slots=True)
class RetrySuccess(CallEvent):
    attempts: int


@dataclass(frozen=True, slots=True)
class RetryExhausted(CallEvent):
    attempts: int
    error: str


@dataclass(frozen=True, slots=True)
class CallRejected(CallEvent):
    error: str
    error_code: ErrorCode
    arguments: Any


@dataclass(frozen=True, slots=True)
class CallCancelled(CallEvent):
    error_code: ErrorCode
    reason: str


@dataclass(frozen=True, slots=True)
class Progress(CallEvent):
    message: str
    fraction: float | None
    data: Any


@dataclass(frozen=True, slots=True)
class CallFinished(CallEvent):
    result: ToolResult


@dataclass(frozen=True, slots=True)
class LateResult(CallEvent):
    status: str
    duration: float


@dataclass(frozen=True, slots=True)
class BatchStart:
    batch_id: str
    count: int
    read_only: int
    mutating: int


@dataclass(frozen=True, slots=True)
class BatchComplete:
    batch_id: str
    count: int
    success_count: int
    failure_count: int
    duration: float


@dataclass(frozen=True, slots=True)
class ParallelStart:
    batch_id: str
    group: int
    count: int


@dataclass(frozen=True, slots=True)
class ParallelComplete:
    batch_id: str
    group: int
    count: int
    success_count: int
    failure_count: int
    duration: float


Event = CallEvent | BatchStart | BatchComplete | ParallelStart | ParallelComplete
