"""How an executor's calls are named on every surface: the executor's name, tool labels.

A tool name the executor does not know (one the model invented) becomes
`UNKNOWN_TOOL` in metric labels, span names and log lines: the model cannot
grow a metric's cardinality, and its invented text goes nowhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..executor import Executor
    from ..tools import Tool

__all__ = ["UNKNOWN_TOOL", "is_extension", "tool_label"]

UNKNOWN_TOOL = "<unknown>"


def tool_label(executor: Executor, name: Any) -> str:
    """`name` if the executor knows a tool by that name (registered, or run as a
    composite tool's step), else `UNKNOWN_TOOL`."""
    if not isinstance(name, str):
        return UNKNOWN_TOOL
    return name if executor._tool_named(name) is not None else UNKNOWN_TOOL


def is_extension(tool: Tool | None) -> bool:
    """Whether `tool` runs on another server (an MCP tool): OTel's `extension` tool type."""
    return tool is not None and tool.extension
