"""`toolbus mcp serve MODULE:REGISTRY`: a registry as an MCP server, over stdio or HTTP."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ._common import EXIT_USAGE, usage_error

__all__ = ["app", "serve"]

app = typer.Typer(
    name="mcp",
    help="MCP: serve a tool registry to MCP clients.",
    no_args_is_help=True,
    add_completion=False,
)

_COMMAND = "mcp serve"


@app.command("serve")
def serve(
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
    http: Annotated[
        bool,
        typer.Option(
            "--http", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio."
        ),
    ] = False,
    host: Annotated[
        str | None,
        typer.Option(
            help="With --http: the address to bind [default: 127.0.0.1]. Another address "
            "than loopback needs --token-env."
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="With --http: the port [default: 8765; 0: any free port]."
        ),
    ] = None,
    token_env: Annotated[
        str | None,
        typer.Option(
            "--token-env",
            metavar="VAR",
            help="With --http: every request must send 'Authorization: Bearer <token>', the "
            "token held by this environment variable (never on the command line).",
        ),
    ] = None,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-origin",
            metavar="ORIGIN",
            help="With --http: also accept browser requests from this origin (repeatable); "
            "loopback origins always are, others get 403.",
        ),
    ] = None,
) -> None:
    """Serve a ToolRegistry to MCP clients over stdio (or streamable HTTP with --http);
    every call runs through a toolbus Executor."""
    if not http:
        given = [
            flag
            for flag, value in (
                ("--host", host),
                ("--port", port),
                ("--token-env", token_env),
                ("--allow-origin", allow_origin),
            )
            if value is not None
        ]
        if given:
            usage_error(_COMMAND, f"{given[0]} needs --http")
    try:
        from ..mcp import load_registry  # needs the `mcp` extra
        from ..mcp._serve_http import DEFAULT_PORT, check_exposure, serve_http
        from ..mcp._server import serve_stdio
    except ImportError as e:
        typer.echo(f"toolbus mcp: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    token: str | None = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            usage_error(_COMMAND, f"--token-env: the environment variable {token_env} is not set")
    bind = host if host is not None else "127.0.0.1"
    if http:
        try:
            check_exposure(bind, token)
        except ValueError as e:
            hint = " (pass --token-env VAR)" if token is None else ""
            usage_error(_COMMAND, f"{e}{hint}")
    try:
        tools = load_registry(registry)
    except ValueError as e:
        usage_error(_COMMAND, str(e))
    options = {"timeout": timeout or None, "max_parallel": max_parallel}
    if not http:
        serve_stdio(tools, name=name, **options)
        return

    def ready(url: str) -> None:
        # stdout stays quiet (as with stdio); the address goes where people look.
        typer.echo(f"toolbus mcp serve: {registry} at {url}", err=True)

    listen = port if port is not None else DEFAULT_PORT
    try:
        serve_http(
            tools,
            host=bind,
            port=listen,
            token=token,
            allowed_origins=allow_origin or (),
            name=name,
            on_ready=ready,
            **options,
        )
    except OSError as e:  # the port is taken, the address is not this machine's
        usage_error(_COMMAND, f"cannot listen on {bind}:{listen}: {e.strerror or e}")
