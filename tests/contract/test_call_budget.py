"""The call path's budget, counted: a regression is caught on any machine.

`benchmarks/call_budget.py` counts, for one `execute` of a noop tool, the
Python function calls made on every thread, the threads woken and the
voluntary context switches (in a process of its own: the profile hook must be
in place before the executor's threads start). Counts do not depend on how
fast or busy the machine is, so this is a test, not a benchmark: issue 20's
budget is half of what the engine made on 5ac056b (142 calls, 74 on the
caller's thread) and one other thread running Python per call. The context
switches, which a loaded machine adds to, are checked by the benchmark suite.
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

# A thread that runs Python now and then whatever the calls (the timer thread
# when the earliest deadline changes) may show in a few calls of a round.
_STRAY = 0.05


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
def test_one_execute_runs_python_on_one_other_thread(
    figures: dict[str, dict[str, float]],
) -> None:
    """One hop to a worker and back: no second thread (a timer, a supervisor)
    runs Python for a call. Counted from where Python ran, not from context
    switches, which a loaded machine adds to (those are a benchmark figure)."""
    one = figures["execute"]
    assert one["ran"] <= BUDGET["ran"] + _STRAY, one


@pytest.mark.timeout(300)
def test_a_batch_costs_no_more_per_call_than_one_execute(
    figures: dict[str, dict[str, float]],
) -> None:
    """Ten quick calls in a batch share workers: neither Python nor wake-ups grow per call."""
    one, ten = figures["execute"], figures["execute_batch_10"]
    assert ten["all_calls"] <= one["all_calls"], (one, ten)
    assert ten["ran"] <= one["ran"] + _STRAY, (one, ten)
