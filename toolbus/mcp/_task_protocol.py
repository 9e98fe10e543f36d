"""What each MCP protocol version says about tasks, apart from keeping them
(`_tasks.py`) and serving them (`_server_tasks.py`): whose a task is, when a
call is run as one, the client's declaration (2026-07-28), and 2025-11-25's
capability and task-augmented `tools/call` (a middleware: the SDK checks a
`tools/call` answer against `CallToolResult`, and declares no `tasks`).
"""

from __future__ import annotations

import typing
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from ..tools import Tool
from ._server_peer import connection_of

__all__ = [
    "INPUT_RESPONSE",
    "MISSING_CAPABILITY",
    "NOT_FOUND",
    "RELATED_TASK",
    "TASKS_EXTENSION",
    "TASK_AFTER",
    "TaskUpdateParams",
    "TasksMiddleware",
    "declared",
    "error_code_of",
    "first_text",
    "modern",
    "named_task",
    "task_owner",
    "wants_task",
]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TASK_AFTER = 1.0
"""Seconds an `"optional"` tool's call runs (2026-07-28) before it is answered with a task."""

# The JSON-RPC code for a missing client capability (2026-07-28).
MISSING_CAPABILITY = -32021
NOT_FOUND = "Failed to retrieve task: Task not found (unknown, expired, or not yours)"

_sessions: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def task_owner(ctx: ServerRequestContext[Any]) -> str | None:
    """Whose a task made by request `ctx` is: the OAuth token's principal
    (client, issuer, subject); else, on 2025-11-25, the connection (its
    session); else nobody's (2026-07-28 without a token: its id is the key)."""
    user = _scope(ctx).get("user")
    token = getattr(user, "access_token", None)
    if token is not None:
        from mcp.server.auth.provider import principal_components

        return "token:" + repr(principal_components(token))
    if modern(ctx):
        return None
    connection = connection_of(ctx)
    try:
        return _sessions.setdefault(connection, f"session:{id(connection):x}:{len(_sessions)}")
    except TypeError:  # (not weakly referenceable: a test double)
        return f"session:{id(connection):x}"


def wants_task(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, tool: Tool
) -> bool:
    """Whether the call `params` of `tool` is run as a task; raises the
    protocol's error when the client's request and the tool's
    `task_support` cannot meet (see the module's doc)."""
    support = tool.task_support
    name = params.name
    if not modern(ctx):
        asked = params.task is not None
        if asked and support == "forbidden":
            raise MCPError(types.METHOD_NOT_FOUND, f"Tool '{name}' cannot be called as a task")
        if not asked and support == "required":
            raise MCPError(
                types.METHOD_NOT_FOUND,
                f"Tool '{name}' must be called as a task (a tools/call with a task parameter)",
            )
        return asked
    if support == "forbidden":
        return False
    if not declared(ctx):
        if support == "required":
            raise MCPError(
                MISSING_CAPABILITY,
                f"Tool '{name}' runs as a task: declare the {TASKS_EXTENSION} extension",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        return False
    return True


def declared(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client declared the tasks extension on this request (2026-07-28)."""
    capabilities = ctx.session.client_capabilities
    extensions = getattr(capabilities, "extensions", None) or {}
    return TASKS_EXTENSION in extensions


class TaskUpdateParams(types.RequestParams):
    """`tasks/update`'s parameters (2026-07-28; the SDK has no type for them)."""

    task_id: str
    # Raw: a key the task did not ask is ignored whatever its value (each
    # answer asked for is read in `ServedTasks.update`).
    input_responses: dict[str, Any] | None = None


Start = Callable[
    [ServerRequestContext[Any], types.CallToolRequestParams], Awaitable[dict[str, Any]]
]


class TasksMiddleware:
    """2025-11-25's part the SDK's checks leave no handler room for: the
    `tasks` capability in `initialize`'s result, and a task-augmented
    `tools/call` answered with its task."""

    def __init__(self, start: Start) -> None:
        self._start = start

    async def __call__(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and _tasks_era(result.get("protocolVersion")):
                capabilities = result.setdefault("capabilities", {})
                capabilities["tasks"] = {
                    "list": {},
                    "cancel": {},
                    "requests": {"tools": {"call": {}}},
                }
            return result
        params = ctx.params
        if (
            ctx.method != "tools/call"
            or modern(ctx)
            or not isinstance(params, Mapping)
            or params.get("task") is None
            or not connection_of(ctx).initialize_accepted
        ):
            return await call_next(ctx)
        try:
            typed = types.CallToolRequestParams.model_validate(params, by_name=False)
        except ValidationError as e:
            raise MCPError(types.INVALID_PARAMS, f"Invalid tools/call parameters: {e}") from None
        return await self._start(ctx, typed)


def modern(ctx: ServerRequestContext[Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _tasks_era(version: object) -> bool:
    # Tasks came with 2025-11-25; 2026-07-28 has them as an extension instead.
    return (
        isinstance(version, str)
        and version >= "2025-11-25"
        and version not in MODERN_PROTOCOL_VERSIONS
    )


def _scope(ctx: ServerRequestContext[Any]) -> Mapping[str, Any]:
    scope = getattr(ctx.request, "scope", None)
    return scope if isinstance(scope, Mapping) else {}


INPUT_RESPONSE: TypeAdapter[Any] = TypeAdapter(typing.get_args(types.InputResponses)[1])
"""One answer of `tasks/update`'s `inputResponses` (read only for keys asked)."""


def named_task(ctx: ServerRequestContext[Any]) -> str | None:
    """The request's `Mcp-Name` header over HTTP (2026-07-28), decoded; ""
    for one that cannot be (it names no task)."""
    headers = getattr(ctx.request, "headers", None)
    if headers is None or not modern(ctx):
        return None
    value = headers.get(MCP_NAME_HEADER)
    if value is None:
        return None
    decoded = decode_header_value(value)
    return decoded if decoded is not None else ""


def error_code_of(result: types.CallToolResult) -> str | None:
    """The toolbus error code a served result carries (`_meta`)."""
    meta = result.meta or {}
    code = meta.get("toolbus/error_code")
    return code if isinstance(code, str) else None


def first_text(result: types.CallToolResult) -> str | None:
    for block in result.content:
        if isinstance(block, types.TextContent):
            return block.text
    return None
