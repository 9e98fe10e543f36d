"""Scheduling under real concurrency: barriers, parallelism and limits."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

from tests.concurrency_tools import finished as _finished
from tests.concurrency_tools import in_thread as _in_thread
from tests.conftest import MakeExecutor, wait_until
from toolbus import Executor, ToolCall, ToolRegistry, bus


class Gauge:
    """Counts calls inside a tool at once; lets a test hold them until a level is reached."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.active = 0
        self.peak = 0
        self.spans: dict[str, tuple[float, float]] = {}

    def enter(self) -> None:
        with self.cond:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.cond.notify_all()

    def leave(self) -> None:
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    def hold_until(self, level: int, timeout: float = 5.0) -> bool:
        """Block until `level` calls are inside at once (or time out); True if reached."""
        with self.cond:
            return self.cond.wait_for(lambda: self.active >= level or self.peak >= level, timeout)


def test_barrier_order_by_timestamps(make_executor: MakeExecutor) -> None:
    spans: dict[str, tuple[float, float]] = {}
    both_reads = threading.Barrier(2, timeout=5)
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def read(key: str, pair: bool = False) -> str:
        start = time.monotonic()
        if pair:
            both_reads.wait()  # only passes if the two reads run at the same time
        spans[key] = (start, time.monotonic())
        return key

    @reg.tool
    def write(key: str) -> str:
        start = time.monotonic()
        spans[key] = (start, time.monotonic())
        return key

    ex = make_executor(reg, max_parallel=8)
    plan = [
        ("read", "r1", True), ("read", "r2", True), ("write", "w1", False),
        ("read", "r3", False), ("read", "r4", False), ("write", "w2", False),
        ("write", "w3", False), ("read", "r5", False),
    ]  # fmt: skip
    calls = [
        ToolCall(id=key, name=name, arguments={"key": key, "pair": pair} if pair else {"key": key})
        for name, key, pair in plan
    ]
    result = ex.execute_batch(calls)
    assert [r.output for r in result] == [k for _, k, _ in plan]
    assert [r.call_id for r in result] == [k for _, k, _ in plan]

    def start(k: str) -> float:
        return spans[k][0]

    def end(*keys: str) -> float:
        return max(spans[k][1] for k in keys)

    assert start("w1") >= end("r1", "r2")
    assert min(start("r3"), start("r4")) >= end("w1")
    assert start("w2") >= end("r3", "r4")
    assert start("w3") >= end("w2")
    assert start("r5") >= end("w3")
    assert result.summary.read_only == 5 and result.summary.mutating == 3


def test_reads_before_a_write_see_the_state_before_it(make_executor: MakeExecutor) -> None:
    """Seed 004 ran all reads first; here a read placed after a write sees the write."""
    store = {"x": "old"}
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def get() -> str:
        return store["x"]

    @reg.tool
    def put(value: str) -> None:
        store["x"] = value

    ex = make_executor(reg)
    result = ex.execute_batch(
        [
            ToolCall(name="get"),
            ToolCall(name="put", arguments={"value": "new"}),
            ToolCall(name="get"),
        ]
    )
    assert [r.output for r in result] == ["old", None, "new"]


def _limit_run(ex: Executor, gauge: Gauge, calls: Sequence[ToolCall], level: int) -> None:
    done = threading.Event()
    out: list[object] = []

    def run() -> None:
        out.append(ex.execute_batch(calls))
        done.set()

    t = threading.Thread(target=run)
    t.start()
    assert gauge.hold_until(level), f"never reached {level} concurrent calls"
    assert done.wait(10)
    t.join()


def test_max_parallel_reached_and_never_exceeded(make_executor: MakeExecutor) -> None:
    gauge = Gauge()
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def hold(i: int) -> int:
        gauge.enter()
        try:
            gauge.hold_until(4)  # stay inside until the limit is reached
            return i
        finally:
            gauge.leave()

    ex = make_executor(reg, max_parallel=4)
    _limit_run(ex, gauge, [ToolCall(name="hold", arguments={"i": i}) for i in range(24)], 4)
    assert gauge.peak == 4
    stats = ex.stats()
    assert stats.peak_in_flight == 4 and stats.in_flight == 0


def test_tool_max_concurrency_reached_and_never_exceeded(make_executor: MakeExecutor) -> None:
    gauge = Gauge()
    others = Gauge()
    reg = ToolRegistry()

    @reg.tool(read_only=True, max_concurrency=2)
    def narrow(i: int) -> int:
        gauge.enter()
        try:
            gauge.hold_until(2)
            return i
        finally:
            gauge.leave()

    @reg.tool(read_only=True)
    def wide(i: int) -> int:
        others.enter()
        others.leave()
        return i

    ex = make_executor(reg, max_parallel=8)
    calls = [ToolCall(name="narrow" if i % 2 else "wide", arguments={"i": i}) for i in range(30)]
    _limit_run(ex, gauge, calls, 2)
    assert gauge.peak == 2


def test_concurrency_hook_limits_one_batch(make_executor: MakeExecutor) -> None:
    gauge = Gauge()
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def hold(i: int) -> int:
        gauge.enter()
        try:
            gauge.hold_until(3)
            return i
        finally:
            gauge.leave()

    seen: list[int] = []

    def concurrency(calls: Sequence[ToolCall]) -> int:
        seen.append(len(calls))
        return 3

    ex = make_executor(reg, max_parallel=8, concurrency=concurrency)
    _limit_run(ex, gauge, [ToolCall(name="hold", arguments={"i": i}) for i in range(12)], 3)
    assert gauge.peak == 3
    assert seen == [12]


def test_max_parallel_holds_across_concurrent_batches(make_executor: MakeExecutor) -> None:
    gauge = Gauge()
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def hold(i: int) -> int:
        gauge.enter()
        try:
            gauge.hold_until(5)
            return i
        finally:
            gauge.leave()

    ex = make_executor(reg, max_parallel=5)
    threads = [
        threading.Thread(
            target=ex.execute_batch,
            args=([ToolCall(name="hold", arguments={"i": i}) for i in range(10)],),
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert gauge.peak == 5


def test_batch_and_group_signals(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def r() -> int:
        return 1

    @reg.tool
    def w() -> int:
        return 2

    @reg.tool(read_only=True)
    def boom() -> int:
        raise RuntimeError("x")

    ex = make_executor(reg)
    with bus.Recorder(sender=ex) as rec:
        names = ["r", "boom", "w", "r", "r", "nope"]
        result = ex.execute_batch([ToolCall(name=n) for n in names])
        ex.drain_events()
    (start,) = rec.of(bus.BATCH_START)
    assert (start.count, start.read_only, start.mutating) == (6, 4, 1)
    (complete,) = rec.of(bus.BATCH_COMPLETE)
    assert (complete.count, complete.success_count, complete.failure_count) == (6, 4, 2)
    assert start.batch_id == complete.batch_id
    opened = rec.of(bus.PARALLEL_START)
    closed = rec.of(bus.PARALLEL_COMPLETE)
    assert [(g.group, g.count) for g in opened] == [(0, 2), (2, 3)]
    assert [(g.group, g.success_count, g.failure_count) for g in closed] == [(0, 1, 1), (2, 2, 1)]
    order = rec.names()
    assert order[0] == bus.BATCH_START and order[-1] == bus.BATCH_COMPLETE
    assert result.summary.total == 6
    finished = rec.of(bus.FINISHED)
    assert sorted(e.call_id for e in finished) == sorted(r.call_id for r in result)


def test_cancelled_call_parked_in_tool_queue_blocks_the_next_call() -> None:
    """A cancelled call parked in a tool's queue blocked the next call for good
    (concurrency review)."""
    reg = ToolRegistry()
    gate = threading.Event()

    @reg.tool(read_only=True, max_concurrency=1)
    def slow(i: int) -> int:
        gate.wait(30)  # set by the test (or its cleanup)
        return i

    ex = Executor(reg, timeout=None)
    rec = bus.Recorder(bus.FINISHED, sender=ex)

    async def load(expected: tuple[int, int], what: str) -> None:
        await asyncio.to_thread(wait_until, lambda: _load(ex) == expected, 10, what)

    async def main() -> str:
        a = asyncio.create_task(ex.aexecute(ToolCall(id="a", name="slow", arguments={"i": 1})))
        await load((1, 0), "a running")
        b = asyncio.create_task(ex.aexecute(ToolCall(id="b", name="slow", arguments={"i": 2})))
        await load((1, 1), "b parked behind a")
        c = asyncio.create_task(ex.aexecute(ToolCall(id="c", name="slow", arguments={"i": 3})))
        await load((1, 2), "c parked behind b")
        b.cancel()  # b is parked in pool.waiting behind a
        await asyncio.to_thread(
            rec.wait_for, bus.FINISHED, where=lambda e: e.call_id == "b", timeout=10
        )
        gate.set()
        await a
        try:
            return (await asyncio.wait_for(c, 10)).status  # (the defect: for good)
        except TimeoutError:
            return "hang"

    try:
        assert asyncio.run(main()) == "ok"
        # A single call's caller is woken before its worker reports: stats catch up.
        wait_until(lambda: _load(ex) == (0, 0), what="no call in flight or queued")
    finally:
        rec.close()
        gate.set()
        ex.close(timeout=1)


def test_stop_on_error_abort_parked_in_tool_queue_blocks_another_call() -> None:
    """A stop_on_error abort left a run parked in a tool's queue: another call hung
    (concurrency review)."""
    reg = ToolRegistry()
    gate = threading.Event()

    @reg.tool(read_only=True, max_concurrency=1)
    def t(i: int) -> int:
        gate.wait(5)
        if i == 0:
            raise ValueError("fail")
        return i

    ex = Executor(reg, timeout=None)
    try:
        calls = [ToolCall(name="t", arguments={"i": 0}), ToolCall(name="t", arguments={"i": 1})]
        tb, ob = _in_thread(lambda: ex.execute_batch(calls, stop_on_error=True))
        wait_until(lambda: _load(ex) == (1, 1), what="t(0) running, t(1) parked")
        ts, os_ = _in_thread(lambda: ex.execute(ToolCall(name="t", arguments={"i": 2})))
        wait_until(lambda: _load(ex) == (1, 2), what="t(2) parked behind t(1)")
        gate.set()
        assert _finished(tb, ob)
        assert _finished(ts, os_), f"single call hangs; stats {ex.stats().model_dump()}"
    finally:
        gate.set()
        ex.close(timeout=1)


def test_free_tool_slot_is_not_used_while_a_call_waits_for_it() -> None:
    """A free tool slot went unused while a call waited for it behind a batch's limit
    (concurrency review)."""
    reg = ToolRegistry()
    gate_q, gate_a = threading.Event(), threading.Event()

    @reg.tool(read_only=True)
    def q(i: int) -> int:
        gate_q.wait(60)  # past the check below: c must finish while q still holds
        return i

    @reg.tool(read_only=True, max_concurrency=1)
    def p(i: int) -> int:
        if i == 0:
            gate_a.wait(5)
        return i

    ex = Executor(reg, timeout=None, concurrency=lambda calls: 1)
    try:
        _in_thread(lambda: ex.execute(ToolCall(name="p", arguments={"i": 0})))
        wait_until(lambda: _load(ex) == (1, 0), what="p(0) running")
        batch = [ToolCall(name="q", arguments={"i": 1}), ToolCall(name="p", arguments={"i": 2})]
        _in_thread(lambda: ex.execute_batch(batch))  # batch limit 1: q runs, its p waits
        wait_until(lambda: _load(ex) == (2, 1), what="q running, p(2) parked")
        tc, oc = _in_thread(lambda: ex.execute(ToolCall(name="p", arguments={"i": 3})))
        wait_until(lambda: _load(ex) == (2, 2), what="p(3) parked")
        gate_a.set()  # p's only slot is free now; c needs nothing else
        assert _finished(tc, oc), f"c waits for the batch's q; stats {ex.stats().pools}"
    finally:
        gate_q.set()
        gate_a.set()
        ex.close(timeout=1)


def _load(ex: Executor) -> tuple[int, int]:
    st = ex.stats()
    return st.in_flight, st.queued
