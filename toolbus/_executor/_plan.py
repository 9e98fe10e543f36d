"""A call planned into a `Run`, and calls into a batch: what each is to do.

`plan_run` decides, for one call, the tool that answers it (or the message a
model reads for a tool it invented), its timeout and retry policy, its
backend, and what the policies say before it is handed on (their chain, a
refusal at submission). It reads no executor state: the executor passes in
what it decides for every call, and the caller's run for a nested call. The
one effect is the policies' own admission at submission (a quota counts the
call), which is why planning happens on the caller's thread, in the batch's
order. `plan_batch` makes the batch its calls belong to.
"""

from __future__ import annotations

import contextvars
import difflib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..approvals import ApprovalDecision
from ..backends import Backend, Backends
from ..masking import SecretKeys
from ..models import ToolCall
from ..pipeline import BatchRun, Run, Waiter
from ..policies._set import Guard, PolicySet, admit_at_submission, submission_scrubber, timeout_for
from ..retry import RetryPolicy
from ..tools import Tool, ToolRegistry, error_text

__all__ = ["MAX_LISTED_TOOLS", "plan_batch", "plan_run", "unknown_tool_message"]

log = logging.getLogger("toolbus")

_batch_ids = itertools.count(1)


def plan_run(
    call: ToolCall,
    tool: Tool | None,
    *,
    registry: ToolRegistry,
    timeout: float | None,
    retry: RetryPolicy,
    policies: PolicySet,
    backends: Backends,
    secret_keys: SecretKeys,
    context: contextvars.Context,
    index: int = 0,
    batch: BatchRun | None = None,
    waiter: Waiter | None = None,
    parent: Run | None = None,
    shares_slot: bool = False,
    priority: int | None = None,
    approval: ApprovalDecision | None = None,
) -> Run:
    """The run of `call` by `tool` (None: no such tool; `registry` names the
    ones there are). `timeout` and `retry` are the executor's, for a tool
    that sets none; `parent` is the run whose tool (or hook) made this call,
    and a step of a composite tool `shares_slot` with it."""
    guard: Guard | None = None
    backend: Backend | None = None
    if tool is None:
        hint = unknown_tool_message(call.name, registry.names())
    else:
        if tool.timeout is not None:
            timeout = tool.timeout
        retry = tool.retry or retry
        guard = policies.guard(tool)
        if guard is not None and guard.refusal is None:
            timed = timeout_for(guard, timeout)
            if isinstance(timed, tuple):  # a policy's timeout() failed: refused below
                guard = replace(guard, refusal=timed)
            else:
                timeout = timed
        try:
            backend = backends.for_tool(tool)
        except Exception as e:  # a custom backend's check() may raise anything
            hint = f"Tool '{call.name}' is unavailable: {error_text(e)}"
    run = Run(
        call,
        tool,
        index=index,
        batch=batch,
        context=context,
        timeout=timeout,
        policy=retry,
        waiter=waiter,
        backend=backend,
        parent=parent,
        shares_slot=shares_slot,
        priority=priority,  # None: 0, or a nested call's caller's (see Run)
    )
    if tool is None or backend is None:
        run.last_error = hint
    elif guard is not None and guard.refusal is not None:
        # A policy's own code (applies_to, timeout) failed for this tool:
        # none of its calls may run, and the caller gets a result, not the error.
        run.refusal = guard.refusal
    elif guard is not None:
        run.policies = guard.chain
        if guard.at_submission:
            # In the batch's order, before it fans out: a quota's first calls run.
            # Before admission masks the arguments: what the default masking
            # hides of them is scrubbed from a refusal (it may quote a key).
            scrubber = submission_scrubber(call, guard.tool, secret_keys)
            run.refusal = admit_at_submission(guard, call, time.monotonic(), scrubber, run.batch_id)
            if run.refusal is None:  # they admitted it: they are told how it ends
                run.consulted.extend(guard.at_submission)
            else:  # its result is scrubbed as it ends, like any call's
                run.scrubber = scrubber
    if approval is not None:
        run.approval = approval
    return run


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
