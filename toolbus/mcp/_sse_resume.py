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
(128 bits) per stream: an id seen is no key to another stream. A stream's
events are kept until `KEEP` seconds after its answer, at most the newest
`MAX_EVENTS` per session, and go with the session.

`Resumption` wires it: it gives each new session its store, and watches
each response, so that `close_when_polled` closes a stream only once its
priming event went out (a stream closed before that leaves the client no
id to come back with).
"""

from __future__ import annotations

import asyncio
import secrets
import time
import weakref
from collections import deque
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
"""Seconds a stream's events stay replayable after its answer."""

SESSION_HEADER = b"mcp-session-id"


@dataclass(eq=False)
class _Response:
    """One HTTP response under way, and whether anything of it went out yet."""

    primed: asyncio.Event = field(default_factory=asyncio.Event)


# Where `watch` leaves a request's `_Response` in its ASGI scope, which the
# request's context carries to the call (`ServerRequestContext.request`).
RESPONSE_KEY = "toolbus.sse_response"


@dataclass(eq=False)
class _Stream:
    """One stream's events, under a random token its event ids carry."""

    sid: str  # the stream's id in the transport (a request id, or the GET stream's)
    token: str
    events: deque[tuple[int, types.JSONRPCMessage | None]] = field(default_factory=deque)
    answered: float | None = None  # when its answer was stored
    grown: asyncio.Event = field(default_factory=asyncio.Event)


class SessionEvents(EventStore):
    """One session's SSE events, kept to be replayed (the SDK's `EventStore`).

    An event id is `<stream token>.<n>`: the token (random) names the stream,
    `n` the event's place in the session. So an id stays good when the event
    itself is no longer kept: a replay sends what is kept after it. A
    stream's events go `keep` seconds after its answer; and beyond
    `max_events`, the session's oldest go first. A stream still waiting for
    its answer keeps its token, however quiet it is.

    A replay goes on live: after what was kept, the stream's new events, up
    to its answer, and then the replayed stream ends. (The SDK would follow a
    replay with a live stream of its own, but an event that comes while it
    opens that one is lost to it.) It ends too when the session does
    (`close`).
    """

    def __init__(
        self,
        *,
        max_events: int = MAX_EVENTS,
        keep: float = KEEP,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_events
        self._keep = keep
        self._clock = clock
        self._n = 0
        self._kept = 0
        self._order: deque[tuple[int, _Stream]] = deque()  # every event kept, oldest first
        self._current: dict[str, _Stream] = {}  # by stream id: the stream open under it
        self._tokens: dict[str, _Stream] = {}
        self._answered: deque[_Stream] = deque()  # in the order of their answers
        self._closed = asyncio.Event()

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self._prune()
        stream = self._current.get(stream_id)
        if stream is None or stream.answered is not None:
            # (A stream id used again, by a request with an old id, is another stream.)
            stream = _Stream(stream_id, secrets.token_urlsafe(16))
            self._current[stream_id] = stream
            self._tokens[stream.token] = stream
        self._n += 1
        stream.events.append((self._n, message))
        self._order.append((self._n, stream))
        self._kept += 1
        while self._kept > self._max:
            self._drop_oldest()
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            stream.answered = self._clock()
            self._answered.append(stream)
        stream.grown.set()
        stream.grown = asyncio.Event()
        return f"{stream.token}.{self._n}"

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        """Send what followed `last_event_id` on its stream, then what comes,
        up to the stream's answer (or until the client leaves, or the session
        ends). Always None: the replayed stream then ends, with no live
        stream of the SDK's after it."""
        self._prune()
        token, _, n = last_event_id.rpartition(".")
        stream = self._tokens.get(token)
        if stream is None or not n.isdigit():
            return None
        after = int(n)
        while not self._closed.is_set():
            grown = stream.grown
            for event_n, message in list(stream.events):
                if event_n <= after:
                    continue
                after = event_n
                if message is None:
                    continue
                await send_callback(EventMessage(message, f"{token}.{event_n}"))
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    return None
            if stream.answered is not None:
                return None  # answered (its answer no longer kept): nothing more comes
            closed = asyncio.ensure_future(self._closed.wait())
            more = asyncio.ensure_future(grown.wait())
            try:
                await asyncio.wait({closed, more}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                more.cancel()
        return None

    def close(self) -> None:
        """The session ended: replays under way end, and the events go."""
        self._closed.set()
        self._order.clear()
        self._current.clear()
        self._tokens.clear()
        self._answered.clear()
        self._kept = 0

    @property
    def kept(self) -> int:
        """How many events are kept. (Not `__len__`: the SDK asks whether a
        store is there with its truth, and an empty one must be.)"""
        return self._kept

    def _prune(self) -> None:
        """Let go of the streams answered more than `keep` seconds ago."""
        oldest = self._clock() - self._keep
        while self._answered and (self._answered[0].answered or 0.0) < oldest:
            self._drop(self._answered.popleft())
        if len(self._answered) > 2 * self._max + 64:
            # (Streams dropped with their evicted answer, waiting to age out.)
            self._answered = deque(s for s in self._answered if s.token in self._tokens)
        if len(self._order) > 2 * self._max + 64:
            # Entries of events let go with their stream stay until compacted.
            self._order = deque((n, s) for n, s in self._order if s.events and s.events[0][0] <= n)

    def _drop_oldest(self) -> None:
        while self._order:
            n, stream = self._order.popleft()
            if stream.events and stream.events[0][0] == n:
                _, message = stream.events.popleft()  # (a stream's events are in order)
                self._kept -= 1
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    self._drop(stream)  # its answer gone, nothing of it is worth replaying
                return

    def _drop(self, stream: _Stream) -> None:
        self._tokens.pop(stream.token, None)
        if self._current.get(stream.sid) is stream:
            del self._current[stream.sid]
        self._kept -= len(stream.events)
        stream.events.clear()

    def knows(self, event_id: str) -> bool:
        """Whether `event_id` names a stream this session still keeps."""
        self._prune()
        return event_id.rpartition(".")[0] in self._tokens


class Resumption:
    """Resumable streams for one HTTP app: a store per session, and a watch
    on each response (see the module's doc)."""

    def __init__(self, *, max_events: int = MAX_EVENTS, keep: float = KEEP) -> None:
        self._max_events = max_events
        self._keep = keep
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
                store = SessionEvents(max_events=self._max_events, keep=self._keep)
                transport._event_store = store
                self._stores[transport.mcp_session_id] = store
                terminate = transport.terminate

                async def terminated() -> None:
                    store.close()  # (replays waiting on the session end with it)
                    await terminate()

                transport.terminate = terminated
            return transport

        manager._admit_session = admit_resumable  # type: ignore[method-assign]

    def _forgotten(self, scope: Any) -> bool:
        headers = dict(scope.get("headers") or ())
        last = headers.get(b"last-event-id")
        session = headers.get(SESSION_HEADER)
        if last is None or session is None:
            return False
        store = self._stores.get(session.decode("latin-1"))
        return store is not None and not store.knows(last.decode("latin-1"))

    def watch(self, app: Any) -> Callable[[Any, Any, Any], Awaitable[None]]:
        """`app`, its responses watched: each knows when its first bytes went out."""

        async def watched(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            if scope.get("method") == "GET" and self._forgotten(scope):
                # A stream this session no longer keeps (its answer let go, or
                # never its): 400, after which a client stops coming back. (Not
                # 404: on a request with a session id, that says the session
                # is gone, and a client would start another.)
                await _gone(send)
                return
            response = _Response()

            async def sending(message: Any) -> None:
                await send(message)
                if message["type"] == "http.response.body" and (
                    message.get("body") or not message.get("more_body", False)
                ):
                    response.primed.set()

            scope[RESPONSE_KEY] = response
            await app(scope, receive, sending)

        return watched


async def _gone(send: Any) -> None:
    body = b"400: this session keeps no stream for that Last-Event-ID\n"
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
    ]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def close_when_polled(ctx: ServerRequestContext[Any], after: float | None) -> None:
    """Close the stream answering request `ctx` once it is primed (its first
    bytes, the priming event, went out) and has been open `after` seconds:
    the client comes back with `Last-Event-ID` for the rest, on a stream that
    stays to the answer. Cancelled when the call ends; does nothing where
    streams cannot resume (another transport, a client before 2025-11-25,
    `after` None)."""
    close = ctx.close_sse_stream
    scope = getattr(ctx.request, "scope", None)
    response = scope.get(RESPONSE_KEY) if isinstance(scope, dict) else None
    if after is None or close is None or not isinstance(response, _Response):
        return
    await response.primed.wait()
    await asyncio.sleep(after)
    await close()
