"""The MCP session of one connection, kept alive on the connection's own event loop.

A `Link` lives on one asyncio loop (the `SessionActor`'s) and is only touched
from it, so it needs no locks. It holds at most one live `_Generation` (one
`mcp.Client`, one server process for stdio) and replaces it when it dies:

- a call that finds the connection closed, or loses it mid-call, drops the
  generation, and a new one is started at once;
- a call that is cancelled (toolbus's timeout fired) triggers a health check;
  a server that does not answer it within `probe_timeout` is dropped too;
- a failed connection attempt is retried only on demand, and not before a
  backoff delay (doubling, capped at `max_backoff`); calls in between fail fast
  with `MCPServerUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, MCPError
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import CONNECTION_CLOSED

from ._errors import MCPCallError, MCPConnectionLost, MCPServerUnavailable

__all__ = ["ConnectionStatus", "Link", "describe"]

log = logging.getLogger("toolbus.mcp")

MakeClient = Callable[[], Client]
# Told the outcome of a connection attempt (None: connected), before anyone awaiting it.
OnAttempt = Callable[["_Generation", BaseException | None], None]

_LIST_PAGE_CAP = 100
# How long a dropped generation may take to shut its server down before close() gives up on it.
_TEARDOWN_TIMEOUT = 6.0


@dataclass(frozen=True)
class ConnectionStatus:
    """A snapshot of a connection's health."""

    connected: bool
    generation: int
    connects: int
    drops: int
    last_error: str | None


def describe(error: BaseException) -> str:
    """One readable line for an error, looking inside exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error)
    if isinstance(error, MCPError):
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _dispatcher_closed(client: Client) -> bool:
    # The JSON-RPC dispatcher marks itself closed when the server's output ends.
    # Not public API: without it a call to an idle server that died fails once
    # (MCPConnectionLost) instead of reconnecting first.
    session = getattr(client, "_session", None)
    return bool(getattr(getattr(session, "_dispatcher", None), "_closed", False))


class _Generation:
    """One connection attempt and, when it succeeds, one live MCP session.

    The client is entered and exited by one owner task, inside one cancel scope
    (anyio requires both in the same task); `stop()` cancels that scope, which
    closes the session and stops the server process.
    """

    def __init__(
        self, number: int, make_client: MakeClient, connect_timeout: float, on_attempt: OnAttempt
    ) -> None:
        self.number = number
        self.client: Client | None = None
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(_retrieve)
        self._on_attempt = on_attempt
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        self.task = asyncio.create_task(
            self._own(make_client, connect_timeout), name=f"toolbus-mcp-gen-{number}"
        )

    @property
    def usable(self) -> bool:
        client = self.client
        return client is not None and not self._stopped and not _dispatcher_closed(client)

    def stop(self) -> None:
        """Close the session and stop the server (asynchronously, in the owner task)."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def _own(self, make_client: MakeClient, connect_timeout: float) -> None:
        error: BaseException | None = None
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + connect_timeout) as scope:
                self._scope = scope
                if self._stopped:
                    scope.cancel()
                async with make_client() as client:
                    scope.deadline = math.inf
                    self.client = client
                    self._on_attempt(self, None)
                    self.ready.set_result(client)
                    await anyio.sleep_forever()
            if scope.cancelled_caught and not self._stopped:
                error = TimeoutError(f"no answer to the handshake within {connect_timeout:g}s")
        except Exception as e:
            error = e
        finally:
            self.client = None
            self._stopped = True
            if not self.ready.done():
                error = error or ConnectionError("closed before it connected")
                try:
                    self._on_attempt(self, error)
                finally:
                    # Whatever the bookkeeping does, callers waiting on this
                    # attempt must be answered.
                    self.ready.set_exception(error)
            elif error is not None:
                log.debug("MCP session %d ended with %s", self.number, describe(error))


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Mark a failed attempt's error as seen: nobody may be waiting for an eager reconnect.
    if not future.cancelled():
        future.exception()


class Link:
    """Calls into one MCP server, across however many sessions it takes."""

    def __init__(
        self,
        name: str,
        make_client: MakeClient,
        *,
        connect_timeout: float,
        probe_timeout: float,
        backoff_base: float,
        max_backoff: float,
    ) -> None:
        self.name = name
        self._make_client = make_client
        self._connect_timeout = connect_timeout
        self._probe_timeout = probe_timeout
        self._backoff_base = backoff_base
        self._max_backoff = max_backoff
        self._current: _Generation | None = None
        self._generations: set[_Generation] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._probing: set[int] = set()
        self._count = 0
        self._failures = 0
        self._retry_at = 0.0
        self._connects = 0
        self._drops = 0
        self._last_error: str | None = None
        self._closed = False

    # -- what the connection offers ------------------------------------------------

    async def open(self) -> Client:
        """Connect for the first time; raise the reason when that fails."""
        generation = self._start()
        return await asyncio.shield(generation.ready)

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server lists, all pages."""
        generation = await self._live()
        assert generation.client is not None
        tools: list[types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(_LIST_PAGE_CAP):
                page = await generation.client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:
                raise
            self._drop(generation, "closed the connection while listing tools")
            raise MCPServerUnavailable(self._message("closed the connection")) from None
        return tools

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        read_only: bool,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        """Call `tool` on a live session (connecting first if need be).

        Raises `MCPServerUnavailable` (never sent), `MCPConnectionLost` (sent,
        no answer), `MCPCallError` (a protocol error). Cancellation cancels the
        request on the server and starts a health check of the server.
        """
        generation = await self._live()
        client = generation.client
        assert client is not None
        lost: BaseException
        try:
            return await client.call_tool(tool, arguments, progress_callback=progress)
        except asyncio.CancelledError:
            self._probe(generation)
            raise
        except MCPError as e:
            if e.code != CONNECTION_CLOSED:
                raise MCPCallError(f"MCP server '{self.name}' refused the call: {e}") from None
            lost = e
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as e:
            lost = e
        retryable = None if read_only else False
        if self._closed:
            raise MCPConnectionLost(
                f"the connection to MCP server '{self.name}' was closed during the call",
                retryable=retryable,
            )
        self._drop(generation, f"closed the connection during a call to '{tool}'")
        raise MCPConnectionLost(
            self._message(
                f"closed the connection during the call ({describe(lost)}); "
                "it may have exited or crashed. toolbus reconnects for the next call"
            ),
            retryable=retryable,
        ) from None

    def status(self) -> ConnectionStatus:
        current = self._current
        return ConnectionStatus(
            connected=current is not None and current.usable,
            generation=current.number if current is not None else self._count,
            connects=self._connects,
            drops=self._drops,
            last_error=self._last_error,
        )

    async def close(self) -> None:
        """Stop every session and its server; returns once they have shut down.

        Calls still in flight end: those whose session closed with an error, any
        other (none expected) cancelled, so that no caller waits on a stopped loop.
        """
        self._closed = True
        self._current = None
        for task in list(self._tasks):
            task.cancel()
        generations = list(self._generations)
        for generation in generations:
            generation.stop()
        tasks = [g.task for g in generations] + list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=_TEARDOWN_TIMEOUT)
        others = asyncio.all_tasks() - {asyncio.current_task()}
        for task in others:
            task.cancel()
        if others:
            await asyncio.wait(others, timeout=1.0)

    # -- generations ------------------------------------------------------------------

    async def _live(self) -> _Generation:
        if self._closed:
            raise MCPServerUnavailable(f"the connection to MCP server '{self.name}' is closed")
        generation = self._current
        if generation is not None and generation.ready.done() and not generation.usable:
            self._drop(generation, "closed the connection")
            generation = self._current
        if generation is None:
            wait = self._retry_at - asyncio.get_running_loop().time()
            if wait > 0:
                raise MCPServerUnavailable(
                    self._message(
                        f"is unavailable ({self._last_error}); "
                        f"the next connection attempt is in {wait:.1f}s"
                    )
                )
            generation = self._start()
        try:
            await asyncio.shield(generation.ready)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            raise MCPServerUnavailable(self._message(f"is unavailable ({describe(e)})")) from None
        return generation

    def _start(self) -> _Generation:
        self._count += 1
        generation = _Generation(
            self._count, self._make_client, self._connect_timeout, self._attempted
        )
        self._current = generation
        self._generations.add(generation)
        generation.task.add_done_callback(lambda _: self._generations.discard(generation))
        return generation

    def _attempted(self, generation: _Generation, error: BaseException | None) -> None:
        if error is None:
            self._failures = 0
            self._connects += 1
            if self._connects > 1:
                log.info("MCP server '%s': reconnected (session %d)", self.name, generation.number)
            return
        self._failures += 1
        # The exponent is capped: 2.0 ** 1024 overflows, and max_backoff wins long before.
        delay = min(self._max_backoff, self._backoff_base * 2.0 ** min(self._failures - 1, 60))
        self._retry_at = asyncio.get_running_loop().time() + delay
        self._last_error = describe(error)
        log.log(
            logging.WARNING if self._connects else logging.DEBUG,  # the first: connect() raises
            "MCP server '%s': connection attempt %d failed (%s); next attempt in %.1fs or later",
            self.name,
            generation.number,
            self._last_error,
            delay,
        )
        if self._current is generation:
            self._current = None

    def _drop(self, generation: _Generation, reason: str) -> None:
        """Give up on `generation`; start a new one at once unless the link is closed."""
        generation.stop()
        if self._current is not generation:
            return  # dropped already
        self._current = None
        self._drops += 1
        self._last_error = reason
        log.warning("MCP server '%s' %s; reconnecting", self.name, reason)
        if not self._closed:
            self._start()

    def _probe(self, generation: _Generation) -> None:
        """After a cancelled call: check, in the background, that the server still answers."""
        if self._closed or generation is not self._current or generation.number in self._probing:
            return
        self._probing.add(generation.number)
        task = asyncio.create_task(self._check(generation))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(self, generation: _Generation) -> None:
        try:
            client = generation.client
            if client is None:
                return
            with anyio.fail_after(self._probe_timeout):
                await client.list_tools(cache_mode="bypass")
        except Exception as e:
            self._drop(
                generation,
                f"did not answer a health check within {self._probe_timeout:g}s ({describe(e)})",
            )
        finally:
            self._probing.discard(generation.number)

    def _message(self, text: str) -> str:
        return f"MCP server '{self.name}' {text}"
