"""Connecting to an MCP server, and handing its tools to a toolbus registry.

    with connect_stdio(sys.executable, ["-m", "mcp_server_time"]) as time_server:
        time_server.register(registry, prefix="time_")
        with Executor(registry) as executor:
            executor.execute(ToolCall(name="time_get_current_time", arguments={...}))

The connection stays open until `close()`; the tools it made fail with
`MCPServerUnavailable` after that.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO, cast

import mcp_types as types
import pykka
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp.server import MCPServer, Server

from .. import __version__
from ..retry import RetryPolicy
from ..tools import DuplicateToolError, ToolRegistry
from ._actor import ListTools, Open, Opened, SessionActor, Status
from ._errors import MCPConnectError
from ._link import ConnectionStatus, Link
from ._tool import MCPTool

__all__ = [
    "MCPConnection",
    "MCPTarget",
    "aconnect",
    "aconnect_http",
    "aconnect_stdio",
    "connect",
    "connect_http",
    "connect_stdio",
]

MCPTarget = StdioServerParameters | str | Server[Any] | MCPServer[Any] | Callable[[], Transport]
"""What `connect` accepts: stdio parameters, a streamable HTTP URL, an in-process
server, or a function that makes a fresh transport (called once per connection
attempt, since transports are single-use)."""

log = logging.getLogger("toolbus.mcp")

_CLIENT_INFO = types.Implementation(name="toolbus", version=__version__)


class MCPConnection:
    """A live connection to one MCP server, and the toolbus tools that call it.

    Made by `connect*`. The session is owned by a `SessionActor` on a daemon
    thread; it reconnects by itself when the server dies or stops answering.
    Thread-safe; use it with `with` (or `async with`) or call `close()`.
    """

    def __init__(self, actor: pykka.ActorRef[SessionActor], opened: Opened, link: Link) -> None:
        self._actor = actor
        self._link = link
        self._port = actor.proxy().port.get()
        self._specs = opened.tools
        self.server_name = opened.server_name
        self.server_version = opened.server_version

    @property
    def name(self) -> str:
        """The name used in error messages (the server's own name unless given)."""
        return self._link.name

    @property
    def closed(self) -> bool:
        return not self._actor.is_alive()

    @property
    def specs(self) -> list[types.Tool]:
        """The server's tool definitions, as last listed."""
        return list(self._specs)

    def tools(
        self,
        *,
        prefix: str = "",
        only: Iterable[str] | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int | None = None,
        read_only_hints: bool = True,
    ) -> list[MCPTool]:
        """toolbus tools for the server's tools (all, or those named in `only`).

        Each is named `prefix + the server's name`. `timeout`, `retry` and
        `max_concurrency` apply to each tool (None: the executor's). With
        `read_only_hints=False` the servers' `readOnlyHint`s are not trusted
        and every tool is mutating (runs alone, in order). A tool whose schema
        is not valid JSON Schema is left out, with a warning in the log.
        """
        wanted = set(only) if only is not None else None
        made: list[MCPTool] = []
        for spec in self._specs:
            if wanted is not None and spec.name not in wanted:
                continue
            try:
                made.append(
                    MCPTool(
                        spec,
                        self._port,
                        name=prefix + spec.name,
                        read_only=None if read_only_hints else False,
                        timeout=timeout,
                        retry=retry,
                        max_concurrency=max_concurrency,
                    )
                )
            except Exception as e:
                _log_skipped(self.name, spec.name, e)
        if wanted is not None:
            missing = wanted - {s.name for s in self._specs}
            if missing:
                raise KeyError(f"MCP server '{self.name}' has no tool {sorted(missing)}")
        return made

    def register(
        self,
        registry: ToolRegistry,
        *,
        prefix: str = "",
        only: Iterable[str] | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_concurrency: int | None = None,
        read_only_hints: bool = True,
    ) -> list[MCPTool]:
        """Make the tools (as `tools()` does) and register each in `registry`.

        A name already in the registry raises `DuplicateToolError` before any
        tool is registered; use `prefix` to keep two servers' tools apart.
        """
        made = self.tools(
            prefix=prefix,
            only=only,
            timeout=timeout,
            retry=retry,
            max_concurrency=max_concurrency,
            read_only_hints=read_only_hints,
        )
        taken = [t.name for t in made if t.name in registry]
        if taken:
            raise DuplicateToolError(f"tools named {taken} are already registered")
        for tool in made:
            registry.register(tool)
        return made

    def refresh(self, timeout: float = 10.0) -> list[types.Tool]:
        """List the server's tools again (for `tools()` made from now on).

        Raises `MCPConnectError` when the server does not answer in time or
        the connection is closed.
        """
        try:
            specs = cast(list[types.Tool], self._actor.ask(ListTools(timeout), timeout=timeout + 5))
        except pykka.ActorDeadError:
            raise MCPConnectError(f"the connection to MCP server '{self.name}' is closed") from None
        except pykka.Timeout:
            raise MCPConnectError(f"MCP server '{self.name}' did not list its tools") from None
        self._specs = specs
        return list(specs)

    async def arefresh(self, timeout: float = 10.0) -> list[types.Tool]:
        """Async twin of `refresh`."""
        return await asyncio.to_thread(self.refresh, timeout)

    def status(self) -> ConnectionStatus:
        """Whether the server is connected now, and how often it (re)connected and dropped."""
        try:
            status = cast(ConnectionStatus, self._actor.ask(Status(), timeout=10.0))
        except (pykka.ActorDeadError, pykka.Timeout):
            return ConnectionStatus(False, 0, 0, 0, "the connection is closed")
        return status

    def close(self, timeout: float = 10.0) -> None:
        """Close the session and stop the server; calls after this fail. Idempotent."""
        try:
            self._actor.stop(timeout=timeout)
        except (pykka.ActorDeadError, pykka.Timeout):
            pass

    async def aclose(self, timeout: float = 10.0) -> None:
        """Async twin of `close`."""
        await asyncio.to_thread(self.close, timeout)

    def __enter__(self) -> MCPConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MCPConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._specs)} tools"
        return f"<MCPConnection {self.name!r} {state}>"


def connect(
    target: MCPTarget,
    *,
    name: str | None = None,
    connect_timeout: float = 10.0,
    probe_timeout: float = 2.0,
    backoff_base: float = 0.5,
    max_backoff: float = 30.0,
) -> MCPConnection:
    """Connect to an MCP server and list its tools; blocks until both are done.

    Raises `MCPConnectError` when the server cannot be reached within
    `connect_timeout` seconds. Later failures never raise here: calls end as
    errors, and the connection reconnects (at once after a drop; after a
    failed attempt not before `backoff_base * 2**n` seconds, at most
    `max_backoff`). A call cancelled by toolbus (timeout) triggers a health
    check; a server that does not answer it within `probe_timeout` seconds is
    restarted.
    """
    link = Link(
        name or _default_name(target),
        _client_factory(target),
        connect_timeout=connect_timeout,
        probe_timeout=probe_timeout,
        backoff_base=backoff_base,
        max_backoff=max_backoff,
    )
    actor = SessionActor.start(link)
    try:
        opened = cast(
            Opened, actor.ask(Open(2 * connect_timeout + 5), timeout=2 * connect_timeout + 10)
        )
    except BaseException as e:
        actor.stop(block=False)
        if isinstance(e, pykka.Timeout):
            raise MCPConnectError(f"MCP server '{link.name}' did not connect in time") from None
        raise
    if name is None and opened.server_name:
        link.name = opened.server_name
    return MCPConnection(actor, opened, link)


async def aconnect(
    target: MCPTarget,
    *,
    name: str | None = None,
    connect_timeout: float = 10.0,
    probe_timeout: float = 2.0,
    backoff_base: float = 0.5,
    max_backoff: float = 30.0,
) -> MCPConnection:
    """Async twin of `connect`; never blocks the event loop.

    Cancelling it cannot stop a connect under way (it runs in a thread); the
    connection it then yields is closed, so no server process is left behind.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[MCPConnection] = loop.create_future()
    abandoned = threading.Event()
    context = contextvars.copy_context()

    def make() -> MCPConnection:
        return connect(
            target,
            name=name,
            connect_timeout=connect_timeout,
            probe_timeout=probe_timeout,
            backoff_base=backoff_base,
            max_backoff=max_backoff,
        )

    def work() -> None:
        # Our own thread, not the loop's executor: asyncio.run() cancels the
        # executor's task at exit, and the connection made after would be lost.
        try:
            conn = context.run(make)
        except BaseException as e:
            _deliver(loop, future, None, e)
            return
        if abandoned.is_set() or not _deliver(loop, future, conn, None):
            conn.close()

    threading.Thread(target=work, name="toolbus-mcp-connect", daemon=True).start()
    try:
        return await future
    except asyncio.CancelledError:
        abandoned.set()
        raise


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[MCPConnection],
    conn: MCPConnection | None,
    error: BaseException | None,
) -> bool:
    """Hand the outcome to the awaiting task; False if nobody can take it."""

    def settle() -> None:
        if future.cancelled():
            if conn is not None:  # cancelled just now: close it, off the loop
                threading.Thread(target=conn.close, name="toolbus-mcp-close", daemon=True).start()
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(conn)  # type: ignore[arg-type]

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop is closed
        return False
    return True


def connect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    errlog: TextIO | None = None,
    **options: Any,
) -> MCPConnection:
    """Start `command args` as an MCP server and connect to it over its stdin/stdout.

    `env` is added to a minimal inherited environment (PATH, HOME, ...); the
    server's stderr goes to `errlog` (default: this process's stderr).
    `options` are `connect`'s. Each reconnection starts a new process.
    """
    return connect(_stdio_target(command, args, env, cwd, errlog), **options)


async def aconnect_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    errlog: TextIO | None = None,
    **options: Any,
) -> MCPConnection:
    """Async twin of `connect_stdio`."""
    return await aconnect(_stdio_target(command, args, env, cwd, errlog), **options)


def connect_http(url: str, **options: Any) -> MCPConnection:
    """Connect to an MCP server over streamable HTTP at `url` (e.g. `http://host/mcp`).

    For headers or authentication, pass `connect` a function that makes the
    transport: `lambda: streamable_http_client(url, http_client=...)`.
    """
    return connect(url, **options)


async def aconnect_http(url: str, **options: Any) -> MCPConnection:
    """Async twin of `connect_http`."""
    return await aconnect(url, **options)


# -- helpers ---------------------------------------------------------------------------


class _StdioTarget:
    """A transport factory for a stdio server: a fresh process per connection attempt."""

    def __init__(self, params: StdioServerParameters, errlog: TextIO) -> None:
        self.params = params
        self.errlog = errlog

    def __call__(self) -> Transport:
        return stdio_client(self.params, errlog=self.errlog)


def _stdio_target(
    command: str,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
    errlog: TextIO | None,
) -> _StdioTarget:
    params = StdioServerParameters(
        command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
    )
    return _StdioTarget(params, errlog if errlog is not None else sys.stderr)


def _client_factory(target: MCPTarget) -> Callable[[], Client]:
    if isinstance(target, StdioServerParameters | str | Server | MCPServer):
        fixed = target
        return lambda: Client(fixed, client_info=_CLIENT_INFO)
    make_transport = target
    return lambda: Client(make_transport(), client_info=_CLIENT_INFO)


def _default_name(target: MCPTarget) -> str:
    if isinstance(target, _StdioTarget):
        target = target.params
    if isinstance(target, StdioServerParameters):
        words = [os.path.basename(target.command), *target.args]
        return " ".join(words)[:80]
    if isinstance(target, str):
        return target
    if isinstance(target, MCPServer | Server):
        return str(target.name)
    return "mcp"


def _log_skipped(server: str, tool: str, error: Exception) -> None:
    log.warning(
        "MCP server '%s': tool '%s' left out, its schema is not usable: %s", server, tool, error
    )
