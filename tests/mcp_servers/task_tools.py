"""Tools served as tasks, for `toolbus mcp serve tests.mcp_servers.task_tools:registry`
and in-process servers alike. A long call waits for a file the test makes
(the client is another process over stdio: an event of the test's would not
reach the tool); `started` files say a call is running."""

from __future__ import annotations

import os
from pathlib import Path

from toolbus import ToolContext, ToolRegistry

registry = ToolRegistry()


def open_gate(gate: Path, text: str) -> None:
    """Open `gate` with `text`, at once: a tool never reads it half written."""
    written = gate.with_name(gate.name + ".writing")
    written.write_text(text)
    os.replace(written, gate)


@registry.tool(read_only=True, task_support="optional")
def build(gate: str, ctx: ToolContext) -> str:
    """Build: runs until the file `gate` exists (or the call is cancelled)."""
    Path(gate + ".started").touch()
    while not Path(gate).exists():
        if ctx.wait_cancelled(0.01):
            Path(gate + ".cancelled").touch()
            return "stopped"
    return f"built {Path(gate).read_text()}"


@registry.tool(read_only=True, task_support="optional")
def lint(target: str) -> str:
    return f"linted {target}"


@registry.tool(read_only=True, task_support="required")
def crawl(site: str) -> str:
    return f"crawled {site}"


@registry.tool(read_only=True, task_support="required")
def fail(why: str) -> str:
    raise ValueError(why)


@registry.tool(read_only=True, task_support="required")
def ask_name(ctx: ToolContext) -> str:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    answer = ctx.elicit("Your name?", schema)
    return f"hello {(answer.data or {})['name']}" if answer.action == "accept" else answer.action


@registry.tool(read_only=True)
def quick() -> str:
    return "quick"


@registry.tool(read_only=True, task_support="optional")
def report(ctx: ToolContext) -> str:
    """Reports its progress, then ends."""
    ctx.progress("halfway", 0.5)
    ctx.log("reporting")
    return "reported"


@registry.tool(read_only=True, task_support="required")
def wait_long(gate: str, ctx: ToolContext) -> str:
    """A task that runs until the file `gate` exists or it is cancelled."""
    return str(build(gate, ctx))


@registry.tool(read_only=True, task_support="required")
def stage(gate: str, ctx: ToolContext) -> str:
    """Says where it is ("compiling"), then runs until the file `gate` exists."""
    ctx.progress("compiling", 0.3)
    return str(build(gate, ctx))


@registry.tool(read_only=True, task_support="required")
def huge() -> int:
    """An integer of more digits than Python prints (a reply carries it exactly)."""
    return 10**5000


@registry.tool(task_support="required")
def deploy(gate: str, ctx: ToolContext) -> str:
    """Deploy (mutating): counts its runs in `<gate>.runs`, then runs until
    the file `gate` exists (or the call is cancelled)."""
    with open(gate + ".runs", "a") as runs:
        runs.write("run\n")
    Path(gate + ".started").touch()
    while not Path(gate).exists():
        if ctx.wait_cancelled(0.01):
            return "stopped"
    return f"deployed {Path(gate).read_text()}"
