"""The actor that owns one MCP connection: its event loop thread and its session.

MCP sessions are asynchronous and bound to the loop they were opened on. The
`SessionActor` starts that loop on a daemon thread of its own and keeps the
`Link` (the session, reconnected as needed) on it. Its mailbox serialises the
connection's lifecycle (open, list tools, status, stop) for callers on any
thread, with bounded waits; tool calls do not queue behind each other in the
mailbox, they go straight to the loop through a `SessionPort`, so that calls to
one server run concurrently and toolbus can cancel each one for real.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
import pykka
from mcp import Client
from mcp.shared.dispatcher import ProgressFnT

from ..approvals import InputAnswer
from ._asking import Asking, while_asking
from ._client_tasks import Tracked
from ._errors import MCPConnectError, MCPConnectionLost, MCPServerUnavailable
from ._link import ConnectionStatus, Link, describe
from ._roots import roots_changed

__all__ = ["ListTools", "Open", "Opened", "SessionActor", "SessionPort", "Status"]

T = TypeVar("T")


@dataclass(frozen=True)
class Open:
    """Connect for the first time and list the tools; the reply is an `Opened`.

    `timeout` bounds the whole; the handshake has its own, shorter deadline.
    """

    timeout: float


@dataclass(frozen=True)
class Opened:
    server_name: str | None
    server_version: str | None
    tools: list[types.Tool]


@dataclass(frozen=True)
class ListTools:
    """List the server's tools again (and apply the list: `Link.on_tools`); the
    reply is a list of `mcp.types.Tool`."""

    timeout: float


@dataclass(frozen=True)
class Status:
    """The reply is a `ConnectionStatus`."""


@dataclass(frozen=True)
class RootsChanged:
    """Tell a live session that the client's roots changed (no reply)."""

    timeout: float


class SessionPort:
    """How a tool reaches the session: a call runs on the session's loop.

    `await port.call(...)` from any other event loop (toolbus runs async tools
    on its own); cancelling the awaiting task cancels the request on the
    session's loop too. Once the connection is closing, calls fail at once, and
    calls still in flight end as errors: none waits on a stopped loop.
    """

    def __init__(self, link: Link, loop: asyncio.AbstractEventLoop) -> None:
        self.link = link
        self.loop = loop
        self._lock = threading.Lock()
        self._closed = False
        self._pending: set[concurrent.futures.Future[Any]] = set()

    @property
    def name(self) -> str:
        return self.link.name

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        retry_safe: bool,
        progress: ProgressFnT | None = None,
        asking: Asking | None = None,
        answer: InputAnswer | None = None,
        task_support: str | None = None,
        task: Tracked | None = None,
    ) -> types.CallToolResult:
        """`Link.call` on the session's loop (its errors are raised here)."""
        coro = self.link.call(
            tool,
            arguments,
            retry_safe=retry_safe,
            progress=progress,
            asking=asking,
            answer=answer,
            task_support=task_support,
            task=task,
        )
        return await self._on_loop(coro, retry_safe)

    async def run(self, use: Callable[[Client], Awaitable[T]], asking: Asking | None = None) -> T:
        """`use(client)` on the live session (connecting first), as a
        read-only call is run: on the session's loop, cancelled with it.
        `asking`: the toolbus call it is for (None: the caller's own)."""
        return await self._on_loop(self._used(use, asking), retry_safe=True)

    def wait(self, use: Callable[[Client], Awaitable[T]], timeout: float, what: str) -> T:
        """`use(client)` on the live session, for a blocking caller of its own
        (not a call): at most `timeout` seconds, beside the calls and the
        connection's lifecycle, never queued behind them. Its errors are
        `MCPConnectError`s naming `what`."""
        with self._lock:
            coro = self._used(use, None)
            try:
                if self._closed:
                    raise RuntimeError("closed")
                future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            except RuntimeError:
                coro.close()
                raise MCPConnectError(self._closed_message("is closed")) from None
            self._pending.add(future)
        future.add_done_callback(self._forget)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine's own TimeoutError
                raise MCPConnectError(
                    f"MCP server '{self.name}' could not {what}: timed out"
                ) from None
            future.cancel()
            raise MCPConnectError(
                f"MCP server '{self.name}' did not {what} within {timeout:g}s"
            ) from None
        except concurrent.futures.CancelledError:
            raise MCPConnectError(
                self._closed_message(f"was closed before it could {what}")
            ) from None
        except Exception as e:
            why = self.link.refused(describe(e))
            raise MCPConnectError(f"MCP server '{self.name}' could not {what}: {why}") from e

    async def _used(self, use: Callable[[Client], Awaitable[T]], asking: Asking | None) -> T:
        client = await self.link.session()
        return await while_asking(asking, self.link.asking, lambda: use(client))

    async def _on_loop(self, coro: Coroutine[Any, Any, T], retry_safe: bool) -> T:
        with self._lock:
            try:
                if self._closed:
                    raise RuntimeError("closed")
                future = asyncio.run_coroutine_threadsafe(coro, self.loop)
            except RuntimeError:  # closing, or the loop is closed
                coro.close()
                raise MCPServerUnavailable(self._closed_message("is closed")) from None
            self._pending.add(future)
        future.add_done_callback(self._forget)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the caller cancelled (toolbus's timeout): the request was cancelled too
            # The session's side was cancelled: the connection closed under the call.
            raise MCPConnectionLost(
                self._closed_message("was closed during the call"),
                retryable=None if retry_safe else False,
            ) from None

    def close(self) -> None:
        """Refuse new calls from now on."""
        with self._lock:
            self._closed = True

    def fail_pending(self) -> None:
        """End calls the stopped loop will never finish (only after it stopped)."""
        with self._lock:
            pending, self._pending = self._pending, set()
        for future in pending:
            if not future.done():
                future.set_exception(MCPServerUnavailable(self._closed_message("was closed")))

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def _closed_message(self, what: str) -> str:
        return f"the connection to MCP server '{self.link.name}' {what}"


class SessionActor(pykka.ThreadingActor):
    """Owns one MCP connection: its loop thread, its `Link`, its lifecycle."""

    use_daemon_thread = True

    def __init__(self, link: Link, *, close_timeout: float = 10.0) -> None:
        super().__init__()
        self._link = link
        self._close_timeout = close_timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, name=f"toolbus-mcp-{link.name}", daemon=True
        )
        self.port = SessionPort(link, self._loop)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def on_start(self) -> None:
        self._thread.start()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Open):
            return self._await(self._open(), message.timeout, "connect")
        if isinstance(message, ListTools):
            return self._await(self._link.list_tools(), message.timeout, "list its tools")
        if isinstance(message, Status):
            return self._link_status()
        if isinstance(message, RootsChanged):
            return self._await(
                roots_changed(self._link.live_client), message.timeout, "hear of new roots"
            )
        return None

    def on_stop(self) -> None:
        self.port.close()
        try:
            self._run(self._link.close()).result(self._close_timeout)
        except Exception:
            pass  # timed out, or the loop is gone: what is left is ended below
        finally:
            try:
                self._loop.call_soon_threadsafe(self._loop.stop)
            except RuntimeError:
                pass  # closed already
            self._thread.join(self._close_timeout)
            self.port.fail_pending()

    async def _open(self) -> Opened:
        client = await self._link.open()
        info = client.server_info
        tools = await self._link.list_tools()
        return Opened(
            server_name=info.name if info is not None else None,
            server_version=info.version if info is not None else None,
            tools=tools,
        )

    def _link_status(self) -> ConnectionStatus:
        async def snapshot() -> ConnectionStatus:
            return self._link.status()

        return self._run(snapshot()).result(5.0)

    def _run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:
            coro.close()
            raise

    def _await(self, coro: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
        """Run `coro` on the loop, at most `timeout` seconds; errors become `MCPConnectError`."""
        future = self._run(coro)
        try:
            return future.result(timeout)
        except Exception as e:
            if not future.done():  # our wait timed out (not the coroutine: a TimeoutError too)
                future.cancel()
                raise MCPConnectError(
                    f"MCP server '{self._link.name}' did not {what} within {timeout:g}s"
                ) from None
            why = self._link.refused(describe(e))
            raise MCPConnectError(f"MCP server '{self._link.name}' could not {what}: {why}") from e
