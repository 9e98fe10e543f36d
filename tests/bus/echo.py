"""The echo tool the bus tests drive calls through, and its calls."""

from __future__ import annotations

from toolbus import ToolCall, ToolRegistry


def echo_registry() -> ToolRegistry:
    """A registry of one read-only tool, `echo`, returning its text."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo(text: str) -> str:
        return text

    return reg


def echo_call(i: int) -> ToolCall:
    """Call `c{i}` of `echo`, its text `str(i)`."""
    return ToolCall(id=f"c{i}", name="echo", arguments={"text": str(i)})
