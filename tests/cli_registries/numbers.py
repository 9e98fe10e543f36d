"""A registry for `toolbus call` and `toolbus tools list` with values past
orjson's reach (integers beyond 64 bits) and a name providers refuse."""

from __future__ import annotations

from typing import Any

from toolbus import ToolContext, ToolRegistry

registry = ToolRegistry()


@registry.tool(read_only=True)
def count(n: int) -> dict[str, Any]:
    """Say what `n` came as."""
    return {"n": n, "type": type(n).__name__}


@registry.tool(read_only=True)
def big_progress(ctx: ToolContext) -> str:
    """Report progress holding an integer past 64 bits."""
    ctx.progress("counting", 0.5, n=10**30)
    return "counted"


@registry.tool(read_only=True, name="ns.dotted")
def dotted() -> str:
    """A name MCP takes, and OpenAI and Anthropic refuse."""
    return "ok"
