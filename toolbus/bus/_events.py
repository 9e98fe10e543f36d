"""The payloads of the lifecycle signals.

Frozen slotted dataclasses rather than pydantic models: they are built on the
hot path whenever a signal has receivers, and cost a tenth as much. Every field
is already masked and scrubbed when an event is built.

Every event derives from `Event`, whose two keyword-only fields are filled in
by toolbus: `timestamp` when the event is built (the moment of the step), `seq`
when it is announced (see `Event`). Subclass `Event` for the payloads of
signals of your own (`define_signal`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..models import ErrorCode, ToolResult

__all__ = [
    "BatchComplete",
    "BatchStart",
    "CallCancelled",
    "CallEvent",
    "CallFinished",
    "CallQueued",
    "CallRejected",
    "Event",
    "Executed",
    "Executing",
    "Failed",
    "InDoubt",
    "LateResult",
    "ParallelComplete",
    "ParallelStart",
    "Progress",
    "RetryAttempt",
    "RetryExhausted",
    "RetrySuccess",
    "RunHalted",
    "TimedOut",
    "WorkerKilled",
]


@dataclass(frozen=True, slots=True)
class Event:
    """What every event on the bus carries.

    `seq`: the event's place in its executor's announcements, 1, 2, 3, ... in
    the order they were announced (0 until it is announced; each receiver gets
    an executor's events in `seq` order). `timestamp`: epoch seconds
    (`time.time()`) when the step happened, that is when the event was built.
    """

    seq: int = field(default=0, kw_only=True)
    timestamp: float = field(default_factory=time.time, kw_only=True)


@dataclass(frozen=True, slots=True)
class CallEvent(Event):
    """Fields every per-call event carries.

    `parent_call_id`: for a nested call (made by a tool or hook of a call of
    the same executor, such as a step of a `toolbus.tools.sequence`), the id of
    the call that made it; None for a call its caller made directly.
    """

    call_id: str
    tool: str
    batch_id: str | None
    attempt: int
    # Keyword-only with a default: every subclass keeps its positional fields.
    parent_call_id: str | None = field(default=None, kw_only=True)
    # toolbus's own, not the event's data (no surface publishes it): which
    # submitted call this is, unique in the process, so an observer that noted
    # the call at submission (`Executor.on_submit`, `Submission._runs`) finds
    # it again when two calls with the same id run at once. 0: not a call's run.
    _run: int = field(default=0, kw_only=True, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class CallQueued(CallEvent):
    """A call has to wait for capacity (`tool:queued`, once per wait).

    `group`: what it waits for: `"max_parallel"` (a slot of the executor's
    `max_parallel`), a capacity group's name (`"tool:fetch"` for a tool's own
    `max_concurrency`, `"db"` for `Executor(groups={"db": ...})`,
    `"batch:<id>"` for its batch's limit), or `"threads"` (the thread budget).
    `position`: its place in that queue when it began to wait (1: next to
    start); calls ahead of it that were cancelled while queued may still
    count as places. `queue_length`: the calls waiting there then, itself
    included. `attempt`: the attempt it waits to start (1 for a new call).
    """

    group: str
    position: int
    queue_length: int


@dataclass(frozen=True, slots=True)
class Executing(CallEvent):
    arguments: Any
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Executed(CallEvent):
    duration: float

    @property
    def success(self) -> bool:
        """Always True: an attempt that failed is announced as `tool:error` instead."""
        return True


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
    max_attempts: int | None = None
    """The most attempts the call's `RetryPolicy` allows; None when it sets no such bound."""


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
    """A call's terminal result (scrubbed). `arguments`: the call's masked
    arguments as `tool:executing` showed them, None when they were never masked
    (an unknown tool, arguments that were not JSON, a broken masker)."""

    result: ToolResult
    arguments: Any = None


@dataclass(frozen=True, slots=True)
class LateResult(CallEvent):
    status: str
    duration: float


@dataclass(frozen=True, slots=True)
class WorkerKilled(CallEvent):
    """A process running attempt `attempt` was killed with its process group.

    `reason`: "timeout" or "cancelled" (or "closed": its executor closed)."""

    pid: int
    reason: str


@dataclass(frozen=True, slots=True)
class InDoubt(Event):
    """A journaled mutating call that started and has no recorded outcome.

    `record` is the journal's `JournalRecord` (masked arguments only)."""

    call_id: str
    tool: str
    record: Any


@dataclass(frozen=True, slots=True)
class RunHalted(Event):
    """An agent run was halted (`agent_run`; None: a batch of no run, `batch_id`).

    `reason` is the halt's (masked as the deciding call's arguments are);
    `call_id` the call whose policy halted it (None: `Executor.halt`);
    `cancelled` how many unfinished calls it ended then."""

    agent_run: str | None
    batch_id: str | None
    reason: str
    call_id: str | None = None
    cancelled: int = 0


@dataclass(frozen=True, slots=True)
class BatchStart(Event):
    batch_id: str
    count: int
    read_only: int
    mutating: int


@dataclass(frozen=True, slots=True)
class BatchComplete(Event):
    batch_id: str
    count: int
    success_count: int
    failure_count: int
    duration: float


@dataclass(frozen=True, slots=True)
class ParallelStart(Event):
    """A read-only group of `count` calls is released to run together.

    `read_only` and `mutating` count the batch's calls of each kind (as in
    `tool:batch-start`): the mutating ones run one at a time, as barriers,
    unless their tools name resources (`resource_keys`). Then a group opens when
    one of its calls may start, and several groups may be open at once.
    """

    batch_id: str
    group: int
    count: int
    read_only: int = 0
    mutating: int = 0


@dataclass(frozen=True, slots=True)
class ParallelComplete(Event):
    batch_id: str
    group: int
    count: int
    success_count: int
    failure_count: int
    duration: float

    @property
    def total(self) -> int:
        """The group's calls (`count`), under the name the event table uses."""
        return self.count
