"""Serve Restate handlers over HTTP/2 cleartext, in this process (`serve`).

The Restate server calls a service over HTTP/2 (one stream per attempt, the
journal flowing both ways), so the service needs an ASGI server that speaks
h2c: hypercorn. Two things its command line gets wrong for a service that
must die with its process: it forks a worker (a `kill -9` of the command
leaves the worker serving), and the SDK's app, on its first request, takes
SIGTERM's handler from hypercorn's (asyncio keeps one per signal), so SIGTERM
no longer stops the server. Here the process that serves is the one started,
and SIGTERM and SIGINT stop it through the SDK's own shutdown hook.

A `stop` event given stops it too, from any thread's loop: the SDK, once its
handler is done or cancelled, waits for the Restate server to close the
stream (and swallows the server's cancellation meanwhile), so on `stop` each
stream's input is ended here, as a disconnect, for the attempt to end.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any

import restate
from hypercorn.asyncio import serve as _hypercorn
from hypercorn.config import Config
from restate.server import install_shutdown_hook

__all__ = ["serve"]


async def serve(
    *services: Any,
    host: str = "127.0.0.1",
    port: int = 9080,
    stop: asyncio.Event | None = None,
    grace: float = 5.0,
) -> None:
    """Serve `services` (Restate `Service`, `VirtualObject` or `Workflow`
    objects) on `host:port` until SIGTERM or SIGINT (in the main thread), or
    until `stop` is set; attempts still running then have `grace` seconds to
    end before they are cancelled (Restate retries them). Register the URL
    with the Restate server's admin API to call them."""
    if not services:
        raise ValueError("serve(): give at least one Restate service")
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ValueError(f"serve(): grace must be a number of seconds >= 0, got {grace!r}")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"serve(): port must be an int from 0 to 65535, got {port!r}")
    app = restate.app(services=list(services))
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = grace
    ended = stop if stop is not None else asyncio.Event()
    if threading.current_thread() is threading.main_thread():  # (signals are the main's)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            install_shutdown_hook(loop, ended.set, sig)
    served = app if stop is None else _until(app, ended)
    await _hypercorn(served, config, shutdown_trigger=ended.wait)


def _until(app: Any, stop: asyncio.Event) -> Any:
    """`app`, whose streams read a disconnect once `stop` is set."""

    async def until(scope: Any, receive: Any, send: Any) -> None:
        async def received() -> Any:
            if stop.is_set():
                return {"type": "http.disconnect"}
            got = asyncio.ensure_future(receive())
            ended = asyncio.ensure_future(stop.wait())
            await asyncio.wait({got, ended}, return_when=asyncio.FIRST_COMPLETED)
            if got.done():
                ended.cancel()
                return got.result()
            got.cancel()
            return {"type": "http.disconnect"}

        await app(scope, received, send)

    return until
