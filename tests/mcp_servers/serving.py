"""An MCP server's ASGI app served over streamable HTTP by uvicorn, at a free
loopback port: on the test's own event loop, or on a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Iterator
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


@contextlib.contextmanager
def served_in_thread(app: Any) -> Iterator[str]:
    """`served` on a thread of its own (its own event loop), for a test that
    blocks, or a server whose tools the test's loop must not wait on."""
    import uvicorn

    from tests.conftest import wait_until

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 30, "the server to listen")
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/mcp"
    finally:
        server.should_exit = True
        thread.join(30)
