"""What a call's steps share: their executor's services, the outcome a step
reports, and the context variables that mark a nested call."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from .._interrupts import INTERRUPTS
from ..bus import _signals as sig
from ..bus._events import LateResult, WorkerKilled
from ..bus._publisher import Emitter
from ..masking import EMPTY_SCRUBBER, Scrubber, SecretKeys
from ..models import ToolCall, ToolResult
from ..retry import AttemptFailure
from ..tools import ToolContext
from ..tools import _running as tools_running
from ..tools._running import NestedCalls
from ._halts import Halts
from ._held import PendingRequests, UsedDecisions
from ._run import Run

log = logging.getLogger("toolbus")

# A step: yields awaitables to its driver, gets their values back, returns T.
Steps = Generator[Awaitable[Any], Any, Any]

# What a hook of the user's (pre-call, authorize, masker, should_retry, an
# inject provider) raising counts as its own failure: any exception, the
# BaseExceptions its code may raise too (it runs on a worker or the loop,
# where no signal lands), but GeneratorExit: the step itself being closed.
HOOK_FAILURES = (Exception, asyncio.CancelledError, *INTERRUPTS)

# The call whose steps run in this context (with its executor's services): a
# call made from inside a tool or hook is recognised as nested by it. The
# variable is the tools layer's (a sequence, a command tool read it there);
# this is the same variable, typed as the engine knows its values.
current_run = cast("contextvars.ContextVar[tuple[Services, Run] | None]", tools_running.current_run)

# Set by a caller around its calls (a framework's node): sees each exception a
# tool raises and may return another to judge the attempt by. LangGraph's
# `ToolbusNode` takes an `interrupt()` (a GraphBubbleUp, the graph's and not
# the tool's failure) back to the graph this way, whatever kind the tool is.
tool_exception_filter: contextvars.ContextVar[
    Callable[[BaseException], BaseException | None] | None
] = contextvars.ContextVar("toolbus_tool_exception_filter", default=None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a run after a step, for the supervisor's books.

    kind: "done" (this step finished the call), "retry" (after `delay`), "lost"
    (someone else settled it first), "late" (the tool returned after the
    call was settled without it) or "delay" (a policy asks again after
    `delay`, or when `until` is done: the call has not started). `timed_out`:
    the attempt overran its deadline and the step itself decided so (the
    supervisor's timer had not fired yet).
    """

    kind: Literal["done", "retry", "lost", "late", "delay"]
    delay: float = 0.0
    late: LateResult | None = None
    timed_out: bool = False
    # "delay": a policy asks again when this (a concurrent.futures.Future) is done.
    until: Any = None


DONE = Outcome("done")
LOST = Outcome("lost")


class Hooks(Protocol):
    """The executor's extension points, as the pipeline calls them (each may
    return an awaitable)."""

    def pre_execute(self, call: ToolCall) -> Any: ...
    def is_allowed(self, call: ToolCall) -> Any: ...
    def mask_arguments(self, call: ToolCall) -> Any: ...
    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> Any: ...
    def post_execute(self, call: ToolCall, result: ToolResult) -> Any: ...


class Tally:
    """A count bumped from any thread (workers killed)."""

    __slots__ = ("_lock", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.value += n


class Journal(Protocol):
    """What the steps need of a durable journal (`toolbus.journal`)."""

    def begin(self, run: Run, key: str) -> Awaitable[Any]:
        """Record the intent of a mutating call (synced); resolves to the
        recorded result if a call with this key already ended ok, None, or a
        `toolbus.journal` `KeyReused` / `KeyInUse` / `Unjournaled`."""
        ...

    def attempt_started(self, run: Run) -> bool:
        """An attempt enters the tool (until `attempt_ended`): False if the
        call has ended already, and its tool is not to start."""
        ...

    def attempt_ended(self, run: Run, n: int, status: str, duration: float) -> None: ...

    def remote_task(self, run: Run, handle: str) -> None:
        """Record that the call's work runs elsewhere under `handle`."""
        ...

    def ended(self, run: Run, result: ToolResult) -> None: ...


class CallsInDoubt(Protocol):
    """The calls a dead process left in doubt in the journal, by tool and key,
    and the handler that decides them (`Executor(on_in_doubt=...)`)."""

    handler: Callable[[Any], Any] | None  # None: only calls with a remote task are taken

    @property
    def pending(self) -> bool:
        """Whether any is left to decide, or being decided."""
        ...

    def take(self, key: str, tool: str, by: object) -> Any:
        """The record in doubt of this key and tool for the call `by` to
        decide (taken: decided once), or None; the key is then `busy` for
        other calls until `done(by)` (or the record is restored)."""
        ...

    def busy(self, key: str, tool: str) -> Any:
        """The record another call is deciding for this key and tool, or None."""
        ...

    def done(self, by: object) -> None:
        """The call `by` decided (its intent written, or none to write)."""
        ...

    def settled(self, record: Any) -> None:
        """Its decision is made: the record is acknowledged in the journal."""
        ...

    def restore(self, record: Any) -> None:
        """No decision was made after all: the record is in doubt again."""
        ...

    def acknowledged(self, timeout: float) -> None:
        """Wait (up to `timeout`) for the decisions made so far to be acknowledged."""
        ...


@dataclass(frozen=True, slots=True)
class Services:
    """What the steps share: read-only after the executor starts."""

    emitter: Emitter
    hooks: Hooks
    max_argument_bytes: int
    # The HMAC secret of idempotency keys and approval digests (the journal's,
    # so both stay the same across restarts, or the executor's own).
    key_secret: bytes = b""
    journal: Journal | None = None
    # Executor(journal_required=True): a mutating call whose intent is not on
    # disk is refused (`JOURNAL_UNAVAILABLE`) instead of run unrecorded.
    journal_required: bool = False
    # Executor(on_in_doubt=...) with a journal: its calls in doubt at start.
    in_doubt: CallsInDoubt | None = None
    killed: Tally = field(default_factory=Tally)
    # Executor(inject=...): "param" or "tool.param" -> fn(call), sync or async.
    inject: Mapping[str, Callable[[ToolCall], Any]] = field(default_factory=dict)
    # The executor's way in for calls its tools make of their own (None: none).
    nested: NestedCalls | None = None
    # Admission runs no user code: the pre-call hooks, authorization and
    # masking are the defaults (no option set, none overridden). A remote
    # backend may then admit a call on whichever thread dispatches it.
    plain_admission: bool = False
    # No post-call hook (none given, `post_execute` not overridden): a result
    # is final as the step makes it.
    plain_post: bool = False
    # `should_retry` is toolbus's own (not overridden): a retry decision runs
    # only the retry policy's strategies.
    plain_retry: bool = False
    # The executor's `secret_keys`: with plain admission, the default masking
    # is applied here without a trip through the hook.
    secret_keys: SecretKeys | None = None
    # What every run's scrubber starts as: with the executor's content scanner
    # (`Executor(scanner=...)`), one that scans whatever it scrubs.
    scrubber: Scrubber = EMPTY_SCRUBBER
    # The agent runs halted on this executor (`_halts.py`).
    halts: Halts = field(default_factory=Halts)
    # The single-use approval decisions used on it, and the requests waiting
    # for a decision (`_held.py`).
    used_decisions: UsedDecisions = field(default_factory=UsedDecisions)
    pending: PendingRequests = field(default_factory=PendingRequests)

    def set_plain(self, admission: bool, post: bool, retry: bool) -> None:
        """The executor's hooks changed after it started (one set on the
        instance): the only fields that change, each one atomic write."""
        object.__setattr__(self, "plain_admission", admission)
        object.__setattr__(self, "plain_post", post)
        object.__setattr__(self, "plain_retry", retry)

    def announce_killed(self, run: Run, pid: int, reason: str) -> None:
        """A process running `run`'s attempt was killed by toolbus: count it and
        announce `tool:killed`. Every backend or tool that kills a process says so here.

        Announced before it is counted: whoever sees the count (`stats()`) and
        then drains the events finds this one among them."""
        try:
            em = self.emitter
            if em.wants(sig.KILLED):
                em.emit(
                    sig.KILLED,
                    WorkerKilled(
                        run.call.id,
                        run.call.name,
                        run.batch_id,
                        run.attempt,
                        pid,
                        reason,
                        parent_call_id=run.parent_call_id,
                        _run=run.token,
                    ),
                )
        finally:
            self.killed.add()


# What sync hooks return; inspect.isawaitable (an ABC check) costs ~1 µs a call.

Invoke = Callable[[Run, Any, ToolContext], Any]
