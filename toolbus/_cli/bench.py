"""`toolbus bench`: the benchmark suite (`python -m benchmarks`), from a clone.

The suite lives beside the package in the repository (`benchmarks/`), not in
the installed package: it measures toolbus against its peers, which the
`bench` extra brings. From a clone (an editable install, or PYTHONPATH) the
command finds it; elsewhere it says where to get it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from ._common import usage_error

__all__ = ["CONTEXT", "bench", "suite_root"]

# Options the command does not name itself go to the suite as they are.
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def suite_root() -> Path | None:
    """The directory that holds the `benchmarks` package: the clone toolbus was
    imported from, else the current directory; None when neither has it."""
    here = Path(__file__).resolve().parents[2]
    for root in (here, Path.cwd()):
        if (root / "benchmarks" / "__main__.py").is_file():
            return root
    return None


def bench(
    ctx: typer.Context,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="Tiny counts, goals not enforced: a quick check.")
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only", metavar="KEYS", help="Comma-separated scenarios (single, batch, ...)."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 if a goal is missed.")] = False,
) -> None:
    """Run the benchmark suite: toolbus against a direct call, a thread pool, pykka and
    the frameworks' own tool runners. Other options (--json PATH, --plots DIR,
    --markdown PATH, --reference, ...) go to the suite: `toolbus bench -- --help`
    lists them."""
    root = suite_root()
    if root is None:
        usage_error(
            "bench",
            "the benchmark suite is not installed with toolbus: run it from a clone of the "
            "repository (toolbus bench, or python3 scripts/run.py bench)",
        )
    argv = [*(["--smoke"] if smoke else []), *(["--strict"] if strict else [])]
    for keys in only or ():
        argv += ["--only", keys]
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *([path] if path else [])])}
    code = subprocess.call([sys.executable, "-m", "benchmarks", *argv, *ctx.args], env=env)
    raise typer.Exit(code)
