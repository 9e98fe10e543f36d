#!/usr/bin/env python3
"""The project's entry points, each setting itself up: `demo`, `test` and `bench`.

    python3 scripts/run.py demo    # the main job: one scripted agent turn, live
    python3 scripts/run.py test    # ruff, mypy --strict, pytest
    python3 scripts/run.py bench [--smoke] [--only ...]   # the benchmark suite

A virtual environment is made in .venv on first use and the project installed
into it (again whenever pyproject.toml changes). Needs nothing but python3.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".toolbus-install"
LINTED = ("toolbus", "tests", "examples", "scripts", "benchmarks")


def _sh(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    code = subprocess.call([str(a) for a in args], cwd=ROOT)
    if code:
        sys.exit(code)


def ensure_env() -> None:
    # This script runs on whatever python3 the user has; the project needs 3.11.
    if sys.version_info < (3, 11):  # noqa: UP036
        sys.exit(f"toolbus needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PY.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    want = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text().strip() != want:
        _sh(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        _sh(PY, "-m", "pip", "install", "--quiet", "-e", ".[dev]")
        STAMP.write_text(want)


def demo(args: list[str]) -> None:
    _sh(BIN / "toolbus", "demo", *args)


def test(args: list[str]) -> None:
    _sh(PY, "-m", "ruff", "check", "toolbus", "tests", "examples", "scripts", "benchmarks")
    _sh(
        PY,
        "-m",
        "ruff",
        "format",
        "--check",
        "toolbus",
        "tests",
        "examples",
        "scripts",
        "benchmarks",
    )
    _sh(PY, "-m", "mypy")
    _sh(PY, "-m", "pytest", *args)


def bench(args: list[str]) -> None:
    """`python -m benchmarks` with these arguments (see docs/performance.md)."""
    _sh(PY, "-m", "benchmarks", *args)


COMMANDS = {"demo": demo, "test": test, "bench": bench}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python3 scripts/run.py {{{'|'.join(COMMANDS)}}} [args...]")
    ensure_env()
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
