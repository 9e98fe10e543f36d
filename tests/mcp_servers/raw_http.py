"""A hand-written streamable HTTP MCP server (an ASGI app, no SDK): for client
tests of what the SDK's HTTP client says of its own. Serve it with
`tests/mcp_servers/serving.py`.

Its tool `bad` answers as its `how` argument says: `"dropstream"` opens the
call's response as an SSE stream and ends it with no event (the SDK's client
ends the request "SSE stream ended without a response"); anything else is
an echo of `text`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

TOOLS: list[dict[str, Any]] = [{"name": "bad", "inputSchema": {"type": "object"}}]


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC reply to `message` (None: answer with an empty SSE stream)."""
    mid, method = message.get("id"), message.get("method")
    if method == "initialize":
        result: Any = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "rawhttp", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        args = message["params"].get("arguments") or {}
        if args.get("how") == "dropstream":
            return None
        result = {"content": [{"type": "text", "text": f"echo {args.get('text')}"}]}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"no {method}"}
        return {"jsonrpc": "2.0", "id": mid, "error": error}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    if scope["method"] != "POST":  # (no standalone stream, no session to delete)
        await _respond(send, 405, b"", "text/plain")
        return
    message = json.loads(body)
    if "id" not in message:  # a notification
        await _respond(send, 202, b"", "text/plain")
        return
    reply = _answer(message)
    if reply is None:
        await _respond(send, 200, b"", "text/event-stream")
        return
    await _respond(send, 200, json.dumps(reply).encode(), "application/json")


async def _respond(send: Send, status: int, body: bytes, kind: str) -> None:
    headers = [(b"content-type", kind.encode()), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
