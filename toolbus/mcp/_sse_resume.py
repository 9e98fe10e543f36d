"""Streams that resume: every SSE event an id, a priming event, `retry`, and replay (SEP-1699).

Over HTTP a 2025-11-25 client's request is answered on an SSE stream. With
an event store, the SDK's transport gives each event an id, opens each
stream with a priming event (an id and no data) and a `retry` field, and a
client that lost the stream comes back with `GET` and `Last-Event-ID` to
be sent what it missed, then the rest live. So a long call's progress and
result survive a dropped connection, and the server may close a call's
stream on purpose (`poll_after`) to be polled instead of holding a
connection open for minutes.

Each session keeps its own events (`SessionEvents`): the SDK hands one
event store to every session, but stream ids repeat across sessions (they
are request ids, and `_GET_stream`), so a shared one would replay one
session's events to another that presented an event id. Ids are random
(128 bits): an id seen is no key to anything else. Events are kept for
`KEEP` seconds, at most `MAX_EVENTS` per session, and go with the session.

`Resumption` wires it: it gives each new session its store, and watches
each response, so that `close_when_polled` closes a stream only once its
priming event went out (a stream closed before that leaves the client no
id to come back with).
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["KEEP", "MAX_EVENTS", "Resumption", "SessionEvents", "close_when_polled"]

MAX_EVENTS = 1000
"""Events a session keeps for replay; the oldest go first."""

KEEP = 300.0
"""Seconds an event stays replayable."""

SESSION_HEADER = b"mcp-session-id"


@dataclass(eq=False)
class _Response:
    """One HTTP response under way, and whether anything of it went out yet."""

    primed: asyncio.Event = field(default_factory=asyncio.Event)


# The response of the request being handled: the store reads it when a
# stream is opened (its priming event is stored from inside that request).
_response: contextvars.ContextVar[_Response | None] = contextvars.ContextVar(
    "toolbus_sse_response", default=None
)


@dataclass(eq=False, slots=True)
class _Event:
    stream: str
    message: types.JSONRPCMessage | None
    at: float
    seq: int


class SessionEvents(EventStore):
    """One session's SSE events, kept to be replayed (the SDK's `EventStore`).

    A replay goes on live: after what was kept, the stream's new events, up
    to its answer, and then the replayed stream ends. (The SDK would follow a
    replay with a live stream of its own, but an event that comes while it
    opens that one is lost to it.) With `watch_openings`, it also knows the
    response that opened each stream (`opened`), so that it can be closed once
    primed.
    """

    def __init__(
        self,
        *,
        max_events: int = MAX_EVENTS,
        keep: float = KEEP,
        watch_openings: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_events
        self._keep = keep
        self._watch_openings = watch_openings
        self._clock = clock
        self._seq = 0
        self._events: OrderedDict[str, _Event] = OrderedDict()
        self._streams: dict[str, deque[str]] = {}
        self._grown: dict[str, asyncio.Event] = {}
        self._opened: dict[str, _Response] = {}
        self._opening: dict[str, asyncio.Event] = {}

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self._prune()
        event_id = secrets.token_urlsafe(16)
        self._seq += 1
        self._events[event_id] = _Event(stream_id, message, self._clock(), self._seq)
        self._streams.setdefault(stream_id, deque()).append(event_id)
        while len(self._events) > self._max:
            self._drop_oldest()
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            self._opened.pop(stream_id, None)  # answered: no closing left to do
        elif message is None and self._watch_openings and (response := _response.get()):
            # A priming event, stored by the request that opens the stream.
            self._opened[stream_id] = response
            if (opening := self._opening.pop(stream_id, None)) is not None:
                opening.set()
        if (grown := self._grown.pop(stream_id, None)) is not None:
            grown.set()
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        """Send what followed `last_event_id` on its stream, then what comes,
        up to the stream's answer (or until the client leaves). Always None:
        the replayed stream then ends, with no live stream of the SDK's after it."""
        self._prune()
        event = self._events.get(last_event_id)
        if event is None:
            return None
        stream, seq = event.stream, event.seq
        while True:
            grown = self._grown.setdefault(stream, asyncio.Event())
            for event_id in list(self._streams.get(stream, ())):
                kept = self._events.get(event_id)
                if kept is None or kept.seq <= seq:
                    continue
                seq = kept.seq
                if kept.message is None:
                    continue
                await send_callback(EventMessage(kept.message, event_id))
                if isinstance(kept.message, types.JSONRPCResponse | types.JSONRPCError):
                    return None
            await grown.wait()

    @property
    def kept(self) -> int:
        """How many events are kept. (Not `__len__`: the SDK asks whether a
        store is there with its truth, and an empty one must be.)"""
        return len(self._events)

    async def opened(self, stream_id: str) -> _Response:
        """The response that opened `stream_id` (stored its priming event)."""
        while (response := self._opened.get(stream_id)) is None:
            await self._opening.setdefault(stream_id, asyncio.Event()).wait()
        return response

    def forget(self, stream_id: str) -> None:
        """Stop watching `stream_id` (its call ended)."""
        self._opened.pop(stream_id, None)
        self._opening.pop(stream_id, None)

    def _prune(self) -> None:
        oldest = self._clock() - self._keep
        while self._events and next(iter(self._events.values())).at < oldest:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, event = self._events.popitem(last=False)
        stream = self._streams[event.stream]
        stream.popleft()  # the stream's oldest: events are stored in time order
        if not stream:
            del self._streams[event.stream]


class Resumption:
    """Resumable streams for one HTTP app: a store per session, and a watch
    on each response (see the module's doc)."""

    def __init__(
        self, *, max_events: int = MAX_EVENTS, keep: float = KEEP, polled: bool = False
    ) -> None:
        self._max_events = max_events
        self._keep = keep
        self._polled = polled
        self._stores: weakref.WeakValueDictionary[str, SessionEvents] = (
            weakref.WeakValueDictionary()
        )

    def install(self, manager: StreamableHTTPSessionManager) -> None:
        """Give every session `manager` opens a store of its own.

        The manager makes each session's transport in `_admit_session`, the
        one place a session and its store can meet; it must not hold a store
        of its own, which it would share between sessions.
        """
        if manager.event_store is not None:
            raise ValueError("a session manager's own event store would be shared by its sessions")
        admit: Callable[..., Any] = manager._admit_session

        def admit_resumable(*args: Any, **kwargs: Any) -> Any:
            transport = admit(*args, **kwargs)
            if transport is not None:
                store = SessionEvents(
                    max_events=self._max_events, keep=self._keep, watch_openings=self._polled
                )
                transport._event_store = store
                self._stores[transport.mcp_session_id] = store
            return transport

        manager._admit_session = admit_resumable  # type: ignore[method-assign]

    def store_of(self, ctx: ServerRequestContext[Any]) -> SessionEvents | None:
        """The store of the session request `ctx` came in."""
        request = ctx.request
        headers = getattr(request, "headers", None)
        session = headers.get(SESSION_HEADER.decode()) if headers is not None else None
        return self._stores.get(session) if session else None

    def watch(self, app: Any) -> Callable[[Any, Any, Any], Awaitable[None]]:
        """`app`, its responses watched: each knows when its first bytes went out."""

        async def watched(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            response = _Response()

            async def sending(message: Any) -> None:
                await send(message)
                if message["type"] == "http.response.body" and (
                    message.get("body") or not message.get("more_body", False)
                ):
                    response.primed.set()

            token = _response.set(response)
            try:
                await app(scope, receive, sending)
            finally:
                _response.reset(token)

        return watched


async def close_when_polled(
    resumption: Resumption | None, ctx: ServerRequestContext[Any], after: float | None
) -> None:
    """Close the stream answering request `ctx` once it is primed and has
    been open `after` seconds: the client comes back with `Last-Event-ID`
    for the rest, on a stream that stays to the answer. Runs until done or
    cancelled (the call ended); does
    nothing where streams cannot resume (another transport, a client before
    2025-11-25, `after` None)."""
    close = ctx.close_sse_stream
    if resumption is None or after is None or close is None:
        return
    store = resumption.store_of(ctx)
    if store is None:
        return
    stream = str(ctx.request_id)
    try:
        response = await store.opened(stream)
        await response.primed.wait()
        await asyncio.sleep(after)
        await close()
    finally:
        store.forget(stream)
