"""Serve Restate handlers over HTTP/2 cleartext, in this process (`serve`).

The Restate server calls a service over HTTP/2 (one stream per attempt, the
journal flowing both ways), so the service needs an ASGI server that speaks
h2c: hypercorn. Two things its command line gets wrong for a service that
must die with its process: it forks a worker (a `kill -9` of the command
leaves the worker serving), and the SDK's app, on its first request, takes
SIGTERM's handler from hypercorn's (asyncio keeps one per signal), so SIGTERM
no longer stops the server. Here the process that serves is the one started,
and SIGTERM and SIGINT stop it through the SDK's own shutdown hook (and give
their handlers back when `serve` returns).

Stopping: attempts still running have `grace` seconds to end. Then each
stream left reads a disconnect and its attempt is cancelled (the SDK, its
handler done or cancelled, ends the stream once it has read the disconnect),
so that each connection is idle, and closed, before hypercorn gives up on
it. A handler that swallows its cancellation is cancelled with its
connection a moment later, and a moment after that `serve` returns whatever
hypercorn still waits for: a stopped service must stop.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import weakref
from typing import Any

import restate
from hypercorn.asyncio import serve as _hypercorn
from hypercorn.config import Config
from restate.server import install_shutdown_hook

__all__ = ["serve"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_TABLES = (dict, weakref.WeakKeyDictionary)  # (the SDK's is weak-keyed by loop)


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
    _check(services, port, grace)
    app = restate.app(services=list(services))
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = None
    # Streams left are ended at `grace` (`_until`); hypercorn cancels what is
    # still running a moment later (a handler that swallows its cancellation),
    # and `serve` returns a moment after that whatever still runs.
    config.graceful_timeout = grace + 0.5
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()  # a signal, or `stop`
    expired = asyncio.Event()  # `grace` over: the streams left read a disconnect
    hooked = threading.current_thread() is threading.main_thread()  # (signals are its)
    before = _hooks(loop) if hooked else {}
    if hooked:
        for sig in _SIGNALS:
            install_shutdown_hook(loop, stopping.set, sig)
    watch = asyncio.ensure_future(_watch(stop, stopping, expired, grace))
    server = asyncio.ensure_future(
        _hypercorn(_until(app, expired), config, shutdown_trigger=stopping.wait)
    )
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({server, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not server.done():
            await asyncio.wait({server}, timeout=grace + 1.5)
        if server.done():
            server.result()  # (hypercorn's own error, if any: a port in use)
    finally:
        for task in (server, watch, stopped):
            task.cancel()
        await asyncio.wait({server, watch, stopped}, timeout=1.0)
        for task in (server, watch, stopped):
            if task.done() and not task.cancelled():
                task.exception()  # (retrieved: hypercorn cut short may end in an error)
        if hooked:
            _restore(loop, before)


def _check(services: tuple[Any, ...], port: Any, grace: Any) -> None:
    if not services:
        raise ValueError("serve(): give at least one Restate service")
    kinds = (restate.Service, restate.VirtualObject, restate.Workflow)
    for s in services:
        if not isinstance(s, kinds):
            raise TypeError(
                "serve(): each service must be a restate.Service, VirtualObject or "
                f"Workflow, got {type(s).__name__}"
            )
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError(f"serve(): port must be an int from 1 to 65535, got {port!r}")
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ValueError(f"serve(): grace must be a number of seconds >= 0, got {grace!r}")


async def _watch(
    stop: asyncio.Event | None, stopping: asyncio.Event, expired: asyncio.Event, grace: float
) -> None:
    """`stop` stops; `grace` after stopping, the streams left expire."""
    if stop is None:
        await stopping.wait()
    else:
        either = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(stopping.wait())}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in either:
                f.cancel()
        stopping.set()
    await asyncio.sleep(grace)  # (the time given, not a wait for an event)
    expired.set()
    await asyncio.Event().wait()  # (ended by `serve`)


def _until(app: Any, expired: asyncio.Event) -> Any:
    """`app`, whose streams are ended once `expired` is set: each reads a
    disconnect, and the attempt it serves is cancelled (the SDK then ends the
    stream itself, while its connection is still up)."""

    async def until(scope: Any, receive: Any, send: Any) -> None:
        async def received() -> Any:
            if expired.is_set():
                return {"type": "http.disconnect"}
            got = asyncio.ensure_future(receive())
            ended = asyncio.ensure_future(expired.wait())
            await asyncio.wait({got, ended}, return_when=asyncio.FIRST_COMPLETED)
            if got.done():
                ended.cancel()
                return got.result()
            got.cancel()
            return {"type": "http.disconnect"}

        if scope.get("type") != "http":  # (the lifespan: the SDK has none)
            await app(scope, received, send)
            return
        # An attempt whose handler is busy with something that is not Restate's
        # never reads the disconnect: left to hypercorn, it would be cancelled
        # with its connection, whose stream then ends on a connection being torn
        # down (hypercorn 0.18 leaks a coroutine there, and `serve` returned
        # before that stream had ended). So it is cancelled at `grace`. Awaited
        # as a task, it stays this stream's, as if awaited here: a cancellation
        # of the stream (hypercorn's, giving up on its connection) reaches it
        # too, so that a handler that swallowed the first is cancelled again,
        # and its error is raised here.
        served = asyncio.ensure_future(app(scope, received, send))
        ended = asyncio.ensure_future(expired.wait())
        ended.add_done_callback(lambda done: done.cancelled() or served.cancel())
        try:
            await served
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if not served.cancelled() or this is None or this.cancelling():
                raise  # (the stream's own cancellation)
            # (cancelled at `grace`: the stream ends, as one ended by its app)
        finally:
            ended.cancel()

    return until


def _hooks(loop: asyncio.AbstractEventLoop) -> dict[int, list[Any]]:
    """The SDK's shutdown hooks of `loop` now, per signal (restate-sdk 1.3
    keeps them in `restate.server._shutdown_hooks`; none: {})."""
    table = getattr(restate.server, "_shutdown_hooks", None)
    hooks = table.get(loop, {}) if isinstance(table, _TABLES) else {}
    return {sig: list(hooks.get(sig, ())) for sig in _SIGNALS}


def _restore(loop: asyncio.AbstractEventLoop, before: dict[int, list[Any]]) -> None:
    """Drop the hooks added while serving (ours, the app's); a signal that had
    none before gets its handler back (the default)."""
    table = getattr(restate.server, "_shutdown_hooks", None)
    if not isinstance(table, _TABLES) or loop not in table:
        return
    hooks = table[loop]
    for sig in _SIGNALS:
        kept = before.get(sig, [])
        if kept and sig in hooks:
            hooks[sig][:] = kept  # (in place: the SDK's dispatcher reads that list)
        elif sig in hooks:
            hooks.pop(sig, None)
            loop.remove_signal_handler(sig)
    if not hooks:
        del table[loop]
