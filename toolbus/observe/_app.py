"""The status server's ASGI app (Starlette, sse-starlette): routes, the guard, the stream.

Imported only when a server starts (`_server.py`): `import toolbus.observe`
loads none of this.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import orjson
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ._content import dumps
from ._feed import Feed

__all__ = ["COOKIE", "Broadcast", "Guard", "build_app", "cookie_value"]

log = logging.getLogger("toolbus.observe")

COOKIE = "toolbus_status"
# The page's own requests may authenticate with the cookie; /metrics may not.
_COOKIE_PATHS = frozenset({"/", "/status", "/events"})
_NO_STORE = {"Cache-Control": "no-store"}
PING_SECONDS = 5  # keeps idle streams open through proxies, and lets clients notice a dead server


def cookie_value(token: str) -> str:
    """What the page's cookie holds: derived from the token, not the token itself
    (so the cookie cannot be replayed as a bearer token, e.g. on /metrics)."""
    return hmac.new(token.encode(), b"toolbus status page", hashlib.sha256).hexdigest()


def _same(given: str | None, expected: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _is_loopback_name(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    """The host of a Host header: "[::1]:8080" -> "::1", "localhost:80" -> "localhost"."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """Every request passes here first.

    - Bound to loopback: the Host header must name a loopback host, so a web
      page whose name was rebound to 127.0.0.1 (DNS rebinding) gets 403.
    - With a token: `Authorization: Bearer <token>` on any path (the scheme's
      name in any case, as RFC 7235 has it); or, for the
      page's own paths (`/`, `/status`, `/events`), the cookie that
      `/?token=<token>` sets (HttpOnly, SameSite=Strict) before redirecting
      to `/`. Anything else gets 401. Comparisons are constant-time.
    """

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback
        self._cookie = cookie_value(token) if token is not None else ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if self.loopback and host is not None and not _is_loopback_name(_host_name(host)):
            await PlainTextResponse("403: this server answers on loopback names only\n", 403)(
                scope, receive, send
            )
            return
        if self.token is None or _same(_bearer(headers.get("authorization")), self.token):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in _COOKIE_PATHS and _same(_cookie(headers, COOKIE), self._cookie):
            await self.app(scope, receive, send)
            return
        if path == "/":
            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token")
            if given and _same(given[0], self.token):
                response = RedirectResponse("./", status_code=303, headers=_NO_STORE)
                response.set_cookie(COOKIE, self._cookie, httponly=True, samesite="strict")
                await response(scope, receive, send)
                return
        await PlainTextResponse(
            "401: this status server needs its token: send 'Authorization: Bearer <token>', "
            "or open /?token=<token> once in a browser\n",
            401,
            headers={"WWW-Authenticate": 'Bearer realm="toolbus"', **_NO_STORE},
        )(scope, receive, send)


def _bearer(header: str | None) -> str | None:
    """The credentials of an `Authorization: Bearer <token>` header, None for
    another scheme. The scheme's name is case-insensitive (RFC 7235): `bearer`
    and `BEARER` are the same scheme; the token is compared as it is."""
    if header is None:
        return None
    scheme, space, credentials = header.partition(" ")
    return credentials if space and scheme.lower() == "bearer" else None


def _cookie(headers: Headers, name: str) -> str | None:
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


class Broadcast:
    """Wakes the event streams on the server's loop when the feed has records.

    `wake()` may be called from any thread (the feed calls it on a delivery
    thread); at most one wake-up is pending on the loop at a time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._pending = False
        self.closed = False
        # Streams open now (changed on the loop only): with none, nobody is woken,
        # so a server nobody watches costs the calls no thread wake-ups.
        self.streams = 0

    def bind(self) -> None:
        """Called on the server's loop as it starts."""
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._event = asyncio.Event()

    @property
    def event(self) -> asyncio.Event:
        """Set at the next wake-up (take it before looking for records)."""
        assert self._event is not None
        return self._event

    def wake(self) -> None:
        if not self.streams and not self.closed:
            return
        with self._lock:
            if self._pending or self._loop is None:
                return
            self._pending = True
            loop = self._loop
        try:
            loop.call_soon_threadsafe(self._fire)
        except RuntimeError:  # the loop is closed: nobody to wake
            pass

    def _fire(self) -> None:
        with self._lock:
            self._pending = False
            fired, self._event = self._event, asyncio.Event()
        if fired is not None:
            fired.set()

    def close(self) -> None:
        self.closed = True
        self.wake()


# A seq: ASCII digits only (str.isdigit() also takes "²", which int() refuses),
# at most 18 of them (any seq fits; int() refuses beyond 4300 digits).
_SEQ = re.compile(r"[0-9]{1,18}")


def _last_event_id(request: Request) -> int | None:
    """Where a client resumes: `Last-Event-ID` (an EventSource reconnecting), else
    `?since=` (a first connection after loading /status); None: from now on
    (also for a value that is not a seq: a header is the client's to send)."""
    for value in (request.headers.get("last-event-id"), request.query_params.get("since")):
        if value is not None and _SEQ.fullmatch(value.strip()):
            return int(value)
    return None


def _page() -> str:
    return resources.files(__package__).joinpath("_page.html").read_text(encoding="utf-8")


def build_app(
    *,
    feed: Feed,
    broadcast: Broadcast,
    status: Callable[[], dict[str, Any]],
    metrics: Callable[[], tuple[bytes, str]],
    token: str | None,
    loopback: bool,
) -> ASGIApp:
    """The app: `/`, `/status`, `/events`, `/metrics`, behind the `Guard`."""
    page = _page()

    def index(request: Request) -> Response:
        nonce = secrets.token_urlsafe(16)
        return Response(
            page.replace("{{nonce}}", nonce),
            media_type="text/html; charset=utf-8",
            headers={
                **_NO_STORE,
                "Content-Security-Policy": (
                    f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                    "form-action 'none'; frame-ancestors 'none'"
                ),
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
            },
        )

    def status_json(request: Request) -> Response:  # sync: runs on a worker thread
        # `dumps`: a lone surrogate (a model's tool name or call id, an
        # executor's name) is written as U+FFFD instead of failing with a 500.
        return Response(dumps(status()), media_type="application/json", headers=_NO_STORE)

    def metrics_text(request: Request) -> Response:
        body, media_type = metrics()
        return Response(body, media_type=media_type, headers=_NO_STORE)

    async def events(request: Request) -> Response:
        return EventSourceResponse(
            _stream(_last_event_id(request)),
            ping=PING_SECONDS,
            send_timeout=30,
            headers={**_NO_STORE, "X-Accel-Buffering": "no"},
        )

    async def _stream(since: int | None) -> AsyncIterator[ServerSentEvent]:
        # Fixed before the first line goes out: a client that has read it gets
        # every event announced after that.
        broadcast.streams += 1  # before looking: from here on every record wakes us
        sent = 0
        try:
            last = feed.latest if since is None else since
            # A short retry: a page reconnects (with Last-Event-ID) a second after a drop.
            yield ServerSentEvent(comment="toolbus events", retry=1000)
            while not broadcast.closed:
                woken = broadcast.event
                records, gap = feed.since(last)
                if gap:  # what the client missed is gone: it reloads /status and goes on
                    last = feed.latest
                    yield ServerSentEvent(
                        data=orjson.dumps({"seq": last, "time": time.time()}).decode(),
                        event="reset",
                    )
                    continue
                for seq, data in records:
                    yield ServerSentEvent(data=data.decode(), id=str(seq))
                    last = seq
                    sent += 1
                    # A turn for the loop after each event: writing a backlog
                    # straight through, the stream would not hear that its
                    # client left (asyncio then logs every write to the dead
                    # socket); given a turn, the response sees the disconnect
                    # and cancels this stream.
                    await asyncio.sleep(0)
                if not records:
                    await woken.wait()
        finally:
            broadcast.streams -= 1
            if not broadcast.closed:
                log.info("status server: an /events client left after %d events", sent)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        broadcast.bind()
        yield

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/status", status_json),
            Route("/events", events),
            Route("/metrics", metrics_text),
        ],
        lifespan=lifespan,
    )
    return Guard(app, token=token, loopback=loopback)
