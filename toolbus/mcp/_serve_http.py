"""A registry served over streamable HTTP, behind a guard against DNS rebinding and strangers.

    serve_http(registry, host="127.0.0.1", port=8765)   # or: toolbus mcp serve M:R --http

The MCP SDK's streamable HTTP transport (its session manager, in the
Starlette app `Server.streamable_http_app` makes) on uvicorn. In front of it,
`Guard` checks every request before anything runs:

- `Origin`: absent (a non-browser client) or allowed, else 403. A web page's
  requests carry its origin; one whose name an attacker rebound to this
  machine (DNS rebinding) has a foreign one. Allowed: loopback origins
  (`http://localhost:3000`, any port) and those given.
- bound to loopback, `Host` must name a loopback host, else 403 (the same
  attack, seen from the other header).
- with a token, `Authorization: Bearer <token>`, compared in constant time,
  else 401.

Or, instead of one shared token, the server is an OAuth resource server
(`oauth=OAuthResource(...)`, `_oauth_server.py`): each request's JWT is
checked, and each tool's `scopes` decide who may list and call it.

The SDK's own Host/Origin checks are turned off: the guard does them, once,
with the allowed origins given here. Binding to an address that is not
loopback needs a token or OAuth.

Streams resume (`_sse_resume.py`): a client that loses a call's stream comes
back for what it missed; with `poll_after`, the server closes a long call's
stream itself, and the client polls.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import ipaddress
import logging
import signal
import threading
from collections.abc import Callable, Generator, Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import uvicorn  # a dependency of `mcp` (which imports it already)
from mcp.server.transport_security import TransportSecuritySettings

from .._asgi import bind, check_address, config, url_host
from .._options import non_negative_number
from .._tokens import token_problem
from ..executor import Executor
from ..tools import ToolRegistry
from ._oauth_server import OAuthGate, OAuthResource
from ._server import build_server
from ._sse_resume import Resumption, close_when_polled
from ._task_protocol import TASK_AFTER

__all__ = [
    "DEFAULT_PORT",
    "Guard",
    "aserve_http",
    "check_exposure",
    "check_streams",
    "http_app",
    "serve_http",
]

log = logging.getLogger("toolbus.mcp")

DEFAULT_PORT = 8765
MCP_PATH = "/mcp"


def http_app(
    registry: ToolRegistry,
    executor: Executor,
    *,
    name: str = "toolbus",
    token: str | None = None,
    oauth: OAuthResource | None = None,
    loopback: bool = True,
    allowed_origins: Iterable[str] = (),
    poll_after: float | None = None,
    reconnect_after: float = 1.0,
    task_after: float = TASK_AFTER,
) -> Any:
    """The ASGI app serving `registry` at `/mcp` (streamable HTTP), its calls
    run on `executor`, behind a `Guard` (and, with `oauth`, an `OAuthGate`).
    Its lifespan runs the SDK's session manager: serve it with lifespan
    events on (uvicorn does by default).

    Each SSE event has an id and a client that lost a stream is sent what it
    missed (2025-11-25 clients; kept `KEEP` seconds, `MAX_EVENTS` per
    session). `reconnect_after`: the seconds a client is told to wait before
    coming back (SSE `retry`). `poll_after`: a call still running after this
    many seconds has its request's stream closed (once), and its client comes
    back for the rest on a stream that stays open to the answer (None: never).
    `task_after`: see `build_server`."""
    _check_guards(token, oauth)
    poll_after, retry_ms = check_streams(poll_after, reconnect_after, "http_app", task_after)
    resumption = Resumption()
    poll = None
    if poll_after is not None:
        poll = functools.partial(close_when_polled, after=poll_after)
    server = build_server(registry, executor, name=name, task_after=task_after, poll=poll)
    app: Any = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        retry_interval=retry_ms,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    resumption.install(server.session_manager)
    app = resumption.watch(app)
    if oauth is not None:
        app = OAuthGate(app, oauth, registry, MCP_PATH)
    return Guard(app, token=token, loopback=loopback, allowed_origins=allowed_origins)


def check_streams(
    poll_after: object,
    reconnect_after: object,
    owner: str = "http_app",
    task_after: object = TASK_AFTER,
) -> tuple[float | None, int]:
    """`poll_after` (None or seconds >= 0), `reconnect_after` (seconds >= 0,
    returned in milliseconds) and `task_after` (seconds >= 0), checked:
    `TypeError`/`ValueError` naming `owner`."""
    if poll_after is not None:
        poll_after = non_negative_number(poll_after, "poll_after", owner)
    retry = non_negative_number(reconnect_after, "reconnect_after", owner)
    non_negative_number(task_after, "task_after", owner)
    return poll_after, round(1000 * retry)


def _check_guards(token: object, oauth: object) -> None:
    if oauth is not None and not isinstance(oauth, OAuthResource):
        raise TypeError(f"oauth must be an OAuthResource, not {type(oauth).__name__}")
    if oauth is not None and token is not None:
        raise ValueError("a shared token and OAuth both given: a request can send only one")


class Guard:
    """ASGI middleware: every HTTP request passes here first (see the module's doc).

    Lifespan events pass through; a refused request gets a short plain-text
    answer and never reaches the app.
    """

    def __init__(
        self,
        app: Any,
        *,
        token: str | None,
        loopback: bool,
        allowed_origins: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.loopback = loopback
        # A header's bytes are Latin-1 (RFC 9110 5.5), and token_problem keeps the
        # token within it.
        self._token = token.encode("latin-1") if token is not None else None
        self._origins = frozenset(_origin(o) for o in allowed_origins)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", ())}
        origin = headers.get(b"origin")
        host = headers.get(b"host")
        if origin is not None and not self._origin_allowed(origin.decode("latin-1")):
            await _refuse(send, 403, "403: requests from this origin are not allowed\n")
        elif self.loopback and host is not None and not _loopback_name(host.decode("latin-1")):
            await _refuse(send, 403, "403: this server answers on loopback names only\n")
        elif self._token is not None and not _authorized(
            headers.get(b"authorization", b""), self._token
        ):
            await _refuse(
                send,
                401,
                "401: this MCP server needs its token: send 'Authorization: Bearer <token>'\n",
                [(b"www-authenticate", b'Bearer realm="toolbus"')],
            )
        else:
            await self.app(scope, receive, send)

    def _origin_allowed(self, origin: str) -> bool:
        normal = _origin(origin)
        if normal in self._origins:
            return True
        parts = urlsplit(normal)
        return parts.scheme in ("http", "https") and _loopback_name(parts.netloc)


def _origin(text: str) -> str:
    """An origin as compared: lower case, without a trailing slash."""
    return text.strip().rstrip("/").lower()


def _loopback_name(netloc: str) -> bool:
    """Whether a Host header (or an origin's host and port) names a loopback host."""
    host = netloc.rsplit("@", 1)[-1]
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _refuse(
    send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = text.encode()
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(extra or ()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _authorized(header: bytes, token: bytes) -> bool:
    """`Authorization: Bearer <token>`; the scheme is case-insensitive (RFC 9110
    11.1), the token compared in constant time."""
    scheme, _, given = header.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(b" "), token)


def check_exposure(host: str, token: str | None, oauth: OAuthResource | None = None) -> bool:
    """Whether `host` is loopback; ValueError when it is not and there is
    neither a token nor OAuth, or when the token is empty or no request could send it."""
    _check_guards(token, oauth)
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ValueError("the token must be a non-empty string (or None)")
    if token is not None and (problem := token_problem(token)) is not None:
        # No request could send it (a header's outer whitespace is stripped, an
        # env file's stray CR...), so the server would refuse everyone. Not quoted.
        raise ValueError(f"no request could send this token: {problem}")
    loopback = _loopback_name(host)  # another name may resolve anywhere: exposed
    if not loopback and token is None and oauth is None:
        raise ValueError(
            f"binding to {host!r}, which is not a loopback address, needs a token (every "
            "request must then send 'Authorization: Bearer <token>') or OAuth"
        )
    return loopback


async def aserve_http(
    registry: ToolRegistry,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    oauth: OAuthResource | None = None,
    allowed_origins: Iterable[str] = (),
    poll_after: float | None = None,
    reconnect_after: float = 1.0,
    task_after: float = TASK_AFTER,
    name: str = "toolbus",
    executor: Executor | None = None,
    on_ready: Callable[[str], object] | None = None,
    **executor_options: Any,
) -> None:
    """Serve `registry` over streamable HTTP at `http://<host>:<port>/mcp` until
    stopped (SIGINT or SIGTERM in the main thread, or cancellation).

    Loopback by default; another address needs a `token` (ValueError
    otherwise), which every request must then carry, or `oauth`: an
    `OAuthResource`, which makes the server check each request's JWT (and each
    tool's `scopes`) instead of a shared token. `port=0` takes any free
    port; `on_ready(url)` is told the address once the socket listens. Calls
    run on `executor`, or on a new `Executor(registry, **executor_options)`
    closed at the end. `poll_after`, `reconnect_after` and `task_after`: see `http_app`.
    """
    host, port = check_address(host, port, "serve_http")
    loopback = check_exposure(host, token, oauth)
    check_streams(poll_after, reconnect_after, "serve_http", task_after)
    if oauth is not None:
        await oauth._keys.warm()
    own = executor is None
    runner = executor if executor is not None else Executor(registry, **executor_options)
    try:
        sock = bind(host, port)
        with sock:
            url = f"http://{url_host(host, sock.family)}:{sock.getsockname()[1]}{MCP_PATH}"
            app = http_app(
                registry,
                runner,
                name=name,
                token=token,
                oauth=oauth,
                loopback=loopback,
                allowed_origins=allowed_origins,
                poll_after=poll_after,
                reconnect_after=reconnect_after,
                task_after=task_after,
            )
            server = _Server(config(app))
            if on_ready is not None:
                on_ready(url)  # the socket listens: connections wait in its backlog
            await server.serve(sockets=[sock])
    finally:
        if own:
            await anyio.to_thread.run_sync(runner.close)


def serve_http(
    registry: ToolRegistry,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    token: str | None = None,
    oauth: OAuthResource | None = None,
    allowed_origins: Iterable[str] = (),
    poll_after: float | None = None,
    reconnect_after: float = 1.0,
    task_after: float = TASK_AFTER,
    name: str = "toolbus",
    on_ready: Callable[[str], object] | None = None,
    **executor_options: Any,
) -> None:
    """Blocking twin of `aserve_http` (runs its own event loop)."""
    anyio.run(
        functools.partial(
            aserve_http,
            registry,
            host=host,
            port=port,
            token=token,
            oauth=oauth,
            allowed_origins=allowed_origins,
            poll_after=poll_after,
            reconnect_after=reconnect_after,
            task_after=task_after,
            name=name,
            on_ready=on_ready,
            **executor_options,
        )
    )


class _Server(uvicorn.Server):
    """uvicorn's server, whose signal handling ends in a clean return.

    uvicorn shuts down on SIGINT/SIGTERM and then raises the signal again,
    which would kill the process before the executor is closed; here the first
    signal asks for a graceful shutdown and a second SIGINT forces it.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach the main thread only
            return

        def stop(sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
