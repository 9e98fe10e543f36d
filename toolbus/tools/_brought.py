"""The tools a policy brings along (its `tools()`: a spill's `read_artifact`), checked.

`tools()` is the policy's own code, asked where the policy is bound: when a
tool guarded by it is registered (`ToolRegistry.register`, a configured view),
and when an executor is made with it (`Executor(policies=...)`). What it gives
back is checked there, so a mistake (None, a name, a plain function, a `Tool`
class) is a TypeError naming the policy and what it gave, never an
AttributeError out of the registry later, a function made into a tool
unasked, or a registry holding something that is not a tool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..policies._protocol import policy_name
from ._tool import Tool

__all__ = ["brought_tools"]


def brought_tools(policy: Any, owner: str) -> tuple[Tool, ...]:
    """The tools `policy` brings along (none without a `tools` method), each a
    `Tool`; else a TypeError naming `owner` (who binds it) and the policy."""
    tools = getattr(policy, "tools", None)
    if tools is None:
        return ()
    who = f"{owner}: policy {policy_name(policy)!r}"
    if not callable(tools):
        raise TypeError(f"{who}: tools must be a method returning its tools, got {tools!r}")
    given = tools()
    if isinstance(given, str | bytes | Mapping) or not isinstance(given, Iterable):
        raise TypeError(
            f"{who}: tools() must return a sequence of toolbus.Tool objects, "
            f"got {type(given).__name__}"
        )
    found = tuple(given)
    for item in found:
        if not isinstance(item, Tool):
            hint = (
                " (make it one: toolbus.tool(fn) or FunctionTool(fn))"
                if callable(item) and not isinstance(item, type)
                else ""
            )
            raise TypeError(
                f"{who}: tools() must return toolbus.Tool objects, got {_shown(item)}{hint}"
            )
    return found


def _shown(item: Any) -> str:
    """`item` in an error: its type, and its repr when short (and readable)."""
    kind = type(item).__name__
    try:
        text = repr(item)
    except Exception:
        return kind
    return f"{kind} {text}" if len(text) <= 80 else kind
