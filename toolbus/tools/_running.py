"""The call a tool is running in, for the few tools that work with the engine.

Most tools know only their arguments and `ToolContext`. Two built-in ones do
more: a `sequence` runs its steps as nested calls of the executor running it,
and a `CommandTool` announces the kill of its process group (`tool:killed`).
The engine sits above the tools layer, so it hands itself over here instead
of being imported: for each attempt the pipeline sets `current_run` to its
`(host, run)` pair, and the tool reads it. `CallHost` and `RunningCall` say
what a tool may ask of them; the pipeline's `Services` and `Run` are what
they are at run time.

A tool run without an executor (`Tool.execute`) finds None, and so does a
tool run directly by another tool's code: `run.tool is not self` tells.
`run_to_completion` is how `Tool.execute` runs an async tool there.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..masking import Scrubber
    from ..models import ToolCall, ToolResult
    from ._tool import Tool

__all__ = ["CallHost", "NestedCalls", "RunningCall", "current_run", "run_to_completion"]


class RunningCall(Protocol):
    """The call whose attempt is running (the pipeline's `Run`)."""

    @property
    def tool(self) -> Tool | None: ...
    @property
    def call(self) -> ToolCall: ...
    @property
    def origin(self) -> ToolCall:
        """The call as submitted: before parsing and pre-call hooks."""
        ...

    @property
    def attempt(self) -> int: ...
    @property
    def stop_reason(self) -> str:
        """Why toolbus settled the call without its attempt (a deadline, a cancel)."""
        ...

    @property
    def scrubber(self) -> Scrubber:
        """What the call's masking hid, to be scrubbed from any text it shows."""
        ...

    @property
    def parent_call_id(self) -> str | None:
        """The call that made this one (a step, a tool's nested call), or None."""
        ...

    def is_live(self, n: int) -> bool:
        """Whether attempt `n` still decides the call (toolbus has not settled it)."""
        ...


class NestedCalls(Protocol):
    """How a tool runs calls of its own on the executor running it, as nested
    calls of its run (a `toolbus.tools.sequence` runs its steps so)."""

    def tool(self, name: str) -> Tool | None:
        """The executor's registered tool of that name, if any."""
        ...

    def call(self, tool: Tool, call: ToolCall, parent: Any) -> Awaitable[tuple[ToolResult, Any]]:
        """Run `call` with `tool` (registered or not) through the executor's
        pipeline, as a nested call of `parent` (the `RunningCall`) on its share
        of `max_parallel`; resolves to its result, as the model would read it
        (secrets scrubbed), and its output as its tool gave it (what a step
        hands the next). Awaited on the loop `parent`'s tool runs on."""
        ...


class CallHost(Protocol):
    """The executor's services, as a running tool may use them."""

    @property
    def nested(self) -> NestedCalls | None:
        """The executor's way in for calls its tools make (None: none)."""
        ...

    def announce_killed(self, run: Any, pid: int, reason: str) -> None:
        """A process running `run`'s attempt was killed by toolbus: count it
        and announce `tool:killed`."""
        ...


# The call whose steps run in this context, with its executor's services: a
# call made from inside a tool or hook is recognised as nested by it.
current_run: contextvars.ContextVar[tuple[CallHost, RunningCall] | None] = contextvars.ContextVar(
    "toolbus_current_run", default=None
)


async def _await(value: Awaitable[Any]) -> Any:
    return await value


def run_to_completion(value: Awaitable[Any], name: str) -> Any:
    """What the awaitable an async tool `name` returned resolves to, run
    without an executor; RuntimeError where an event loop already runs."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await(value))
    if inspect.iscoroutine(value):
        value.close()
    raise RuntimeError(
        f"tool {name!r} is async and an event loop is running here: use `await tool.aexecute(...)`"
    )
