"""`toolbus top URL`: the dashboard of an executor in another process, from its
status server (`serve_status`).

It loads `/status` (configuration, counters and the state, as of some `seq`),
rebuilds the state (`LiveState.restore`), then follows `/events` from that
`seq` on a thread, applying each event as it comes; the counters are read
from `/status` again every second. The screen is the same `Board` as
`live()`'s. Only the standard library speaks HTTP here, so `top` needs no
extra on the watching side.

If the stream drops it reconnects with `Last-Event-ID`; if the server no
longer has the events in between (it answers `reset`), it reloads `/status`.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import IO, Any

from rich.console import Console

from .._json import loads
from .._tokens import token_problem
from ._state import LiveState

__all__ = ["main", "run_top"]

_READ_TIMEOUT = 20.0  # the server pings every 5 s: silence this long means it is gone


class Redirected(OSError):
    """The status server answered with a redirect, which `top` does not follow:
    urllib would send the bearer token on to wherever it points."""

    def __init__(self, url: str, code: int, location: str) -> None:
        self.url, self.code, self.location = url, code, location
        super().__init__(
            f"{url} redirects (HTTP {code}) to {location}; toolbus top does not follow "
            "redirects (its token would go along): watch the address it points to"
        )


class _Refuse(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> None:
        raise Redirected(req.full_url, code, _shown(newurl))


def _shown(url: str) -> str:
    """`url` without what may be a credential (userinfo, query, fragment)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "an address that is not one"
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class _Client:
    def __init__(self, url: str, token: str | None) -> None:
        self.base = url if url.endswith("/") else url + "/"
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._opener = urllib.request.build_opener(_Refuse)

    def _open(self, path: str, headers: dict[str, str], timeout: float) -> Any:
        request = urllib.request.Request(self.base + path, headers={**self.headers, **headers})
        return self._opener.open(request, timeout=timeout)

    def status(self) -> dict[str, Any]:
        with self._open("status", {"Accept": "application/json"}, 10.0) as response:
            data: dict[str, Any] = loads(response.read())
            return data

    def events(self, since: int) -> Iterator[tuple[str, str | None]]:
        """(event name, data) per server-sent event; ("ping", None) per comment."""
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(since)}
        with self._open("events", headers, _READ_TIMEOUT) as response:
            yield from _parse(response)


def _parse(stream: IO[bytes]) -> Iterator[tuple[str, str | None]]:
    name, data = "message", list[str]()
    for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith(":"):
            yield "ping", None
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)


class _Top:
    """The client's view of the server: state, counters, configuration, connection."""

    def __init__(self, client: _Client, url: str, status: dict[str, Any]) -> None:
        self.client = client
        self.url = url
        self.connection = "live"
        self._take(status, restore=True)

    def _take(self, status: dict[str, Any], *, restore: bool) -> None:
        self.config: dict[str, Any] = status["executor"]
        self.stats: dict[str, Any] | None = status["stats"]
        self.skew = float(status["server"]["time"]) - time.time()
        if restore:
            self.state = LiveState.restore(status["state"])

    def poll(self) -> None:
        try:
            self._take(self.client.status(), restore=False)
        except Exception as e:  # (any: whatever the server sends, the command goes on)
            self.connection = f"no answer: {_reason(e)}"

    def follow(self, stop: threading.Event) -> None:
        """Apply `/events` until `stop`; reconnects after a drop."""
        while not stop.is_set():
            try:
                for name, data in self.client.events(self.state.seq):
                    if stop.is_set():
                        return
                    self.connection = "live"
                    if name == "reset":
                        self._take(self.client.status(), restore=True)
                    elif name == "message" and data is not None:
                        # (`loads`: an integer of any size, where the standard
                        # library's refuses one past 4300 digits, and the stream
                        # would be read again from the same event for ever.)
                        self.state.apply(loads(data))
                self.connection = "disconnected: the server ended the stream"
            except Exception as e:
                # Any: a thread that died on what a server sent (a number out
                # of range in a snapshot) would leave the header saying "live".
                self.connection = f"disconnected: {_reason(e)}"
            stop.wait(1.0)  # then reconnect

    def board(self) -> Any:
        from ._view import Board

        now = time.time() + self.skew
        return Board(
            config=self.config,
            state=self.state.snapshot(now),
            stats=self.stats,
            source=self.url,
            status=self.connection,
            now=now,
        )


def _reason(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def address_problem(url: str) -> str | None:
    """Why `url` is not the address of a status server, None if it may be."""
    if not url.startswith(("http://", "https://")):
        return "is not an http:// or https:// address"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - read for its check: a port that is no number raises
    except ValueError as e:
        return f"is not a valid address ({e})"
    if not parts.hostname:
        return "names no host"
    if parts.query or parts.fragment or "@" in parts.netloc:
        # Where a token would be put by mistake (and the paths toolbus top
        # adds would land after it): refused, never shown (`_shown`).
        return (
            "holds a user name, a query or a fragment: give the status server's own "
            "address, and its token through --token-env"
        )
    return None


def run_top(
    url: str,
    *,
    token: str | None = None,
    console: Console | None = None,
    refresh_per_second: float = 4.0,
    poll_seconds: float = 1.0,
    stop: threading.Event | None = None,
) -> int:
    """Draw the dashboard of the executor served at `url` until `stop` is set or
    Ctrl-C; the exit code (0; 1: the server cannot be reached; 2: a bad address
    or token, or it wants a token)."""
    from rich.live import Live

    console = console or Console()
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    problem = address_problem(url)
    if problem is not None:
        errors.print(f"toolbus top: {_shown(url)!r} {problem}", markup=False)
        return 2
    if token is not None:
        problem = token_problem(token)
        if problem is not None:
            errors.print(f"toolbus top: the token cannot be sent: {problem}", markup=False)
            return 2
    client = _Client(url, token)
    try:
        status = client.status()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            hint = "a wrong token" if token else "no token (pass --token-env VAR)"
            errors.print(
                f"toolbus top: {url} refused the request (HTTP {e.code}): {hint}", markup=False
            )
            return 2
        errors.print(f"toolbus top: {url} answered HTTP {e.code} for /status", markup=False)
        return 1
    except Redirected as e:
        errors.print(f"toolbus top: {e}", markup=False)
        return 2
    except (OSError, ValueError) as e:
        errors.print(f"toolbus top: cannot reach {url}: {_reason(e)}", markup=False)
        return 1
    try:
        top = _Top(client, url, status)
    except Exception:  # (any: a number out of range, a structure nested too deep)
        errors.print(
            f"toolbus top: {url} does not answer like a toolbus status server", markup=False
        )
        return 1
    stop = stop or threading.Event()
    reader = threading.Thread(target=top.follow, args=(stop,), name="toolbus-top", daemon=True)
    reader.start()
    try:
        with Live(
            get_renderable=top.board,
            console=console,
            refresh_per_second=refresh_per_second,
            screen=False,
        ):
            # Sleeps, not stop.wait(): Ctrl-C raises KeyboardInterrupt wherever the
            # main thread is, and one raised inside Event.wait can leave the event's
            # lock held, so the stop.set() below would hang the command forever.
            while not stop.is_set():
                time.sleep(poll_seconds)
                if not stop.is_set():
                    top.poll()
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
    return 0


def main(url: str, *, token_env: str | None = None) -> int:
    """The `toolbus top` command: check its input, then `run_top`."""
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    problem = address_problem(url)
    if problem is not None:  # a usage error (2), not a server that cannot be reached (1)
        errors.print(f"toolbus top: {_shown(url)!r} {problem}", markup=False)
        return 2
    token = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            errors.print(
                f"toolbus top: the environment variable {token_env} is not set", markup=False
            )
            return 2
        # Checked before use: urllib's own error for such a header quotes it.
        problem = token_problem(token)
        if problem is not None:
            errors.print(
                f"toolbus top: the token in {token_env} cannot be sent: {problem}", markup=False
            )
            return 2
    return run_top(url, token=token)
