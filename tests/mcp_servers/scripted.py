"""A low-level MCP server (the `mcp` SDK's `Server`) whose tool list and results
a test sets, run in-process: for client tests that need a server to say
something no well-behaved one would."""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server import Server


class Peer:
    """A low-level MCP server whose tool list and results the test sets."""

    def __init__(self, name: str = "peer") -> None:
        self.tools: dict[str, types.Tool] = {}
        self.results: dict[str, Any] = {}
        self.server: Server[Any] = Server(name, on_list_tools=self._list, on_call_tool=self._call)

    def tool(self, name: str, **fields: Any) -> None:
        self.tools[name] = types.Tool(name=name, input_schema={"type": "object"}, **fields)

    async def _list(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
        result = self.results.get(params.name)
        if isinstance(result, types.CallToolResult | dict):
            return result  # (a dict: sent as it is, as no well-behaved server would)
        return types.CallToolResult(content=[types.TextContent(text="plain")])
