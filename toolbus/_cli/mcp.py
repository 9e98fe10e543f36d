"""`toolbus mcp serve MODULE:REGISTRY`: a registry as an MCP server, over stdio or HTTP."""

from __future__ import annotations

import math
import os
from typing import Annotated, Any

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
            "than loopback needs --token-env or --jwks."
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
    jwks: Annotated[
        str | None,
        typer.Option(
            "--jwks",
            metavar="FILE_OR_URL",
            help="With --http: be an OAuth resource server: every request must send a JWT "
            "signed with a key of this JWKS (a file or an http(s) URL). Needs --issuer and "
            "--resource-url.",
        ),
    ] = None,
    issuer: Annotated[
        str | None,
        typer.Option(
            "--issuer", metavar="URL", help="With --jwks: the authorization server (tokens' iss)."
        ),
    ] = None,
    resource_url: Annotated[
        str | None,
        typer.Option(
            "--resource-url",
            metavar="URL",
            help="With --jwks: this server's URL as clients reach it (tokens' aud), "
            "e.g. https://tools.example.com/mcp.",
        ),
    ] = None,
    required_scope: Annotated[
        list[str] | None,
        typer.Option(
            "--required-scope",
            metavar="SCOPE",
            help="With --jwks: a scope every request's token must grant (repeatable); "
            "tools' own scopes come on top.",
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
    poll_after: Annotated[
        float | None,
        typer.Option(
            "--poll-after",
            metavar="SECONDS",
            min=0,
            help="With --http: close a call's stream after this many seconds; the client comes "
            "back for the rest (SSE polling, 2025-11-25 clients) [default: never].",
        ),
    ] = None,
    task_after: Annotated[
        float | None,
        typer.Option(
            "--task-after",
            metavar="SECONDS",
            min=0,
            help="Protocol 2026-07-28: how long the call of a tool with task_support='optional' "
            "runs before it is answered with a task [default: 1].",
        ),
    ] = None,
    reconnect_after: Annotated[
        float | None,
        typer.Option(
            "--reconnect-after",
            metavar="SECONDS",
            min=0,
            help="With --http: how long a client that lost a stream is told to wait before "
            "coming back (SSE retry) [default: 1].",
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
                ("--jwks", jwks),
                ("--allow-origin", allow_origin),
                ("--poll-after", poll_after),
                ("--reconnect-after", reconnect_after),
            )
            if value is not None
        ]
        if given:
            usage_error(_COMMAND, f"{given[0]} needs --http")
    oauth_flags = [
        flag
        for flag, value in (
            ("--issuer", issuer),
            ("--resource-url", resource_url),
            ("--required-scope", required_scope),
        )
        if value is not None
    ]
    if jwks is None and oauth_flags:
        usage_error(_COMMAND, f"{oauth_flags[0]} needs --jwks")
    if jwks is not None and token_env is not None:
        usage_error(_COMMAND, "--token-env and --jwks both given: pass one")
    try:
        from ..mcp import load_registry  # needs the `mcp` extra
        from ..mcp._oauth_server import OAuthResource
        from ..mcp._serve_http import DEFAULT_PORT, check_exposure, check_streams, serve_http
        from ..mcp._server import serve_stdio
    except ImportError as e:
        typer.echo(f"toolbus mcp: {e}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    token: str | None = None
    if token_env is not None:
        token = os.environ.get(token_env)
        if not token:
            usage_error(_COMMAND, f"--token-env: the environment variable {token_env} is not set")
    oauth: OAuthResource | None = None
    if jwks is not None:
        if issuer is None or resource_url is None:
            usage_error(_COMMAND, "--jwks needs --issuer and --resource-url")
        try:
            oauth = OAuthResource(
                jwks=jwks,
                issuer=issuer,
                resource_url=resource_url,
                required_scopes=tuple(required_scope or ()),
            )
        except (TypeError, ValueError) as e:
            usage_error(_COMMAND, str(e))
    bind = host if host is not None else "127.0.0.1"
    if http:
        try:
            check_streams(poll_after, 1.0 if reconnect_after is None else reconnect_after,
                          "")  # fmt: skip
        except ValueError as e:
            usage_error(_COMMAND, str(e).replace("poll_after", "--poll-after").replace(
                "reconnect_after", "--reconnect-after"))  # fmt: skip
        try:
            check_exposure(bind, token, oauth)
        except ValueError as e:
            hint = " (pass --token-env VAR or --jwks)" if token is None and oauth is None else ""
            usage_error(_COMMAND, f"{e}{hint}")
    try:
        tools = load_registry(registry)
    except ValueError as e:
        usage_error(_COMMAND, str(e))
    options: dict[str, Any] = {"timeout": timeout or None, "max_parallel": max_parallel}
    if task_after is not None:
        if not math.isfinite(task_after):
            usage_error(_COMMAND, f"--task-after must be finite, got {task_after}")
        options["task_after"] = task_after
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
            oauth=oauth,
            allowed_origins=allow_origin or (),
            poll_after=poll_after,
            reconnect_after=1.0 if reconnect_after is None else reconnect_after,
            name=name,
            on_ready=ready,
            **options,
        )
    except OSError as e:  # the port is taken, the address is not this machine's
        usage_error(_COMMAND, f"cannot listen on {bind}:{listen}: {e.strerror or e}")
