"""The registry: the tools an executor can run, by name."""

from __future__ import annotations

import builtins
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Self, Unpack, overload

from .. import _seams
from .._keywords import refuse_unknown
from ._brought import brought_tools
from ._function import AnyFunction, FunctionTool, ToolOptions, tool
from ._names import check_name_prefix, check_prefixed_name
from ._offer import StepContext, check_step, enabled
from ._plugins import ENTRY_POINT_GROUP, PluginError, load_plugins
from ._tool import Tool, ToolType
from ._tool_options import (
    LANGCHAIN_KEYWORDS,
    LangChainOptions,
    OpenAIAgentsOptions,
    PydanticAIOptions,
)

__all__ = ["DuplicateToolError", "ToolRegistry"]


class DuplicateToolError(ValueError):
    """A tool with this name is already registered."""


class ToolRegistry:
    """Thread-safe map of tool names to tools.

    Writers copy the map under a lock and swap it in; readers (the executor, on
    every call) read the current map without locking.
    """

    def __init__(self, tools: list[Tool | AnyFunction] | None = None) -> None:
        self._lock = threading.Lock()
        self._tools: dict[str, Tool] = {}
        # What `load_entry_points` skipped, every time it was called, in order.
        self.plugin_errors: builtins.list[PluginError] = []
        # An executor's configured view of another registry (`registry_view`):
        # id(original) -> (the original, its copy here or None if left out).
        # Tools hold tools (a sequence's steps, a spill's read_artifact): this
        # says which one this registry runs for a tool object held so.
        self._configured: dict[int, tuple[Tool, Tool | None]] = {}
        for t in tools or ():
            self.register(t)

    @classmethod
    def from_entry_points(cls, group: str = ENTRY_POINT_GROUP) -> Self:
        """A new registry of the tools installed packages publish under the
        entry-point group `group` (see `load_entry_points`)."""
        registry = cls()
        registry.plugin_errors.extend(load_plugins(registry, group))
        return registry

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> builtins.list[PluginError]:
        """Register the tools installed packages publish under the entry-point
        group `group` (`toolbus.tools`).

        An entry point's value is a `Tool`, a `ToolRegistry` (all its tools),
        or a callable taking no arguments that returns one of those or an
        iterable of tools. Modules are imported now, never at `import toolbus`.
        A broken plugin (its import fails or exits, its value is none of those,
        calling it or iterating over what it returns raises) is skipped, and
        so is a tool whose name is taken (by this registry's own tools or an
        earlier plugin's): each is a `PluginWarning` and a `PluginError`,
        returned and added to `plugin_errors`.
        """
        problems = load_plugins(self, group)
        self.plugin_errors.extend(problems)
        return problems

    def register(self, tool: Tool | AnyFunction) -> Tool:
        """Add a tool (or a plain function, made a tool); duplicate names are an
        error. Its name was checked when it was made (`Tool`: 1 to 128 ASCII
        letters, digits, '_', '-' or '.'); a `Tool` class is a TypeError."""
        t = tool if isinstance(tool, Tool) else FunctionTool(tool)
        extra = _policy_tools(t)  # the policies' code, run outside the lock
        with self._lock:
            if t.name in self._tools:
                raise DuplicateToolError(f"a tool named {t.name!r} is already registered")
            self._tools = {**self._tools, t.name: t, **_brought(t, extra, self._tools)}
        return t

    def unregister(self, name: str) -> Tool:
        """Remove and return the tool called `name`; `KeyError` if there is none."""
        with self._lock:
            tools = dict(self._tools)
            t = tools.pop(name)
            self._tools = tools
        return t

    def replace(self, old: Tool, new: Tool) -> bool:
        """Put `new` where `old` is registered (same name), in one step: a call
        looked up meanwhile finds one or the other, never neither. False (and
        nothing changed) when `old` is no longer registered under that name."""
        if new.name != old.name:
            raise ValueError(f"cannot replace {old.name!r} by a tool named {new.name!r}")
        with self._lock:
            if self._tools.get(old.name) is not old:
                return False
            self._tools = {**self._tools, new.name: new}
        return True

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def _version_of(self, tool: Tool) -> Tool | None:
        """The tool this registry runs for the tool object `tool`: `tool`
        itself, unless this registry is a configured view of another
        (`Executor.from_config`) that replaced it by a copy with the file's
        settings (that copy) or disabled it (None)."""
        found = self._configured.get(id(tool))
        if found is None or found[0] is not tool:
            return tool
        return found[1]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> builtins.list[str]:
        return list(self._tools)

    def list(self) -> builtins.list[Tool]:
        return list(self._tools.values())

    def add_langchain(self, tool: Any, **options: Unpack[LangChainOptions]) -> Tool:
        """Register a LangChain `BaseTool` (needs langchain-core: the `langgraph` extra).

        The model sees the schema LangChain exports for it; its `args_schema`
        validates the arguments; it runs sync or async as it supports. It is
        mutating unless `read_only=True`. `InjectedToolArg` parameters become
        toolbus `Injected` ones, `InjectedToolCallId` is the call's id, and
        `InjectedState` comes from `ToolbusNode`'s input. Tools that need
        `InjectedStore`, a `ToolRuntime`, return a `Command` or use
        `response_format="content_and_artifact"` are refused (`ValueError`).
        See `toolbus.integrations.langchain`.
        """
        refuse_unknown(options, LANGCHAIN_KEYWORDS, "ToolRegistry.add_langchain")
        return self.register(_seams.langchain_tool.call(tool, **options))

    def list_by_type(self, type: ToolType) -> builtins.list[Tool]:
        return [t for t in self._tools.values() if t.type == type]

    def merge(
        self, other: ToolRegistry | Iterable[Tool], *, prefix: str | None = None
    ) -> builtins.list[Tool]:
        """Add every tool of `other` (a registry, or any iterable of tools) to this one.

        With `prefix`, each is added under `prefix + name` (a copy of the tool
        so renamed; `other` keeps its own): two sources with the same names
        stay apart. The names made must be tools' names too (`Tool`): a prefix
        of ASCII letters, digits, '_', '-' or '.', short enough (ValueError).
        All or nothing: if any resulting name is taken already,
        `DuplicateToolError` names every clash and nothing is added. Returns
        the tools added, in `other`'s order. `other` is read once: tools it
        gets later are not added.
        """
        if prefix is not None:
            check_name_prefix(prefix, "merge")
        given = other.list() if isinstance(other, ToolRegistry) else builtins.list(other)
        for t in given:
            if not isinstance(t, Tool):
                raise TypeError(f"merge: expected toolbus tools, got {type(t).__name__}")
        if prefix:
            tools = [_renamed(t, check_prefixed_name(prefix, t.name, "merge")) for t in given]
        else:
            tools = given
        names = [t.name for t in tools]
        repeated = sorted(n for n, count in Counter(names).items() if count > 1)
        if repeated:
            raise DuplicateToolError(f"merge: {_quoted(repeated)} given more than once")
        with self._lock:
            taken = [n for n in names if n in self._tools]
            if taken:
                raise DuplicateToolError(
                    f"merge: {_quoted(taken)} already registered; nothing was added"
                    + ("" if prefix else " (pass prefix= to keep the sources apart)")
                )
            self._tools = {**self._tools, **{t.name: t for t in tools}}
        return tools

    def enabled(self, step: StepContext | None = None) -> builtins.list[Tool]:
        """The tools enabled at `step` (`Tool.is_enabled`; None: the current
        step, see `toolbus.tools.StepContext`), in order: what the exports offer."""
        check_step(step)
        return [t for t in self._tools.values() if enabled(t, step)]

    def to_openai(self, step: StepContext | None = None) -> builtins.list[dict[str, Any]]:
        """Every tool enabled at `step` in OpenAI's function-tool format
        (`Tool.to_openai`). For strict schemas or the Responses API:
        `toolbus.providers.openai`."""
        return [t.to_openai() for t in self.enabled(step)]

    def to_anthropic(self, step: StepContext | None = None) -> builtins.list[dict[str, Any]]:
        """Every tool enabled at `step` in Anthropic Messages' `tools` format,
        `{name, description, input_schema}` (`toolbus.providers.anthropic.tool_definitions`)."""
        return _seams.anthropic_definitions.call(self.enabled(step))

    def to_mcp(self, step: StepContext | None = None) -> builtins.list[dict[str, Any]]:
        """Every tool enabled at `step` as an MCP server lists it (`tools/list`):
        `{name, description, inputSchema, outputSchema, annotations:
        {readOnlyHint, destructiveHint, idempotentHint, openWorldHint}}`, JSON
        as on the wire (`outputSchema` only for a tool whose output type is
        known). Made by `toolbus.mcp.mcp_tool`, which gives the SDK's `Tool`
        objects; needs the `mcp` extra (`ImportError` saying so otherwise).
        """
        return [_seams.mcp_definition.call(t) for t in self.enabled(step)]

    def add_pydantic_ai(
        self, tool_or_function: Any, /, **options: Unpack[PydanticAIOptions]
    ) -> Tool:
        """Register a pydantic-ai tool (a `pydantic_ai.Tool` or a plain function,
        described as pydantic-ai describes it); its JSON schema is kept.

        Needs the `pydantic-ai` extra. Options (`name`, `read_only`, `timeout`,
        ...) and what is refused: `toolbus.integrations.pydantic_ai.from_pydantic_ai`.
        """
        return self.register(_seams.pydantic_ai_tool.call(tool_or_function, **options))

    def add_openai_agents(
        self, function_tool: Any, /, **options: Unpack[OpenAIAgentsOptions]
    ) -> Tool:
        """Register an OpenAI Agents SDK `FunctionTool`; its JSON schema is kept.

        Needs the `openai-agents` extra. Options (`name`, `read_only`, `timeout`,
        `context`, ...) and what is refused:
        `toolbus.integrations.openai_agents.from_openai_agents`.
        """
        return self.register(_seams.openai_agents_tool.call(function_tool, **options))

    @overload
    def tool(self, fn: AnyFunction, /) -> FunctionTool: ...

    @overload
    def tool(self, /, **options: Unpack[ToolOptions]) -> Callable[[AnyFunction], FunctionTool]: ...

    def tool(
        self, fn: AnyFunction | None = None, /, **options: Unpack[ToolOptions]
    ) -> FunctionTool | Callable[[AnyFunction], FunctionTool]:
        """Decorator: make a tool from a function (`@tool`'s options) and register it."""

        make_tool = tool(**options)

        def make(f: AnyFunction) -> FunctionTool:
            t = make_tool(f)
            self.register(t)
            return t

        return make(fn) if fn is not None else make


def _policy_tools(t: Tool) -> builtins.list[Tool]:
    """The tools `t`'s policies bring along (a spill's read_artifact), each
    checked a tool (`_brought.py`)."""
    return [x for p in t.policies for x in brought_tools(p, f"tool {t.name!r}")]


def _brought(t: Tool, extra: Iterable[Tool], known: Mapping[str, Tool]) -> dict[str, Tool]:
    """Those of `extra` (the tools `t`'s policies bring) that `known` lacks;
    `DuplicateToolError` if `known`, or `t` itself, has another by such a name."""
    added: dict[str, Tool] = {}
    for x in extra:
        found = added.get(x.name, known.get(x.name, t if x.name == t.name else None))
        if found is x:
            continue
        if found is not None:
            raise DuplicateToolError(
                f"tool {t.name!r}: its policies bring a tool named {x.name!r}, "
                "and one by that name is already registered"
            )
        added[x.name] = x
    return added


def _renamed(tool: Tool, name: str) -> Tool:
    """A copy of `tool` called `name`: every attribute shared, the name its own.

    Not `copy.copy`, which goes through the pickling state (`Tool.__getstate__`
    leaves out the backend).
    """
    clone = object.__new__(type(tool))
    clone.__dict__.update(tool.__dict__)
    clone.name = name
    return clone


def reconfigured(tool: Tool, **attributes: Any) -> Tool:
    """A copy of `tool` with `attributes` set, checked as a new tool is.

    The original is untouched (other executors, other registries may hold it).
    The copy's options are checked again (`Tool._check_options`, the backend
    pairing), so a value no tool could be made with fails here, as TypeError
    or ValueError naming the tool and the option.
    """
    clone = _renamed(tool, tool.name)
    for name, value in attributes.items():
        if not hasattr(tool, name):
            raise AttributeError(f"tool {tool.name!r} has no attribute {name!r}")
        setattr(clone, name, value)
    clone._check_options()
    _seams.check_backend.call(clone)
    return clone


def registry_view(registry: ToolRegistry, replaced: Mapping[str, Tool | None]) -> ToolRegistry:
    """A new registry holding `registry`'s tools, in its order, except those
    named in `replaced`: swapped for the tool given, or left out for None.

    `registry` is read once and never changed. The view remembers which tool
    object it swapped or left out (`_version_of`), so a tool that holds
    another (a sequence's step) runs the view's version of it. Tools the new
    tools' policies bring along are added, as the view has them: a brought
    tool `replaced` swaps is its copy, one it leaves out stays out
    (`DuplicateToolError` if a name they bring is taken by another tool).
    """
    unknown = [n for n in replaced if n not in registry]
    if unknown:
        raise KeyError(f"no tool named {_quoted(unknown)} in the registry")
    view = ToolRegistry()
    # A view of a view: what the earlier one mapped maps on through this one.
    configured = {
        key: (original, _swapped(copy, registry, replaced))
        for key, (original, copy) in registry._configured.items()
    }
    for name, swapped in replaced.items():
        original = registry._tools[name]
        if swapped is not original:
            configured[id(original)] = (original, swapped)
    view._configured = configured
    tools: dict[str, Tool] = {}
    for t in registry.list():
        swapped = replaced.get(t.name, t)
        if swapped is not None:
            tools[t.name] = swapped
    for swapped in replaced.values():
        if swapped is not None:
            brought = [view._version_of(x) for x in _policy_tools(swapped)]
            tools.update(_brought(swapped, [x for x in brought if x is not None], tools))
    view._tools = tools
    return view


def _swapped(
    tool: Tool | None, registry: ToolRegistry, replaced: Mapping[str, Tool | None]
) -> Tool | None:
    """`tool` (None, or what `registry` runs for some tool) as `replaced` leaves it."""
    if tool is None or tool.name not in replaced or registry.get(tool.name) is not tool:
        return tool
    return replaced[tool.name]


def _quoted(names: Sequence[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:10])
    return shown + (f" and {len(names) - 10} more" if len(names) > 10 else "")
