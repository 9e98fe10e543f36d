"""Served calls' progress, sent to the MCP clients that asked for it.

A tool's `ctx.progress(...)` becomes a `tool:progress` event on the executor's
bus, whatever backend ran it (a worker process's progress arrives the same
way). One subscription per running server picks out the events of the calls
being served to a client that sent a `progressToken`, and hands them to that
request's task on the server's event loop, which sends them in order as
`notifications/progress`. Before the call's result goes back, the request
waits (briefly) for the call's `tool:finished` to pass the same queue, so no
progress notification follows the response it belongs to.

The log messages of an MCP server that a served tool called in turn (an
`MCPTool`: `tool:progress` events with data `server_log`) are passed on as
log messages of the served call, not as progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp.server import ServerRequestContext

from ..bus import BusPublisher, Subscription, subscribe
from ..bus import _signals as sig
from ..bus._events import CallFinished, Progress
from ..executor import Executor

__all__ = [
    "Flow",
    "ProgressRelay",
    "Send",
    "direct_progress",
    "progress_values",
]

log = logging.getLogger("toolbus.mcp")

# Sends one notification: (progress, total, message).
Send = Callable[[float, float | None, str | None], Awaitable[None]]

# How long a result waits for its call's progress to be sent: results never
# wait long for observers (a wedged delivery thread must not hold them).
_FLUSH_TIMEOUT = 2.0

_END = None  # queued after the call's last progress


def progress_values(
    count: int, fraction: float | None, data: dict[str, Any]
) -> tuple[float, float | None]:
    """MCP's `(progress, total)` for a toolbus progress report.

    A tool relaying another MCP server's progress (an `MCPTool`) passes its
    `progress` and `total` on; otherwise a fraction is `progress` out of a
    `total` of 1, and without one, `progress` counts the reports so far.
    """
    given, total = _number(data.get("progress")), _number(data.get("total"))
    if given is not None:
        return given, total
    if fraction is not None and math.isfinite(fraction):
        return fraction, 1.0
    return float(count), None


def _number(value: Any) -> float | None:
    """A finite number as a float; None for anything else (bool included)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class Flow:
    """What a relayed block says of its call: `flush` False if it goes on
    (suspended for input) rather than having its result."""

    flush: bool = True


@dataclass
class _Watch:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Progress | None] = field(default_factory=asyncio.Queue)
    count: int = 0
    last: float = -math.inf


class ProgressRelay:
    """One subscription to an executor's progress, shared by a server's requests.

    `opened()` (the server's lifespan) subscribes while any server run is
    live; `relay(call_id, send)` wraps one served call.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        # Calls run as tasks: each progress message is told (on its loop).
        self._followers: dict[str, tuple[asyncio.AbstractEventLoop, Callable[[str], None]]] = {}
        self._users = 0
        self._subscription: Subscription | None = None

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[None]:
        with self._lock:
            self._users += 1
            # An executor publishing elsewhere (Executor(publisher=...)) has no
            # bus events to relay: its served calls send no progress.
            if self._subscription is None and type(self._executor.publisher) is BusPublisher:
                self._subscription = subscribe(
                    self._receive, sig.PROGRESS, sig.FINISHED, sender=self._executor
                )
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                subscription = self._subscription if self._users == 0 else None
                if subscription is not None:
                    self._subscription = None
            if subscription is not None:
                subscription.close()

    @contextlib.asynccontextmanager
    async def relay(self, call_id: str, send: Send | None) -> AsyncIterator[Flow]:
        """Send the progress of call `call_id` with `send` while the block runs;
        on leaving it normally, send what is left first (up to 2 s), unless
        the block said the call goes on (`Flow.flush = False`). With `send`
        None, nothing is sent, and leaving waits for the call's events all the
        same (what they made, such as log messages, goes before the result)."""
        flow = Flow()
        if self._subscription is None:
            yield flow
            return
        watch = _Watch(asyncio.get_running_loop())
        with self._lock:
            self._watches[call_id] = watch
        pump = asyncio.create_task(self._pump(watch, send), name=f"toolbus-mcp-progress-{call_id}")
        try:
            yield flow
            # The call has its result; its progress, up to tool:finished, goes first.
            if flow.flush:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(pump), _FLUSH_TIMEOUT)
        finally:
            with self._lock:
                self._watches.pop(call_id, None)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    @contextlib.contextmanager
    def follow(self, call_id: str, told: Callable[[str], None]) -> Iterator[None]:
        """While it lasts, `told(message)` on this loop for each progress
        message of call `call_id` (a task's status message follows them)."""
        self._followers[call_id] = (asyncio.get_running_loop(), told)
        try:
            yield
        finally:
            self._followers.pop(call_id, None)

    async def _pump(self, watch: _Watch, send: Send | None) -> None:
        while (event := await watch.queue.get()) is not _END:
            if send is None:
                continue  # (watched for its end only)
            watch.count += 1
            progress, total = progress_values(watch.count, event.fraction, event.data)
            if progress <= watch.last:
                # MCP: progress MUST increase with each notification. A tool
                # whose fraction stalls or goes down (or that mixes counted
                # and fractional reports) gets the next value up: the same
                # figure to a reader, never a step back.
                progress = math.nextafter(watch.last, math.inf)
                if total is not None and progress > total:
                    total = None  # past its total: no total rather than a wrong one
            watch.last = progress
            try:
                await send(progress, total, event.message or None)
            except Exception as e:  # the client went away: the call goes on regardless
                log.debug("could not send progress of call %s: %s", event.call_id, e)
                return

    def _receive(self, sender: Any, *, event: Any, signal: str) -> None:
        """On a delivery thread: hand a watched call's events to its request's loop."""
        if signal == sig.PROGRESS and "server_log" in event.data:
            return  # a log message, sent on by the call itself (`_server_logs.py`)
        if signal == sig.PROGRESS:
            followed = self._followers.get(event.call_id)
            if followed is not None and event.message:
                with contextlib.suppress(RuntimeError):  # (its loop has closed)
                    followed[0].call_soon_threadsafe(followed[1], str(event.message))
            key = event.call_id if event.call_id in self._watches else event.parent_call_id
        elif isinstance(event, CallFinished):
            key = event.call_id
        else:
            return
        watch = self._watches.get(key) if key is not None else None
        if watch is None:
            return
        item = event if signal == sig.PROGRESS else _END
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            watch.loop.call_soon_threadsafe(watch.queue.put_nowait, item)


def direct_progress(ctx: ServerRequestContext[Any]) -> bool:
    # An in-process client (`mcp.Client(server)`) sends no progress token: its
    # dispatch context holds the caller's progress callback instead (wrapped by
    # the server's runner). Not public API: should it change, in-process
    # clients get no progress; clients over stdio and HTTP still do.
    outbound = getattr(ctx.session, "_request_outbound", None)
    outbound = getattr(outbound, "_inner", outbound)
    return getattr(outbound, "_on_progress", None) is not None
