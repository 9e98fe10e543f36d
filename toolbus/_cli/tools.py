"""`toolbus tools list module:registry`: the tools of a registry, as a table or as
the JSON each provider takes."""

from __future__ import annotations

import enum
import math
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from .._text import for_terminal
from ..backends import Backend
from ..tools import Tool, ToolRegistry
from ._common import console, load, usage_error, write_json

__all__ = ["Format", "app", "describe", "list_tools"]

app = typer.Typer(
    name="tools",
    help="Inspect a tool registry.",
    no_args_is_help=True,
    add_completion=False,
)


class Format(enum.StrEnum):
    table = "table"
    openai = "openai"
    anthropic = "anthropic"
    mcp = "mcp"
    json = "json"


@app.command("list")
def list_tools(
    registry: Annotated[
        str,
        typer.Argument(
            help="The registry, as module:attribute (a ToolRegistry, or a function returning one)."
        ),
    ],
    format: Annotated[
        Format,
        typer.Option(
            "--format",
            "-f",
            help="table: for people; openai (Chat Completions), anthropic (Messages), "
            "mcp (tools/list): what each is sent; json: every toolbus option of each tool.",
        ),
    ] = Format.table,
) -> None:
    """List the tools of a registry: what a model is shown of each, and how toolbus runs it."""
    tools = load("tools list", registry)
    if format is Format.table:
        _print_table(registry, tools)
    elif format is Format.openai or format is Format.anthropic:
        try:  # (a tool name the provider refuses: a dotted one, valid in toolbus and MCP)
            exported = tools.to_openai() if format is Format.openai else tools.to_anthropic()
        except ValueError as e:
            usage_error("tools list", f"--format {format.value}: {e}")
        write_json(exported)
    elif format is Format.mcp:
        try:
            write_json(tools.to_mcp())
        except ImportError as e:
            usage_error("tools list", f"--format mcp: {e}")
    else:
        write_json([describe(t) for t in tools.list()])


def describe(tool: Tool) -> dict[str, Any]:
    """A tool as `--format json` shows it: its name, description, schema and options."""
    retry = tool.retry
    return {
        "name": tool.name,
        "description": tool.description,
        "type": tool.type,
        "read_only": tool.read_only,
        "idempotent": tool.idempotent,
        "destructive": tool.destructive,
        "open_world": tool.open_world,
        "timeout": _seconds(tool.timeout),
        "retry": None
        if retry is None
        else {
            "max_retries": retry.max_retries,
            "backoff_base": retry.backoff_base,
            "backoff_factor": retry.backoff_factor,
            "max_backoff": retry.max_backoff,
            "jitter": retry.jitter,
            "retry_on": [t.__name__ for t in retry.retry_on],
        },
        "max_concurrency": tool.max_concurrency,
        "backend": _backend_name(tool.backend),
        "groups": list(tool.groups),
        "resource_keys": list(tool.resource_keys),
        "memory_limit_mb": tool.memory_limit_mb,
        "cpu_limit_s": tool.cpu_limit_s,
        "injected": list(tool.injected),
        "parameters": tool.schema,
        "output_schema": tool.output_schema,
    }


def _seconds(value: float | None) -> float | str | None:
    return "inf" if value == math.inf else value


def _backend_name(backend: str | Backend | None) -> str | None:
    if backend is None or isinstance(backend, str):
        return backend
    return str(getattr(backend, "name", None) or type(backend).__name__)


def _print_table(spec: str, registry: ToolRegistry) -> None:
    out = console()
    tools = registry.list()
    title = Text(f"{for_terminal(spec)}: {len(tools)} tools")
    table = Table(title=title, title_justify="left")
    table.add_column("tool", style="bold", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("timeout", justify="right", no_wrap=True)
    table.add_column("retries", justify="right", no_wrap=True)
    table.add_column("parameters (* required)", overflow="fold")
    table.add_column("description", overflow="fold")
    # A tool's name, parameters and description are its author's (an MCP
    # server's, for its tools): drawn as text, their control characters written out.
    for t in tools:
        table.add_row(
            Text(for_terminal(t.name)),
            _kind(t),
            "executor's"
            if t.timeout is None
            else "none"
            if t.timeout == math.inf
            else f"{t.timeout:g} s",
            "executor's" if t.retry is None else str(t.retry.max_retries),
            Text(for_terminal(_parameters(t))),
            Text(for_terminal(t.description, lines=True)),
        )
    out.print(table)


def _kind(tool: Tool) -> str:
    kind = "read-only" if tool.read_only else "mutating"
    if tool.idempotent and not tool.read_only:
        kind += ", idempotent"
    return kind if tool.type == "function" else f"{kind}, free text"


def _parameters(tool: Tool) -> str:
    if tool.type == "custom":
        return "(free text)"
    properties = tool.schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "—"
    required = tool.schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    return ", ".join(f"{name}*" if name in needed else name for name in properties)
