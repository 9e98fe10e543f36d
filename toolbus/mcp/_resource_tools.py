"""A server's resources offered to the model: two read-only tools.

    conn.register(registry, prefix="docs_", resources_as_tools=True)
    # docs_list_resources() and docs_read_resource(uri), beside the server's tools

`list_resources` gives each resource's URI, name, description and MIME type;
`read_resource(uri)` its contents: text as the output, a blob as an
attachment (as a tool result's embedded resource would be). They are toolbus
tools like any other: validated, masked, policy-checked, timed out and
published; read-only, so they run in parallel. A server's refusal (an unknown
URI) is an error result the model can read.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp import Client, MCPError

from ..models import ToolOutput
from ..tools import Tool, ToolContext, ToolError
from ._actor import SessionPort
from ._output import tool_output

__all__ = ["ListResources", "ReadResource"]


class _ResourceTool(Tool):
    read_only = True
    # Its calls go through this process's live session to the server.
    process_local = True
    extension = True

    def __init__(self, port: SessionPort, name: str) -> None:
        self._port = port
        self.server = port.name
        self.name = name
        super().__init__()


class ListResources(_ResourceTool):
    """The server's resources: URI, name, description and MIME type of each."""

    def __init__(self, port: SessionPort, *, prefix: str = "") -> None:
        self.parameters = {"type": "object", "properties": {}}
        self.description = (
            f"List the resources (documents, files, records) that MCP server "
            f"'{port.name}' offers, to read with {prefix}read_resource."
        )
        super().__init__(port, f"{prefix}list_resources")

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> list[dict[str, Any]]:
        async def listed(client: Client) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            cursor: str | None = None
            for _ in range(100):  # (a server that pages without end is read this far)
                page = await client.list_resources(cursor=cursor)
                found.extend(
                    r.model_dump(mode="json", include={"uri", "name", "description", "mime_type"})
                    for r in page.resources
                )
                if (cursor := page.next_cursor) is None:
                    break
            return found

        return await self._port.run(_refusals(self.server, "list its resources", listed))


class ReadResource(_ResourceTool):
    """What one of the server's resources holds."""

    def __init__(self, port: SessionPort, *, prefix: str = "") -> None:
        self.parameters = {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": False,
        }
        self.description = (
            f"Read a resource of MCP server '{port.name}' by its URI "
            f"(as {prefix}list_resources gives them)."
        )
        super().__init__(port, f"{prefix}read_resource")

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        uri = params["uri"]

        async def read(client: Client) -> types.ReadResourceResult:
            return await client.read_resource(uri)

        result = await self._port.run(_refusals(self.server, f"read {uri!r}", read))
        blocks = [types.EmbeddedResource(type="resource", resource=c) for c in result.contents]
        return tool_output(types.CallToolResult(content=blocks), server=self.server)


def _refusals(server: str, what: str, use: Any) -> Any:
    """`use`, with the server's refusal as an error the model reads."""

    async def refusing(client: Client) -> Any:
        try:
            return await use(client)
        except MCPError as e:
            raise ToolError(f"MCP server '{server}' could not {what}: {e}") from None

    return refusing
