"""The `toolbus` command line."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console

from . import __version__

__all__ = ["app", "main"]

app = typer.Typer(
    name="toolbus",
    help="Execute an LLM agent's tool calls through actors, a supervisor and a signal bus.",
    no_args_is_help=True,
    add_completion=False,
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


@app.command()
def demo(
    plain: Annotated[
        bool,
        typer.Option(
            "--plain",
            help="One line per event, no live board (the default when output is not a terminal).",
        ),
    ] = False,
) -> None:
    """Play one scripted agent turn and show every lifecycle signal as it happens."""
    from .demo import run_demo  # the demo's tools load only when it runs

    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, _PIPE_WIDTH)
    code = run_demo(console, plain=plain)
    if code:
        raise typer.Exit(code)


def main() -> None:
    """Console entry point: run the typer app."""
    app()
