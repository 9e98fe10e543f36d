"""The benchmark suite in smoke mode: every scenario runs and reports, so it never rots.

No timing assertions: the numbers of a smoke run mean nothing, only that each
scenario, the goals table and every output (JSON, plots, Markdown) are produced.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._report import MD_END, MD_START
from benchmarks._suite import SCENARIOS, goals

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(300)
def test_smoke_run_reports_every_scenario_and_the_goals(tmp_path: Path) -> None:
    out_json, plots, md = tmp_path / "results.json", tmp_path / "plots", tmp_path / "results.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--json",
            str(out_json),
            "--plots",
            str(plots),
            "--markdown",
            str(md),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    log = proc.stdout + "\n" + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "crashed" not in proc.stdout, log[-5000:]

    assert len(SCENARIOS) == 8
    for _, header, _ in SCENARIOS:
        assert f"=== {header} ===" in proc.stdout
    assert "-- Goals (smoke mode" in proc.stdout
    for goal in goals():
        assert goal.text in proc.stdout

    data = json.loads(out_json.read_text())
    assert set(data["scenarios"]) == {key for key, _, _ in SCENARIOS}
    assert [g["key"] for g in data["goals"]] == [g.key for g in goals()]
    assert data["meta"]["mode"] == "smoke"

    written = sorted(p.name for p in plots.glob("*.png"))
    assert written == ["bus.png", "latency.png", "longrun.png", "scaling.png"]
    text = md.read_text()
    assert MD_START in text
    assert MD_END in text
    assert "| goal | measured | target | result |" in text
