"""The resources a connection follows, and their updates as bus events.

`MCPConnection.subscribe_resource(uri)` asks the server to say when the
resource changes; each change is an event on the signal
`mcp:resource-updated` (`ResourceUpdated`: the server's name and the URI),
sent by the connection. How the server is asked depends on the protocol:

- 2025-11-25: `resources/subscribe` per URI; the server sends
  `notifications/resources/updated` unasked from then on (the connection's
  message handler hands them here);
- 2026-07-28: one `subscriptions/listen` stream whose filter names every URI
  followed; a change of the set opens a new stream, then closes the old one,
  so no update falls between them.

The URIs followed outlive a session: after a reconnection they are asked for
again (`resumed`). An update for a URI no longer followed is dropped. Events
go out through an `Announcer` of the connection's own (its delivery threads,
started with the first event), never on the session's loop.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ResourceUpdated as SdkResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..bus import Announcer, BusPublisher, Event, define_signal

__all__ = ["RESOURCE_UPDATED", "ResourceUpdated", "ResourceWatch"]

log = logging.getLogger("toolbus.mcp")

RESOURCE_UPDATED = "mcp:resource-updated"
define_signal(
    RESOURCE_UPDATED,
    "A resource an MCP connection follows (subscribe_resource) changed on its server; "
    "sent by the connection.",
)


@dataclass(frozen=True, slots=True)
class ResourceUpdated(Event):
    """`uri` changed on MCP server `server`: read it again to see how."""

    server: str
    uri: str


class ResourceWatch:
    """The URIs one connection follows. Its coroutines run on the session's loop."""

    def __init__(self, server: Callable[[], str], sender: object) -> None:
        self._server = server
        self._sender = sender
        self.uris: set[str] = set()
        self._announcer: Announcer | None = None
        self._stream: asyncio.Task[None] | None = None
        self._closed = False
        # One change of the set at a time: each opens its stream and retires
        # the one before (two at once would retire each other's: found by review).
        self._changing = asyncio.Lock()

    def updated(self, uri: str) -> None:
        """Announce that `uri` changed, if it is followed."""
        if uri not in self.uris or self._closed:
            return
        if self._announcer is None:
            self._announcer = Announcer(BusPublisher(self._sender))
        self._announcer.announce(RESOURCE_UPDATED, ResourceUpdated(server=self._server(), uri=uri))

    def on_message(self, message: object) -> None:
        """A message the session got unasked: a 2025-11-25 server's update.
        (The SDK hands this handler a listen stream's events too: those are
        announced from the stream, once.)"""
        if self._stream is not None:
            return
        if getattr(message, "method", None) != "notifications/resources/updated":
            return
        uri = getattr(getattr(message, "params", None), "uri", None)
        if uri is not None:
            self.updated(str(uri))

    async def follow(self, client: Client, uri: str) -> None:
        """Follow `uri` from now on (the server's refusal is raised, and it is not followed)."""
        async with self._changing:
            if uri in self.uris:
                return
            self.uris.add(uri)
            try:
                if _modern(client):
                    await self._listen(client)
                else:
                    with warnings.catch_warnings():  # deprecated by 2026-07-28, not before
                        warnings.simplefilter("ignore", MCPDeprecationWarning)
                        await client.session.subscribe_resource(uri)
            except BaseException:
                self.uris.discard(uri)
                raise

    async def unfollow(self, client: Client | None, uri: str) -> None:
        """Stop following `uri` (nothing is announced for it from now on)."""
        async with self._changing:
            if uri not in self.uris:
                return
            self.uris.discard(uri)
            if client is None:
                return  # no session: the next one is not asked for it
            if _modern(client):
                await self._listen(client)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.session.unsubscribe_resource(uri)

    async def resumed(self, client: Client) -> None:
        """A new session: ask it for every URI followed."""
        async with self._changing:
            if not self.uris:
                return
            try:
                await self._ask_again(client)
            except Exception as e:  # the session may be gone again: the next one asks
                log.warning("MCP server '%s': resources not followed again: %s", self._server(), e)

    async def _ask_again(self, client: Client) -> None:
        if _modern(client):
            await self._listen(client)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            for uri in sorted(self.uris):
                await client.session.subscribe_resource(uri)

    async def _listen(self, client: Client) -> None:
        """One stream for every URI followed (none: no stream), open before it returns."""
        old, self._stream = self._stream, None
        if self.uris:
            ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._stream = asyncio.create_task(
                self._stream_of(client, sorted(self.uris), ready),
                name="toolbus-mcp-resource-updates",
            )
            try:
                await ready
            except BaseException:
                self._stream.cancel()
                self._stream = old
                raise
        if old is not None:
            old.cancel()

    async def _stream_of(
        self, client: Client, uris: list[str], ready: asyncio.Future[None]
    ) -> None:
        try:
            async with client.listen(resource_subscriptions=uris) as stream:
                honored = stream.honored.resource_subscriptions if stream.honored else None
                missing = sorted(set(uris) - set(honored or ()))
                if missing:
                    raise LookupError(f"the server does not report changes of {missing}")
                ready.set_result(None)
                async for event in stream:
                    if isinstance(event, SdkResourceUpdated):
                        self.updated(event.uri)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not ready.done():
                ready.set_exception(e)
            else:  # the stream dropped: the next session asks again
                log.info("MCP server '%s': resource updates stopped: %s", self._server(), e)

    def close(self) -> None:
        """Stop: no more events (those announced are delivered, for a second at most)."""
        self._closed = True
        if self._stream is not None:
            self._stream.cancel()
        if self._announcer is not None:
            self._announcer.close(1.0)


def _modern(client: Client) -> bool:
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS
