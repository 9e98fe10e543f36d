"""The `toolbus` command line.

    toolbus demo                                    one scripted agent turn, live
    toolbus tools list module:registry [--format]   a registry's tools (table, openai, ...)
    toolbus call module:registry TOOL --args JSON   one call through an Executor
    toolbus bench [--smoke]                         the benchmark suite (from a clone)
    toolbus top URL [--token-env VAR]               a served executor's live dashboard
    toolbus mcp serve module:registry               a registry as an MCP server (stdio)

Exit codes: 0 ok; 1 the call ended anything but ok; 2 bad input (usage, a
registry that cannot be imported, bad JSON, an unknown tool), in one line on
stderr. The commands other than `demo` and `mcp serve` live in `toolbus/_cli/`,
one module each.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

from . import __version__
from ._cli import bench as _bench
from ._cli import call as _call
from ._cli import tools as _tools
from ._cli import top as _top
from ._cli._common import EXIT_USAGE, OneLineErrors

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


mcp_app = typer.Typer(
    name="mcp",
    help="MCP: serve a tool registry to MCP clients.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(mcp_app)


@mcp_app.command("serve")
def mcp_serve(
    registry: Annotated[
        str,
        typer.Argument(
            help="The registry to serve, as module:attribute (a ToolRegistry, "
            "or a function returning one)."
        ),
    ],
    timeout: Annotated[
        float,
        typer.Option(min=0, help="Seconds per tool attempt, unless a tool sets its own (0: none)."),
    ] = 30.0,
    max_parallel: Annotated[int, typer.Option(min=1, help="At most this many calls at once.")] = 8,
    name: Annotated[str, typer.Option(help="The server name MCP clients see.")] = "toolbus",
) -> None:
    """Serve a ToolRegistry over stdio; every call runs through a toolbus Executor."""
    try:
        from .mcp import load_registry, serve_stdio  # needs the `mcp` extra
    except ImportError as e:
        typer.echo(f"toolbus mcp: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    try:
        tools = load_registry(registry)
    except ValueError as e:
        typer.echo(f"toolbus mcp serve: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    serve_stdio(tools, name=name, timeout=timeout or None, max_parallel=max_parallel)


def main() -> None:
    """Console entry point: run the typer app."""
    app()
