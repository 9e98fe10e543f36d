"""An MCP server (the `mcp` SDK's `MCPServer`, 2026-07-28) with one resource
that changes: `notes://today`, rewritten by the tool `write(text)`, which
tells the clients that follow it (`subscriptions/listen`). In-process
(`server`) or over stdio (`python tests/mcp_servers/notes_server.py`).
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes", log_level="WARNING")

NOTES = {"notes://today": "nothing yet", "notes://later": "nothing yet"}


@server.resource("notes://today", name="today", mime_type="text/plain")
def today() -> str:
    return NOTES["notes://today"]


@server.resource("notes://later", name="later", mime_type="text/plain")
def later() -> str:
    return NOTES["notes://later"]


@server.tool()
async def write(uri: str, text: str, ctx: Context) -> str:
    """Rewrites the note at `uri` and tells whoever follows it."""
    NOTES[uri] = text
    await ctx.notify_resource_updated(uri)
    return "written"


@server.tool()
def quit() -> str:
    """Ends the server's process mid-call (over stdio: a crash to reconnect after)."""
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")
