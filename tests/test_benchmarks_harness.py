"""The benchmark harness's own measurements: CPU and context switches of the whole
process, the thread-peak sampler, and the recorded reference.

No timing assertions: each test checks an inequality that holds however fast the
machine is (a process spends at least what its threads spent), or pure arithmetic.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import _reference
from benchmarks._common import os_threads
from benchmarks._harness import Case, Stat, Usage, interleave, paired_diff, paired_ratio
from benchmarks._report import Report
from benchmarks.latency import TB_10, TPE_10
from benchmarks.many_async import PeakThreads
from tests.conftest import wait_until


def _run_on_threads(count: int, body: Callable[[], None]) -> None:
    threads = [threading.Thread(target=body) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_cpu_per_op_counts_threads_that_ended_during_the_round() -> None:
    burned: list[int] = []  # CPU ns each helper thread measured for itself

    def burn() -> None:
        t0 = time.thread_time_ns()
        x = 0
        for k in range(200_000):
            x += k
        burned.append(time.thread_time_ns() - t0)

    def run(n: int) -> list[float]:
        _run_on_threads(n, burn)  # every thread has ended when run returns
        return [1.0]

    ops = 3
    stats = interleave(
        [Case("burn on threads", run)],
        rounds=2,
        budget_ms=0,
        fixed_ops={"burn on threads": ops},
        warmed=burned.clear,
    )
    st = stats["burn on threads"]
    assert len(st.cpu_rounds) == 2
    # The caller's thread did almost none of this work: counting only it would fall short.
    assert sum(st.cpu_rounds) * ops >= sum(burned)
    assert st.cpu == pytest.approx(sum(st.cpu_rounds) / 2)


def test_context_switches_per_op_count_other_threads_too() -> None:
    naps = 5

    def napper() -> None:
        for _ in range(naps):
            time.sleep(0.0005)  # the workload: each sleep is a voluntary context switch

    def run(n: int) -> list[float]:
        _run_on_threads(n, napper)
        return [1.0]

    stats = interleave([Case("naps", run)], rounds=2, budget_ms=0, fixed_ops={"naps": 2})
    # The caller blocks once or twice per op (start, join); the helper switched `naps` times.
    assert min(stats["naps"].csw_rounds) >= naps


def test_paired_ratios_and_differences_use_the_chosen_measure() -> None:
    a = Stat("a", per_op=True, ops=1)
    b = Stat("b", per_op=True, ops=1)
    for wall_a, cpu_a, wall_b, cpu_b in ((10, 40, 5, 10), (20, 60, 10, 20), (30, 90, 10, 30)):
        a.add_round([wall_a], Usage(cpu_a, 4))
        b.add_round([wall_b], Usage(cpu_b, 2))
    assert paired_ratio(a, b).value == 2.0  # wall: 2, 2, 3
    assert paired_ratio(a, b, "cpu").value == 3.0  # cpu: 4, 3, 3
    assert paired_ratio(a, b, "csw").value == 2.0
    assert paired_diff(a, b, "cpu") == 40.0  # 30, 40, 60
    assert a.cpu == 60 and a.csw == 4
    assert math.isnan(Stat("never ran", per_op=True).cpu)


def test_peak_threads_does_not_count_its_sampler() -> None:
    before = os_threads()
    with PeakThreads(interval=0.001) as empty:
        pass
    assert empty.peak <= before
    assert not any(t.name == "bench-threads" for t in threading.enumerate())


def test_peak_threads_keeps_the_peak_of_threads_that_ended_inside_the_block() -> None:
    gate = threading.Event()
    extra = [threading.Thread(target=gate.wait, daemon=True) for _ in range(12)]
    with PeakThreads(interval=0.001) as peak:
        for t in extra:
            t.start()
        # The caller's thread and the 12 are alive now; the sampler must see them.
        wait_until(lambda: peak.peak >= 1 + len(extra), what="a sample with the 12 threads")
        gate.set()
        for t in extra:
            t.join()
    assert peak.peak >= 1 + len(extra)


def test_reference_collects_every_case_with_per_op_figures() -> None:
    report = Report(smoke=False, goals=[])
    figures = {"median_ns": 1000.0, "cpu_ns_per_op": 1200.0, "csw_per_op": 7.0, "p99_ns": 9.0}
    report.figure("batch", TB_10, figures)
    report.figure("batch", "baseline", TPE_10)
    report.figure("scaling", "max_parallel=1", {"single": figures, "noop_calls_per_s": 5.0})
    ref = _reference.from_report(report)
    assert ref["scenarios"]["batch"] == {
        TB_10: {"median_ns": 1000.0, "cpu_ns_per_op": 1200.0, "csw_per_op": 7.0}
    }
    assert ref["scenarios"]["scaling"]["max_parallel=1/single"]["cpu_ns_per_op"] == 1200.0
    assert _reference.figure(ref, "batch", TB_10, "cpu_ns_per_op") == 1200.0
    assert math.isnan(_reference.figure(ref, "batch", "no such case", "cpu_ns_per_op"))
    assert math.isnan(_reference.figure(None, "batch", TB_10, "cpu_ns_per_op"))
    report.figure("single", "odd", {"cpu_ns_per_op": 123456.789, "csw_per_op": 5.28399311})
    odd = _reference.from_report(report)["scenarios"]["single"]["odd"]
    assert odd == {"cpu_ns_per_op": 123500.0, "csw_per_op": 5.284}  # 4 significant digits


def test_relative_divides_each_figure_by_its_own_runs_baseline() -> None:
    # Now 40 µs on a machine where the pool costs 20; then 100 where it cost 25.
    assert _reference.relative(40, 20, 100, 25) == pytest.approx(0.5)
    assert math.isnan(_reference.relative(40, 20, math.nan, 25))
    assert math.isnan(_reference.relative(40, 0, 100, 25))


def test_the_recorded_reference_has_what_the_batch_goal_compares() -> None:
    ref = _reference.load(_reference.DEFAULT)
    assert ref is not None, "benchmarks/reference.json is missing"
    assert ref["mode"] == "full"
    assert "dirty" not in ref["commit"]
    assert ref["engine_commit"] not in ("", "?")
    for case in (TB_10, TPE_10):
        assert _reference.figure(ref, "batch", case, "cpu_ns_per_op") > 0


def test_load_returns_none_without_a_file(tmp_path: Path) -> None:
    assert _reference.load(tmp_path / "absent.json") is None
    (tmp_path / "ref.json").write_text(json.dumps({"scenarios": {}}))
    assert _reference.load(tmp_path / "ref.json") == {"scenarios": {}}
