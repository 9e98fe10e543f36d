"""What every command shares: exit codes, one-line errors, loading a registry."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperGroup

from .._text import encodable, for_terminal, text_of
from ..tools import ToolRegistry, load_registry

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "OneLineErrors",
    "console",
    "load",
    "usage_error",
    "write_json",
]

EXIT_OK = 0
"""Done; for `toolbus call`, the call ended `ok`."""
EXIT_FAILED = 1
"""The call ended anything but `ok` (or a benchmark goal was missed with --strict)."""
EXIT_USAGE = 2
"""Bad input: a wrong option, a registry that cannot be imported, bad JSON, an unknown tool."""

# DEL and C1 controls, which JSON does not escape: in JSON text they stand only inside
# strings, where a \u escape means the same character.
_DEL_C1 = re.compile("[\x7f-\x9f]")

# Pipes and CI logs have no width; rich would assume 80 columns and wrap every line.
PIPE_WIDTH = 120


def console() -> Console:
    """A console on stdout, 120 columns wide when it is not a terminal."""
    out = Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = max(out.width, PIPE_WIDTH)
    return out


def usage_error(command: str, message: str) -> NoReturn:
    """Print `toolbus <command>: <message>` on one line to stderr and exit 2."""
    # The message may quote a registry's tool names (an MCP server's) or an import error.
    one_line = for_terminal(" ".join(message.split()))
    typer.echo(f"toolbus {command}: {one_line}", err=True)
    raise typer.Exit(EXIT_USAGE)


def load(command: str, spec: str) -> ToolRegistry:
    """The registry `spec` (`module:attribute`) names, or a one-line error (exit 2)."""
    try:
        return load_registry(spec)
    except ValueError as e:
        usage_error(command, str(e))


def write_json(data: Any) -> None:
    """`data` as indented JSON on stdout, unwrapped, for pipes and `jq`.

    JSON escapes C0 controls (ESC among them) itself; DEL and C1 controls are
    escaped too (`\\u009b`), so no string in it acts on a terminal; a lone
    surrogate (in a tool's output: UTF-8 cannot hold it) is written as U+FFFD,
    in a key as its escape (`encodable`: keys stay apart)."""
    text = json.dumps(data, indent=2, ensure_ascii=False, default=str)
    if text_of(text) is not text:  # (rare: the walk only then)
        text = json.dumps(encodable(data, str), indent=2, ensure_ascii=False, default=str)
    sys.stdout.write(_DEL_C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n")


class OneLineErrors(TyperGroup):
    """The root command group: usage errors are one line on stderr, exit 2.

    Typer prints them as a panel with the usage above it; a user (or a script
    reading stderr) gets `toolbus call: Missing argument 'TOOL'. (see 'toolbus
    call --help')` instead. Everything else is typer's own behaviour.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(
                args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra
            )
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(EXIT_FAILED)
        except Exception as e:
            # Click's errors (typer vendors click from 0.2x on, so matched by shape).
            code = getattr(e, "exit_code", None)
            if not isinstance(code, int) or not hasattr(e, "format_message"):
                raise
            kinds = {c.__name__ for c in type(e).__mro__}
            if "NoArgsIsHelpError" in kinds:
                sys.exit(code)  # typer has printed the help already
            ctx = getattr(e, "ctx", None)
            where = str(ctx.command_path) if ctx is not None else "toolbus"
            hint = f" (see '{where} --help')" if "UsageError" in kinds else ""
            message = " ".join(str(e.format_message()).split())
            typer.echo(f"{where}: {message}{hint}", err=True)
            sys.exit(code)
        sys.exit(code if isinstance(code, int) else EXIT_OK)
