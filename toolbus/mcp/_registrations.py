"""Keeping the tools an `MCPConnection` registered in step with the server's tool list.

Each `register()` is remembered as a `Registration`: the registry, the options
and the tools it made. When the server's list changes (it announced a change,
the connection reconnected, the listing's TTL ran out, or `refresh()`), every
registration is brought up to date:

- a tool the server no longer lists is unregistered and marked `removed`:
  calls already sent finish as they will; calls still waiting in toolbus end
  `rejected`, `TOOL_NOT_FOUND` (the tool's policy sees the mark);
- a tool whose definition changed is replaced by a new `MCPTool` in one step
  (`ToolRegistry.replace`): a call finds the old one or the new one, never none;
- a new tool is registered under the registration's prefix, unless that name
  is taken in the registry (skipped, with a warning) or `only` leaves it out.

A tool the user unregistered or replaced is not the registration's any more,
and is left alone.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import mcp_types as types

from ..retry import RetryPolicy
from ..tools import DuplicateToolError, ToolRegistry
from ._tool import MCPTool

__all__ = ["MadeWith", "Registration"]

log = logging.getLogger("toolbus.mcp")


@dataclass(frozen=True)
class MadeWith:
    """The options of `tools()`/`register()`, kept to make the server's new tools alike."""

    prefix: str
    timeout: float | None
    retry: RetryPolicy | None
    max_concurrency: int | None
    read_only_hints: bool
    idempotent_hints: bool
    call_timeout: float | None = None


# Makes one tool from a spec, or None (and a warning) when its schema is unusable.
MakeTool = Callable[[types.Tool, MadeWith], MCPTool | None]


class Registration:
    """One `register()` call: where its tools went, and how they were made."""

    def __init__(
        self,
        registry: ToolRegistry,
        made_with: MadeWith,
        only: Iterable[str] | None,
        tools: Iterable[MCPTool],
        skipped: Iterable[str] = (),
    ) -> None:
        # Weak: a registry dropped by its owner is not kept alive by the connection.
        self._registry = weakref.ref(registry)
        self.made_with = made_with
        self.only = frozenset(only) if only is not None else None
        self.tools = {t.remote_name: t for t in tools}
        # Listed tools left out for an unusable schema: tried again when the
        # server lists them changed (not only the names new to the listing).
        self.skipped = set(skipped)

    def apply(
        self,
        server: str,
        before: Mapping[str, types.Tool],
        after: Mapping[str, types.Tool],
        make: MakeTool,
    ) -> bool:
        """Bring the registry in step with the server's new list; False once the
        registry is gone (the registration can be forgotten)."""
        registry = self._registry()
        if registry is None:
            return False
        for remote, tool in list(self.tools.items()):
            if registry.get(tool.name) is not tool:
                del self.tools[remote]  # unregistered or replaced by the user: not ours
                continue
            spec = after.get(remote)
            if spec is None:
                self._drop(registry, remote, tool)
                log.info(
                    "MCP server '%s' removed '%s': '%s' unregistered", server, remote, tool.name
                )
            elif spec != tool.spec:
                fresh = make(spec, self.made_with)
                if fresh is None:  # its new schema is unusable (logged): left out, as at first
                    self._drop(registry, remote, tool)
                    self.skipped.add(remote)
                elif registry.replace(tool, fresh):
                    self.tools[remote] = fresh
                    log.info(
                        "MCP server '%s' changed '%s': '%s' updated", server, remote, tool.name
                    )
        self.skipped &= after.keys()
        for remote, spec in after.items():
            if remote in self.tools:
                continue
            if remote in before and (remote not in self.skipped or before[remote] == spec):
                continue  # not new, or left out and listed unchanged (already warned)
            if self.only is not None and remote not in self.only:
                continue
            name = self.made_with.prefix + remote
            if name in registry:
                log.warning(
                    "MCP server '%s' added '%s', but a tool named '%s' is already registered: "
                    "skipped (a prefix keeps servers apart)",
                    server,
                    remote,
                    name,
                )
                continue
            fresh = make(spec, self.made_with)
            if fresh is None:
                self.skipped.add(remote)
                continue
            try:
                registry.register(fresh)
            except DuplicateToolError:
                log.warning(
                    "MCP server '%s' added '%s'; '%s' was taken meanwhile: skipped",
                    server,
                    remote,
                    name,
                )
                continue
            self.tools[remote] = fresh
            self.skipped.discard(remote)
            log.info("MCP server '%s' added '%s': registered as '%s'", server, remote, name)
        return True

    def _drop(self, registry: ToolRegistry, remote: str, tool: MCPTool) -> None:
        del self.tools[remote]
        tool.removed = True
        try:
            registry.unregister(tool.name)
        except KeyError:
            pass  # gone meanwhile
