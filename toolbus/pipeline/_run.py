"""The state of one submitted call, shared by the supervisor and the workers.

Two atomic claims make "exactly one terminal result" hold under every race:

- `try_settle(n)`: who decides the outcome of attempt `n`, the worker that ran
  it or the supervisor (deadline, cancellation). The loser's outcome is dropped
  and, for a worker, reported as a late result.
- `try_complete(result)`: who sets the call's final result. Only the winner
  announces `tool:finished` and releases the caller.

Everything else on a `Run` belongs to one thread at a time: the supervisor's
bookkeeping fields (prefixed `sv_`) only ever to the supervisor.

One piece: `Run`, `BatchRun` and their waiters are the one record a call's
layers share today; Core v3 part 2 (issue 20) splits it by the layer that
writes each field.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .._sync import Latch
from ..masking import EMPTY_SCRUBBER, Scrubber
from ..models import ToolCall, ToolResult
from ..retry import RetryPolicy
from ..scheduling import Schedule
from ._keys import derive_key

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from ..tools import Tool

__all__ = ["BatchRun", "Cancellable", "LoopWaiter", "Run", "ThreadWaiter", "Waiter"]

# Where a run waits (Run.sv_queued).
READY = 1
PARKED = 2

# Run tokens: `next()` of a count is atomic under the GIL, so no lock.
_tokens = itertools.count(1)

# Phases, for error messages that say where a call got stuck.
QUEUED = "queued"
ADMISSION = "pre-call hooks"
JOURNALING = "journal"  # writing its intent: off the deadline's clock
STARTING = "starting a worker"  # a backend starts what runs it: off the clock too
# Its policies deciding: queueing, not run time (a policy that asks a remote
# service must not eat the tool's deadline). Off the clock, but bounded apart:
# a policy that takes a whole timeout to decide ends the call (see _deadlines.py).
POLICIES = "policies"
# Phases whose time the deadline does not count: the step moves the deadline on
# by as long as they took, and a deadline that fires meanwhile is re-armed.
OFF_CLOCK = frozenset({JOURNALING, STARTING, POLICIES})
RUNNING = "tool"
FINISHING = "post-call hooks"


class Cancellable(Protocol):
    """Whatever runs an attempt's user code and can be told to stop (thread-safe)."""

    def cancel(self) -> None: ...


class Waiter:
    """Something a caller blocks or awaits on; released once with a value."""

    __slots__ = ()

    def release(self, value: Any) -> None:
        raise NotImplementedError


class ThreadWaiter(Waiter):
    __slots__ = ("latch", "value")

    def __init__(self) -> None:
        self.latch = Latch()  # `latch.flag`: released
        self.value: Any = None

    def release(self, value: Any) -> None:
        self.value = value
        self.latch.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.latch.wait(timeout)

    @property
    def released(self) -> bool:
        return self.latch.flag


class LoopWaiter(Waiter):
    """Resolves an asyncio future from any thread without blocking its loop."""

    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[Any] = loop.create_future()

    def release(self, value: Any) -> None:
        try:
            if asyncio._get_running_loop() is self.loop:
                self.loop.call_soon(self._set, value)  # no wake-up needed: we are on it
            else:
                self.loop.call_soon_threadsafe(self._set, value)
        except RuntimeError:
            pass  # the caller's loop is closed: nobody is waiting any more

    def _set(self, value: Any) -> None:
        if not self.future.done():
            self.future.set_result(value)


class Run:
    """One call from submission to its terminal result."""

    __slots__ = (
        "_lock",
        "admitted",
        "approval",
        "asking_since",
        "attempt",
        "backend",
        "batch",
        "call",
        "cancel_event",
        "completed_late",
        "consulted",
        "context",
        "deadline",
        "delayed_by",
        "first_start",
        "index",
        "journaled",
        "key",
        "last_error",
        "masked",
        "origin",
        "params",
        "parent",
        "parent_call_id",
        "phase",
        "policies",
        "policy",
        "policy_at",
        "priority",
        "read_only",
        "refusal",
        "result",
        "retry_delay",
        "retry_state",
        "scrubber",
        "settled",
        "shares_slot",
        "stop_reason",
        "submitted",
        "sv_ahead",
        "sv_armed",
        "sv_borrowed",
        "sv_cancel",
        "sv_closed",
        "sv_gen",
        "sv_groups",
        "sv_lent",
        "sv_pool",
        "sv_queued",
        "sv_shared",
        "sv_slot",
        "sv_timer",
        "sv_waiting_on",
        "sv_worker",
        "task",
        "timeout",
        "token",
        "tool",
        "waiter",
    )

    def __init__(
        self,
        call: ToolCall,
        tool: Tool | None,
        *,
        index: int = 0,
        batch: BatchRun | None = None,
        context: contextvars.Context,
        timeout: float | None,
        policy: RetryPolicy,
        waiter: Waiter | None = None,
        backend: Any = None,
        parent: Run | None = None,
        shares_slot: bool = False,
        priority: int | None = None,
    ) -> None:
        self._lock = threading.Lock()
        # Unique per run in the process, unlike a call id (a model may repeat
        # one): its events carry it (`CallEvent._run`), and so does its submission.
        self.token = next(_tokens)
        self.call = call
        self.origin = call  # as submitted: before parsing and pre-call hooks
        self.key: str | None = None  # its idempotency key, made when first needed
        self.journaled = False  # its intent is in the journal: record its outcome too
        # Why the supervisor let the current attempt go ("timeout", "cancelled").
        self.stop_reason = ""
        self.tool = tool
        self.index = index
        self.batch = batch
        self.context = context
        self.timeout = timeout
        self.policy = policy
        self.waiter = waiter
        self.read_only = tool.read_only if tool is not None else True
        self.backend = backend  # the toolbus.backends.Backend that runs its attempts
        self.parent = parent  # the run whose tool made this call (nested), if any
        # For its events: a call id never changes once the call is made.
        self.parent_call_id = parent.call.id if parent is not None else None
        # Runs on its parent's slot of max_parallel (a sequence's step): the
        # parent waits for it, so it takes no capacity of its own there.
        self.shares_slot = shares_slot and parent is not None
        # Higher goes first when capacity is short (execute*(priority=N)); a
        # nested call given none goes at its caller's.
        self.priority: int = (
            priority if priority is not None else parent.priority if parent is not None else 0
        )
        self.completed_late = False  # a mutating attempt returned after its deadline
        self.submitted = time.monotonic()
        self.first_start = 0.0
        self.attempt = 0
        self.settled = True
        self.phase = QUEUED
        self.cancel_event: Latch | None = None  # one per attempt, made at dispatch
        self.task: Cancellable | None = None
        self.result: ToolResult | None = None
        self.admitted = False
        self.params: Any = None
        self.masked: Any = None
        self.scrubber: Scrubber = EMPTY_SCRUBBER
        self.retry_state: RetryCallState | None = None
        self.last_error = ""
        self.retry_delay = 0.0
        self.deadline: float | None = None
        # Supervisor bookkeeping (its thread only).
        self.sv_closed = False  # counted, slot released, batch told
        self.sv_slot = False  # holds a concurrency slot (an attempt or its timeout stage)
        self.sv_queued = 0  # 0: not queued, READY: in the ready queue, PARKED: in a waiting queue
        # Last queued at the front of its priority class (a retry, a run let out
        # of a waiting queue): should it wait again, it keeps that turn.
        self.sv_ahead = False
        self.sv_timer: Any = None  # the supervisor's TimerHandle
        self.sv_armed: Any = None  # the kind of message sv_timer will send (Deadline, ...)
        self.sv_gen = 0  # bumped whenever sv_timer changes: older timer messages are stale
        self.sv_cancel: tuple[Any, str] | None = (
            None  # cancel asked while a worker held the outcome
        )
        self.sv_pool: Any = None  # the tool's own capacity group
        self.sv_groups: tuple[Any, ...] = ()  # every capacity group it needs a slot of
        self.sv_waiting_on: Any = None  # the group it is parked for, if any
        # A nested call may run past a full max_parallel on its caller's share:
        # one such call per caller at a time (sv_lent on the caller).
        self.sv_borrowed = False
        self.sv_lent = 0
        self.sv_shared = False  # holds a slot that does not count against max_parallel
        self.sv_worker: Any = None
        # Its policies (toolbus.policies), asked in order before its first
        # attempt; `policy_at`: how many admitted it; `consulted`: those, to
        # be told its result.
        self.policies: tuple[Any, ...] = ()
        self.policy_at = 0
        self.consulted: list[Any] = []
        self.delayed_by: Any = None  # the policy whose delay it waits out, if any
        # When its policies began deciding (phase POLICIES): the supervisor bounds
        # that phase by the call's timeout, apart from the tool's deadline.
        self.asking_since = 0.0
        self.approval: Any = None  # the caller's ApprovalDecision for it, if any
        # (code, message): refused at submission (a quota), before it fans out.
        self.refusal: tuple[Any, str] | None = None

    @property
    def batch_id(self) -> str | None:
        return self.batch.batch_id if self.batch is not None else None

    @property
    def completed(self) -> bool:
        return self.result is not None

    def begin_attempt(self, n: int) -> None:
        """Supervisor: attempt `n` is being dispatched."""
        with self._lock:
            self.attempt = n
            self.settled = False
            self.phase = QUEUED
            self.cancel_event = Latch()
            self.task = None
            now = time.monotonic()
            if n == 1:
                self.first_start = now
            self.deadline = now + self.timeout if self.timeout is not None else None

    def is_live(self, n: int) -> bool:
        """True while attempt `n` is current and nobody has settled it."""
        return self.attempt == n and not self.settled and self.result is None

    def try_settle(self, n: int) -> bool:
        """Claim the outcome of attempt `n`; False if it was claimed already."""
        with self._lock:
            if self.attempt != n or self.settled or self.result is not None:
                return False
            self.settled = True
            return True

    def try_complete(self, result: ToolResult) -> bool:
        """Set the final result; False if the call already has one."""
        with self._lock:
            if self.result is not None:
                return False
            self.result = result
            return True

    def note_policy(self, policy: Any, *, admitted: bool) -> bool:
        """Record that `policy` admitted the call (or delays it); False if the
        call has its result already (then that policy is told it directly)."""
        with self._lock:
            if self.result is not None:
                return False
            if admitted:
                self.consulted.append(policy)
                self.delayed_by = None
            else:
                self.delayed_by = policy
            return True

    def interrupt(self) -> None:
        """Tell the running attempt its result is no longer wanted (cooperative
        flag for sync tools, real cancellation for async ones)."""
        if self.cancel_event is not None:
            self.cancel_event.set()
        task = self.task
        if task is not None:
            task.cancel()

    def caller_loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop its caller awaits it on (None for a blocking caller)."""
        waiter = self.waiter if self.batch is None else self.batch.waiter
        return waiter.loop if isinstance(waiter, LoopWaiter) else None

    def idempotency_key(self, secret: bytes) -> str:
        """The call's idempotency key (see `_keys.py`), made once."""
        key = self.key
        if key is None:
            key = self.key = derive_key(self.origin, secret)
        return key

    def remaining(self) -> float | None:
        """Seconds left before the current attempt's deadline (None: no deadline).

        Backends get this, not the deadline itself, so a remote one can rebase
        it on its own clock."""
        if self.deadline is None:
            return None
        return self.deadline - time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.first_start if self.first_start else 0.0


class BatchRun:
    """A batch: its calls, its schedule and its completion (supervisor-owned)."""

    __slots__ = (
        "batch_id",
        "done",
        "group_failures",
        "group_started",
        "limit",
        "on_done",
        "remaining",
        "runs",
        "schedule",
        "started",
        "stop_on_error",
        "stopped",
        "sv_busy",
        "sv_group",
        "waiter",
    )

    def __init__(
        self,
        batch_id: str,
        *,
        limit: int,
        stop_on_error: bool,
        waiter: Waiter | None,
        on_done: Callable[[BatchRun], None] | None = None,
    ) -> None:
        self.batch_id = batch_id
        self.runs: list[Run] = []
        self.limit = limit
        self.stop_on_error = stop_on_error
        self.waiter = waiter
        self.on_done = on_done
        self.schedule: Schedule | None = None
        self.remaining = 0
        self.sv_group: Any = None  # its capacity group (the scheduler's)
        # The supervisor is in the middle of the batch's bookkeeping (closing a
        # run that closes others in turn, say): its completion waits until
        # that is done, since its caller, once released, takes `runs` away.
        self.sv_busy = 0
        self.stopped = False
        self.done = False
        self.started = time.monotonic()
        self.group_started: dict[int, float] = {}
        self.group_failures: dict[int, int] = {}
