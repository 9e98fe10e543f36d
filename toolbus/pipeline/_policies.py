"""Where a call's policies are asked, and their decisions carried out.

`consult` runs after admission (the call is validated) and before the tool:
each policy of the run's chain is asked in order until one does not admit.
`Delay` becomes an outcome the supervisor turns into a timer (the job gives its
slot back and holds no thread); `Reject`, `Respond` and a missing approval
become the call's result. `tell_results` gives every policy that admitted the
call its terminal result, innermost first, and takes a replacement if one is
returned; a policy that made the call wait, when it ended waiting, hears of it
through `on_dropped` instead. Whatever a policy raises or returns amiss ends
the call `rejected` with a message naming the policy: a broken guard fails
closed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..agent_runs import AGENT_RUN
from ..models import ErrorCode, ToolResult
from ..policies._protocol import (
    Admit,
    Delay,
    Halt,
    Reject,
    RequireApproval,
    Respond,
    approval_text,
    halt_text,
    policy_name,
    rejection_text,
    untold_text,
)
from ..policies._signals import asking, done_asking
from ..tools import error_text
from ._decisions import EDITED, approval, edited
from ._halts import halted_text
from ._make import awaitable, awaited_own, log_contained, make_result, own_exit
from ._policy_results import well_formed
from ._run import ADMISSION, POLICIES

if TYPE_CHECKING:
    from ._run import Run
    from ._services import Services, Steps

__all__ = ["Deferral", "consult", "tell_results"]

log = logging.getLogger("toolbus")


class Deferral:
    """`consult`'s answer when the call must wait: `seconds`, or until `until` is done."""

    __slots__ = ("seconds", "until")

    def __init__(self, seconds: float, until: Any) -> None:
        self.seconds = seconds
        self.until = until


def consult(run: Run, svc: Services) -> Steps:
    """Ask the run's policies not yet asked. None: go on to the tool; a
    `ToolResult`: the call ends with it; a `Deferral`: ask again later."""
    chain = run.policies
    tool = run.tool
    assert tool is not None
    if run.call is run.origin:
        # Still the caller's own object, which it may have submitted twice
        # at once (`execute_batch([c, c])`): a policy knows a call by its
        # object (ids may repeat), so each run gets one of its own.
        run.call = run.call.model_copy()
    # Asked again after a delay: whatever it decides now, it decided; it is
    # told the call's result only if it admits it.
    run.delayed_by = None
    # Off the deadline's clock (queueing, not run time): the deadline moves on
    # by as long as the policies took. The supervisor bounds the phase itself
    # by the call's timeout, so a policy that never decides cannot hold the
    # call for ever. `asking_since` first: the supervisor reads it once it
    # sees the phase.
    began = run.asking_since = time.monotonic()
    run.phase = POLICIES
    token = asking(svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due, run.policy)
    try:
        while run.policy_at < len(chain):
            policy = chain[run.policy_at]
            waiting = False  # at the `yield`: where the driver closes the step
            try:
                decision = policy.admit(run.call, tool, time.monotonic())
                if type(decision) not in _DECISIONS and awaitable(decision):
                    waiting = True
                    decision = yield _asked(decision, svc, run)
            except BaseException as e:
                if (isinstance(e, GeneratorExit) and waiting) or (
                    isinstance(e, asyncio.CancelledError) and not run.is_live(run.attempt)
                ):
                    # The step itself is being thrown away (its loop closed),
                    # or toolbus settled the attempt (a cancel, the executor
                    # closing, the policies' time bound) and cancelled the
                    # policy's task: not the policy's failure; the driver
                    # drops the step.
                    raise
                # Anything else came out of the policy's own code, SystemExit
                # and KeyboardInterrupt included (it runs on a worker or the
                # executor's loop, never where a caller's Ctrl-C lands): a
                # broken guard fails closed, naming itself.
                e = own_exit(e)
                what = f"policy {policy_name(policy)} failed for call {run.call.id}"
                log_contained(what, e, run.scrubber)
                return _refused(run, policy, f"it raised {error_text(e)}")
            kind = type(decision)
            if kind is Admit:
                run.policy_at += 1
                if not run.note_policy(policy, admitted=True):
                    return _ended_meanwhile(run, policy, svc, admitted=True)
                continue
            if kind is Delay:
                seconds = _seconds(decision.seconds)
                if seconds is None:
                    return _refused(run, policy, f"it asked for a delay of {decision.seconds!r}")
                if seconds > threading.TIMEOUT_MAX and decision.until is None:
                    # No timer keeps such a wait: the call would be parked for good.
                    why = f"it asked for a delay of {seconds:g} seconds, one that never ends"
                    return _refused(run, policy, why)
                if not run.note_policy(policy, admitted=False):
                    return _ended_meanwhile(run, policy, svc, admitted=False)
                return Deferral(seconds, decision.until)
            if kind is Reject or kind is Halt or kind is RequireApproval:
                if kind is Reject and not isinstance(decision.code, ErrorCode):
                    return _refused(run, policy, f"it rejected with code {decision.code!r}")
                try:
                    text = _decision_text(decision, run.call.name, policy)
                except BaseException as e:  # its text's own `__str__`: the policy's failure
                    log_contained(
                        f"policy {policy_name(policy)} failed for call {run.call.id}",
                        e,
                        run.scrubber,
                    )
                    return _refused(run, policy, untold_text(decision, e))
            if kind is Reject:
                return make_result(run, "rejected", error=text, code=decision.code, attempts=0)
            if kind is Respond:
                if not isinstance(decision.result, ToolResult):
                    return _refused(run, policy, "it responded with something not a ToolResult")
                given = well_formed(decision.result, run.call.name, policy)
                if isinstance(given, str):
                    return _refused(run, policy, f"it responded with {given}")
                return given.model_copy(
                    update={
                        "call_id": run.call.id,
                        "name": run.call.name,
                        "attempts": 0,
                        "duration": run.elapsed(),
                    }
                )
            if kind is Halt:
                # Scrubbed here, once: the other calls of the run carry it too,
                # and their scrubbers do not know this call's secrets.
                why = run.scrubber.text(text)
                halted = make_result(
                    run, "cancelled", error=halted_text(why), code=ErrorCode.HALTED, attempts=0
                )
                # The rest of its run (or batch) ends too; this call ends with
                # its own result, which the scheduler leaves to it.
                svc.halts.halt(run.agent_run, run.batch, why, run)
                return halted
            if kind is RequireApproval:
                answer = approval(run, text, svc)
                if answer is EDITED:  # approved with other arguments: admitted again
                    answer = yield from edited(run, svc)
                    # The policies still to ask publish with the edit's
                    # scrubber, which knows the secrets the edit brought.
                    done_asking(token)
                    token = asking(
                        svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due, run.policy
                    )
                if answer is None:  # approved: the next policy's turn
                    run.policy_at += 1
                    if not run.note_policy(policy, admitted=True):
                        return _ended_meanwhile(run, policy, svc, admitted=True)
                    continue
                return answer
            return _refused(run, policy, f"it returned {type(decision).__name__}, not a decision")
        return None
    finally:
        done_asking(token)
        run.move_deadline(time.monotonic() - began)
        run.phase = ADMISSION  # (the deadline first: see _journal_intent)


def _decision_text(decision: Any, tool: str, policy: Any) -> str:
    """The text a `Reject`, `Halt` or `RequireApproval` carries; raises what
    its `__str__` raises."""
    if type(decision) is Reject:
        return rejection_text(decision.message, tool, policy)
    if type(decision) is Halt:
        return halt_text(decision.reason, policy)
    return approval_text(decision.reason)


async def _asked(decision: Awaitable[Any], svc: Services, run: Run) -> Any:
    # An async policy may run on the loop thread (driven from a worker): it
    # announces its events to this executor all the same.
    token = asking(svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due, run.policy)
    try:
        return await awaited_own(decision)
    finally:
        done_asking(token)


_DECISIONS = frozenset({Admit, Delay, Reject, Respond, RequireApproval, Halt})


def _ended_meanwhile(run: Run, policy: Any, svc: Services, *, admitted: bool) -> None:
    """The call ended (a cancel, its policies' time bound) while `policy`
    decided: tell it how, as every policy that let a call through is told
    (`on_result`), or, when it delayed the call, as a policy whose waiting call
    is dropped is (`on_dropped`). The step then finds the attempt settled and
    stops."""
    result = run.result
    if result is not None:
        if admitted:
            _tell(policy, run, result, svc)
        else:
            _drop(policy, run, result, svc)


def _seconds(value: Any) -> float | None:
    """A delay's seconds, if they are a finite number >= 0 (not text, not a bool)."""
    if isinstance(value, bool | str | bytes | bytearray):
        return None
    try:
        seconds = float(value)
    except Exception:  # (OverflowError for a huge int; whatever a `__float__` raises)
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _refused(run: Run, policy: Any, why: str) -> ToolResult:
    return make_result(
        run,
        "rejected",
        error=f"Tool '{run.call.name}' is unavailable: its policy {policy_name(policy)} "
        f"failed ({why})",
        code=ErrorCode.TOOL_UNAVAILABLE,
        attempts=0,
    )


def tell_results(
    run: Run,
    result: ToolResult,
    svc: Services,
    published: Callable[[ToolResult], ToolResult] | None = None,
) -> ToolResult:
    """Give `result` to every policy that admitted the run (`on_result`),
    innermost first; return the result as the last of them left it. The
    policy it was waiting for, if it ended while waiting, hears of it first,
    through `on_dropped`: it never admitted the call, so `on_result` (which
    its docs promise only for calls it admitted) is not for it.

    `published`: where what is published is not `result` (the model's copy),
    what makes it of a result; a policy that `stores_results` gets that."""
    # Read after the result was claimed: nobody adds to them any more.
    if run.delayed_by is not None:
        _drop(run.delayed_by, run, result, svc)
    for policy in reversed(run.consulted):
        if published is not None and getattr(policy, "stores_results", False) is True:
            given = published(result)
            told = _tell(policy, run, given, svc)
            result = result if told is given else told
        else:
            result = _tell(policy, run, result, svc)
    return result


def _drop(policy: Any, run: Run, result: ToolResult, svc: Services) -> None:
    """`policy.on_dropped`, if it has one, contained: a call it made wait ended
    while waiting (a cancel, the executor closing). Its answer is not taken:
    the call was never its to answer."""
    dropped = getattr(policy, "on_dropped", None)
    if not callable(dropped):
        return
    token = asking(svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due)
    try:
        dropped(run.call, result, time.monotonic())
    except BaseException as e:  # the result is claimed: see _tell
        log_contained(
            f"policy {policy_name(policy)} failed on dropping call {run.call.id}",
            e,
            run.scrubber,
        )
    finally:
        done_asking(token)


def _tell(policy: Any, run: Run, result: ToolResult, svc: Services) -> ToolResult:
    """`policy.on_result`, contained; the result as the policy leaves it."""
    token = asking(svc.emitter, run.batch_id, run.timeout, run.scrubber, run.due)
    # One asked at submission is told with the call object it was asked
    # about (as submitted): it may know the call by it, as the others do.
    # It is told in the call's agent run too (as it was asked): one call
    # object may be submitted in two runs at once.
    at_submission = getattr(policy, "at_submission", False) is True
    call = run.origin if at_submission else run.call
    in_run = AGENT_RUN.set(run.agent_run) if at_submission else None
    try:
        other = policy.on_result(call, result, time.monotonic())
    except BaseException as e:
        # The result stands; the policy's failure is logged. BaseException too:
        # the result is claimed already, so anything escaping here would leave
        # the call unannounced and its caller waiting forever.
        log_contained(
            f"policy {policy_name(policy)} failed on the result of call {run.call.id}",
            e,
            run.scrubber,
        )
        return result
    finally:
        if in_run is not None:
            AGENT_RUN.reset(in_run)
        done_asking(token)
    if isinstance(other, ToolResult):
        checked = well_formed(other, run.call.name, policy)
        if isinstance(checked, str):
            log.warning(
                "policy %s replaced the result of call %s with %s; ignored",
                policy_name(policy),
                run.call.id,
                checked,
            )
            return result
        return checked.model_copy(update={"call_id": result.call_id, "name": result.name})
    if other is not None:
        log.warning(
            "policy %s returned %s for the result of call %s, not a ToolResult or None; ignored",
            policy_name(policy),
            type(other).__name__,
            run.call.id,
        )
    return result
