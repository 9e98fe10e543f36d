#!/usr/bin/env python3
"""The project's entry points, each setting itself up: `demo`, `test` and `bench`.

    python3 scripts/run.py demo    # the main job: one scripted agent turn, live
    python3 scripts/run.py test    # ruff, mypy --strict, pytest
    python3 scripts/run.py bench [--smoke] [--only ...]   # the benchmark suite

A virtual environment is made in .venv on first use and the project installed
into it, editable, with what the command needs: `demo` the base install only
(quick), `test` the dev set (every extra, pytest, mypy, ruff, and the
example plugin package the tests find by its entry points), `bench` the
`bench` extra (the peers it measures). It is installed again whenever
pyproject.toml (or the plugin's) changes. pip's output is shown only when it
fails. Needs nothing but python3.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".toolbus-install"
LINTED = ("toolbus", "tests", "examples", "scripts", "benchmarks")

# A plugin package the tests load through its entry points (tests/tools/test_plugins.py):
# installed, editable, with the dev set; entry points exist only once installed.
TEST_PLUGIN = ROOT / "tests" / "plugins" / "toolbus_example_plugin"

# The extras each command needs; `dev` includes every other one.
NEEDS: dict[str, frozenset[str]] = {
    "demo": frozenset(),
    "test": frozenset({"dev"}),
    "bench": frozenset({"bench"}),
}


def _sh(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    code = subprocess.call([str(a) for a in args], cwd=ROOT)
    if code:
        sys.exit(code)


def _stamp() -> tuple[str | None, set[str]]:
    """The install's hash (`_install_hash`) and the extras of the last install
    (none: no install)."""
    try:
        text = STAMP.read_text().strip()
    except OSError:
        return None, set()
    try:
        data = json.loads(text)
    except ValueError:
        return text, {"dev"}  # an earlier version of this script: the hash alone, dev installed
    if not isinstance(data, dict):
        return None, set()
    return str(data.get("pyproject")), {str(e) for e in data.get("extras", ())}


def _install_hash() -> str:
    """What an install is made from: pyproject.toml and the test plugin's (its
    entry points are metadata, written only when it is installed)."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update((TEST_PLUGIN / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def _pip_install(extras: set[str]) -> None:
    """`pip install -e .[extras]` (with the dev set, the test plugin too), its
    output shown only if it fails (setuptools' editable-install banner and the
    resolver's chatter are noise on success)."""
    target = f".[{','.join(sorted(extras))}]" if extras else "."
    what = f"toolbus[{','.join(sorted(extras))}]" if extras else "toolbus"
    print(f"installing {what} into {VENV} (editable) ...", flush=True)
    started = time.monotonic()
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    plugin = ["-e", str(TEST_PLUGIN)] if "dev" in extras else []
    proc = subprocess.run(
        [str(PY), "-m", "pip", "install", "--quiet", "-e", target, *plugin],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        sys.exit(f"pip install -e {target} failed (exit {proc.returncode})")
    print(f"installed in {time.monotonic() - started:.0f} s", flush=True)


def ensure_env(command: str) -> None:
    # This script runs on whatever python3 the user has; the project needs 3.11.
    if sys.version_info < (3, 11):  # noqa: UP036
        sys.exit(f"toolbus needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PY.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    want = _install_hash()
    installed_for, extras = _stamp()
    needs = NEEDS[command]
    if installed_for == want and (needs <= extras or "dev" in extras):
        return
    extras |= needs  # what an earlier command installed stays: a dev environment stays one
    _pip_install(extras)
    STAMP.write_text(json.dumps({"pyproject": want, "extras": sorted(extras)}))


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
    ensure_env(sys.argv[1])
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
