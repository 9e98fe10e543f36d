"""Serving an ASGI app with uvicorn on a socket bound here: the MCP HTTP server, the status page.

The socket is bound before the server starts (`bind`), so its address is
known at once and a port in use is an `OSError` to the caller, not to a
server thread. `config` is uvicorn's configuration both servers use: quiet,
the application's logging left alone, no access log (a URL may carry a
token). `ServerThread` runs a server on a daemon thread of its own event loop.
uvicorn is imported only when a server is made.
"""

from __future__ import annotations

import ipaddress
import numbers
import socket
import threading
import time
from typing import Any

__all__ = ["ServerThread", "bind", "check_address", "config", "url_host"]

_MAX_PORT = 65535


def check_address(host: object, port: object, owner: str) -> tuple[str, int]:
    """`host` and `port` if a server can listen there: a non-empty string and
    an integer 0..65535 (0: any free port); else `TypeError` / `ValueError`
    naming `owner`. The socket library would take a port of 70000 modulo
    65536, "http" for 80, and fail on others with errors that name nothing."""
    if not isinstance(host, str):
        raise TypeError(f"{owner}: host must be a string, got {type(host).__name__} {host!r}")
    if not host.strip("[] "):
        raise ValueError(f"{owner}: host must not be empty (127.0.0.1: this machine only)")
    wanted = f"{owner}: port must be an integer 0..{_MAX_PORT} (0: any free port)"
    if isinstance(port, bool) or not isinstance(port, numbers.Integral):
        raise TypeError(f"{wanted}, got {type(port).__name__} {port!r}")
    number = int(port)
    if not 0 <= number <= _MAX_PORT:
        raise ValueError(f"{wanted}, got {port!r}")
    return host, number


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: any free port)."""
    host, port = check_address(host, port, "bind")
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


def url_host(host: str, family: int) -> str:
    """`host` as a URL names it: an IPv6 address in brackets, and a loopback
    address for one that listens everywhere."""
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if ip.is_unspecified:  # 0.0.0.0 / :: listen everywhere; loopback reaches them here
        return "127.0.0.1" if family == socket.AF_INET else "[::1]"
    return f"[{host}]" if ip.version == 6 else host


def config(app: Any) -> Any:
    """uvicorn's `Config` for serving `app`: lifespan events on, h11, no websockets."""
    import uvicorn

    return uvicorn.Config(
        app,
        log_config=None,  # leave the application's logging as it is
        log_level="warning",
        access_log=False,  # a URL may carry ?token=
        lifespan="on",
        loop="asyncio",
        http="h11",
        ws="none",
        timeout_graceful_shutdown=2,
    )


class ServerThread:
    """`app` served on `sock` by uvicorn, on a daemon thread named `name`.

    The socket is the thread's from then on: it closes it when the server has
    stopped (closed under a server still shutting down, the server's thread
    would fail on it), or here if the thread cannot be made."""

    def __init__(self, app: Any, sock: socket.socket, name: str) -> None:
        try:
            import uvicorn

            self.server = server = uvicorn.Server(config(app))

            def serve() -> None:
                try:
                    server.run(sockets=[sock])
                finally:
                    sock.close()

            self.thread = threading.Thread(target=serve, name=name, daemon=True)
            self.thread.start()
        except BaseException:
            sock.close()
            raise

    def wait_started(self, timeout: float) -> bool:
        """Whether the server is serving within `timeout` seconds (False: its
        thread ended, or it was too slow)."""
        deadline = time.monotonic() + timeout
        while not self.server.started:  # uvicorn offers no event to wait on
            if not self.thread.is_alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def stop(self, timeout: float | None) -> None:
        """Ask the server to shut down, and wait up to `timeout` seconds (None:
        no bound) for its thread, which then closes the socket."""
        self.server.should_exit = True
        self.thread.join(timeout)
