"""Output guardrails: an `ok` result checked before it is final, and what their verdicts do.

The policies of a run that check results (`check_output`: an output guardrail,
`toolbus.policies.guardrail(stage="output")`) are asked in order, after the
post-call hooks and where they run (the attempt is settled: the scheduler
bounds this by `hook_grace`), each about the result the one before it left.
`Pass` (or None) keeps it, `Replace(output)` replaces its output, `Refuse`
withholds it (`rejected`, `CONTENT_BLOCKED`: the tool ran), `Trip` halts the
call's agent run (`HALTED`, as a policy's `Halt`). A check that raises or
answers anything else withholds the output: a broken guard fails closed.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from .._interrupts import interrupts_caller
from ..models import ErrorCode, ToolResult
from ..policies._guardrail import Pass, Refuse, Replace, Trip, failed_text, refused_text
from ..policies._protocol import policy_name
from ..policies._signals import asking, done_asking
from ..tools import error_text, normalize_output
from ._halts import halted_text
from ._make import awaitable, awaited_own, log_contained, make_result, own_exit

if TYPE_CHECKING:
    from ._run import Run
    from ._services import Services, Steps

__all__ = ["check_outputs"]


def check_outputs(run: Run, result: ToolResult, svc: Services) -> Steps:
    """`result` (ok) as the run's output guardrails leave it. Returns a ToolResult."""
    token = asking(svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due)
    try:
        for guard in run.output_checks:
            waiting = False  # at the `yield`: where the driver closes the step
            try:
                verdict: Any = guard.check_output(run.call, result, time.monotonic())
                if awaitable(verdict):
                    waiting = True
                    verdict = yield _asked(verdict, svc, run)
            except BaseException as e:
                if (isinstance(e, GeneratorExit) and waiting) or (
                    isinstance(e, asyncio.CancelledError) and run.completed
                ):
                    # The step is being let go (its loop closed), or the call
                    # ended meanwhile (its `hook_grace` ran out, a cancel) and
                    # its guard's task was cancelled: not the guard's failure.
                    # (The attempt is settled already: `is_live` cannot tell.)
                    raise
                if isinstance(e, asyncio.CancelledError) and waiting and _task_cancelled():
                    # The call's own task was cancelled while it awaited the
                    # guard (the caller's loop shutting down: asyncio.run's
                    # end): the call is cancelled, as a tool's task would be.
                    return make_result(
                        run,
                        "cancelled",
                        error=f"the call was cancelled in its output guardrail "
                        f"{policy_name(guard)} (its event loop shutting down?)",
                        code=ErrorCode.CANCELLED,
                        attempts=result.attempts,
                    )
                if interrupts_caller(e):
                    # Ctrl-C: a sync guard runs where the step is driven, the
                    # caller's own thread when its loop runs an async tool.
                    raise
                # Anything else came out of the guard's own code, a
                # CancelledError it raised while its call's task was not
                # being cancelled, or a SystemExit raised off the main thread
                # (where no signal's handler runs): a broken guard fails
                # closed, naming itself.
                e = own_exit(e)
                log_contained(
                    f"guardrail {policy_name(guard)} failed for call {run.call.id}", e, run.scrubber
                )
                return _withheld(
                    run, result, f"its guardrail {policy_name(guard)} raised {error_text(e)}"
                )
            kind = type(verdict)
            if verdict is None or kind is Pass:
                continue
            if kind is Replace:
                try:
                    output, attachments, metadata = normalize_output(verdict.output)
                except Exception as e:  # (OutputError: not JSON, a cycle, ...)
                    why = f"its guardrail {policy_name(guard)} gave an output toolbus cannot send"
                    return _withheld(run, result, f"{why} ({type(e).__name__})")
                result = make_result(
                    run,
                    "ok",
                    output=output,
                    attachments=attachments,
                    metadata={**result.metadata, **metadata, "guardrail": policy_name(guard)},
                    attempts=result.attempts,
                )
                continue
            if kind is Refuse:
                text = refused_text(guard, run.call.name, verdict, "output")
                return make_result(
                    run,
                    "rejected",
                    error=text,
                    code=ErrorCode.CONTENT_BLOCKED,
                    attempts=result.attempts,
                )
            if kind is Trip:
                # Scrubbed here, once: the other calls of the run carry it too.
                reason = verdict.reason
                if not isinstance(reason, str) or not reason:
                    reason = f"guardrail {policy_name(guard)} tripped"
                why = run.scrubber.text(reason)
                svc.halts.halt(run.agent_run, run.batch, why, run)
                return make_result(
                    run,
                    "cancelled",
                    error=halted_text(why),
                    code=ErrorCode.HALTED,
                    attempts=result.attempts,
                )
            return _withheld(run, result, failed_text(guard, run.call.name, verdict))
        return result
    finally:
        done_asking(token)


def _task_cancelled() -> bool:
    """Whether the task driving this step is being cancelled (not the guard's
    own CancelledError). A worker thread driving it has no task: its guard's
    task is cancelled only by whoever settled the call (`run.completed`)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a worker thread
        return False
    return task is not None and task.cancelling() > 0


def _withheld(run: Run, result: ToolResult, why: str) -> ToolResult:
    text = f"Tool '{run.call.name}' ran, but its result is withheld: {why}"
    return make_result(
        run, "rejected", error=text, code=ErrorCode.CONTENT_BLOCKED, attempts=result.attempts
    )


async def _asked(verdict: Any, svc: Services, run: Run) -> Any:
    # Run on the loop thread when driven from a worker: the guard announces
    # its events to this executor all the same.
    token = asking(svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due)
    try:
        return await awaited_own(verdict)
    finally:
        done_asking(token)
