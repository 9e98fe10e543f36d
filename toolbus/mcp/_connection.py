"""A connection to an MCP server, and handing its tools to a toolbus registry.

    with connect_stdio(sys.executable, ["-m", "mcp_server_time"]) as time_server:
        time_server.register(registry, prefix="time_")
        with Executor(registry) as executor:
            executor.execute(ToolCall(name="time_get_current_time", arguments={...}))

The connection stays open until `close()`; the tools it made fail with
`MCPServerUnavailable` after that. Tools it registered follow the server's
tool list (`_registrations.py`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar, Unpack, cast

import mcp_types as types
import pykka
from mcp import Client

from .._keywords import keywords_of, refuse_unknown
from .._options import positive_int, positive_number, timeout_seconds
from ..retry import RetryPolicy
from ..tools import DuplicateToolError, Tool, ToolRegistry
from ..tools._names import ToolNameError, check_name_prefix, shown_name
from ..tools._tool_options import ToolLimits
from ._actor import ListTools, Opened, RootsChanged, SessionActor, Status
from ._errors import MCPConnectError
from ._link import ConnectionStatus, Link
from ._registrations import MadeWith, Registration
from ._resource_tools import ListResources, ReadResource
from ._resource_updates import ResourceWatch
from ._resources import ResourcesAndPrompts
from ._roots import Roots, RootsOption, root_list
from ._tool import MCPTool, server_group

__all__ = ["MCPConnection", "MCPToolsOptions"]


class MCPToolsOptions(ToolLimits, total=False):
    """The options of `MCPConnection.tools` and `.register`: see `tools`."""

    prefix: str
    only: Iterable[str] | None
    read_only_hints: bool
    idempotent_hints: bool | None


_TOOLS_KEYWORDS = keywords_of(MCPToolsOptions)

log = logging.getLogger("toolbus.mcp")

T = TypeVar("T")


class MCPConnection(ResourcesAndPrompts):
    """A live connection to one MCP server, and the toolbus tools that call it.

    Made by `connect*`. The session is owned by a `SessionActor` on a daemon
    thread; it reconnects by itself when the server dies or stops answering.
    Thread-safe; use it with `with` (or `async with`) or call `close()`.
    """

    def __init__(
        self,
        actor: pykka.ActorRef[SessionActor],
        opened: Opened,
        link: Link,
        *,
        server_max_concurrency: int | None = None,
        idempotent_hints: bool = False,
        unwrap_results: bool | None = None,
        roots: Roots | None = None,
    ) -> None:
        self._actor = actor
        self._roots = roots
        self._link = link
        self._port = actor.proxy().port.get()
        self._specs = _unique(opened.tools, opened.server_name or link.name)
        self.server_name = opened.server_name
        self.server_version = opened.server_version
        self.server_max_concurrency = server_max_concurrency
        self._idempotent_hints = idempotent_hints
        self._unwrap_results = unwrap_results
        # Guards the specs, the tools made and the registrations: the session's
        # loop applies new listings while callers make and register tools.
        self._lock = threading.Lock()
        self._made: weakref.WeakSet[MCPTool] = weakref.WeakSet()
        self._registrations: list[Registration] = []
        link.on_tools = self._apply
        self._watch = link.resources = ResourceWatch(lambda: link.name, self)

    @property
    def name(self) -> str:
        """The name used in error messages (the server's own name unless given)."""
        return self._link.name

    @property
    def capacity_group(self) -> str | None:
        """The capacity group of `server_max_concurrency` (`mcp:<name>`), or None without one."""
        return None if self.server_max_concurrency is None else server_group(self.name)

    @property
    def closed(self) -> bool:
        return not self._actor.is_alive()

    @property
    def specs(self) -> list[types.Tool]:
        """The server's tool definitions, as last listed."""
        return list(self._specs)

    def tools(self, **options: Unpack[MCPToolsOptions]) -> list[MCPTool]:
        """toolbus tools for the server's tools (all, or those named in `only`).

        Each is named `prefix + the server's name`. `timeout`, `call_timeout`,
        `retry` and `max_concurrency` apply to each tool (None: the executor's). With
        `read_only_hints=False` the servers' `readOnlyHint`s are not trusted
        and every tool is mutating (runs alone, in order). `idempotent_hints`
        (None: the connection's, False unless `connect(idempotent_hints=True)`)
        says whether `idempotentHint`s make tools `idempotent`. A tool whose
        schema is not valid JSON Schema, or whose name (with `prefix`) breaks
        the rule for tools' names (MCP's: 1 to 128 ASCII letters, digits, `_`,
        `-` or `.`), is left out, with a warning in the log naming it; a
        `prefix` that breaks it is a ValueError.
        """
        refuse_unknown(options, _TOOLS_KEYWORDS, "MCPConnection.tools")
        made_with = self._made_with(options)
        only = options.get("only")
        with self._lock:
            return self._tools(made_with, only)

    def resource_tools(self, **options: Unpack[MCPToolsOptions]) -> list[Tool]:
        """The server's resources as two read-only tools for the model:
        `<prefix>list_resources` and `<prefix>read_resource(uri)`, with the
        limits `tools()` takes (`timeout`, `retry`, ...) and the connection's
        `server_max_concurrency`."""
        refuse_unknown(options, _TOOLS_KEYWORDS, "MCPConnection.resource_tools")
        return self._resource_tools(self._made_with(options))

    def _resource_tools(self, made_with: MadeWith) -> list[Tool]:
        cap = self.server_max_concurrency
        return [
            ListResources(self._port, made_with=made_with, server_max_concurrency=cap),
            ReadResource(self._port, made_with=made_with, server_max_concurrency=cap),
        ]

    def register(
        self,
        registry: ToolRegistry,
        *,
        resources_as_tools: bool = False,
        **options: Unpack[MCPToolsOptions],
    ) -> list[MCPTool]:
        """Make the tools (as `tools()` does) and register each in `registry`;
        with `resources_as_tools`, the two of `resource_tools()` too (under the
        same prefix; not returned, and not changed with the server's tool list).

        A name already in the registry raises `DuplicateToolError` before any
        tool is registered; use `prefix` to keep two servers' tools apart.
        From then on the registry follows the server's tool list: tools it
        adds are registered alike (a name already taken is skipped, with a
        warning), tools it removes are unregistered, changed ones replaced.
        """
        refuse_unknown(options, _TOOLS_KEYWORDS, "MCPConnection.register")
        if not isinstance(resources_as_tools, bool):
            raise TypeError(
                "MCPConnection.register: resources_as_tools must be True or False, "
                f"got {resources_as_tools!r}"
            )
        made_with = self._made_with(options)
        only = options.get("only")
        only = list(only) if only is not None else None
        extra = self._resource_tools(made_with) if resources_as_tools else []
        with self._lock:
            made = self._tools(made_with, only)
            names = [t.name for t in [*made, *extra]]
            taken = sorted({n for n in names if n in registry or names.count(n) > 1})
            if taken:
                raise DuplicateToolError(f"tools named {taken} are already registered")
            for tool in [*made, *extra]:
                registry.register(tool)
            # The listed tools left out (unusable schema): each comes back once the
            # server lists it fixed.
            wanted = {s.name for s in self._specs if only is None or s.name in only}
            skipped = wanted - {t.remote_name for t in made}
            self._registrations.append(Registration(registry, made_with, only, made, skipped))
        return made

    def refresh(self, timeout: float = 10.0) -> list[types.Tool]:
        """List the server's tools again, and bring the registered tools in step.

        The server's announced changes do this by themselves; `refresh()` is
        for servers that announce none. Raises `MCPConnectError` when the
        server does not answer in time or the connection is closed.
        """
        try:
            specs = cast(list[types.Tool], self._actor.ask(ListTools(timeout), timeout=timeout + 5))
        except pykka.ActorDeadError:
            raise MCPConnectError(f"the connection to MCP server '{self.name}' is closed") from None
        except pykka.Timeout:
            raise MCPConnectError(f"MCP server '{self.name}' did not list its tools") from None
        return list(specs)

    async def arefresh(self, timeout: float = 10.0) -> list[types.Tool]:
        """Async twin of `refresh`."""
        return await asyncio.to_thread(self.refresh, timeout)

    @property
    def roots(self) -> list[types.Root]:
        """The roots offered to the server (`connect(roots=...)`, `set_roots`)."""
        return list(self._roots.current) if self._roots is not None else []

    def set_roots(self, roots: RootsOption, timeout: float = 10.0) -> None:
        """Offer these roots from now on (paths or `file://` URIs, each alone
        or with a name), and tell a live 2025-11-25 session they changed.

        Raises `ValueError` on a connection made without `roots=` (the
        capability is fixed at the handshake), `MCPConnectError` when the
        session does not take the notice in time or the connection is closed.
        """
        if self._roots is None:
            raise ValueError(
                f"MCP connection '{self.name}' offers no roots: connect with roots=[...] "
                "(an empty list will do) to set them later"
            )
        given = root_list(roots, "MCPConnection.set_roots")
        timeout = positive_number(timeout, "timeout", "MCPConnection.set_roots")
        if self.closed:
            raise MCPConnectError(f"the connection to MCP server '{self.name}' is closed")
        self._roots.current = given
        try:
            self._actor.ask(RootsChanged(timeout), timeout=timeout + 5)
        except pykka.ActorDeadError:
            raise MCPConnectError(f"the connection to MCP server '{self.name}' is closed") from None
        except pykka.Timeout:
            raise MCPConnectError(f"MCP server '{self.name}' did not hear of its roots") from None

    def _on_session(self, use: Callable[[Client], Awaitable[T]], timeout: float, what: str) -> T:
        timeout = positive_number(timeout, "timeout", "MCPConnection")
        return cast(T, self._port.wait(use, timeout, what))

    async def aset_roots(self, roots: RootsOption, timeout: float = 10.0) -> None:
        """Async twin of `set_roots`."""
        await asyncio.to_thread(self.set_roots, roots, timeout)

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
        self._watch.close()
        with self._lock:
            self._registrations.clear()

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

    # -- making tools, and following the server's list ---------------------------------

    def _made_with(self, options: MCPToolsOptions) -> MadeWith:
        # Checked here, each error naming its option: a bad option must not
        # surface later as every tool's "schema not usable" (and no tools).
        owner = "MCPConnection.tools/register"
        prefix = options.get("prefix", "")
        timeout = options.get("timeout")
        retry = options.get("retry")
        max_concurrency = options.get("max_concurrency")
        read_only_hints = options.get("read_only_hints", True)
        idempotent_hints = options.get("idempotent_hints")
        prefix = check_name_prefix(prefix, owner)
        timeout = timeout_seconds(timeout, "timeout", owner, "the executor's timeout")
        call_timeout = timeout_seconds(options.get("call_timeout"), "call_timeout", owner)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"{owner}: retry must be a RetryPolicy or None, got {retry!r}")
        if max_concurrency is not None:
            max_concurrency = positive_int(max_concurrency, "max_concurrency", owner)
        if not isinstance(read_only_hints, bool):
            raise TypeError(
                f"{owner}: read_only_hints must be True or False, got {read_only_hints!r}"
            )
        if idempotent_hints is not None and not isinstance(idempotent_hints, bool):
            raise TypeError(
                f"{owner}: idempotent_hints must be True, False or None, got {idempotent_hints!r}"
            )
        trust = self._idempotent_hints if idempotent_hints is None else idempotent_hints
        return MadeWith(
            prefix, timeout, retry, max_concurrency, read_only_hints, trust, call_timeout
        )

    def _tools(self, made_with: MadeWith, only: Iterable[str] | None) -> list[MCPTool]:
        """The tools for the specs as last listed (the caller holds the lock)."""
        wanted = set(only) if only is not None else None
        if wanted is not None:
            missing = wanted - {s.name for s in self._specs}
            if missing:
                raise KeyError(f"MCP server '{self.name}' has no tool {sorted(missing)}")
        made = []
        for spec in self._specs:
            if wanted is None or spec.name in wanted:
                tool = self._make(spec, made_with)
                if tool is not None:
                    made.append(tool)
        return made

    def _make(self, spec: types.Tool, made_with: MadeWith) -> MCPTool | None:
        try:
            tool = MCPTool(
                spec,
                self._port,
                name=made_with.prefix + spec.name,
                read_only=None if made_with.read_only_hints else False,
                idempotent=None if made_with.idempotent_hints else False,
                timeout=made_with.timeout,
                call_timeout=made_with.call_timeout,
                retry=made_with.retry,
                max_concurrency=made_with.max_concurrency,
                server_max_concurrency=self.server_max_concurrency,
                unwrap=self._unwrap_results,
            )
        except Exception as e:
            what = "name" if isinstance(e, ToolNameError) else "schema"
            log.warning(
                "MCP server '%s': tool %s left out, its %s is not usable: %s",
                self.name,
                shown_name(spec.name),
                what,
                e,
            )
            return None
        self._made.add(tool)
        return tool

    def _apply(self, specs: list[types.Tool]) -> None:
        """A new listing (on the session's loop): mark the tools the server no
        longer lists, and bring each registration in step."""
        with self._lock:
            specs = _unique(specs, self.name)
            before = {s.name: s for s in self._specs}
            after = {s.name: s for s in specs}
            self._specs = specs
            if before == after:
                return
            for tool in list(self._made):
                if tool.remote_name not in after:
                    tool.removed = True
            self._registrations = [
                r for r in self._registrations if r.apply(self.name, before, after, self._make)
            ]


def _unique(specs: Iterable[types.Tool], server: str) -> list[types.Tool]:
    """The listing with each name once (its first listing): a name listed twice
    would otherwise fail half-way through registering (a duplicate name)."""
    seen: set[str] = set()
    unique = []
    for spec in specs:
        if spec.name in seen:
            log.warning(
                "MCP server '%s' lists tool '%s' more than once: only its first listing is used",
                server,
                spec.name,
            )
            continue
        seen.add(spec.name)
        unique.append(spec)
    return unique
