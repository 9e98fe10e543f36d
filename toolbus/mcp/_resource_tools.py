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
from ..tools._context import call_scrubber
from ._actor import SessionPort
from ._asking import Asking
from ._errors import MCPConnectionLost
from ._output import tool_output
from ._registrations import MadeWith
from ._tool import server_group

__all__ = ["ListResources", "ReadResource"]


class _ResourceTool(Tool):
    read_only = True
    # Its calls go through this process's live session to the server.
    process_local = True
    extension = True

    def __init__(
        self, port: SessionPort, name: str, made_with: MadeWith, server_max_concurrency: int | None
    ) -> None:
        self._port = port
        self.server = port.name
        self.name = made_with.prefix + name
        # The limits `register()` gives the server's tools, and its server's group.
        self.timeout = made_with.timeout
        self.call_timeout = made_with.call_timeout
        self.retry = made_with.retry
        self.max_concurrency = made_with.max_concurrency
        if server_max_concurrency is not None:
            group = server_group(port.name)
            self.groups = (group,)
            self.group_limits = {group: server_max_concurrency}
        super().__init__()

    async def _read(self, use: Any, what: str, ctx: ToolContext) -> Any:
        """`use(client)` on the session for this call, the server's refusal
        an error the model reads, a lost connection one a retry may mend."""

        async def refusing(client: Client) -> Any:
            try:
                return await use(client)
            except MCPError as e:
                if self._port.link.lost(e, client):
                    raise MCPConnectionLost(
                        f"MCP server '{self.server}' closed the connection while asked to "
                        f"{what}; toolbus reconnects for the next call"
                    ) from None
                raise ToolError(f"MCP server '{self.server}' could not {what}: {e}") from None

        return await self._port.run(refusing, Asking(ctx, self.name))


class ListResources(_ResourceTool):
    """The server's resources: URI, name, description and MIME type of each."""

    def __init__(
        self, port: SessionPort, *, made_with: MadeWith, server_max_concurrency: int | None
    ) -> None:
        self.parameters = {"type": "object", "properties": {}}
        self.description = (
            f"List the resources (documents, files, records) that MCP server "
            f"'{port.name}' offers, to read with {made_with.prefix}read_resource."
        )
        super().__init__(port, "list_resources", made_with, server_max_concurrency)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> list[dict[str, Any]]:
        async def listed(client: Client) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            cursor: str | None = None
            for _ in range(100):  # (a server that pages without end is read this far)
                page = await client.list_resources(cursor=cursor)
                found.extend(
                    r.model_dump(
                        mode="json",
                        by_alias=True,  # MCP's names: mimeType
                        exclude_none=True,
                        include={"uri", "name", "description", "mime_type"},
                    )
                    for r in page.resources
                )
                if (cursor := page.next_cursor) is None:
                    break
            return found

        found: list[dict[str, Any]] = await self._read(listed, "list its resources", ctx)
        return found


class ReadResource(_ResourceTool):
    """What one of the server's resources holds."""

    def __init__(
        self, port: SessionPort, *, made_with: MadeWith, server_max_concurrency: int | None
    ) -> None:
        self.parameters = {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": False,
        }
        self.description = (
            f"Read a resource of MCP server '{port.name}' by its URI "
            f"(as {made_with.prefix}list_resources gives them)."
        )
        super().__init__(port, "read_resource", made_with, server_max_concurrency)

    async def run(self, params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        uri = params["uri"]

        async def read(client: Client) -> types.ReadResourceResult:
            return await client.read_resource(uri)

        # Scrubbed before it is cut: a URI may hold a secret (a token in its
        # query), which the executor would not find whole in a cut one.
        result = await self._read(read, f"read {_short(call_scrubber(ctx).text(uri))}", ctx)
        blocks = [types.EmbeddedResource(type="resource", resource=c) for c in result.contents]
        return tool_output(types.CallToolResult(content=blocks), server=self.server)


def _short(uri: str) -> str:
    """`uri` quoted for an error text, cut to a readable length."""
    return repr(uri if len(uri) <= 200 else uri[:197] + "...")
