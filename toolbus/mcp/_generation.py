"""One connection attempt to an MCP server and, when it succeeds, one live session.

A `_Generation` is owned by the `Link` (in `_link.py`) and lives on the
connection's event loop. Its owner task enters the `mcp.Client`, then watches
the server's tool list for as long as the session lives, and exits the client
when stopped (anyio requires entering and exiting in one task, inside one
cancel scope).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp.client.session import MessageHandlerFnT
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ._output import skip_sdk_output_check
from ._redact import redact_text

__all__ = [
    "Generation",
    "MakeClient",
    "OnAttempt",
    "connection_lost",
    "describe",
    "dispatcher_closed",
]

log = logging.getLogger("toolbus.mcp")

# Makes a client that hands the server's notifications to the given handler.
MakeClient = Callable[[MessageHandlerFnT], Client]
# Told the outcome of a connection attempt (None: connected), before anyone awaiting it.
OnAttempt = Callable[["Generation", BaseException | None], None]


def describe(error: BaseException) -> str:
    """One readable line for an error, looking inside exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    # A transport's error may quote the URL, with its credentials: redacted.
    text = redact_text(str(error))
    if isinstance(error, MCPError):
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def dispatcher_closed(client: Client) -> bool:
    """Whether the server's output has ended (the JSON-RPC dispatcher marked itself closed).

    Not public API: without it a call to an idle server that died fails once
    (MCPConnectionLost) instead of reconnecting first.
    """
    session = getattr(client, "_session", None)
    return bool(getattr(getattr(session, "_dispatcher", None), "_closed", False))


# The texts of the errors the SDK makes itself when it ends a request without
# an answer (the session's read stream ended, a write found the transport
# closed, an HTTP response stream ended): its code, CONNECTION_CLOSED, is
# -32000, JSON-RPC's generic "server error", which servers use for refusals.
_SDK_CLOSED = "Connection closed"
# (Only its streamable HTTP client says this: over stdio, or to an in-process
# server, an error in these words is the server's own.)
_SDK_STREAM_ENDED = "SSE stream "


def connection_lost(error: MCPError, client: Client | None, *, http: bool) -> bool:
    """Whether `error` is the SDK's word that the request's connection was
    lost, not a server's refusal that happens to use code -32000.

    The SDK gives both the same code: a lost connection is told by the
    session's state (its read stream ended) or by the SDK's own messages,
    its "SSE stream ..." ones only where the transport may be streamable
    HTTP (`http`: the `Link`'s `http_streams`).
    """
    if error.code != CONNECTION_CLOSED:
        return False
    if client is None or dispatcher_closed(client):
        return True
    message = error.message
    if error.data is not None:
        return False
    return message == _SDK_CLOSED or (http and message.startswith(_SDK_STREAM_ENDED))


class Generation:
    """One connection attempt and, when it succeeds, one live MCP session.

    The client is entered and exited by one owner task, inside one cancel scope
    (anyio requires both in the same task); `stop()` cancels that scope, which
    closes the session and stops the server process. While the session lives,
    the owner task listens for changes of the server's tool list (on 2026-07-28
    sessions through `subscriptions/listen`; earlier ones send
    `notifications/tools/list_changed` unasked, to `on_message`) and calls
    `on_tools_changed` for each.
    """

    def __init__(
        self,
        number: int,
        make_client: MakeClient,
        connect_timeout: float,
        on_attempt: OnAttempt,
        on_message: MessageHandlerFnT,
        on_tools_changed: Callable[[], None],
    ) -> None:
        self.number = number
        self.client: Client | None = None
        self.ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self.ready.add_done_callback(_retrieve)
        self._on_attempt = on_attempt
        self._on_tools_changed = on_tools_changed
        self._scope: anyio.CancelScope | None = None
        self._stopped = False
        self.task = asyncio.create_task(
            self._own(make_client, on_message, connect_timeout), name=f"toolbus-mcp-gen-{number}"
        )

    @property
    def usable(self) -> bool:
        client = self.client
        return client is not None and not self._stopped and not dispatcher_closed(client)

    def stop(self) -> None:
        """Close the session and stop the server (asynchronously, in the owner task)."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def _own(
        self, make_client: MakeClient, on_message: MessageHandlerFnT, connect_timeout: float
    ) -> None:
        error: BaseException | None = None
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + connect_timeout) as scope:
                self._scope = scope
                if self._stopped:
                    scope.cancel()
                async with make_client(on_message) as client:
                    scope.deadline = math.inf
                    skip_sdk_output_check(client)  # MCPTool checks results itself, off this loop
                    self.client = client
                    self._on_attempt(self, None)
                    self.ready.set_result(client)
                    await self._watch(client)
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

    async def _watch(self, client: Client) -> None:
        """Follow the tool list on a 2026-07-28 session, until the stream ends.

        Earlier protocol versions need nothing here: their servers notify
        unasked. A server that offers no listing changes, or refuses the
        stream, is left alone; one whose stream drops is listed again once
        (there is no replay), since changes may have been missed.
        """
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return
        tools = client.server_capabilities.tools
        if tools is None or not tools.list_changed:
            return
        listening = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                listening = True
                async for _ in subscription:
                    self._on_tools_changed()
        except Exception as e:  # refused, or the stream dropped: the session may live on
            log.debug(
                "MCP session %d: tool list changes not followed (%s)", self.number, describe(e)
            )
        if listening:
            self._on_tools_changed()


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Mark a failed attempt's error as seen: nobody may be waiting for an eager reconnect.
    if not future.cancelled():
        future.exception()
