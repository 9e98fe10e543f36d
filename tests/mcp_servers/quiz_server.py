"""A low-level MCP server (the `mcp` SDK's `Server`, 2026-07-28) whose tools
return `InputRequiredResult`s by hand, for what the SDK's resolvers never
send: a tool that asks twice, one round after the other (`twice`), and one
whose question, schema and plain-text `request_state` carry the caller's
token (`leak`). In-process only (`server`).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext

FORM = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}
bodies: list[str] = []  # the tools' bodies that ran to their end


def _question(message: str, schema: dict[str, Any]) -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=schema)
    )


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def _list(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"token": {"type": "string"}}}
    return types.ListToolsResult(
        tools=[types.Tool(name=n, input_schema=schema) for n in ("twice", "leak")]
    )


async def _call(ctx: ServerRequestContext[Any], p: types.CallToolRequestParams) -> Any:
    answers, state = p.input_responses or {}, p.request_state
    if p.name == "twice":
        if state is None:
            return types.InputRequiredResult(
                input_requests={"q1": _question("First?", FORM)}, request_state="t1"
            )
        if state == "t1":
            first = json.dumps(answers["q1"].content)
            return types.InputRequiredResult(
                input_requests={"q2": _question("Second?", FORM)}, request_state=f"t2:{first}"
            )
        bodies.append("twice")
        return _text(f"{state[3:]} then {json.dumps(answers['q2'].content)}")
    token = (p.arguments or {}).get("token", "")
    if state is None:
        schema = {
            "type": "object",
            "properties": {"v": {"type": "string", "default": token, "description": token}},
        }
        return types.InputRequiredResult(
            input_requests={"q": _question(f"Confirm {token}?", schema)},
            request_state=json.dumps({"token": token}),
        )
    bodies.append("leak")
    return _text(f"confirmed: {answers['q'].action}")


server: Server[Any] = Server("quiz", on_list_tools=_list, on_call_tool=_call)
