"""A call planned into a `Run`, and calls into a batch: what each is to do.

`ToolPlan` is what stays the same for every call of one tool on one executor:
its timeout and retry policy, its policies, its backend (or why it has none).
It is worked out once (`ToolPlans.plan`) and kept while the tool, the
registry's map and the executor's defaults it was made from stay the same, so
a call pays a dictionary lookup for it, not a resolution. `plan_run` then
decides what varies per call: a policy's timeout, the policies' own admission
at submission (a quota counts the call, which is why planning happens on the
caller's thread, in the batch's order), the message a model reads for a tool
it invented. `plan_batch` makes the batch the calls belong to.
"""

from __future__ import annotations

import contextvars
import difflib
import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ..approvals import ApprovalDecision
from ..backends import Backend, Backends
from ..masking import SecretKeys
from ..models import ErrorCode, ToolCall, ToolResult
from ..pipeline import BatchRun, Halts, Run, Waiter, halted_text
from ..policies._set import (
    PolicySet,
    admit_at_submission,
    never_submitted,
    submission_scrubber,
    timeout_for,
)
from ..retry import RetryPolicy
from ..tools import Tool, ToolRegistry, error_text
from ..tools._offer import granted, missing_scopes, not_offered, offered, offering

__all__ = [
    "MAX_LISTED_TOOLS",
    "MAX_NESTING",
    "ToolPlan",
    "ToolPlans",
    "plan_batch",
    "plan_run",
    "tightest",
    "unknown_tool_message",
]

log = logging.getLogger("toolbus")

_batch_ids = itertools.count(1)

# How deep calls may nest (a tool's call of its executor, a sequence's step):
# deeper is a tool or sequence that calls itself without end, refused rather
# than left to grow until memory or its deadline runs out.
MAX_NESTING = 64


class ToolPlan:
    """What every call of `tool` shares on one executor, resolved once.

    `timeout` and `retry` are the tool's own or the executor's defaults
    (`defaults`, kept to notice a change); `guard` its policies; `backend`
    what runs it, or None with `hint` saying why. `version` is the tool's
    (`Tool._version`, bumped by any attribute set on it): a plan of an older
    version is stale."""

    __slots__ = (
        "backend",
        "budget",
        "defaults",
        "guard",
        "hint",
        "retry",
        "timeout",
        "tool",
        "version",
    )

    def __init__(
        self,
        tool: Tool,
        *,
        timeout: float | None,
        retry: RetryPolicy,
        policies: PolicySet,
        backends: Backends,
        call_timeout: float | None = None,
    ) -> None:
        self.tool = tool
        self.version = tool._version
        self.defaults = (timeout, retry, call_timeout)
        self.timeout = tool.timeout if tool.timeout is not None else timeout
        # The whole call's budget: the tighter of the tool's and the executor's.
        self.budget = tightest(tool.call_timeout, call_timeout)
        self.retry = tool.retry or retry
        self.guard = policies.guard(tool)
        self.backend: Backend | None = None
        self.hint = ""
        try:
            self.backend = backends.for_tool(tool)
        except Exception as e:  # a custom backend's check() may raise anything
            self.hint = f"Tool '{tool.name}' is unavailable: {error_text(e)}"

    @property
    def lasting(self) -> bool:
        """Whether it may be kept: a backend whose `check` raised, or a policy
        whose `applies_to` did, is asked again by the next call (the failure
        may pass)."""
        return self.backend is not None and (self.guard is None or self.guard.refusal is None)


class ToolPlans:
    """An executor's plans, by tool name, for the registry map they were made
    from (a registry swaps its map whole on every change)."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        # (the registry's map, the plans made from it): swapped whole, so a
        # plan is only ever kept beside the map it was made from, whichever
        # thread swaps first.
        self._state: tuple[Any, dict[str, ToolPlan]] = (None, {})

    def plan(
        self,
        name: str,
        registry: ToolRegistry,
        timeout: float | None,
        retry: RetryPolicy,
        policies: PolicySet,
        backends: Backends,
        call_timeout: float | None = None,
    ) -> ToolPlan | None:
        """The plan of the tool `registry` has under `name` (None: no such tool)."""
        tools = registry._tools
        state = self._state
        if state[0] is not tools:  # registered, replaced or removed: start again
            state = self._state = (tools, {})
        by_name = state[1]
        plan = by_name.get(name)
        if (
            plan is not None
            and plan.version == plan.tool._version
            and plan.defaults[0] == timeout
            and plan.defaults[1] is retry
            and plan.defaults[2] == call_timeout
        ):
            return plan
        tool = tools.get(name)
        if tool is None:
            return None
        plan = ToolPlan(
            tool,
            timeout=timeout,
            retry=retry,
            policies=policies,
            backends=backends,
            call_timeout=call_timeout,
        )
        if plan.lasting:
            by_name[name] = plan
        return plan


def plan_run(
    call: ToolCall,
    plan: ToolPlan | None,
    # Positional or keyword: `Executor._make_run` passes them all in this
    # order (a keyword each would cost every call about half a microsecond).
    registry: ToolRegistry,
    secret_keys: SecretKeys,
    context: contextvars.Context,
    index: int = 0,
    batch: BatchRun | None = None,
    waiter: Waiter | None = None,
    parent: Run | None = None,
    shares_slot: bool = False,
    priority: int | None = None,
    approval: ApprovalDecision | None = None,
    timeout: float | None = None,
    call_timeout: float | None = None,
    decided: ToolResult | None = None,
    gate: Any = None,
    halts: Halts | None = None,
) -> Run:
    """The run of `call` by the tool of `plan` (None: no such tool; `registry`
    names the ones there are). `parent` is the run whose tool (or hook) made
    this call, and a step of a composite tool `shares_slot` with it.
    `timeout` and `call_timeout` are the caller's for this call (None: not
    given): its attempt's timeout instead of the tool's, and a whole-call
    budget that wins if it is the tightest. `decided`: its result, known
    before it is submitted (a durable engine's record): it ends with that,
    and no policy is asked for it. `gate`: what its first attempt waits for
    before its tool runs (`Run.gate`). `halts`: the executor's halted agent
    runs: a call of one, or of a batch a halt ended, is refused (`HALTED`),
    and a policy that halts at submission halts its run."""
    if plan is None:
        return Run(
            call,
            None,
            index=index,
            batch=batch,
            context=context,
            timeout=None,
            policy=_NO_RETRY,
            waiter=waiter,
            parent=parent,
            priority=priority,
            approval=approval,
            refusal=(ErrorCode.TOOL_NOT_FOUND, unknown_tool_message(call.name, _offered(registry))),
            decided=decided,
        )
    given = timeout is not None  # the call's own: it replaces the tool's and a policy's
    if not given:
        timeout = plan.timeout
    elif timeout == math.inf:
        timeout = None  # this call's attempts have no deadline of their own
    guard = plan.guard
    if guard is not None and guard.refusal is None and guard.timing and not given:
        timed = timeout_for(guard, timeout)
        if isinstance(timed, tuple):  # a policy's timeout() failed: refused below
            guard = replace(guard, refusal=timed)
        else:
            timeout = timed
    refusal: tuple[ErrorCode, str] | None = None
    if plan.backend is None:
        refusal = (ErrorCode.TOOL_UNAVAILABLE, plan.hint)
    elif guard is not None and guard.refusal is not None:
        # A policy's own code (applies_to, timeout) failed for this tool:
        # none of its calls may run, and the caller gets a result, not the error.
        refusal = guard.refusal
    elif parent is not None and _nested_too_deep(parent):
        refusal = (
            ErrorCode.TOOL_UNAVAILABLE,
            f"Tool '{plan.tool.name}' is unavailable: calls nest more than {MAX_NESTING} deep "
            "(a tool or a sequence that calls itself without end?)",
        )
    elif parent is not None and plan.tool.scopes and (missing := _missing(plan.tool)):
        # A call made by a served call (a sequence's step, a tool calling
        # another) is held to the served call's token, as that call was.
        refusal = (ErrorCode.TOOL_NOT_ALLOWED, missing)
    elif (
        parent is None
        and (plan.tool.is_enabled is not True or offering.get() is not None)
        and (why := not_offered(plan.tool)) is not None
    ):
        # The model's call of a tool it was not offered at this step (the
        # calls its tools make are theirs: not held to it).
        refusal = (ErrorCode.TOOL_NOT_OFFERED, why)
    policies = guard.chain if guard is not None and refusal is None and decided is None else ()
    # (In `Run`'s order, each under its own name: positionally, as it is cheaper.)
    run = Run(
        call, plan.tool, context, timeout, plan.retry, waiter, plan.backend, index, batch,
        parent, shares_slot, priority, policies, approval, refusal, decided, gate,
    )  # fmt: skip
    if guard is not None and guard.output_checks and refusal is None and decided is None:
        run.output_checks = guard.output_checks
    budget = plan.budget if call_timeout is None else tightest(plan.budget, call_timeout)
    if budget is not None or parent is not None:
        run.bound(budget, parent)
    if (
        halts is not None
        and refusal is None
        and decided is None
        and (halts.active or (batch is not None and batch.halted is not None))
    ):
        why = batch.halted if batch is not None and batch.halted is not None else None
        why = why or halts.reason(run.agent_run)
        if why is not None:  # its run (or batch) is halted: no policy counts it
            run.refuse(ErrorCode.HALTED, halted_text(why))
            return run
    if refusal is None and guard is not None and guard.at_submission and decided is None:
        # In the batch's order, before it fans out: a quota's first calls run.
        # Before admission masks the arguments: what the default masking
        # hides of them is scrubbed from a refusal (it may quote a key).
        scrubber = submission_scrubber(call, guard.tool, secret_keys)
        admitted: list[Any] = []
        try:
            refused = admit_at_submission(
                guard, call, time.monotonic(), scrubber, run.batch_id, admitted
            )
            if refused is not None and refused[0] is ErrorCode.HALTED:
                # The rest of its batch ends with it (the calls before it in
                # order too: none has started), and so does its run.
                run.refuse(ErrorCode.HALTED, halted_text(refused[1]))
                if batch is not None:
                    batch.halted = refused[1]
                if halts is not None:
                    halts.halt(run.agent_run, batch, refused[1], run)
            elif refused is not None:
                run.refuse(*refused)
            run.admitted_at_submission(tuple(admitted), scrubber)
        except BaseException:  # interrupted (Ctrl-C): the run never reaches its caller
            # Nobody else will tell those that admitted it (`admitted` is
            # empty if `admit_at_submission` told them itself).
            never_submitted(run.consulted or admitted, call, scrubber, run.batch_id)
            raise
    return run


def tightest(*budgets: float | None) -> float | None:
    """The smallest of the budgets given (None and `math.inf`: no bound)."""
    least: float | None = None
    for b in budgets:
        if b is not None and b != math.inf and (least is None or b < least):
            least = b
    return least


# An unknown tool's run never reaches a retry decision.
_NO_RETRY = RetryPolicy()


def plan_batch(
    calls: Sequence[ToolCall],
    max_parallel: Callable[[Sequence[ToolCall]], int],
    cap: int,
    stop_on_error: bool,
    waiter: Waiter,
) -> BatchRun:
    """A batch of `calls`, running at most `max_parallel(calls)` (the hook)
    at once, never more than `cap` (`parallel_limit`); a failing hook means `cap`."""
    try:
        limit = int(max_parallel(calls))
    except KeyboardInterrupt:
        raise  # the caller's own interrupt
    except BaseException as e:
        # No traceback or message: either may quote the calls' arguments.
        log.warning("max_parallel hook failed (%s); using %d", type(e).__name__, cap)
        limit = cap
    return BatchRun(
        f"batch_{next(_batch_ids)}",
        limit=max(1, min(limit, cap)),
        stop_on_error=stop_on_error,
        waiter=waiter,
    )


# An unknown tool's error lists at most this many of the registry's tool names.
MAX_LISTED_TOOLS = 20
# ... and echoes at most this many characters of the name the model invented.
_MAX_NAME_ECHO = 100


def unknown_tool_message(name: str, known: list[str]) -> str:
    """The error a model reads for a tool it invented: close matches first, then
    the available names (at most `MAX_LISTED_TOOLS`, in registration order), so
    it can recover on its next turn, as LangGraph's `ToolNode` does."""
    shown = name if len(name) <= _MAX_NAME_ECHO else name[: _MAX_NAME_ECHO - 1] + "…"
    if not known:
        return f"Unknown tool '{shown}': no tools are available"
    text = f"Unknown tool '{shown}'."
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        text += " Did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    listed = ", ".join(known[:MAX_LISTED_TOOLS])
    more = len(known) - MAX_LISTED_TOOLS
    return text + f" Available tools: {listed}" + (f" (and {more} more)" if more > 0 else "")


def _nested_too_deep(parent: Run) -> bool:
    """A call made inside `parent` would nest more than `MAX_NESTING` deep."""
    depth = 1
    caller: Run | None = parent
    while caller is not None:
        depth += 1
        if depth > MAX_NESTING:
            return True
        caller = caller.parent
    return False


def _missing(tool: Tool) -> str | None:
    """Why the token of the served call running here may not call `tool` (None: it may)."""
    missing = missing_scopes(tool, granted.get())
    if not missing:
        return None
    return f"Tool '{tool.name}' needs scope {' '.join(missing)}, which the token lacks"


def _offered(registry: ToolRegistry) -> list[str]:
    """The names an unknown tool's error may suggest: those the caller's token
    is offered (all, without a token)."""
    offer = offering.get()
    if offer is not None and offer.names is not None:
        return [n for n in registry.names() if n in offer.names]
    return [t.name for t in offered(registry.list(), granted.get())]
