"""An MCP server (the `mcp` SDK's `MCPServer`) with resources and prompts, and no tools.

Run over stdio (`python tests/mcp_servers/library_server.py`) or connect to
`server` in-process.

- `docs://guide` (text), `docs://logo` (a PNG, as a blob), and the template
  `docs://chapters/{number}` (text per chapter);
- `docs://slow`, which waits (5 s at most) for a second reader to meet;
- the prompt `summarize(topic, style="short")`.
"""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("library", log_level="WARNING")

GUIDE = "How to use the library: ask, then read."
LOGO = b"\x89PNG\r\n\x1a\n" + bytes(range(16))


@server.resource("docs://guide", name="guide", mime_type="text/plain")
def guide() -> str:
    return GUIDE


@server.resource("docs://logo", name="logo", mime_type="image/png")
def logo() -> bytes:
    return LOGO


@server.resource("docs://chapters/{number}", name="chapter", mime_type="text/plain")
def chapter(number: str) -> str:
    return f"Chapter {number}: it goes on."


readers = {"inside": 0, "peak": 0}


@server.resource("docs://slow", name="slow", mime_type="text/plain")
async def slow() -> str:
    """Waits (5 s at most) for a second reader to come in: two reads side by
    side meet here (`readers["peak"]`, in-process), one at a time do not."""
    readers["inside"] += 1
    readers["peak"] = max(readers["peak"], readers["inside"])
    with anyio.move_on_after(5):
        while readers["peak"] < 2:
            await anyio.sleep(0.01)  # a poll of the state above, bounded
    readers["inside"] -= 1
    return "at last"


@server.prompt()
def summarize(topic: str, style: str = "short") -> str:
    """Ask for a summary of `topic`."""
    return f"Write a {style} summary of {topic}."


if __name__ == "__main__":
    server.run()
