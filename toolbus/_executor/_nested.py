"""Calls an executor's own tools and hooks make of it: the nested-call gateway.

A tool (or hook) running a call may call its executor again. Such a call is
nested: its run's `parent` is the caller's run (`caller_run`, read from
`pipeline.current_run`), its events name the caller's call id, and it goes at
its caller's priority. A composite tool (`toolbus.tools.sequence`) runs its
steps through `NestedGateway`, on its caller's slot of `max_parallel`.

A blocking `execute` from there would stall the event loop the executor's
async tools run on, and wait forever for a call that loop must run:
`would_block_its_tools` tells, and `refuse_blocking` ends such calls
`rejected` at once instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import TYPE_CHECKING, Any

from ..actors import Scheduler
from ..actors._messages import Submit
from ..backends import LoopThread
from ..models import ErrorCode, ToolCall, ToolResult
from ..pipeline import LoopWaiter, Run, Services, caller_cancelled, current_run
from ..tools import Tool
from ._approvals import waive_covered_approvals

if TYPE_CHECKING:
    from ..executor import Executor

__all__ = ["NestedGateway", "caller_run", "refuse_blocking", "would_block_its_tools"]


def caller_run(services: Services, step_of: Run | None) -> Run | None:
    """The run a new call is nested in: `step_of` for a composite tool's step,
    else the run whose tool or hook is making the call on this same executor
    (`services` tells which executor); None for a call from outside."""
    if step_of is not None:
        return step_of
    parent = current_run.get()
    if parent is not None and parent[0] is services:
        return parent[1]  # made by a tool (or hook) of a call of this executor
    return None


def would_block_its_tools(loop: LoopThread, scheduler: Scheduler, services: Services) -> bool:
    """A blocking call here would stall the loop the executor's async tools
    run on: its own loop thread, or a caller's loop that one of its async
    tools or hooks (a nested call) is running on."""
    me = threading.get_ident()
    if me in (loop.thread_ident, scheduler.owner):
        return True  # (the scheduler's lock: a backend running a job inside submit)
    if asyncio._get_running_loop() is None:
        return False
    parent = current_run.get()
    return parent is not None and parent[0] is services


def refuse_blocking(scheduler: Scheduler, message: Submit) -> None:
    """A blocking call on the loop its async tools run on would deadlock: end
    its calls `rejected` at once, through the scheduler (counted, announced)."""
    inside = scheduler.held_here()
    for run in message.runs:
        if run.tool is not None and run.refusal is None:
            run.refuse(
                ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable here: a blocking execute() was "
                "called from inside the executor's scheduler (a policy told how a call "
                "ended, say), which it would stall"
                if inside
                else f"Tool '{run.call.name}' is unavailable here: a blocking execute() was "
                "called on an event loop this executor's async tools run on, which it "
                "would block; use `await executor.aexecute(...)`",
            )
    scheduler.ask(message)  # handled before it returns: never waits on a tool


class NestedGateway:
    """The executor's way in for a tool's calls of its own (`Services.nested`):
    a `toolbus.tools.sequence` runs its steps through it.

    A step is submitted like `aexecute` submits a call (hooks, events, its own
    timeout and retries, `on_submit`), with two differences: its tool is the
    one given, so a step need not be registered, and it shares its caller's
    slot of `max_parallel` (the caller only waits for it): a sequence takes
    one slot however many steps it has, and works at `max_parallel=1`.
    """

    __slots__ = ("_executor",)

    def __init__(self, executor: Executor) -> None:
        # Strong: the executor's Services hold its hooks (the executor) anyway.
        self._executor = executor

    def tool(self, name: str) -> Tool | None:
        return self._executor.registry.get(name)

    async def call(self, tool: Tool, call: ToolCall, parent: Run) -> tuple[ToolResult, Any]:
        ex = self._executor
        # The executor's version of the step's tool: a step is a call of this
        # executor, so its configuration (Executor.from_config) applies to it
        # as to any call: a tool it set a timeout, a rate limit, a cache for
        # runs as its copy with those, and one it disabled does not run.
        mine = ex.registry._version_of(tool)
        if mine is not None:
            ex._step_tools.setdefault(mine.name, mine)
        waiter = LoopWaiter(asyncio.get_running_loop())
        run = ex._make_run(
            call,
            context=contextvars.copy_context(),
            waiter=waiter,
            step_of=parent,
            step_tool=mine,
        )
        if mine is None:  # ended `rejected` (TOOL_NOT_FOUND) as a call of it would be
            run.refuse(
                ErrorCode.TOOL_NOT_FOUND,
                f"Tool '{call.name}' is not available: this executor's configuration disables it",
            )
        else:
            waive_covered_approvals(run, parent, ex._services.key_secret)
        ex._hand_on((run,), None)
        why = caller_cancelled(parent)
        result: ToolResult = await ex._waiting.result(waiter, (run,), None, run, why)
        if run.scrubber.values:
            # The secrets it knew (its own, its caller's) are the caller's
            # from here on: the next step may be handed them, and the
            # caller's own result may show them.
            parent.scrubber = parent.scrubber.merged(run.scrubber.known())
        passed = run.unscrubbed if run.unscrubbed is not None else result
        return result, passed.output
