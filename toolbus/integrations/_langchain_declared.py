"""What a LangChain tool declares, read once when it is added.

Its parameters' annotations say which are injected (`InjectedToolArg`), which
take the call's id (`InjectedToolCallId`) or the graph's state
(`InjectedState`), and which LangGraph-only ones toolbus refuses
(`InjectedStore`, `ToolRuntime`, a `Command` return): `classify`. Also read
here: whether toolbus may call a `StructuredTool`'s function itself
(`plain_structured`), whether the tool has async work of its own
(`has_async`), and where it takes LangChain's `RunnableConfig`.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolArg, InjectedToolCallId, StructuredTool
from langchain_core.tools import Tool as SimpleTool
from langchain_core.tools.base import get_all_basemodel_annotations
from pydantic import AliasChoices, AliasPath, BaseModel

from ..tools._injected import argument_names, is_injected_marker, schema_name
from ._langchain_graph import langgraph

__all__ = [
    "SYNTHETIC",
    "Injections",
    "UnsupportedToolError",
    "classify",
    "config_param",
    "has_async",
    "injected_keys",
    "plain_structured",
]

# LangChain's own `_arun`s, which run the sync `_run` in the event loop's thread pool.
SYNC_ARUNS = frozenset((BaseTool._arun, StructuredTool._arun, SimpleTool._arun))

# LangChain's names for the fields of `*args` / `**kwargs`: passed only when given.
SYNTHETIC = frozenset(("args", "kwargs"))


class UnsupportedToolError(ValueError):
    """A LangChain tool toolbus cannot run as it expects to be run (the message says why)."""


@dataclass(frozen=True, slots=True)
class Injections:
    """A tool's parameters that the model does not fill (see `classify`)."""

    call_ids: tuple[str, ...]
    """Those that take the call's id (`InjectedToolCallId`)."""
    states: dict[str, str | None]
    """Those that take LangGraph state (`InjectedState`): each, and the
    state's field it reads (None: the whole state)."""
    framework: frozenset[str]
    """Every name the model might send those two under (aliases too): dropped."""
    optional_state: frozenset[str]
    """State parameters with a default: left out when the state lacks the field."""
    injected: tuple[str, ...]
    """The injected ones (`InjectedToolArg`, or LangChain's own list)."""
    aliases: dict[str, str]
    """Injected fields the args_schema reads under another name: param -> alias."""


def classify(
    name: str, tool: BaseTool, model: type[BaseModel] | None, raw_keys: frozenset[str]
) -> Injections:
    """Read the tool's annotations (its function's and its args_schema's): which
    parameters are injected, and how; refuse (`UnsupportedToolError`) what only
    LangGraph's `ToolNode` can run."""
    lg = langgraph()
    annotations: dict[str, Any] = {}
    fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if fn is not None:
        annotations.update(_hints(fn))
    if model is not None:
        annotations.update(get_all_basemodel_annotations(model))
    returns = _hints(fn, returns=True) if fn is not None else {}
    if fn is None:
        returns = _hints(type(tool)._run, returns=True)
    if lg.command is not None and _mentions(returns.get("return"), lg.command):
        raise UnsupportedToolError(
            f"LangChain tool {name!r} returns a LangGraph Command, which toolbus "
            "cannot apply to the graph; run it with LangGraph's ToolNode"
        )
    call_ids: list[str] = []
    states: dict[str, str | None] = {}
    injected: list[str] = []
    for param, annotation in annotations.items():
        if lg.runtime is not None and _mentions(annotation, lg.runtime, metadata=False):
            raise UnsupportedToolError(
                f"LangChain tool {name!r} takes a ToolRuntime ({param!r}), which only "
                "LangGraph's ToolNode provides; run it there, or take InjectedState instead"
            )
        for marker in _metadata(annotation):
            if _is(marker, InjectedToolCallId):
                call_ids.append(param)
            elif lg.state is not None and _is(marker, lg.state):
                states[param] = (
                    getattr(marker, "field", None) if not isinstance(marker, type) else None
                )
            elif lg.store is not None and _is(marker, lg.store):
                raise UnsupportedToolError(
                    f"LangChain tool {name!r} takes an InjectedStore ({param!r}), which "
                    "only LangGraph's ToolNode provides; run it there"
                )
            elif _is(marker, InjectedToolArg):
                injected.append(param)
            elif is_injected_marker(marker):
                # LangChain would show it to the model (bind_tools, ToolNode):
                # the model would be asked for a value toolbus refuses.
                raise UnsupportedToolError(
                    f"LangChain tool {name!r}: parameter {param!r} is marked with "
                    "toolbus's Injected, which LangChain does not know (it shows the "
                    "parameter to the model); mark it Annotated[..., InjectedToolArg], "
                    "which toolbus treats as injected"
                )
            else:
                continue
            break
    for param in raw_keys:
        if param not in call_ids and param not in states and param not in injected:
            injected.append(param)  # declared on the function only
    fields = model.model_fields if model is not None else {}
    injected_params = tuple(dict.fromkeys(injected))
    # Injected fields the args_schema reads under another name (an alias):
    # the value supplied under the parameter's name is validated under it.
    aliases: dict[str, str] = {}
    by_alias = model is None or model.model_config.get("validate_by_alias", True)
    for param in (*injected_params, *call_ids, *states):
        f = fields.get(param)
        if f is None or not by_alias:
            continue
        alias = f.validation_alias
        first = alias.choices[0] if isinstance(alias, AliasChoices) and alias.choices else alias
        if isinstance(first, AliasPath):
            raise UnsupportedToolError(
                f"LangChain tool {name!r}: injected parameter {param!r} is read from "
                "an AliasPath, where toolbus cannot put its value; give it a plain alias"
            )
        schema = schema_name(param, f)
        if schema != param:
            aliases[param] = schema
    return Injections(
        call_ids=tuple(call_ids),
        states=states,
        # What the model sends under any name of these is dropped (the
        # aliases of an args_schema's fields too).
        framework=frozenset(
            n
            for p in (*call_ids, *states)
            for n in (argument_names(p, fields[p]) if p in fields else (p,))
        ),
        optional_state=frozenset(
            p for p, f in states.items() if f and p in fields and not fields[p].is_required()
        ),
        injected=injected_params,
        aliases=aliases,
    )


def plain_structured(tool: BaseTool) -> bool:
    """A `StructuredTool` whose function toolbus may call itself: nothing of
    LangChain's run path overridden, no callbacks of its own."""
    if not isinstance(tool, StructuredTool) or (tool.func is None and tool.coroutine is None):
        return False
    cls = type(tool)
    if any(fn is not None and "callbacks" in _parameters(fn) for fn in (tool.func, tool.coroutine)):
        return False  # LangChain passes it the run's callbacks: through its invoke
    return (
        cls._run is StructuredTool._run
        and cls._arun is StructuredTool._arun
        and cls.run is BaseTool.run
        and cls.arun is BaseTool.arun
        and cls.invoke is BaseTool.invoke
        and cls.ainvoke is StructuredTool.ainvoke
        and cls._parse_input is BaseTool._parse_input
        and cls._to_args_and_kwargs is BaseTool._to_args_and_kwargs
        and not tool.callbacks
        and not tool.verbose
    )


def has_async(tool: BaseTool) -> bool:
    """Whether the tool has an async implementation: a coroutine, or an `_arun`
    of its own (LangChain's own `_arun`s run the sync `_run` in a thread)."""
    if getattr(tool, "coroutine", None) is not None:
        return True
    return type(tool)._arun not in SYNC_ARUNS


def _parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def injected_keys(tool: BaseTool) -> frozenset[str]:
    """LangChain's own list of the injected parameters of the tool's function."""
    keys: Any = getattr(tool, "_injected_args_keys", frozenset())
    return frozenset(keys) if isinstance(keys, frozenset | set) else frozenset()


def _hints(fn: Any, *, returns: bool = False) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable annotations: LangChain skips them too
        return {}
    if returns:
        return {"return": hints["return"]} if "return" in hints else {}
    hints.pop("return", None)
    return hints


def _metadata(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) is typing.Annotated:
        return tuple(annotation.__metadata__)
    return ()


def _is(marker: Any, kind: type) -> bool:
    return isinstance(marker, kind) or (isinstance(marker, type) and issubclass(marker, kind))


def _mentions(annotation: Any, kind: type, *, metadata: bool = True) -> bool:
    """Whether `annotation` is `kind`, or a union, list or Annotated of it."""
    if annotation is None:
        return False
    if _is(annotation, kind) if isinstance(annotation, type) else False:
        return True
    origin = typing.get_origin(annotation)
    if origin is not None and isinstance(origin, type) and issubclass(origin, kind):
        return True
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        args = args[:1] if not metadata else args
    return any(_mentions(a, kind, metadata=metadata) for a in args if not isinstance(a, str))


def config_param(fn: Callable[..., Any]) -> str | None:
    """The parameter LangChain passes the RunnableConfig in, if the function has one."""
    for name, hint in _hints(fn).items():
        if hint is RunnableConfig:
            return name
    return None
