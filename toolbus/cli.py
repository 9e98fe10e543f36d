"""The `toolbus` command line.

    toolbus demo                                    one scripted agent turn, live
    toolbus tools list module:registry [--format]   a registry's tools (table, openai, ...)
    toolbus call module:registry TOOL --args JSON   one call through an Executor
    toolbus bench [--smoke]                         the benchmark suite (from a clone)
    toolbus top URL [--token-env VAR]               a served executor's live dashboard
    toolbus mcp serve module:registry [--http]      a registry as an MCP server (stdio, HTTP)

Exit codes: 0 ok; 1 the call ended anything but ok; 2 bad input (usage, a
registry that cannot be imported, bad JSON, an unknown tool), in one line on
stderr. The commands other than `demo` live in `toolbus/_cli/`, one module each.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

from ._cli import bench as _bench
from ._cli import call as _call
from ._cli import mcp as _mcp
from ._cli import tools as _tools
from ._cli import top as _top
from ._cli._common import OneLineErrors
from ._version import __version__

__all__ = ["app", "main"]

app = typer.Typer(
    name="toolbus",
    help="Execute an LLM agent's tool calls through actors, a supervisor and a signal bus.",
    no_args_is_help=True,
    add_completion=False,
    cls=OneLineErrors,
)

# Pipes and CI logs have no width; rich would assume 80 columns and wrap every line.
_PIPE_WIDTH = 120


def _version(value: bool) -> None:
    if value:
        typer.echo(f"toolbus {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """toolbus: reliable, observable tool execution for LLM agents."""


@app.command(short_help="Play one scripted agent turn, every lifecycle signal live.")
def demo(
    plain: Annotated[
        bool,
        typer.Option(
            "--plain",
            help="One line per event, no live board (the default when output is not a terminal).",
        ),
    ] = False,
) -> None:
    """Play one scripted agent turn and show every lifecycle signal as it happens; then
    a hung tool, abandoned on a thread and killed in a process; then the policies: a
    throttled call, a cache hit, an open circuit breaker and an approval."""
    from .demo import run_demo  # the demo's tools load only when it runs

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, _PIPE_WIDTH)
    code = run_demo(console, plain=plain)
    if code:
        raise typer.Exit(code)


# The commands of toolbus/_cli/, one module each; a new one is a module there and
# a line here.
app.add_typer(_tools.app)
app.command("call", short_help="Run one call through an Executor; print its events and result.")(
    _call.call
)
app.command(
    "bench",
    context_settings=_bench.CONTEXT,
    short_help="Run the benchmark suite (from a clone of the repository).",
)(_bench.bench)
app.command("top", short_help="Watch an executor served by toolbus.observe.serve_status, live.")(
    _top.top
)
app.add_typer(_mcp.app)


def main() -> None:
    """Console entry point: run the typer app."""
    app()
