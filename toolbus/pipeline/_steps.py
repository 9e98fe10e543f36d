"""What happens to one call, step by step, wherever its backend runs it.

admission (size, JSON, pre-call hooks, masking, authorization, validation)
-> attempt (the tool) -> on failure, the retry decision -> post-call hooks ->
the terminal result. Every step that runs user code (tools, hooks) is here and
is contained: whatever it raises becomes a result. The supervisor runs none of
it; it only learns the `Outcome`.

The steps are generators, in the manner of tenacity's shared decision core:
wherever user code hands back an awaitable (an async hook, an async tool), the
step `yield`s it and its driver (`_drive.py`) resolves it, by awaiting it on an
event loop or by waiting for it from a worker thread. So one body of code serves
sync and async tools, and sync and async hooks, alike.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from .._json import dumps as json_dumps
from ..bus import _signals as sig
from ..bus._events import (
    CallCancelled,
    CallFinished,
    CallRejected,
    Executed,
    Executing,
    Failed,
    LateResult,
    Progress,
    RetryAttempt,
    RetryExhausted,
    RetrySuccess,
    TimedOut,
)
from ..bus._events import WorkerKilled as WorkerKilled_
from ..bus._publisher import Emitter
from ..masking import Scrubber, mask_arguments, mask_paths, published_arguments
from ..models import ErrorCode, Status, ToolCall, ToolResult, idempotency_key_problem
from ..retry import AttemptFailure, AttemptTimeout, RetryDecision, new_retry_state, record_failure
from ..tools import (
    ArgumentError,
    Tool,
    ToolContext,
    ToolFailure,
    error_text,
    normalize_output,
)
from ..tools._tool import parse_json_arguments
from ._faults import ToolCrashed, WorkerKilled
from ._policies import Deferral, consult, tell_results
from ._run import ADMISSION, FINISHING, JOURNALING, RUNNING, Run

__all__ = [
    "Hooks",
    "Invoke",
    "Journal",
    "NestedCalls",
    "Outcome",
    "Services",
    "Steps",
    "Tally",
    "after_timeout",
    "attempt",
    "current_run",
    "end_call",
    "finish",
    "make_result",
    "publish_killed",
    "publish_progress",
    "tool_exception_filter",
]

log = logging.getLogger("toolbus")

# A step: yields awaitables to its driver, gets their values back, returns T.
Steps = Generator[Awaitable[Any], Any, Any]

# The call whose steps run in this context (with its executor's services): a
# call made from inside a tool or hook is recognised as nested by it.
current_run: contextvars.ContextVar[tuple[Services, Run] | None] = contextvars.ContextVar(
    "toolbus_current_run", default=None
)

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

    def begin(self, run: Run, key: str) -> Awaitable[ToolResult | None]:
        """Record the intent of a mutating call (synced); resolves to the
        recorded result if a call with this key already ended ok."""
        ...

    def attempt_ended(self, run: Run, n: int, status: str, duration: float) -> None: ...

    def ended(self, run: Run, result: ToolResult) -> None: ...


class NestedCalls(Protocol):
    """How a tool runs calls of its own on the executor running it, as nested
    calls of its run (a `toolbus.tools.sequence` runs its steps so)."""

    def tool(self, name: str) -> Tool | None:
        """The executor's registered tool of that name, if any."""
        ...

    def call(self, tool: Tool, call: ToolCall, parent: Run) -> Awaitable[ToolResult]:
        """Run `call` with `tool` (registered or not) through the executor's
        pipeline, as a nested call of `parent` on its share of `max_parallel`;
        resolves to its result. Awaited on the loop `parent`'s tool runs on."""
        ...


@dataclass(frozen=True, slots=True)
class Services:
    """What the steps share: read-only after the executor starts."""

    emitter: Emitter
    hooks: Hooks
    max_argument_bytes: int
    # The HMAC secret of idempotency keys (the journal's, or the executor's own).
    key_secret: bytes = b""
    journal: Journal | None = None
    killed: Tally = field(default_factory=Tally)
    # Executor(inject=...): "param" or "tool.param" -> fn(call), sync or async.
    inject: Mapping[str, Callable[[ToolCall], Any]] = field(default_factory=dict)
    # The executor's way in for calls its tools make of their own (None: none).
    nested: NestedCalls | None = None


# What sync hooks return; inspect.isawaitable (an ABC check) costs ~1 µs a call.
_PLAIN = frozenset({ToolCall, ToolResult, RetryDecision, bool, type(None), dict, list, str})


def _awaitable(value: Any) -> bool:
    """Whether user code handed back something to await (an async hook's coroutine).

    Each step writes `if _awaitable(v): v = yield v` where it calls a hook: a
    generator per hook call (`yield from`) would cost more than the hook."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


def make_result(
    run: Run,
    status: Status,
    *,
    output: Any = None,
    error: str | None = None,
    code: ErrorCode | None = None,
    attempts: int | None = None,
    attachments: tuple[Any, ...] = (),
    metadata: dict[str, Any] | None = None,
) -> ToolResult:
    # The validating constructor: pydantic-core makes it faster than model_construct.
    return ToolResult(
        call_id=run.call.id,
        name=run.call.name,
        status=status,
        output=output,
        error=error,
        error_code=code,
        attempts=run.attempt if attempts is None else attempts,
        duration=run.elapsed(),
        attachments=attachments,
        metadata=metadata if metadata is not None else {},
    )


def _scrubbed(scrubber: Scrubber, result: ToolResult) -> ToolResult:
    if not scrubber:
        return result
    return result.model_copy(
        update={
            "output": scrubber.value(result.output),
            "error": scrubber.text(result.error) if result.error else result.error,
            "metadata": scrubber.value(result.metadata),
            "attachments": tuple(
                a.model_copy(update=scrubber.value(a.model_dump(exclude={"type"})))
                for a in result.attachments
            ),
        }
    )


def finish(run: Run, result: ToolResult, svc: Services) -> bool:
    """Make `result` the call's terminal result if it has none yet; announce it.

    Returns False (and announces nothing) when someone else finished the call.
    """
    if run.completed_late and "completed_late" not in result.metadata:
        # The model must not redo a side effect that did happen, only too late.
        result = result.model_copy(update={"metadata": {**result.metadata, "completed_late": True}})
    result = _scrubbed(run.scrubber, result)
    if not run.try_complete(result):
        return False
    if run.consulted or run.delayed_by is not None:
        # Ours now: the policies that let the call through see how it ended
        # (and a spill or cache may hand back another result to publish).
        result = run.result = _scrubbed(run.scrubber, tell_results(run, result, svc))
    if run.journaled:
        try:
            svc.journal.ended(run, result)  # type: ignore[union-attr]
        except Exception as e:  # the result stands; the journal's failure is logged
            log_contained(f"journal write failed for call {run.call.id}", e, run.scrubber)
    em = svc.emitter
    bid, att, name = run.batch_id, result.attempts, run.call.name
    pid = run.parent_call_id
    if att > 1:
        if result.status == "ok":
            if em.wants(sig.RETRY_SUCCESS):
                em.emit(
                    sig.RETRY_SUCCESS,
                    RetrySuccess(run.call.id, name, bid, att, att, parent_call_id=pid),
                )
        elif result.status in ("error", "timeout") and em.wants(sig.RETRY_EXHAUSTED):
            em.emit(
                sig.RETRY_EXHAUSTED,
                RetryExhausted(
                    run.call.id, name, bid, att, att, result.error or "", parent_call_id=pid
                ),
            )
    if result.status == "rejected" and em.wants(sig.REJECTED):
        em.emit(
            sig.REJECTED,
            CallRejected(
                run.call.id,
                name,
                bid,
                att,
                result.error or "",
                result.error_code or ErrorCode.TOOL_ERROR,
                run.masked,
                parent_call_id=pid,
            ),
        )
    elif result.status == "cancelled" and em.wants(sig.CANCELLED):
        em.emit(
            sig.CANCELLED,
            CallCancelled(
                run.call.id,
                name,
                bid,
                att,
                result.error_code or ErrorCode.CANCELLED,
                result.error or "",
                parent_call_id=pid,
            ),
        )
    if em.wants(sig.FINISHED):
        em.emit(
            sig.FINISHED,
            CallFinished(run.call.id, name, bid, att, result, run.masked, parent_call_id=pid),
        )
    # The caller is woken by whoever closes the run's books (the scheduler),
    # so its stats already count the call when `execute` returns.
    return True


def end_call(run: Run, svc: Services, status: Status, code: ErrorCode, message: str) -> Outcome:
    """End the call with a result made here, no user code involved (a timeout,
    a cancellation, an internal error): DONE, or LOST if it had a result."""
    result = make_result(run, status, error=message, code=code)
    return DONE if finish(run, result, svc) else LOST


def log_contained(what: str, error: BaseException, scrubber: Scrubber) -> None:
    """Log a contained failure with its traceback, secrets scrubbed from all of it."""
    text = "".join(traceback.format_exception(error))
    log.warning("%s:\n%s", what, scrubber.text(text))


# -- admission ------------------------------------------------------------------


def _reject(run: Run, code: ErrorCode, message: str) -> ToolResult:
    return make_result(run, "rejected", error=message, code=code, attempts=0)


def _mask(run: Run, call: ToolCall, svc: Services) -> Steps:
    raw = call.arguments
    # Values the tool's schema types as secret are hidden whatever the masker does.
    paths = run.tool.secret_paths if run.tool is not None else ()
    try:
        masked = svc.hooks.mask_arguments(call)
        if _awaitable(masked):
            masked = yield masked
        if isinstance(masked, str | bytes) and not isinstance(raw, str):
            try:
                masked = orjson.loads(masked)
            except orjson.JSONDecodeError:
                pass
        masked, typed = mask_paths(masked, raw, paths)
        if masked is not raw:
            # Whatever the masker returned (a text, a list, an object), what is
            # published has every hidden value scrubbed from it.
            masked, run.scrubber = published_arguments(raw, masked, typed)
        run.masked = masked
    except (Exception, asyncio.CancelledError) as e:  # a hook's own, too
        # A broken masker must not leak: publish nothing of the arguments.
        run.masked = None
        run.scrubber = Scrubber(mask_arguments(raw)[1] + mask_paths(None, raw, paths)[1])
        log_contained(f"masker failed for call {call.id}", e, run.scrubber)


def _argument_size(args: dict[str, Any] | str, limit: int) -> int:
    if isinstance(args, str):
        return len(args) if len(args) * 4 <= limit else len(args.encode())
    return len(json_dumps(args, option=orjson.OPT_NON_STR_KEYS)) if args else 2


def admit(run: Run, svc: Services) -> Steps:
    """Prepare a call for its first attempt; return why it is rejected, or None."""
    run.phase = ADMISSION
    tool = run.tool
    assert tool is not None
    call = run.call
    key = run.origin.idempotency_key
    if key is not None:
        # A ToolCall checks its key when made; a mapping's (or a model_construct
        # one's) comes here unchecked, and is answered, not run under another.
        problem = idempotency_key_problem(key)
        if problem is not None:
            return _reject(run, ErrorCode.INVALID_ARGUMENTS, f"Invalid call: {problem}")
    args: dict[str, Any] | str = call.arguments
    limit = svc.max_argument_bytes
    try:
        size = _argument_size(args, limit)
    except TypeError as e:
        return _reject(run, ErrorCode.INVALID_ARGUMENTS, f"Arguments are not JSON: {e}")
    if size > limit:
        return _reject(
            run,
            ErrorCode.INVALID_ARGUMENTS,
            f"Arguments for '{call.name}' are {size} bytes; the limit is {limit} bytes",
        )
    if tool.type == "function" and isinstance(args, str):
        try:
            call = ToolCall.model_construct(
                id=call.id, name=call.name, arguments=parse_json_arguments(args)
            )
        except ArgumentError as e:
            return _reject(
                run, ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments for '{call.name}': {e}"
            )
        run.call = call
    if tool.injected:
        injected = yield from _inject(run, call, svc)
        if isinstance(injected, ToolResult):
            return injected
        call = run.call = injected
    try:
        new = svc.hooks.pre_execute(call)
        if _awaitable(new):
            new = yield new
        if not isinstance(new, ToolCall):
            raise TypeError(f"pre-call hook returned {type(new).__name__}, not a ToolCall")
    except (Exception, asyncio.CancelledError) as e:  # a hook's own, too
        # Raising is the documented way for a hook to refuse a call: logged
        # without a traceback, it is not a fault.
        yield from _mask(run, call, svc)
        log.info("pre-call hook rejected call %s: %s", call.id, run.scrubber.text(error_text(e)))
        return _reject(run, ErrorCode.TOOL_NOT_ALLOWED, error_text(e))
    if new.name != call.name:
        yield from _mask(run, call, svc)
        return _reject(
            run,
            ErrorCode.TOOL_NOT_ALLOWED,
            f"a pre-call hook renamed '{call.name}' to '{new.name}'; calls cannot change tools",
        )
    if new.id != call.id:
        new = ToolCall.model_construct(id=call.id, name=new.name, arguments=new.arguments)
    run.call = new
    yield from _mask(run, new, svc)
    if tool.injected_required and isinstance(new.arguments, dict):
        args = new.arguments
        missing = [n for n in tool.injected if n in tool.injected_required and n not in args]
        if missing:
            names = ", ".join(f"'{n}'" for n in missing)
            return _reject(
                run,
                ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{new.name}' is unavailable: nothing supplied its injected parameter "
                f"{names} (Executor(inject=...) or a pre-call hook does)",
            )
    try:
        # An async authorizer is awaited: its coroutine object is not a yes.
        allowed = svc.hooks.is_allowed(new)
        if _awaitable(allowed):
            allowed = yield allowed
        allowed = bool(allowed)
    except (Exception, asyncio.CancelledError) as e:  # a hook's own, too
        log_contained(f"authorization failed for call {new.id}", e, run.scrubber)
        return _reject(run, ErrorCode.TOOL_NOT_ALLOWED, error_text(e))
    if not allowed:
        return _reject(run, ErrorCode.TOOL_NOT_ALLOWED, f"Tool '{new.name}' is not allowed")
    try:
        run.params = tool.parse(new.arguments)
    except ArgumentError as e:
        return _reject(run, ErrorCode.INVALID_ARGUMENTS, str(e))
    except Exception as e:
        return _reject(
            run, ErrorCode.INVALID_ARGUMENTS, f"Invalid arguments for '{new.name}': {error_text(e)}"
        )
    run.admitted = True
    return None


def _inject(run: Run, call: ToolCall, svc: Services) -> Steps:
    """Refuse a model-supplied value for an injected parameter (on the arguments
    as the model sent them) and fill the injected values `Executor(inject=...)`
    supplies. Returns the call with them, or why it is rejected."""
    tool = run.tool
    assert tool is not None
    args = call.arguments
    if not isinstance(args, dict):
        return call  # unparseable: validation says so
    given = [n for n in tool.injected_names if n in args]
    if given:
        names = ", ".join(f"'{n}'" for n in given)
        return _reject(
            run,
            ErrorCode.INVALID_ARGUMENTS,
            f"Invalid arguments for '{call.name}': {names} cannot be set by the model "
            "(the application supplies it); leave it out",
        )
    providers = svc.inject
    if not providers:
        return call
    values: dict[str, Any] = {}
    for name in tool.injected:
        fn = providers.get(f"{call.name}.{name}") or providers.get(name)
        if fn is None:
            continue
        try:
            value = fn(call)
            if _awaitable(value):
                value = yield value
        except (Exception, asyncio.CancelledError) as e:  # the provider's own, too
            # Refused like a pre-call hook that raises; whatever was supplied
            # so far is masked (and scrubbed from the message) first.
            yield from _mask(run, call.with_arguments({**args, **values}), svc)
            log.info(
                "injecting '%s' failed for call %s: %s",
                name,
                call.id,
                run.scrubber.text(error_text(e)),
            )
            return _reject(
                run,
                ErrorCode.TOOL_NOT_ALLOWED,
                run.scrubber.text(f"Could not supply '{name}': {error_text(e)}"),
            )
        values[name] = value
    return call.with_arguments({**args, **values}) if values else call


# -- attempts -------------------------------------------------------------------


# Handed to tools that take no context (they never see it).
_NO_CONTEXT = ToolContext(call_id="", tool="")


def publish_progress(
    run: Run, svc: Services, message: str, fraction: float | None, data: dict[str, Any]
) -> None:
    """Announce a tool's progress, scrubbed; the progress channel of every backend."""
    em = svc.emitter
    if em.wants(sig.PROGRESS):
        s = run.scrubber
        em.emit(
            sig.PROGRESS,
            Progress(
                run.call.id,
                run.call.name,
                run.batch_id,
                run.attempt,
                s.text(message),
                fraction,
                s.value(data),
                parent_call_id=run.parent_call_id,
            ),
        )


def publish_killed(run: Run, svc: Services, pid: int, reason: str) -> None:
    """A process running `run`'s attempt was killed by toolbus: count it and
    announce `tool:killed`. Every backend or tool that kills a process says so here."""
    svc.killed.add()
    em = svc.emitter
    if em.wants(sig.KILLED):
        em.emit(
            sig.KILLED,
            WorkerKilled_(
                run.call.id,
                run.call.name,
                run.batch_id,
                run.attempt,
                pid,
                reason,
                parent_call_id=run.parent_call_id,
            ),
        )


def _progress_sink(svc: Services, run: Run) -> Any:
    def sink(ctx: ToolContext, message: str, fraction: float | None, data: dict[str, Any]) -> None:
        publish_progress(run, svc, message, fraction, data)

    return sink


# How a backend runs the tool itself: `invoke(run, params, ctx)`, returning the
# value or a coroutine. The default calls `tool.invoke` here; a process backend
# ships the call to a worker instead.
Invoke = Callable[[Run, Any, ToolContext], Any]


def attempt(run: Run, n: int, svc: Services, invoke: Invoke | None = None) -> Steps:
    """Run attempt `n` of `run` (admitting the call first when n == 1); return an Outcome."""
    if not run.is_live(n):
        return LOST
    current_run.set((svc, run))
    # Whatever attempt this is: one that timed out in its pre-call hooks or in
    # a policy's decision left the rest undone, and a retry must not skip it.
    if not run.admitted:  # (admitted already before a policy's delay)
        rejection = yield from admit(run, svc)
        if rejection is not None:
            if not run.try_settle(n):
                return LOST
            return DONE if finish(run, rejection, svc) else LOST
        if not run.is_live(n):
            return LOST
    if run.policy_at < len(run.policies):
        decided = yield from consult(run, svc)
        if decided is not None:
            if not run.try_settle(n):
                return LOST
            if type(decided) is Deferral:
                return Outcome("delay", decided.seconds, until=decided.until)
            return DONE if finish(run, decided, svc) else LOST
        if not run.is_live(n):
            return LOST
    if svc.journal is not None and not run.read_only and not run.journaled:
        replayed = yield from _journal_intent(run, svc)
        if not run.is_live(n):
            return LOST
        if replayed is not None:
            if not run.try_settle(n):
                return LOST
            return DONE if finish(run, replayed, svc) else LOST
    tool = run.tool
    assert tool is not None
    em = svc.emitter
    call_id, name, bid = run.call.id, run.call.name, run.batch_id
    pid = run.parent_call_id
    if n > 1 and em.wants(sig.RETRY_ATTEMPT):
        em.emit(
            sig.RETRY_ATTEMPT,
            RetryAttempt(
                call_id,
                name,
                bid,
                n,
                run.last_error,
                run.retry_delay,
                run.policy.max_attempts,
                parent_call_id=pid,
            ),
        )
    if em.wants(sig.EXECUTING):
        em.emit(
            sig.EXECUTING,
            Executing(call_id, name, bid, n, run.masked, run.timeout, parent_call_id=pid),
        )
    run.phase = RUNNING
    # Built only for a tool that takes one (its `run` has a ctx parameter).
    ctx = (
        ToolContext(
            call_id=call_id,
            tool=name,
            attempt=n,
            deadline=run.deadline,
            cancel=run.cancel_event,
            sink=_progress_sink(svc, run),
            idempotency_key=run.idempotency_key(svc.key_secret),
        )
        if tool.wants_context or invoke is not None
        else _NO_CONTEXT
    )
    start = time.monotonic()
    error: BaseException | None = None
    value: Any = None
    try:
        value = tool.invoke(run.params, ctx) if invoke is None else invoke(run, run.params, ctx)
        if inspect.iscoroutine(value):  # also from a sync wrapper of an async function
            value = yield value
        elif tool.is_async and inspect.isawaitable(value):
            raise TypeError("tool returned an awaitable that is not a coroutine")
        output, attachments, metadata = normalize_output(value)
    except BaseException as e:  # tools may raise anything; nothing escapes a step
        error = e
    if error is not None:
        seen = tool_exception_filter.get()
        if seen is not None:
            error = _filtered(seen, error, run)
    end = time.monotonic()
    duration = end - start
    overran = run.deadline is not None and end > run.deadline
    if run.journaled:
        svc.journal.attempt_ended(  # type: ignore[union-attr]
            run, n, "ok" if error is None else "timeout" if overran else "error", duration
        )
    if isinstance(error, WorkerKilled):
        # Killed by whoever settled the attempt (deadline, cancellation): not a
        # late result, there is none. Unsettled, it counts as a crash.
        error.__traceback__ = None
        if not run.try_settle(n):
            return LOST
        error = ToolCrashed(f"the process running '{name}' was killed")
        overran = False
    elif not run.try_settle(n):
        # Announced by the driver only after it has reported to the supervisor,
        # so whoever sees the event also sees it in the executor's stats.
        if error is not None:
            error.__traceback__ = None  # see after_failure
        return Outcome("late", late=_late_event(run, n, error, duration))
    if overran:
        # Finished, but after its deadline (the timer had not fired yet): a
        # timeout all the same. The value is a late result; a mutating call
        # that did complete says so, so the model does not redo it.
        if error is None and not run.read_only:
            run.completed_late = True
        if em.wants(sig.TIMEOUT):
            em.emit(
                sig.TIMEOUT,
                TimedOut(call_id, name, bid, n, run.timeout or 0.0, parent_call_id=pid),
            )
        late = _late_event(run, n, error, duration)
        outcome = yield from after_timeout(run, n, "", svc)
        return Outcome(outcome.kind, outcome.delay, late, timed_out=True)
    if isinstance(error, asyncio.CancelledError):
        # Not cancelled by toolbus (it settles first): by the loop the tool ran
        # on, shutting down (asyncio.run's end), or by the tool itself.
        error.__traceback__ = None
        return end_call(
            run,
            svc,
            "cancelled",
            ErrorCode.CANCELLED,
            "the tool's task was cancelled (its event loop shutting down?)",
        )
    if error is None:
        if em.wants(sig.EXECUTED):
            em.emit(sig.EXECUTED, Executed(call_id, name, bid, n, duration, parent_call_id=pid))
        result = make_result(run, "ok", output=output, attachments=attachments, metadata=metadata)
        return (yield from complete(run, result, svc))
    if em.wants(sig.ERROR):
        text = run.scrubber.text(error_text(error))
        em.emit(
            sig.ERROR,
            Failed(
                call_id,
                name,
                bid,
                n,
                text,
                _failure_code(error),
                duration,
                parent_call_id=pid,
            ),
        )
    return (yield from after_failure(run, n, error, svc, timed_out=False))


def _filtered(
    seen: Callable[[BaseException], BaseException | None], error: BaseException, run: Run
) -> BaseException:
    """The exception to judge an attempt by: what the caller's filter makes of `error`."""
    try:
        other = seen(error)
    except Exception as e:  # a broken filter must not lose the tool's failure
        log_contained(f"tool exception filter failed for call {run.call.id}", e, run.scrubber)
        return error
    return other if isinstance(other, BaseException) else error


def _journal_intent(run: Run, svc: Services) -> Steps:
    """Record a mutating call's intent before its tool runs; return the recorded
    result of an earlier call with the same idempotency key that ended ok.

    The wait is off the deadline's clock: the deadline moves on by as long as
    the write took (the supervisor re-arms a deadline that fires meanwhile).
    It is bounded by the journal (`journal_timeout`): an intent not on disk by
    then, or whose commit failed, resolves to None, logged by the journal, and
    the call runs unjournaled, never held back."""
    journal = svc.journal
    assert journal is not None
    run.phase = JOURNALING
    began = time.monotonic()
    recorded: ToolResult | None = None
    try:
        recorded = yield journal.begin(run, run.idempotency_key(svc.key_secret))
        run.journaled = True
    except (Exception, asyncio.CancelledError) as e:
        if run.is_live(1):
            # A journal that cannot be written must not lose the call (its own
            # failures are logged by the journal; this is anything else).
            log_contained(f"journal write failed for call {run.call.id}", e, run.scrubber)
        else:  # cancelled or timed out while it waited: not the journal's failure
            log.debug("call %s ended while its intent was being written", run.call.id)
    if run.deadline is not None:
        run.deadline += time.monotonic() - began
    run.phase = ADMISSION
    if recorded is None:
        return None
    return make_result(
        run,
        "ok",
        output=recorded.output,
        attachments=recorded.attachments,
        metadata={**recorded.metadata, "replayed": True},
        attempts=0,
    )


def _late_event(run: Run, n: int, error: BaseException | None, duration: float) -> LateResult:
    status = "ok" if error is None else "error"
    return LateResult(
        run.call.id,
        run.call.name,
        run.batch_id,
        n,
        status,
        duration,
        parent_call_id=run.parent_call_id,
    )


def after_timeout(run: Run, n: int, phase: str, svc: Services) -> Steps:
    """Attempt `n` timed out (in `phase`); decide what follows. Returns an Outcome."""
    current_run.set((svc, run))  # its hooks' calls to the executor are nested calls
    if phase == ADMISSION:
        what = "pre-call hooks did not return"
    elif phase == FINISHING:
        what = "post-call hooks did not return"
    else:
        what = f"Tool '{run.call.name}' timed out"
    return (
        yield from after_failure(
            run, n, AttemptTimeout(f"{what} after {run.timeout}s"), svc, timed_out=True
        )
    )


def after_failure(
    run: Run, n: int, error: BaseException, svc: Services, *, timed_out: bool
) -> Steps:
    run.phase = FINISHING
    text = run.scrubber.text(str(error) if timed_out else error_text(error))
    decision = RetryDecision.give_up()
    # A tool that says "no retry" (ToolFailure(retry=False)) is not second-guessed:
    # no hook is asked, so none can force a retry.
    final = isinstance(error, ToolFailure) and not error.retry
    if run.admitted and not final:
        if run.retry_state is None:
            # Tenacity's clock (stop_after_delay) starts with the first attempt.
            run.retry_state = new_retry_state()
            run.retry_state.start_time = run.first_start
        record_failure(run.retry_state, n, error)
        failure = AttemptFailure(
            attempt=n,
            error=error,
            timed_out=timed_out,
            read_only=run.read_only or _idempotent(run),  # safe to run again
            policy=run.policy,
            state=run.retry_state,
        )
        try:
            answer = svc.hooks.should_retry(run.call, failure)
            if _awaitable(answer):
                answer = yield answer
            decision = answer if isinstance(answer, RetryDecision) else RetryDecision(bool(answer))
        except (Exception, asyncio.CancelledError) as e:  # a hook's own, too
            log_contained(
                f"should_retry failed for call {run.call.id}; not retrying", e, run.scrubber
            )
    # The traceback's frames hold this step's locals (the run among them): a
    # cycle only a garbage collection would free. Its text is taken already.
    error.__traceback__ = None
    code = _failure_code(error)
    crashed = code is ErrorCode.TOOL_CRASHED
    # A mutating attempt that timed out or crashed may have had its side
    # effect: never run it again, whatever a hook decided, unless the tool
    # says running it twice is safe.
    unsafe = (timed_out or crashed) and not (run.read_only or _idempotent(run))
    if decision.retry and not unsafe and not final:
        run.last_error = text
        run.retry_delay = decision.delay
        return Outcome("retry", decision.delay)
    if timed_out:
        result = make_result(
            run, "timeout", error=text, code=ErrorCode.EXECUTION_TIMEOUT, attempts=n
        )
    else:
        metadata = error.metadata if isinstance(error, ToolFailure) else None
        result = make_result(run, "error", error=text, code=code, attempts=n, metadata=metadata)
    return (yield from complete(run, result, svc))


def _failure_code(error: BaseException) -> ErrorCode:
    """The error code of a failed attempt: a crash of its runner, or the tool's own."""
    if isinstance(error, ToolCrashed):
        return ErrorCode.TOOL_CRASHED
    if isinstance(error, ToolFailure):
        return error.code
    return ErrorCode.TOOL_ERROR


def _idempotent(run: Run) -> bool:
    return run.tool is not None and run.tool.idempotent


def complete(run: Run, result: ToolResult, svc: Services) -> Steps:
    """Run post-call hooks on a result and make it final. Returns an Outcome."""
    run.phase = FINISHING
    if run.admitted:
        try:
            new = svc.hooks.post_execute(run.call, result)
            if _awaitable(new):
                new = yield new
            if not isinstance(new, ToolResult):
                raise TypeError(f"post-call hook returned {type(new).__name__}, not a ToolResult")
            if new.call_id != result.call_id:
                new = new.model_copy(update={"call_id": result.call_id})
            result = new
        except asyncio.CancelledError:
            # Cancelled: by the loop it ran on shutting down, or by the hook.
            result = make_result(
                run,
                "cancelled",
                error="the call was cancelled in its post-call hooks",
                code=ErrorCode.CANCELLED,
                attempts=result.attempts,
            )
        except Exception as e:
            log_contained(f"post-call hook failed for call {run.call.id}", e, run.scrubber)
            result = make_result(
                run,
                "error",
                error=f"post-call hook failed: {error_text(e)}",
                code=ErrorCode.TOOL_ERROR,
                attempts=result.attempts,
            )
    return DONE if finish(run, result, svc) else LOST
