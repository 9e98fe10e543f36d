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

One piece: the attempt, its retry decision, the post-call hooks and the
completion are one chain of generators handing the same run along; split
across modules, every call would pay more lookups on its path.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable
from types import CoroutineType
from typing import Any

from .._errors import InputRequired, ToolCrashed, WorkerKilled
from ..bus import _signals as sig
from ..bus._events import (
    Executed,
    Executing,
    Failed,
    LateResult,
    RetryAttempt,
    TimedOut,
)
from ..models import ErrorCode, ToolResult
from ..retry import AttemptFailure, AttemptTimeout, RetryDecision, new_retry_state, record_failure
from ..tools import (
    ToolContext,
    ToolFailure,
    error_text,
    normalize_output,
)
from ._admission import NOT_PLAIN, admit, admit_plain
from ._clock import ran_out, spent_result
from ._decisions import spend
from ._external import external_result
from ._guardrails import check_outputs
from ._input import answer_for, deferred_for_input
from ._journaled import before_journaled
from ._make import awaitable, log_contained, make_result, ok_result
from ._policies import Deferral, consult
from ._reports import CallLogs, progress_sink
from ._results import end_call, finish
from ._run import FINISHING, RUNNING, Run
from ._services import (
    DONE,
    HOOK_FAILURES,
    LOST,
    Invoke,
    Outcome,
    Services,
    Steps,
    current_run,
    log,
    tool_exception_filter,
)

__all__ = [
    "after_failure",
    "after_timeout",
    "attempt",
    "complete",
    "plain_after_timeout",
    "timed_out_here",
]

# -- attempts -------------------------------------------------------------------


# Handed to tools that take no context (they never see it).
_NO_CONTEXT = ToolContext(call_id="", tool="")


def _remote_task(svc: Services, run: Run, handle: str) -> None:
    """A tool said its call's work runs elsewhere under `handle`: kept with
    the call's intent, for the call made again after a crash."""
    if svc.journal is not None and run.journaled:
        svc.journal.remote_task(run, handle)


# How a backend runs the tool itself: `invoke(run, params, ctx)`, returning the
# value or a coroutine. The default calls `tool.invoke` here; a process backend
# ships the call to a worker instead.


def attempt(
    run: Run,
    n: int,
    svc: Services,
    invoke: Invoke | None = None,
    hand_on: Callable[[], None] | None = None,
) -> Steps:
    """Run attempt `n` of `run` (admitting the call first when n == 1); return an Outcome.

    `hand_on`: called once what follows may take long, when the call is
    admitted and its policies let it through (or before admission runs a hook
    set meanwhile): its backend may then wake another worker for its queue,
    see `_thread_pool.py`."""
    if run.attempt != n or run.settled or run.result is not None:  # `run.is_live(n)`, inlined
        return LOST
    current_run.set((svc, run))
    if hand_on is not None and not run.admitted and not svc.plain_admission:
        # A hook was set since the worker took the call as quick to ask:
        # whatever it does, the queue is not to wait for it.
        hand_on()
        hand_on = None
    # Whatever attempt this is: one that timed out in its pre-call hooks left
    # the rest undone, and a retry must not skip it. (A policy's decision is
    # off the clock: it never times out an attempt, see `consult`.)
    if not run.admitted:  # (admitted already before a policy's delay)
        rejection = admit_plain(run, svc)
        if rejection is NOT_PLAIN:
            rejection = yield from admit(run, svc)
        if rejection is not None:
            if not run.try_settle(n):
                return LOST
            return DONE if finish(run, rejection, svc) else LOST
        if run.attempt != n or run.settled or run.result is not None:  # not `is_live(n)`
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
    if run.tool is not None and run.tool.external:  # never run here: answered from outside
        if not run.try_settle(n):
            return LOST
        return DONE if finish(run, external_result(run, svc), svc) else LOST
    if hand_on is not None:
        hand_on()
    if (svc.journal is not None and not run.read_only and not run.journaled) or run.gate:
        replayed = yield from before_journaled(run, svc)
        if not run.is_live(n):
            return LOST
        if replayed is not None:
            if not run.try_settle(n):
                return LOST
            return DONE if finish(run, replayed, svc) else LOST
    spent = None if run.spend is None else spend(run, svc)  # its decision, checked now
    if spent is not None:
        if not run.try_settle(n):
            return LOST
        return DONE if finish(run, spent, svc) else LOST
    # From here on the deadline treats the attempt as running: a timer that
    # fired before this line found it not yet begun and settled it.
    run.phase = RUNNING
    if run.attempt != n or run.settled or run.result is not None:  # not `is_live(n)`
        return LOST
    due = run.due
    if due is not None and time.monotonic() >= due:
        # Its worker began after the whole call's time ran out (a busy loop, a
        # slow start): the tool does not run now.
        if not run.try_settle(n):
            return LOST
        return DONE if finish(run, spent_result(run, n - 1), svc) else LOST
    tool = run.tool
    assert tool is not None
    em = svc.emitter
    call_id, name = run.call.id, run.call.name
    bid = run.batch.batch_id if run.batch is not None else None
    pid = run.parent_call_id
    # Built on a delivery thread (`emit_later`): this is the caller's critical path.
    if n > 1 and em.listening[sig.RETRY_ATTEMPT]:
        # The model's text of the last error: scanned here where a content
        # scanner leaves the model's copy alone.
        last = run.last_error if run.scrubber.scanner is None else run.scrubber.text(run.last_error)
        em.emit_later(
            sig.RETRY_ATTEMPT,
            RetryAttempt,
            (call_id, name, bid, n, last, run.retry_delay, run.policy.max_attempts),
            pid,
            run.token,
        )
    if em.listening[sig.EXECUTING]:
        em.emit_later(
            sig.EXECUTING,
            Executing,
            (call_id, name, bid, n, run.masked, run.allowed),
            pid,
            run.token,
        )
    # Built only for a tool that takes one (its `run` has a ctx parameter),
    # also where a backend runs it elsewhere: what it sends along (the key,
    # the progress channel) only a tool that takes a context can see.
    ctx = (
        ToolContext(
            call_id=call_id,
            tool=name,
            attempt=n,
            deadline=run.deadline,
            cancel=run.cancel_latch(),
            sink=progress_sink(svc, run),
            idempotency_key=run.idempotency_key(svc.key_secret),
            answer=answer_for(run, svc.key_secret) if run.approval is not None else None,
            logs=CallLogs(run),
            remote_task=run.remote_task,
            remote=functools.partial(_remote_task, svc, run),
        )
        if tool.wants_context
        else _NO_CONTEXT
    )
    # Ended just now (its deadline, a cancel), its outcome written: its key is
    # no longer held for it, so its tool must not start. (A call without a
    # journal pays one flag read, as for `attempt_ended` below.)
    if (
        run.journaled
        and not svc.journal.attempt_started(run)  # type: ignore[union-attr]
        and run.result is not None
    ):
        return LOST
    # Handed to the first attempt after a crash only: a later attempt in this
    # process starts its own work (the one before was cancelled, or ended).
    run.remote_task = None
    if run.remote_record is not None and (picked := run.take_remote_record()) is not None:
        picked[0].settled(picked[1])  # its work is picked up: the old record goes
    start = time.monotonic()
    error: BaseException | None = None
    value: Any = None
    try:
        value = tool.invoke(run.params, ctx) if invoke is None else invoke(run, run.params, ctx)
        if isinstance(value, CoroutineType):  # also from a sync wrapper of an async function
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
        if error is not None:
            error.__traceback__ = None  # see after_failure
            if isinstance(error, asyncio.CancelledError):
                # Cancelled by whoever settled the attempt (its deadline, a
                # cancel): a timeout or a cancellation, already accounted for.
                # A late result is only what an attempt returned or raised of
                # its own after that.
                return LOST
        # Announced by the driver only after it has reported to the supervisor,
        # so whoever sees the event also sees it in the executor's stats.
        return Outcome("late", late=_late_event(run, n, error, duration))
    if overran:
        # Finished, but after its deadline (the timer had not fired yet): a
        # timeout all the same. The value is a late result; a mutating call
        # that did complete says so, so the model does not redo it.
        if error is None and not run.read_only:
            run.completed_late = True
        if em.listening[sig.TIMEOUT]:
            em.emit(
                sig.TIMEOUT,
                TimedOut(
                    call_id, name, bid, n, run.allowed or 0.0, parent_call_id=pid, _run=run.token
                ),
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
            "the tool's task was cancelled (its event loop shutting down?)"
            if tool.is_async
            else "the tool raised asyncio.CancelledError",  # (a sync tool: its own code)
        )
    if error is None:
        if em.listening[sig.EXECUTED]:
            em.emit_later(sig.EXECUTED, Executed, (call_id, name, bid, n, duration), pid, run.token)
        result = (
            ok_result(run, output, metadata)
            if attachments == () and type(metadata) is dict  # (a plain value's: most tools')
            else make_result(run, "ok", output=output, attachments=attachments, metadata=metadata)
        )
        if svc.plain_post and not run.output_checks:  # nothing to run on it: final as made
            return DONE if finish(run, result, svc) else LOST
        return (yield from complete(run, result, svc))
    if em.listening[sig.ERROR] and not isinstance(error, InputRequired):  # (a question, no failure)
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
                _run=run.token,
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
        _run=run.token,
    )


def after_timeout(run: Run, n: int, phase: str, svc: Services) -> Steps:
    """Attempt `n` timed out (in `phase`); decide what follows. Returns an Outcome."""
    current_run.set((svc, run))  # its hooks' calls to the executor are nested calls
    _, text = ran_out(run, phase)
    return (yield from after_failure(run, n, AttemptTimeout(text), svc, timed_out=True))


def timed_out_here(run: Run, n: int, phase: str, svc: Services) -> Outcome:
    """`after_timeout`, decided at once on this thread, for a run whose timeout
    is followed by no code of the user's (`plain_after_timeout`): no await, no
    hook, and no context of the call's is entered."""
    _, text = ran_out(run, phase)
    steps = after_failure(run, n, AttemptTimeout(text), svc, timed_out=True)
    try:
        steps.send(None)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome
    steps.close()
    raise RuntimeError(f"the timeout of call {run.call.id} awaited something: not plain")


def plain_after_timeout(run: Run, svc: Services) -> bool:
    """Whether what follows `run`'s timeout runs no code of the user's: the
    retry decision is toolbus's (`should_retry` and the policy's strategies
    its own), no post-call hook sees the result, and no policy of the user's
    is told it."""
    policy = run.policy
    return (
        svc.plain_retry
        and svc.plain_post
        and policy.stop is None
        and policy.wait is None
        and policy.retry is None
        # Policies told the result are toolbus's own (quick, never blocking).
        and all(type(p).__module__.startswith("toolbus.") for p in run.consulted)
    )


def after_failure(
    run: Run, n: int, error: BaseException, svc: Services, *, timed_out: bool
) -> Steps:
    run.phase = FINISHING
    if isinstance(error, InputRequired) and run.admitted:
        # Not a failure: the call waits for a person's answer (never retried).
        error.__traceback__ = None
        return (yield from complete(run, deferred_for_input(run, error, n, svc.key_secret), svc))
    # The result's error: published scanned, in `finish`, whatever the model gets.
    text = run.scrubber.for_model().text(str(error) if timed_out else error_text(error))
    decision = RetryDecision.give_up()
    # A tool that says "no retry" (ToolFailure(retry=False)) is not second-guessed:
    # no hook is asked, so none can force a retry.
    final = isinstance(error, ToolFailure) and not error.retry
    # Timed out at the whole call's deadline: nothing can follow, so nothing
    # is asked.
    spent = timed_out and run.out_of_budget()
    if run.admitted and not final and not spent:
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
            if awaitable(answer):
                answer = yield answer
            decision = _retry_decision(answer, run)
        except HOOK_FAILURES as e:  # a hook's own, too
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
    if decision.retry and not unsafe and not final and not spent:
        delay, due = decision.delay, run.due
        if delay <= threading.TIMEOUT_MAX and (due is None or time.monotonic() + delay < due):
            run.last_error = text
            run.retry_delay = delay
            return Outcome("retry", delay)
        # The retry would start after the whole call's deadline, or never (a
        # wait no timer can keep, which would park the call for good): the
        # call ends with this attempt's failure, saying why it was not retried.
        text += (
            f" (not retried: its {delay:g}s backoff would end after the whole call's deadline)"
            if delay <= threading.TIMEOUT_MAX
            else " (not retried: its backoff would never end)"
            if due is None
            else " (not retried: its endless backoff would outlast the whole call's deadline)"
        )
    if timed_out:
        code = ErrorCode.DEADLINE_EXCEEDED if spent else ErrorCode.EXECUTION_TIMEOUT
        result = make_result(run, "timeout", error=text, code=code, attempts=n)
    else:
        metadata = error.metadata if isinstance(error, ToolFailure) else None
        result = make_result(run, "error", error=text, code=code, attempts=n, metadata=metadata)
    return (yield from complete(run, result, svc))


def _retry_decision(answer: Any, run: Run) -> RetryDecision:
    """`should_retry`'s answer as a decision, failing closed: a `RetryDecision`
    whose `retry` is True or False (and its `delay` seconds >= 0), or a bare
    True or False; anything else (None, 1, "yes", a decision whose `retry` is
    not a bool or whose delay is not a number >= 0) means no retry."""
    if isinstance(answer, RetryDecision) and isinstance(answer.retry, bool):
        delay = answer.delay
        if not answer.retry or (
            type(delay) in (int, float) and delay >= 0  # (NaN is not; a bool is not a delay)
        ):
            return answer
    if isinstance(answer, bool):
        return RetryDecision(answer)
    what = type(answer).__name__
    if isinstance(answer, RetryDecision):
        what = (
            f"RetryDecision(retry=True, delay={answer.delay!r})"
            if isinstance(answer.retry, bool)
            else f"RetryDecision(retry={type(answer.retry).__name__})"
        )
    log.warning(
        "should_retry returned %s for call %s, not a RetryDecision whose retry is a bool "
        "and whose delay is a number of seconds >= 0: not retrying",
        what,
        run.call.id,
    )
    return RetryDecision.give_up()


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
    if run.admitted and not svc.plain_post:
        try:
            new = svc.hooks.post_execute(run.call, result)
            if awaitable(new):
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
    if run.output_checks and result.status == "ok":  # output guardrails
        result = yield from check_outputs(run, result, svc)
    return DONE if finish(run, result, svc) else LOST
