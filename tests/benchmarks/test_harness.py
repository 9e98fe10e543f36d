"""The benchmark harness's own measurements: CPU and context switches of the whole
process, the thread-peak sampler, and the recorded reference.

No timing assertions: each test checks an inequality that holds however fast the
machine is (a process spends at least what its threads spent), or pure arithmetic.
"""

from __future__ import annotations

import gc
import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks import _chaos_load as chaos_load
from benchmarks import _reference, chaos
from benchmarks._common import os_threads
from benchmarks._harness import Case, Stat, Usage, interleave, paired_diff, paired_ratio
from benchmarks._report import Report
from benchmarks.latency import TB_10, TPE_10
from benchmarks.many_async import PeakThreads
from tests.conftest import wait_until
from toolbus import ExecutorStats, Status, ToolContext, ToolResult, bus


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


def test_waiting_sampler_leaves_out_the_callers_and_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read against a thread list the test sets: the process's own threads come
    and go as other tests' leftovers end (in random order, one ended between
    the count before and the sample, and the peak read one short)."""
    from benchmarks import waiting

    main = threading.current_thread()
    callers = [threading.Thread(target=lambda: None) for _ in range(3)]
    other = threading.Thread(target=lambda: None)
    alive: list[threading.Thread] = [main]
    monkeypatch.setattr(waiting.threading, "enumerate", lambda: list(alive))
    monkeypatch.setattr(waiting, "os_threads", lambda: len(alive))
    sampler = waiting._Sampler(callers)  # not started: read by hand, a sample at a time
    alive[:] = [main, *callers, sampler.thread, other]
    sampler.read()
    # The callers and the sampler are left out; the one other thread is not.
    assert (sampler.peak, sampler.os_peak, sampler.new_peak) == (2, 2, 1)
    alive[:] = [main, other]  # the callers have ended: the peak stays
    sampler.read()
    assert (sampler.peak, sampler.new_peak, sampler.samples) == (2, 1, 2)


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


# -- scenario 10 (chaos): the plan, the probe and the arithmetic of lateness ------------


def test_chaos_plan_is_seeded_and_fills_each_quota_exactly() -> None:
    kinds: dict[str, str] = {}
    steps = chaos_load.plan(3, 1250, asynchronous=True, kinds=kinds)
    again = chaos_load.plan(3, 1250, asynchronous=True, kinds={})
    specs = [spec for st in steps for spec in st.specs]
    assert specs == [spec for st in again for spec in st.specs]
    assert len(specs) == 1250
    assert len({cid for _, cid, _ in specs}) == 1250
    assert kinds == {cid: kind for kind, cid, _ in specs}
    assert any(st.cancel_after is not None for st in steps)
    sync = chaos_load.plan(4, 1250, asynchronous=False, kinds={})
    assert all(st.cancel_after is None for st in sync)
    assert sync[0].specs != steps[0].specs  # each agent its own seed
    torn = chaos_load.make_call("torn", "torn-0-1", 1)
    assert torn == {"id": "torn-0-1", "name": "write", "arguments": [1]}


def _result(cid: str, status: Status = "timeout", duration: float = 0.05) -> ToolResult:
    return ToolResult(call_id=cid, name="hang", status=status, attempts=1, duration=duration)


def _finished(result: ToolResult, timestamp: float) -> bus.CallFinished:
    return bus.CallFinished(
        result.call_id, result.name, None, 1, result=result, timestamp=timestamp
    )


def test_chaos_probe_counts_every_arrival_and_keeps_the_first() -> None:
    probe = chaos_load.Probe()
    first = _result("a")
    probe.single(first, freed_at=5.0)
    probe.batch([_result("a", duration=9.0), _result("b")])
    probe.on_finished(None, event=_finished(first, 100.0), signal=bus.FINISHED)
    probe.on_finished(None, event=_finished(_result("a", "ok"), 200.0), signal=bus.FINISHED)
    assert probe.returns == {"a": 2, "b": 1}
    assert probe.finishes == {"a": 2}
    assert probe.returned["a"] == probe.finished["a"][1] == chaos_load.fingerprint(first)
    assert probe.finished["a"][0] == 100.0
    assert probe.freed_at == {"a": 5.0}
    assert probe.wait_finished(2, timeout=0)
    assert not probe.wait_finished(3, timeout=0)


def _chaos_run(probe: chaos_load.Probe, kinds: dict[str, str], **stats: int) -> chaos._Run:
    nan3 = (math.nan, math.nan, math.nan)
    counts: dict[str, Any] = {"ok": 0, "error": 0, "timeout": 0, "cancelled": 0, "rejected": 0}
    counts.update(stats)
    return chaos._Run(
        len(kinds), kinds, probe, ExecutorStats.model_construct(**counts), chaos_load.Pauses(),
        Counter(), 1000.0, 0.0, 1.0, Usage(0, 0), True, 0.0, True, 0, nan3, nan3,
    )  # fmt: skip


def test_chaos_lateness_times_singles_by_the_caller_and_the_rest_by_their_event() -> None:
    probe = chaos_load.Probe()
    kinds = {"hang-0-0": "hang", "hang_async-0-1": "hang_async", "ok-0-2": "ok"}
    for cid, deadline in (("hang-0-0", 10.0), ("hang_async-0-1", 20.0)):
        ctx = ToolContext(call_id=cid, tool="hang", attempt=1, deadline=deadline - 1)
        probe.deadline(ctx)
        probe.deadline(ToolContext(call_id=cid, tool="hang", attempt=2, deadline=deadline))
        probe.deadline(ctx)  # an earlier attempt, reported late: the last attempt's stays
    probe.single(_result("hang-0-0"), freed_at=10.004)
    probe.batch([_result("hang_async-0-1")])
    # Event timestamps are epoch seconds: the run's offset (1000) moves them onto monotonic.
    probe.on_finished(None, event=_finished(_result("hang-0-0"), 1010.5), signal=bus.FINISHED)
    probe.on_finished(
        None, event=_finished(_result("hang_async-0-1"), 1020.25), signal=bus.FINISHED
    )
    late, missing = chaos._lateness(_chaos_run(probe, kinds))
    assert missing == 0
    assert {cid: pytest.approx(x) for cid, _, x in late} == {
        "hang-0-0": pytest.approx(0.004),  # the caller's clock, not the event's 0.5
        "hang_async-0-1": pytest.approx(0.25),
    }


def test_chaos_exactly_once_counts_lost_and_duplicated_calls() -> None:
    probe = chaos_load.Probe()
    kinds = {"ok-0-0": "ok", "ok-0-1": "ok", "ok-0-2": "ok", "ok-0-3": "ok"}
    for cid in ("ok-0-0", "ok-0-0", "ok-0-1", "ghost"):  # one twice, one stray
        probe.on_finished(None, event=_finished(_result(cid, "ok"), 1.0), signal=bus.FINISHED)
    probe.batch([_result("ok-0-0", "ok"), _result("ok-0-1", "ok", duration=1.0)])
    probe.cancelled(["ok-0-2"])  # its task was cancelled: no result is owed
    lost, dup, checks = chaos._exactly_once(_chaos_run(probe, kinds, ok=5))
    assert checks["tool:finished, one per call"] == (2, 1)  # 0-2 and 0-3 never finished
    assert checks["result returned to the caller"] == (1, 0)  # 0-3
    assert checks["returned result differs from tool:finished's"] == (1, 0)  # 0-1's duration
    assert checks["results or events for unknown call ids"] == (0, 1)
    assert checks["executor stats: terminal results vs calls"] == (0, 1)
    assert (lost, dup) == (4, 3)


def test_chaos_gc_pauses_are_recorded_and_matched_to_late_callers() -> None:
    frozen = gc.get_freeze_count()
    with chaos_load.watched_gc() as pauses:
        assert gc.get_freeze_count() > frozen
        gc.collect()
    assert pauses not in gc.callbacks
    assert gc.get_freeze_count() == frozen
    assert any(g == 2 for _, _, g in pauses.items)
    pauses.items = [(10.0, 0.1, 2), (20.0, 0.005, 0)]
    assert pauses.overlapping(10.05, 10.2, 0.01)
    assert not pauses.overlapping(9.0, 9.99, 0.01)
    assert not pauses.overlapping(20.0, 20.01, 0.01)  # too short to count
    assert pauses.overlapping(20.0, 20.01, 0.001)


def test_a_table_fits_100_columns_and_smoke_goals_are_not_checked() -> None:
    """`bench --smoke` printed rows over 200 columns and `MISS` for goals it
    cannot judge, which read as failures (issue 22)."""
    from benchmarks._report import Goal, Report, Table

    t = Table("a title " * 20, ["case", "median", "vs ThreadPoolExecutor submit+result (IQR)"])
    t.add("a tool with a rather long name that describes the case " * 2, "1.5", "2.43× (2.1×–2.6×)")
    t.notes.append("a note " * 40)
    text = t.text()
    assert max(len(line) for line in text.splitlines()) <= 100
    for word in ("describes", "ThreadPoolExecutor", "(2.1×–2.6×)"):
        assert word in text  # words are whole where they can be
    empty = Table("a column with nothing in it", ["case", ""])
    empty.add("one", "")
    assert empty.text().splitlines()[-1] == "one"
    goal = Goal("g", "one call vs a pool", "≤ 2×", "single")
    goal.set(2.43, "2.43×", False)
    smoke = Report(smoke=True, goals=[goal]).goals_table().text()
    assert "not checked" in smoke and "MISS" not in smoke
    assert "MISS" in Report(smoke=False, goals=[goal]).goals_table().text()
