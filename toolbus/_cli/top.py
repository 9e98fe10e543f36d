"""`toolbus top URL`: the live dashboard of an executor served in another process by
`toolbus.observe.serve_status`; the work is in `toolbus/observe/_top.py`."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["top"]


def top(
    url: Annotated[
        str, typer.Argument(help="The status server's address (serve_status(...).url).")
    ],
    token_env: Annotated[
        str | None,
        typer.Option(
            "--token-env",
            metavar="VAR",
            help="Send the token held by this environment variable (never on the command line).",
        ),
    ] = None,
) -> None:
    """Watch an executor in another process live: the dashboard of toolbus.observe.live,
    fed by its status server (toolbus.observe.serve_status). Ctrl-C quits. Exit codes: 0
    when quit; 1 the server cannot be reached; 2 a bad address, a missing variable, or a
    server that refuses the token."""
    from ..observe._top import main  # rich's live display loads only when it runs

    code = main(url, token_env=token_env)
    if code:
        raise typer.Exit(code)
