"""The benchmark suite in smoke mode: every scenario runs and reports, so it never rots.

No timing assertions: the numbers of a smoke run mean nothing, only that each
scenario, the goals table and every output (JSON, plots, Markdown) are produced.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._report import MD_END, MD_START
from benchmarks._suite import SCENARIOS, goals
from benchmarks.adapters import OAI, PAI
from benchmarks.latency import OA_ASYNC, OA_SYNC, PA_NET, TB_10, TB_ONE, TPE, TPE_10
from benchmarks.policies_cost import ELSEWHERE, GUARDED, TWIN, UNUSED
from benchmarks.process import PPE as PROC_BASE
from benchmarks.process import TB_PROC
from benchmarks.ray_backend import RAW as RAY_RAW
from benchmarks.ray_backend import TB as TB_RAY
from benchmarks.throughput import ASYNC_GATHER, SEM_GATHER

# The slow tier (tests/README.md): the whole benchmark suite in smoke mode.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


# Bounds, not expectations: about 30 s on a quiet machine, ten times that
# with the machine oversubscribed (`scripts/run.py test --stress`).
@pytest.mark.timeout(1800)
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
        timeout=1700,
    )
    log = proc.stdout + "\n" + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "crashed" not in proc.stdout, log[-5000:]

    assert len(SCENARIOS) == 19
    for _, header, _ in SCENARIOS:
        assert f"=== {header} ===" in proc.stdout
    assert "-- Goals (smoke mode" in proc.stdout
    assert "MISS" not in proc.stdout  # a smoke run judges no goal: "not checked"
    # Printed, a long goal wraps within 100 columns; the Markdown keeps each row whole.
    recorded = md.read_text()
    for goal in goals():
        assert goal.text.replace("|", "\\|") in recorded, goal.text

    data = json.loads(out_json.read_text())
    assert set(data["scenarios"]) == {key for key, _, _ in SCENARIOS}
    assert [g["key"] for g in data["goals"]] == [g.key for g in goals()]
    assert data["meta"]["mode"] == "smoke"

    # CPU and context switches beside wall time, for toolbus and the baselines alike.
    scenarios = data["scenarios"]
    for key, case in (("single", TB_ONE), ("single", TPE), ("batch", TB_10), ("batch", TPE_10)):
        fig = scenarios[key][case]
        assert fig["cpu_ns_per_op"] > 0, (key, case)
        assert fig["csw_per_op"] >= 0, (key, case)
        assert not math.isnan(fig["cpu_vs_baseline"]["ratio"]), (key, case)
    for case, fig in scenarios["async10k"].items():
        if isinstance(fig, dict):
            assert fig["cpu_ns_per_op"] > 0, case
            assert min(fig["peak_threads"]) >= 1, case
    measured = {g["key"]: g["value"] for g in data["goals"]}
    for key in (
        "single_cpu_vs_tpe",
        "io_vs_tpe",
        "many_async_batch",
        "many_async_threads",
        "pipelined_sync_vs_tpe",
        "pipelined_async_vs_gather",
        "waiting_threads",
        "lateness_vs_event",
        "chaos_lost",
        "chaos_late_p99",
        "chaos_late_max",
    ):
        assert measured[key] is not None, key
    # Pipelined: each toolbus case against its yardstick, calls/s beside the ratio.
    pipe = {k: v for k, v in scenarios["pipelined"].items() if isinstance(v, dict)}
    assert pipe[ASYNC_GATHER]["yardstick"] == SEM_GATHER
    for case, fig in pipe.items():
        assert fig["calls_per_s"] > 0, case
    assert sum("throughput_vs_yardstick" in fig for fig in pipe.values()) == 2
    # Waiting on a rate limit: every call back, the threads counted from before it all.
    waiting = scenarios["waiting"]["result"]
    assert waiting["ok"] == waiting["calls"] == 60
    assert (waiting["callers"], waiting["max_parallel"]) == (6, 64)
    assert waiting["peak_threads"] >= waiting["threads_before"]
    assert waiting["samples"] > 0
    assert waiting["live_workers"] >= 1
    # Lateness: every waiter sampled, each with its quantiles.
    late = scenarios["lateness"]["result"]
    assert late["samples"] >= 30
    for waiter in ("plain", "sync", "async"):
        assert late[waiter]["p50_ms"] <= late[waiter]["p99_ms"] <= late[waiter]["max_ms"]
    # Chaos: every call accounted for exactly once, hanging calls timed out and timed.
    chaos = scenarios["chaos"]
    assert chaos["all_finished_in_time"]
    assert (chaos["lost"], chaos["duplicated"], chaos["unexpected_status"]) == (0, 0, 0)
    assert sum(row["calls"] for row in chaos["by_kind"].values()) == chaos["calls"]
    assert chaos["by_kind"]["hang"]["timeout"] > 0
    assert chaos["by_kind"]["hang_async"]["timeout"] > 0
    assert chaos["lateness_ms"]["singles"]["count"] > 0
    assert chaos["lateness_ms"]["batch"]["count"] > 0
    # Each hanging call that timed out is timed, or counted as left out: one
    # whose deadline came before its tool began (in admission, on a loaded
    # machine: stress run 12) has no deadline of its tool's to time it by.
    hang_timeouts = sum(chaos["by_kind"][k]["timeout"] for k in ("hang", "hang_async"))
    assert chaos["lateness_ms"]["all"]["count"] + chaos["no_deadline"] == hang_timeouts
    assert chaos["cpu_ns_per_call"] > 0
    assert chaos["events_dropped"] == 0
    assert measured["batch_cpu_vs_reference"] is not None  # benchmarks/reference.json is read
    # The process backend: a warm call against a process pool, with the child processes'
    # CPU beside this process's; hung calls killed (none left), each replaced.
    proc = scenarios["process"]
    for case in (PROC_BASE, TB_PROC):
        assert proc[case]["cpu_ns_per_op"] > 0, case
        assert proc[case]["children_cpu_ns_per_op"] > 0, case
        assert not math.isnan(proc[case]["vs_baseline"]["ratio"]), case
    assert proc["timeouts"] > 0
    assert proc["killed_workers"] >= proc["timeouts"]
    assert proc["killed_left"] == []
    assert proc["problems"] == []
    assert proc["timeout_release"]["count"] == proc["timeouts"]
    assert proc["timeout_replacement_running"]["count"] == proc["timeouts"]
    for key in ("process_warm_vs_ppe", "process_timeout_release", "process_replacement"):
        assert measured[key] is not None, key
    # Policies: a tool without any, policies unused or used elsewhere, wall and CPU.
    pol = scenarios["policies"]
    for case in (UNUSED, ELSEWHERE, TWIN, GUARDED):
        assert pol[case]["cpu_ns_per_op"] > 0, case
        assert pol[case]["rounds"] >= 5, case
        assert not math.isnan(pol[case]["cpu_vs_baseline"]["ratio"]), case
    assert measured["policy_free_vs_unused"] is not None
    # The Ray backend against raw Ray (when Ray is installed; the goals say so otherwise).
    if importlib.util.find_spec("ray"):
        ray_figures = scenarios["ray"]
        for case in (RAY_RAW, TB_RAY):
            assert ray_figures[case]["cpu_ns_per_op"] > 0, case
            assert not math.isnan(ray_figures[case]["vs_baseline"]["ratio"]), case
        for key in ("ray_call_vs_raw", "ray_async_vs_gather"):
            assert measured[key] is not None, key
    if importlib.util.find_spec("agents"):
        assert OA_SYNC in scenarios["batch"]
        assert OA_ASYNC in scenarios["batch"]
        assert measured["agents_sync_vs_batch_cpu"] is not None
    if importlib.util.find_spec("pydantic_ai"):
        assert PA_NET in scenarios["single"]
        assert scenarios["adapters"][PAI]["cpu_ns_per_op"] > 0
        assert measured["pai_toolset_cpu_vs_aexecute"] is not None
    if importlib.util.find_spec("agents"):
        assert scenarios["adapters"][OAI]["cpu_ns_per_op"] > 0
        assert measured["agents_tool_cpu_vs_aexecute"] is not None

    written = sorted(p.name for p in plots.glob("*.png"))
    assert written == ["bus.png", "latency.png", "longrun.png", "scaling.png"]
    text = md.read_text()
    assert MD_START in text
    assert MD_END in text
    assert "| goal | measured | target | result |" in text
