"""The tools the official MCP conformance suite's task scenarios (its next
release: the `io.modelcontextprotocol/tasks` extension, SEP-2663) call, as a
toolbus registry (tests/mcp/test_conformance.py). Each is plain toolbus,
named and shaped as the scenarios' fixtures ask.
"""

from __future__ import annotations

import os

from toolbus import ToolContext, ToolError, ToolRegistry

registry = ToolRegistry()

_NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@registry.tool(read_only=True)
def greet(name: str) -> str:
    """Sync only."""
    return f"Hello, {name}!"


@registry.tool(read_only=True, task_support="optional")
def slow_compute(ctx: ToolContext, seconds: float = 0, label: str = "") -> str:
    """Computes for `seconds`; cancelled, it stops."""
    if ctx.wait_cancelled(seconds):  # the tool under test takes that long, as asked
        return "cancelled"
    return f"computed in {seconds:g}s"


@registry.tool(read_only=True, task_support="required")
def failing_job(ctx: ToolContext) -> str:
    """Fails (a tool execution error) after about a second."""
    ctx.wait_cancelled(1.0)
    raise ToolError("the job failed")


@registry.tool(read_only=True, task_support="required", backend="process")
def protocol_error_job() -> str:
    """Crashes: its worker process dies (the server's failure, not the tool's error)."""
    os._exit(1)


@registry.tool(task_support="required")
def confirm_delete(ctx: ToolContext, filename: str = "file.txt") -> str:
    """Asks once, then deletes (or not)."""
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}
    answer = ctx.elicit(f"Delete {filename}?", schema)
    confirmed = answer.action == "accept" and (answer.data or {}).get("confirm")
    return f"deleted {filename}" if confirmed else f"kept {filename}"


@registry.tool(task_support="required")
def multi_input(ctx: ToolContext) -> str:
    """Asks two questions at once."""
    from concurrent.futures import ThreadPoolExecutor

    schema = {"type": "object", "properties": {"value": {"type": "string"}}}
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(ctx.elicit, "First?", schema)
        second = pool.submit(ctx.elicit, "Second?", schema)
        answers = [first.result(), second.result()]
    return "; ".join(f"{a.action}: {(a.data or {}).get('value')}" for a in answers)


@registry.tool(read_only=True, task_support="required")
def test_tool_with_task(ctx: ToolContext) -> str:
    """Asks for a name, then works as a task."""
    answer = ctx.elicit("Your name?", _NAME)
    return f"Hello, {(answer.data or {}).get('name')}!"
