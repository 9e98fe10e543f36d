"""Today's engine, recorded: the figures a later engine is compared against.

`python -m benchmarks --save-reference PATH` writes every per-operation figure of
the run (wall, process CPU, context switches; per scenario and case) with the
commit it was measured at. A run reads `benchmarks/reference.json` (or
`--reference PATH`) for goals stated against today's engine, such as "a ten-call
batch costs ≤ 40 % of today's CPU per call".

Such a comparison crosses runs. `relative` makes it a comparison of same-run
ratios (each side over a baseline measured in its own run), so that a faster
machine, or a minute when every hand-off costs more, moves both sides alike.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

from ._report import ROOT, Report

DEFAULT = Path(__file__).with_name("reference.json")
FIGURES = ("median_ns", "cpu_ns_per_op", "csw_per_op")


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.strip() or "?"


def _rounded(x: float) -> float:
    """Four significant digits: more would be noise, and the file stays readable."""
    return float(f"{x:.4g}")


def _cases(node: Any, prefix: str, out: dict[str, dict[str, float]]) -> None:
    """Every figure dict under `node` that has per-operation figures, by its path."""
    if not isinstance(node, dict):
        return
    if "cpu_ns_per_op" in node:
        out[prefix] = {k: _rounded(node[k]) for k in FIGURES if k in node}
        return
    for key, value in node.items():
        _cases(value, f"{prefix}/{key}" if prefix else str(key), out)


def from_report(report: Report) -> dict[str, Any]:
    """The run's per-operation figures and where they come from, ready to save."""
    m = report.meta
    scenarios: dict[str, dict[str, dict[str, float]]] = {}
    for key, figures in report.figures.items():
        cases: dict[str, dict[str, float]] = {}
        _cases(figures, "", cases)
        if cases:
            scenarios[key] = cases
    return {
        "about": "figures of today's engine, recorded by python -m benchmarks --save-reference; "
        "median_ns is wall time per operation, cpu_ns_per_op the whole process's CPU, "
        "csw_per_op its context switches",
        "commit": m["commit"],
        "engine_commit": _git("log", "-1", "--format=%h", "--", "toolbus"),
        "date": m["date"],
        "mode": m["mode"],
        "machine": {k: m[k] for k in ("cpus", "python", "platform")},
        "load": {"start": m["load_start"], "end": m.get("load_end", "?")},
        "command": m["command"],
        "scenarios": scenarios,
    }


def save(report: Report, path: Path) -> None:
    path.write_text(json.dumps(from_report(report), indent=1, sort_keys=False) + "\n")


def load(path: Path) -> dict[str, Any] | None:
    """The reference at `path`, or None if there is none (goals against it are skipped)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return data


def figure(ref: dict[str, Any] | None, scenario: str, case: str, name: str) -> float:
    """One recorded figure, or NaN if the reference does not have it."""
    try:
        value = ref["scenarios"][scenario][case][name] if ref else math.nan
    except KeyError:
        return math.nan
    return float(value) if value is not None else math.nan


def relative(now: float, now_base: float, then: float, then_base: float) -> float:
    """`now` as a fraction of `then`, each first divided by its own run's baseline.

    So a machine that is twice as fast, or a minute when every hand-off costs
    more, moves both numerator and denominator alike.
    """
    if any(math.isnan(x) or x <= 0 for x in (now, now_base, then, then_base)):
        return math.nan
    return (now / now_base) / (then / then_base)
