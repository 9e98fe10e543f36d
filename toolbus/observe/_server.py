"""`serve_status(executor)`: a small web server showing one executor, on a thread.

    with toolbus.observe.serve_status(executor) as server:
        print("open", server.url)
        run_the_agent(executor)

Routes: `/` (a page that updates live), `/status` (a JSON snapshot),
`/events` (server-sent events: the masked lifecycle events, `id:` their
`seq`, resuming after `Last-Event-ID`), `/metrics` (Prometheus text).

Starlette and sse-starlette on uvicorn (the `web` extra), imported only when a
server starts. uvicorn runs its own event loop on a daemon thread; the socket
is bound before `serve_status` returns, so `.url` answers at once and a port
in use is an `OSError` here, not on the thread.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from typing import Any

from .._asgi import ServerThread, bind, check_address, url_host
from .._options import wait_seconds
from .._tokens import token_problem
from ..executor import Executor

__all__ = ["StatusServer", "serve_status"]

_START_TIMEOUT = 10.0


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # another name: it may resolve anywhere, so it counts as exposed


class StatusServer:
    """A running status server (see `serve_status`); `close()` or `with` stops it.

    `url` is the page's address (`http://127.0.0.1:<port>/`); `port` the port
    bound (useful with `port=0`, the default: any free port).
    """

    def __init__(
        self,
        executor: Executor,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        history: int = 1000,
    ) -> None:
        host, port = check_address(host, port, "serve_status")
        if token is not None and (not isinstance(token, str) or not token.strip()):
            raise ValueError("serve_status: token must be a non-empty string (or None)")
        if token is not None and (problem := token_problem(token)) is not None:
            raise ValueError(f"serve_status: no request could send this token: {problem}")
        loopback = _is_loopback(host)
        if not loopback and token is None:
            raise ValueError(
                f"serve_status: binding to {host!r}, which is not a loopback address, needs a "
                "token (serve_status(..., token=...)); every request must then send "
                "'Authorization: Bearer <token>'"
            )
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ValueError(f"serve_status: history must be an integer >= 1, got {history!r}")
        try:
            import prometheus_client
            import uvicorn  # noqa: F401  (the web extra's: served by toolbus._asgi)

            from ._app import Broadcast, build_app
        except ImportError as e:
            raise ImportError(
                f"serve_status needs the web extra (pip install 'toolbus[web]'): {e}"
            ) from e
        from ._config import describe_executor
        from ._feed import Feed
        from ._prometheus import instrument_prometheus
        from ._subscription import require_bus

        # Checked before the socket is bound: a refused executor leaves no port open.
        require_bus(executor, "serve_status")
        self._executor = executor
        self._closed = False
        self._lock = threading.Lock()
        sock = bind(host, port)
        try:
            self.port: int = sock.getsockname()[1]
            self.url = f"http://{url_host(host, sock.family)}:{self.port}/"
            self._feed = feed = Feed(executor, history=history)
        except BaseException:
            sock.close()  # whatever failed, the port is not left listening
            raise
        self._broadcast = broadcast = Broadcast()
        feed.listen(broadcast.wake)
        # /metrics: the Prometheus exporter's series for this executor, in a
        # registry of the server's own (so the process's default one is untouched).
        self._registry = registry = prometheus_client.CollectorRegistry(auto_describe=True)
        try:
            self._metrics = instrument_prometheus(executor, registry=registry)
        except BaseException:
            feed.close()
            sock.close()
            raise

        def status() -> dict[str, Any]:
            now = time.time()
            return {
                "executor": describe_executor(executor),
                "stats": executor.stats().model_dump(),
                "state": feed.state.snapshot(now),
                "server": {"time": now, "history": history, "latest": feed.latest},
            }

        def metrics() -> tuple[bytes, str]:
            return prometheus_client.generate_latest(
                registry
            ), prometheus_client.CONTENT_TYPE_LATEST

        self._socket = sock
        try:
            app = build_app(
                feed=feed,
                broadcast=broadcast,
                status=status,
                metrics=metrics,
                token=token,
                loopback=loopback,
            )
            # The socket is the server thread's now: it closes it, even if it cannot start.
            self._serving = ServerThread(app, sock, f"toolbus-status-{self.port}")
        except BaseException:
            self._metrics.close()
            feed.close()
            sock.close()
            raise
        self._thread = self._serving.thread
        if not self._serving.wait_started(_START_TIMEOUT):
            self.close()
            raise RuntimeError(f"serve_status: the server on port {self.port} did not start")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop serving: end the event streams, stop uvicorn (waiting up to
        `timeout` seconds for it; None: no bound), unsubscribe. Idempotent.
        A bad `timeout` is refused before anything stops.

        The socket is closed by the server's thread once uvicorn is done with
        it: a short `timeout` returns while it still shuts down."""
        seconds = wait_seconds(timeout, "timeout", "StatusServer.close")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._broadcast.close()
        self._serving.stop(seconds)
        self._feed.close()
        self._metrics.close()

    def __enter__(self) -> StatusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"<StatusServer {self.url} {state}>"


def serve_status(
    executor: Executor,
    host: str = "127.0.0.1",
    port: int = 0,
    token: str | None = None,
    *,
    history: int = 1000,
) -> StatusServer:
    """Serve `executor`'s status page, JSON, event stream and metrics on a thread.

    Binds to loopback by default (`port=0`: any free port; see `.url`).
    Binding to any other address without a `token` raises ValueError, as
    does a token no header can carry (whitespace, control characters, beyond
    Latin-1). With a token, every request needs `Authorization: Bearer
    <token>`; a browser opens `/?token=<token>` once and gets a cookie for the
    page (HttpOnly, SameSite=Strict, derived from the token). `history`: how many recent
    events are kept for clients that reconnect (`Last-Event-ID`).
    """
    return StatusServer(executor, host=host, port=port, token=token, history=history)
