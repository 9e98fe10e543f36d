"""The call path's budget, counted: a regression is caught on any machine.

`benchmarks/call_budget.py` counts, for one `execute` of a noop tool, the
Python function calls made on every thread, the threads woken and the
voluntary context switches (in a process of its own: the profile hook must be
in place before the executor's threads start). Counts do not depend on how
fast or busy the machine is, so this is a test, not a benchmark: issue 20's
budget is half of what the engine made on 5ac056b (142 calls, 74 on the
caller's thread), one other thread woken and two switches per call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.call_budget import BUDGET, TODAY

ROOT = Path(__file__).resolve().parents[2]

# Switches are the quietest of several rounds; a stray wake-up in that round
# (a garbage collection, a timer) may add a few per hundred calls.
_SWITCH_SLACK = 0.1


@pytest.fixture(scope="module")
def figures() -> dict[str, dict[str, float]]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.call_budget", "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, dict[str, float]] = json.loads(proc.stdout)
    return out


@pytest.mark.timeout(300)
def test_one_execute_makes_at_most_half_the_python_calls_of_before(
    figures: dict[str, dict[str, float]],
) -> None:
    one = figures["execute"]
    assert BUDGET["all_calls"] * 2 <= TODAY["all_calls"]  # the budget is what it says
    assert one["all_calls"] <= BUDGET["all_calls"], one
    assert one["caller_calls"] <= BUDGET["caller_calls"], one


@pytest.mark.timeout(300)
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="counts switches from /proc")
def test_one_execute_wakes_one_thread_and_switches_twice(
    figures: dict[str, dict[str, float]],
) -> None:
    one = figures["execute"]
    assert one["woken"] <= BUDGET["woken"] + _SWITCH_SLACK, one
    assert one["switches"] <= BUDGET["switches"] + _SWITCH_SLACK, one


@pytest.mark.timeout(300)
def test_a_batch_costs_no_more_per_call_than_one_execute(
    figures: dict[str, dict[str, float]],
) -> None:
    """Ten quick calls in a batch share workers: neither Python nor wake-ups grow per call."""
    one, ten = figures["execute"], figures["execute_batch_10"]
    assert ten["all_calls"] <= one["all_calls"], (one, ten)
    assert ten["woken"] <= one["woken"] + _SWITCH_SLACK, (one, ten)
