"""An MCP server's ASGI app served over streamable HTTP by uvicorn, on the
test's own event loop, at a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """Serve `app`; yield its MCP endpoint's URL; stop it (within 10 s) after."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()
