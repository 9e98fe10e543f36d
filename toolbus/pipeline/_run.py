"""The state of one submitted call, shared by the supervisor and the workers.

Two atomic claims make "exactly one terminal result" hold under every race:

- `try_settle(n)`: who decides the outcome of attempt `n`, the worker that ran
  it or the supervisor (deadline, cancellation). The loser's outcome is dropped
  and, for a worker, reported as a late result.
- `try_complete(result)`: who sets the call's final result. Only the winner
  announces `tool:finished` and releases the caller.

Everything else on a `Run` belongs to one thread at a time. What the
scheduler keeps about a run (where it waits, the slots it holds, its timer) is
not here but on its `ticket` (`actors/_ticket.py`), which only the scheduler
writes. One piece, a little over 400 lines, until the record is split by the
layer that owns each field (Core v3 part 2).
"""

from __future__ import annotations

import contextvars
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._sync import Latch
from ..agent_runs import AGENT_RUN
from ..masking import EMPTY_SCRUBBER, Scrubber
from ..models import ToolCall, ToolResult
from ..retry import RetryPolicy
from ._keys import derive_key
from ._waiters import Cancellable, Waiter

if TYPE_CHECKING:
    from tenacity import RetryCallState

    from ..tools import Tool
    from ._batch_run import BatchRun

__all__ = ["Run"]

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
# `Run.settled` when the scheduler claimed the attempt's outcome (a cancel, a
# deadline): it, not a worker, then ends the call.
SUPERVISOR = 2


class Run:
    """One call from submission to its terminal result: the call's own record.

    Who writes what: the executor fills it in as it is made (its constructor,
    then `refuse`, `admitted_at_submission` and `waive` before submission);
    the pipeline's steps write the rest (arguments, masking, phase, deadline,
    policies' answers, retries, the result); whatever runs an attempt sets
    `task`. The scheduler changes it only through `begin_attempt`,
    `try_settle`, `interrupt` and `not_started`; what it keeps of its own is
    on `ticket` (`actors/_ticket.py`).
    """

    __slots__ = (
        "_lock",
        "admitted",
        "agent_run",
        "allowed",
        "approval",
        "asking_since",
        "attempt",
        "backend",
        "batch",
        "budget",
        "call",
        "cancel_event",
        "completed_late",
        "consulted",
        "context",
        "deadline",
        "decided",
        "delayed_by",
        "due",
        "first_start",
        "gate",
        "index",
        "journaled",
        "judged",
        "key",
        "keyed",
        "last_error",
        "masked",
        "origin",
        "output_checks",
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
        "remote_record",
        "remote_task",
        "result",
        "retry_delay",
        "retry_state",
        "scrubber",
        "settled",
        "shares_slot",
        "spend",
        "stop_reason",
        "submitted",
        "task",
        "ticket",
        "timeout",
        "token",
        "tool",
        "unscrubbed",
        "waiter",
    )

    def __init__(
        self,
        call: ToolCall,
        tool: Tool | None,
        # Positional or keyword: its maker passes them all in this order, since
        # a keyword each would cost every call about half a microsecond.
        context: contextvars.Context,
        timeout: float | None,
        policy: RetryPolicy,
        waiter: Waiter | None = None,
        backend: Any = None,
        index: int = 0,
        batch: BatchRun | None = None,
        parent: Run | None = None,
        shares_slot: bool = False,
        priority: int | None = None,
        policies: tuple[Any, ...] = (),
        approval: Any = None,
        refusal: tuple[Any, str] | None = None,
        decided: ToolResult | None = None,
        gate: Any = None,
    ) -> None:
        self._lock = threading.Lock()
        # Unique per run in the process, unlike a call id (a model may repeat
        # one): its events carry it (`CallEvent._run`), and so does its submission.
        self.token = next(_tokens)
        # The agent run it belongs to (`toolbus.agent_runs`), read as it is submitted.
        self.agent_run: str | None = AGENT_RUN.get()
        self.call = call
        self.origin = call  # as submitted: before parsing and pre-call hooks
        self.key: str | None = None  # its idempotency key, made when first needed
        self.keyed: Any = None  # the arguments the key stands for if not origin's (an edit's)
        self.journaled = False  # its intent is in the journal: record its outcome too
        self.remote_task: str | None = None  # its work elsewhere (`record_remote_task`)
        self.remote_record: Any = None  # (the index, the record in doubt) it picks up
        self.judged: str | None = None  # the request its decision decided (`_decisions.py`)
        self.spend: Any = None  # a decision checked (and spent) when it runs
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
        # Truthy once someone claimed the current attempt's outcome (`try_settle`):
        # `SUPERVISOR` when the scheduler did, which then owes the call its end.
        self.settled: int = True
        self.phase = QUEUED
        # The current attempt's cancel flag, made when first asked for (its
        # ToolContext, an interrupt): most attempts never need one.
        self.cancel_event: Latch | None = None
        self.task: Cancellable | None = None
        self.result: ToolResult | None = None
        # A composite tool's step: its result before its secrets were
        # scrubbed, when they were (what the next step is handed).
        self.unscrubbed: ToolResult | None = None
        self.admitted = False
        self.params: Any = None
        self.masked: Any = None
        self.scrubber: Scrubber = EMPTY_SCRUBBER
        self.retry_state: RetryCallState | None = None
        self.last_error = ""
        self.retry_delay = 0.0
        self.deadline: float | None = None
        # The seconds the current attempt was given (its events say so): its
        # timeout, or what was left of the whole call's budget if that was less.
        self.allowed: float | None = timeout
        # The whole call's deadline (`call_timeout`, schedule-to-close): a
        # monotonic instant no attempt, wait or backoff may pass, or None.
        # `budget` is the call_timeout it was made from (None: inherited from
        # the call that made this one, see `bound`).
        self.due: float | None = None
        self.budget: float | None = None
        # The scheduler's own record of it (`actors/_ticket.py`): given at
        # submission, written on the scheduler's thread only.
        self.ticket: Any = None
        # Its policies (toolbus.policies), asked in order before its first
        # attempt; `policy_at`: how many admitted it; `consulted`: those, to
        # be told its result.
        self.policies = policies
        # Its policies that check an ok result before it is final (output
        # guardrails: `_policies.check_outputs`), from its plan.
        self.output_checks: tuple[Any, ...] = ()
        self.policy_at = 0
        self.consulted: list[Any] = []
        self.delayed_by: Any = None  # the policy whose delay it waits out, if any
        # When its policies began deciding (phase POLICIES): the supervisor bounds
        # that phase by the call's timeout, apart from the tool's deadline.
        self.asking_since = 0.0
        self.approval = approval  # the caller's ApprovalDecision for it, if any
        # (code, message): why it can never start, known before it is submitted
        # (no such tool, no backend, a quota's refusal): it ends `rejected`.
        self.refusal = refusal
        # Its result, decided before it was submitted (a durable engine's
        # record of it, an in-doubt decision): it ends with that, its tool not
        # run, its arguments masked for its events as any call's are.
        self.decided = decided
        # What its first attempt waits for before its tool runs, once: a
        # durable engine's record of its intent (`pipeline/_journaled.py`).
        self.gate: Callable[[], Awaitable[Any]] | None = gate

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
            self.cancel_event = None
            self.task = None
            now = time.monotonic()
            if n == 1:
                self.first_start = now
            timeout = self.timeout
            deadline = now + timeout if timeout is not None else None
            due = self.due
            if due is not None and (deadline is None or due < deadline):
                deadline = due  # the whole call's budget is the tighter clock
                timeout = due - now
            self.deadline, self.allowed = deadline, timeout

    def bound(self, budget: float | None, parent: Run | None) -> None:
        """Before submission: give the call its whole-call deadline, `budget`
        seconds from its submission (the tightest `call_timeout`, None for
        none), and never past what its caller has left (a nested call)."""
        due = None if budget is None else self.submitted + budget
        if parent is not None:
            # What the caller has left: its attempt's deadline (never past its
            # own whole-call deadline), or from its post-call hooks, which
            # the attempt's deadline does not bound (they may run after a
            # timeout, within `hook_grace`), its whole-call deadline.
            if parent.phase == FINISHING or parent.deadline is None:
                left = parent.due
            else:
                left = parent.deadline
            if left is not None and (due is None or left < due):
                due = left
                budget = None  # inherited: its message names the caller
        self.due, self.budget = due, budget

    def move_deadline(self, seconds: float) -> None:
        """Move the attempt's deadline on by `seconds` spent off its clock
        (a journal write, a policy's decision, a worker starting), never past
        the whole call's deadline."""
        deadline = self.deadline
        if deadline is None:
            return
        deadline += seconds
        due = self.due
        if due is not None and deadline > due:
            # What the attempt is given shrinks by what the cap takes off.
            if self.allowed is not None:
                self.allowed -= deadline - due
            deadline = due
        self.deadline = deadline

    def out_of_budget(self) -> bool:
        """Whether the current attempt's deadline is the whole call's: its
        timeout is then `DEADLINE_EXCEEDED`, and no retry can follow."""
        due = self.due
        return due is not None and self.deadline is not None and self.deadline >= due

    def refuse(self, code: Any, message: str) -> None:
        """Before submission: the call can never start; it ends `rejected` with
        `code` (an ErrorCode) and `message` (what the model reads)."""
        self.refusal = (code, message)

    def admitted_at_submission(self, policies: tuple[Any, ...], scrubber: Scrubber) -> None:
        """Before submission: `policies` (a quota's) were asked as the call was
        submitted and admitted it: they are told how it ends, refused by a
        later one of them or not. A refusal is scrubbed with `scrubber` as it
        ends, like any result."""
        self.consulted.extend(policies)
        if self.refusal is not None:
            self.scrubber = scrubber

    def waive(self, kind: type) -> None:
        """Before submission: drop its policies of type `kind` (an approval of
        its caller covers them)."""
        self.policies = tuple(p for p in self.policies if not isinstance(p, kind))

    def take_remote_record(self) -> Any:
        """The record in doubt whose work it picks up, once (None after)."""
        with self._lock:
            taken, self.remote_record = self.remote_record, None
        return taken

    def note_journaled(self) -> None:
        """The journal holds its intent: record its outcome there too."""
        self.journaled = True

    def not_started(self) -> None:
        """Scheduler: a policy delayed the attempt dispatched before it began,
        so the next dispatch is its first attempt again."""
        self.attempt = 0

    def is_live(self, n: int) -> bool:
        """True while attempt `n` is current and nobody has settled it."""
        return self.attempt == n and not self.settled and self.result is None

    def try_settle(self, n: int, by: int = True) -> bool:
        """Claim the outcome of attempt `n`; False if it was claimed already.
        The scheduler claims `by=SUPERVISOR`: a claim it was interrupted
        before honouring is then told from a worker's (`actors/_mend.py`)."""
        with self._lock:
            if self.attempt != n or self.settled or self.result is not None:
                return False
            self.settled = by
            return True

    def try_complete(self, result: ToolResult) -> bool:
        """Set the final result; False if the call already has one."""
        with self._lock:
            if self.result is not None:
                return False
            self.result = result
            return True

    def while_open(self, announce: Callable[[], None]) -> None:
        """Call `announce` unless the call has its result, under the lock that
        sets the result: what it announces is numbered before the call's
        `tool:finished` (announced once the result is set), or not at all."""
        with self._lock:
            if self.result is None:
                announce()

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

    def interrupt(self, reason: str = "") -> None:
        """Tell the running attempt its result is no longer wanted (cooperative
        flag for sync tools, real cancellation for async ones); `reason` (the
        scheduler's: "timeout", "cancelled", "closed") is what a backend that
        kills its worker says (`stop_reason`)."""
        if reason:
            self.stop_reason = reason
        self.cancel_latch().set()
        task = self.task
        if task is not None:
            task.cancel()

    def cancel_latch(self) -> Latch:
        """The current attempt's cancel flag (what its `ToolContext.cancelled`
        reads; `interrupt` sets it), made when first asked for."""
        with self._lock:
            latch = self.cancel_event
            if latch is None:
                latch = self.cancel_event = Latch()
            return latch

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
