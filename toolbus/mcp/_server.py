"""A toolbus registry as an MCP server: every call goes through an `Executor`.

    serve_stdio(registry, timeout=10)          # or: toolbus mcp serve module:registry

MCP clients see each registry tool with its name, description, JSON schema,
output schema (when its return type is known) and the four annotation hints;
each call gets toolbus's validation, timeout, retries, limits, masking and
events. Every outcome that is not `ok` comes back as a result with `isError:
true` whose text names the toolbus error code, and whose `_meta` carries
`toolbus/status` and `toolbus/error_code`. A client's progress token gets the
tool's progress, its cancellation cancels the call, and its trace context
(`traceparent` in `_meta`) is the served call's parent. Over HTTP: `_serve_http.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from .._options import non_negative_number
from .._text import encodable, text_of
from .._version import __version__
from ..executor import Executor
from ..formatting import output_text
from ..models import ErrorCode, ToolCall, ToolResult
from ..tools import StepContext, Tool, ToolRegistry, load_registry
from ..tools._offer import Offer, granted, missing_scopes, offered, offering
from ._oauth_server import granted_scopes
from ._server_calls import Poll, ServedCalls
from ._server_output import attachment_block, served_output
from ._server_peer import LogLevels, forward_records
from ._server_progress import ProgressRelay, direct_progress
from ._server_tasks import ServedTasks, TasksFull
from ._server_trace import trace_continued
from ._task_protocol import TASK_AFTER, TasksMiddleware, wants_task

__all__ = [
    "aserve_stdio",
    "build_server",
    "call_result",
    "load_registry",
    "mcp_tool",
    "serve_stdio",
    "tool_annotations",
]

# Custom (free-text) tools take their raw input as this one string parameter.
CUSTOM_INPUT = "input"

_STALE = (
    "The call this request_state suspended is not waiting here (unknown, expired, "
    "answered already, or sent again for another tool or other arguments): send the call anew"
)

_CUSTOM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string", "description": "The tool's raw input."}},
    "required": [CUSTOM_INPUT],
}


def mcp_tool(tool: Tool) -> types.Tool:
    """How an MCP client sees a toolbus tool."""
    served = served_output(tool)
    # Everything sent is made writable (`text_of`): a lone surrogate in one
    # description would fail the SDK's writer, and with it the whole listing.
    return types.Tool(
        name=text_of(tool.name),
        description=text_of(tool.description) if tool.description else None,
        input_schema=encodable(_schema(tool)),
        output_schema=encodable(served.schema) if served is not None else None,
        annotations=tool_annotations(tool),
        execution=(
            types.ToolExecution(task_support=tool.task_support)
            if tool.task_support != "forbidden"
            else None
        ),
    )


def tool_annotations(tool: Tool) -> types.ToolAnnotations:
    """The four hints, each given (clients default an absent one, to the
    spec's defaults, which toolbus's need not be): `readOnlyHint` is
    `read_only`, `destructiveHint` `destructive` (None: `not read_only`),
    `idempotentHint` `idempotent`, `openWorldHint` `open_world`."""
    destructive = tool.destructive if tool.destructive is not None else not tool.read_only
    return types.ToolAnnotations(
        read_only_hint=tool.read_only,
        destructive_hint=destructive,
        idempotent_hint=tool.idempotent,
        open_world_hint=tool.open_world,
    )


def call_result(result: ToolResult, tool: Tool | None = None) -> types.CallToolResult:
    """An MCP tool result for a toolbus result; anything but `ok` is `is_error`.

    With the `tool` that ran, an output schema applies: `structured_content` is
    the output (`{"result": output}` when the schema is wrapped) and must match
    it, or the result is an error saying where it does not. Without one, a dict
    output is the structured content.
    """
    if not result.ok:
        code = result.error_code.value if result.error_code is not None else result.status
        return _error(f"{result.error or result.status} ({code})", result.status, code)
    served = served_output(tool) if tool is not None else None
    structured = result.output if isinstance(result.output, dict) else None
    if served is not None:
        structured, mismatch = served.structured(result.output)
        if mismatch is not None:
            code = ErrorCode.TOOL_ERROR.value
            text = f"Tool '{result.name}' returned an output its output schema refuses ({mismatch})"
            return _error(f"{text} ({code})", "error", code)
    # Text the tool made (a file name decoded with surrogateescape, a model's
    # "\ud800") may hold a lone surrogate, which the SDK cannot write: on stdio
    # its writer dies and the server with it, over HTTP the response is lost.
    # Such a character is sent as U+FFFD (checked above as the tool returned it).
    content: list[types.ContentBlock] = []
    if result.output is not None:
        content.append(types.TextContent(text=text_of(output_text(result.output))))
    content.extend(attachment_block(a, n) for n, a in enumerate(result.attachments, 1))
    return types.CallToolResult(content=content, structured_content=encodable(structured))


def _error(text: str, status: str, code: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text_of(text))],  # writable, as results are
        is_error=True,
        meta={"toolbus/status": status, "toolbus/error_code": code},
    )


def build_server(
    registry: ToolRegistry,
    executor: Executor,
    *,
    name: str = "toolbus",
    task_after: float = TASK_AFTER,
    poll: Poll | None = None,
) -> Server[Any]:
    """A low-level MCP `Server` that lists `registry`'s tools and runs calls on `executor`.

    The registry is read on every request, so tools registered later show up.
    (The low-level server, not `MCPServer`: `MCPServer` derives schemas from
    function signatures and validates arguments itself, where toolbus's own
    schemas and validation must apply.) While the server runs (its lifespan),
    it watches `executor`'s progress events for the clients that ask for them.
    `task_after`: seconds an `"optional"` tool's call runs on 2026-07-28
    before it is answered with a task (see `_server_tasks.py`). `poll(ctx)`
    runs beside each call a request waits for, until it ends: over HTTP, what
    closes a long call's stream to be polled (`_sse_resume.py`).
    """
    task_after = non_negative_number(task_after, "task_after", "build_server")
    relay = ProgressRelay(executor)
    levels = LogLevels()
    calls = ServedCalls(executor, relay, levels, poll)
    tasks = ServedTasks(calls)

    @contextlib.asynccontextmanager
    async def lifespan(server: Server[Any]) -> Any:
        with forward_records():
            async with relay.opened(), tasks.opened():
                yield {}

    async def set_level(
        ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        levels.set(ctx, params.level)
        return types.EmptyResult()

    def offer_for(ctx: ServerRequestContext[Any]) -> tuple[list[Tool], Offer]:
        """What this request is offered: the executor's offer when it serves this registry."""
        step = StepContext(context=ctx)
        if executor.registry is registry:
            tools = executor.offered(step)
        else:
            tools = offered(registry.list(), granted.get(), step)
        return tools, Offer(step, frozenset(t.name for t in tools))

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        held = granted.set(granted_scopes(ctx.request))
        try:
            tools, _ = offer_for(ctx)
        finally:
            granted.reset(held)
        return types.ListToolsResult(tools=[mcp_tool(t) for t in tools])

    @contextlib.contextmanager
    def held_to_caller(ctx: ServerRequestContext[Any]) -> Iterator[frozenset[str] | None]:
        """Within it, calls are held to the caller's token (its calls' own
        calls too) and to what `tools/list` offers it now: a tool not offered
        is refused (TOOL_NOT_OFFERED), as the executor refuses it."""
        scopes = granted_scopes(ctx.request)
        held = granted.set(scopes)
        try:
            shown = offering.set(offer_for(ctx)[1])
            try:
                yield scopes
            finally:
                offering.reset(shown)
        finally:
            granted.reset(held)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        with held_to_caller(ctx) as scopes:
            return await _call_tool(ctx, params, scopes)

    async def call_as_task(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any]:
        """A 2025-11-25 `tools/call` with a `task`: answered with its task."""
        with held_to_caller(ctx) as scopes:
            made = _made(params, scopes)
            ttl = params.task.ttl if params.task is not None else None
            if isinstance(made, types.CallToolResult):
                return tasks.created(tasks.ended(ctx, params.name, made, ttl))
            call, tool = made
            if tool is None:
                raise MCPError(types.METHOD_NOT_FOUND, f"Tool '{params.name}' is not served here")
            wants_task(ctx, params, tool)
            with trace_continued(ctx.meta or {}):
                return tasks.created(tasks.start(ctx, call, _replier(tool), ttl))

    async def _as_task(
        ctx: ServerRequestContext[Any], call: ToolCall, tool: Tool, wants_progress: bool
    ) -> dict[str, Any] | None:
        """A 2026-07-28 call run as a task: its task, or its answer if an
        `"optional"` tool's call ended in time; None: it is run as any call
        (an optional tool when no task can be made)."""
        optional = tool.task_support == "optional"
        try:
            task = tasks.start(ctx, call, _replier(tool), None)
        except TasksFull:
            if optional:
                return None
            raise
        if optional:
            done = await tasks.settled_within(task, task_after, ctx, wants_progress)
            if done is not None:
                return done
        return tasks.created(task)

    def _replier(tool: Tool | None) -> Callable[[ToolResult], types.CallToolResult]:
        def reply(result: ToolResult) -> types.CallToolResult:
            scanner = executor.scanner
            if scanner is not None and not scanner.to_model:
                # A reply leaves the process: it is published, whatever the caller's copy is.
                result = scanner.result(result)
            return call_result(result, tool)

        return reply

    def _made(
        params: types.CallToolRequestParams, scopes: frozenset[str] | None
    ) -> types.CallToolResult | tuple[ToolCall, Tool | None]:
        """The call `params` asks for, or why it is refused before it is made."""
        given = dict(params.arguments or {})
        tool = registry.get(params.name)
        if tool is not None and (missing := missing_scopes(tool, scopes)):
            # (The HTTP gate refuses such a call with a 403 before it gets here.)
            code = ErrorCode.TOOL_NOT_ALLOWED.value
            needs = f"Tool '{params.name}' needs scope {' '.join(missing)}, which the token lacks"
            return _error(f"{needs} ({code})", "rejected", code)
        arguments: dict[str, Any] | str = given
        if tool is not None and tool.type == "custom":
            text = given.get(CUSTOM_INPUT)
            if not isinstance(text, str):
                # A free-text tool would run on any text, "None" and "" included:
                # refuse here what its advertised schema requires.
                return call_result(
                    ToolResult(
                        call_id="-",
                        name=params.name,
                        status="rejected",
                        error=f"Invalid arguments for '{params.name}': "
                        f"'{CUSTOM_INPUT}' must be a string",
                        error_code=ErrorCode.INVALID_ARGUMENTS,
                    )
                )
            arguments = text
        return ToolCall(name=params.name, arguments=arguments), tool

    async def _call_tool(
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        scopes: frozenset[str] | None,
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        made = _made(params, scopes)
        if isinstance(made, types.CallToolResult):
            return made
        call, tool = made
        meta = ctx.meta or {}
        # Progress only for a client that asked (a progressToken); a client's
        # cancellation cancels this task, and the call with it.
        wants_progress = meta.get("progress_token") is not None or direct_progress(ctx)
        with trace_continued(meta):
            if (
                tool is not None
                and params.request_state is None
                and wants_task(ctx, params, tool)  # (2025-11-25's tasks: `call_as_task`)
                and (answer := await _as_task(ctx, call, tool, wants_progress)) is not None
            ):
                return answer
            if params.request_state is not None:  # sent again, with answers (2026-07-28)
                replies = params.input_responses or {}
                state = params.request_state
                outcome = await calls.resume(state, call, replies, ctx, wants_progress)
                if outcome is None:
                    code = ErrorCode.INVALID_ARGUMENTS.value
                    return _error(f"{_STALE} ({code})", "rejected", code)
            else:
                outcome = await calls.start(call, ctx, wants_progress)
        if isinstance(outcome, types.InputRequiredResult):
            return outcome  # the tool waits for answers
        return _replier(tool)(outcome)

    def input_schema(tool_name: str) -> dict[str, Any] | None:
        tool = registry.get(tool_name)
        return _schema(tool) if tool is not None else None

    with warnings.catch_warnings():
        # Logging is deprecated as of 2026-07-28 (SEP-2577); clients of
        # 2025-11-25 still set their level with it.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = Server(
            name,
            version=__version__,
            lifespan=lifespan,
            get_tool_input_schema=input_schema,
            on_list_tools=list_tools,
            on_call_tool=call_tool,  # type: ignore[arg-type]  # (a task's answer is a dict)
            on_set_logging_level=set_level,
        )
    tasks.register(server)
    server.middleware.append(TasksMiddleware(call_as_task))
    return server


async def aserve_stdio(
    registry: ToolRegistry,
    *,
    name: str = "toolbus",
    executor: Executor | None = None,
    task_after: float = TASK_AFTER,
    **executor_options: Any,
) -> None:
    """Serve `registry` over this process's stdin/stdout until the client disconnects.

    Calls run on `executor`, or on a new `Executor(registry, **executor_options)`
    that is closed at the end. While serving, stdout is the protocol channel:
    anything tools print goes to stderr. `task_after`: see `build_server`.
    """
    task_after = non_negative_number(task_after, "task_after", "serve_stdio")
    own = executor is None
    runner = executor if executor is not None else Executor(registry, **executor_options)
    server = build_server(registry, runner, name=name, task_after=task_after)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        if own:
            await asyncio.to_thread(runner.close)


def serve_stdio(
    registry: ToolRegistry,
    *,
    name: str = "toolbus",
    task_after: float = TASK_AFTER,
    **executor_options: Any,
) -> None:
    """Blocking twin of `aserve_stdio` (runs its own event loop)."""
    anyio.run(
        functools.partial(
            aserve_stdio, registry, name=name, task_after=task_after, **executor_options
        )
    )


def _schema(tool: Tool) -> dict[str, Any]:
    if tool.type == "custom":
        return _CUSTOM_SCHEMA
    schema = tool.schema
    return schema if schema.get("type") == "object" else {"type": "object", **schema}
