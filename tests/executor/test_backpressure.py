"""Backpressure through the public API (issue 21 item 3): `tool:queued`,
`Executor(max_queued=N)`, a group's `max_queued`, shedding by priority,
`on_full="wait"`, and the per-queue counts of `stats()`.

A blocker tool holds a slot until the test opens its gate; calls then queue
behind it. Nothing sleeps to synchronize: the tests wait on events, handles,
or `wait_until` a state the executor reports.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, ToolResult, bus
from toolbus.policies import Admit, BasePolicy, Decision, Delay, quota

OVERLOADED = "Tool 'read' is overloaded: too many calls are waiting; try again later"


class Scene:
    """Tools that record their start; `blocker`, `write_hold` and a `db` or
    `narrow` call tagged "hold" wait for `gate`."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.blocking = threading.Event()
        self.quota = quota(100)
        self.registry = reg = ToolRegistry()

        @reg.tool(read_only=True, timeout=30)
        def blocker() -> str:
            self.blocking.set()
            assert self.gate.wait(10), "the test never opened the gate"
            return "blocker"

        @reg.tool(timeout=30)
        def write_hold() -> str:
            self.blocking.set()
            assert self.gate.wait(10), "the test never opened the gate"
            return "written"

        # Their own timeouts: an executor's `timeout` below bounds only the wait for room.
        @reg.tool(read_only=True, timeout=30)
        def read(tag: str) -> str:
            self.record(tag)
            return tag

        @reg.tool(read_only=True, max_concurrency=1, timeout=30)
        def narrow(tag: str) -> str:
            return self.hold(tag)

        @reg.tool(read_only=True, groups=["db"], timeout=30)
        def db(tag: str) -> str:
            return self.hold(tag)

        @reg.tool(read_only=True, policies=[self.quota], timeout=30)
        def counted(tag: str) -> str:
            self.record(tag)
            return tag

    def hold(self, tag: str) -> str:
        self.record(tag)
        if tag == "hold":
            self.blocking.set()
            assert self.gate.wait(10), "the test never opened the gate"
        return tag

    def record(self, tag: str) -> None:
        with self.lock:
            self.started.append(tag)


@pytest.fixture
def scene() -> Iterator[Scene]:
    s = Scene()
    yield s
    s.gate.set()  # whatever happened, nothing stays blocked


def new(make_executor: MakeExecutor, scene: Scene, **options: Any) -> Executor:
    """An executor of the scene's tools (with the group `db` they need)."""
    options.setdefault("groups", {"db": 1})
    return make_executor(scene.registry, **options)


def read(tag: str, **kw: Any) -> ToolCall:
    return ToolCall(id=tag, name="read", arguments={"tag": tag}, **kw)


def call(name: str, tag: str) -> ToolCall:
    return ToolCall(id=tag, name=name, arguments={"tag": tag})


def hold(ex: Executor, scene: Scene, name: str = "blocker") -> cf.Future[ToolResult]:
    """Submit a call that holds its slot until the gate opens; wait until it runs."""
    handle = ex.submit(ToolCall(id="hold", name=name, arguments={} if name in (
        "blocker", "write_hold") else {"tag": "hold"}))  # fmt: skip
    assert scene.blocking.wait(5), "the blocking call never started"
    return handle


def overloaded(result: ToolResult, text: str = OVERLOADED) -> bool:
    return (
        result.status == "rejected"
        and result.error_code is ErrorCode.OVERLOADED
        and result.error == text
        and result.attempts == 0
    )


def queued_events(rec: bus.Recorder) -> list[tuple[str, str, int, int]]:
    return [(e.call_id, e.group, e.position, e.queue_length) for e in rec.of(bus.QUEUED)]


# -- max_queued -------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_max_queued_is_exact_under_16_submitting_threads(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    limit, threads, each = 10, 16, 25
    ex = new(make_executor, scene, max_parallel=1, max_queued=limit, timeout=30)
    with bus.Recorder(sender=ex) as rec:
        blocker = hold(ex, scene)
        start = threading.Barrier(threads)
        handles: list[list[Any]] = [[] for _ in range(threads)]

        def produce(k: int) -> None:
            start.wait(5)
            for j in range(each):
                handles[k].append(ex.submit(read(f"{k}.{j}")))

        producers = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
        for t in producers:
            t.start()
        for t in producers:
            t.join(30)
            assert not t.is_alive()
        everyone = [h for hs in handles for h in hs]
        total = threads * each
        stats = ex.stats()
        # Exactly `limit` wait; every other call ended at once, refused.
        assert stats.queued == limit and stats.queues == {"max_parallel": limit}
        assert stats.rejected == total - limit and stats.submitted == total + 1
        refused = [h for h in everyone if h.done()]
        assert len(refused) == total - limit
        assert all(overloaded(h.result()) for h in refused)
        scene.gate.set()
        results = [h.result(10) for h in everyone]
        assert blocker.result(10).status == "ok"
        assert Counter(r.status for r in results) == {"ok": limit, "rejected": total - limit}
        assert ex.drain_events()
        # Each call exactly one result and one tool:finished.
        finished = Counter(e._run for e in rec.of(bus.FINISHED))
        assert len(finished) == total + 1 and set(finished.values()) == {1}
        # The calls that waited were announced, once each; the refused ones never.
        waited = {r.call_id for r in results if r.status == "ok"}
        announced = rec.of(bus.QUEUED)
        assert sorted(e.call_id for e in announced) == sorted(waited)
        assert {e.group for e in announced} == {"max_parallel"}
        assert all(1 <= e.position <= e.queue_length <= limit for e in announced)
    stats = ex.stats()
    assert (stats.queued, stats.in_flight, stats.queues) == (0, 0, {"max_parallel": 0})


def test_a_groups_max_queued_bounds_only_the_calls_parked_on_it(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=8, groups={"db": {"limit": 1, "max_queued": 2}})
    holder = hold(ex, scene, "db")
    calls = [ex.submit(call("db", f"d{i}")) for i in range(5)]
    text = "Tool 'db' is overloaded: too many calls are waiting; try again later"
    assert [h.done() for h in calls] == [False, False, True, True, True]
    assert all(overloaded(h.result(), text) for h in calls[2:])
    # Other tools go on; the group's queue is its own.
    assert ex.execute(read("free")).status == "ok"
    stats = ex.stats()
    assert stats.queues == {"max_parallel": 0, "db": 2} and stats.queued == 2
    scene.gate.set()
    assert holder.result(10).status == "ok"
    assert [h.result(10).status for h in calls[:2]] == ["ok", "ok"]
    assert scene.started == ["hold", "free", "d0", "d1"]


def test_a_higher_priority_arrival_sheds_the_lowest_queued_call(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=2)
    hold(ex, scene)
    a, b = ex.submit(read("a")), ex.submit(read("b"))
    high = ex.submit(read("high"), priority=5)
    assert overloaded(b.result(5))  # the newest of the lowest priority went
    low = ex.submit(read("low"), priority=-1)
    assert overloaded(low.result(5))  # the lowest of all: refused at once
    same = ex.submit(read("same"))
    assert overloaded(same.result(5))  # a newcomer never sheds its equals
    assert not a.done() and not high.done()
    scene.gate.set()
    assert [a.result(10).status, high.result(10).status] == ["ok", "ok"]
    assert scene.started == ["high", "a"]


def test_nested_calls_are_never_shed(make_executor: MakeExecutor, scene: Scene) -> None:
    go, children_gate = threading.Event(), threading.Event()
    reg = scene.registry
    box: list[Executor] = []

    @reg.tool(read_only=True, timeout=30)
    async def parent(n: int) -> list[str]:
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 10)
        calls = [ToolCall(id=f"child{i}", name="child", arguments={"i": i}) for i in range(n)]
        results = await asyncio.gather(*(box[0].aexecute(c) for c in calls))
        return [r.status for r in results]

    @reg.tool(read_only=True, timeout=30)
    def child(i: int) -> int:
        assert children_gate.wait(10)
        return i

    ex = new(make_executor, scene, max_parallel=1, max_queued=1)
    box.append(ex)
    try:
        top = ex.submit(ToolCall(id="parent", name="parent", arguments={"n": 3}))
        wait_until(lambda: ex.stats().in_flight == 1, what="the parent runs")
        outsider = ex.submit(read("outsider"))
        go.set()
        # One child runs on its caller's share; two wait, over the bound: the
        # call that is not nested goes, the nested ones stay.
        assert overloaded(outsider.result(5))
        wait_until(lambda: ex.stats().queues == {"max_parallel": 2}, what="two children queued")
        children_gate.set()
        assert top.result(10).output == ["ok", "ok", "ok"]
    finally:
        go.set()
        children_gate.set()


def test_a_batch_whose_calls_are_shed_ends_as_any_batch_does(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=1)
    with bus.Recorder(sender=ex) as rec:
        hold(ex, scene)
        batch = ex.submit_batch([read("x1"), read("x2"), read("x3")])
        assert [h.done() for h in batch.calls] == [False, True, True]
        scene.gate.set()
        result = batch.result(10)
        assert [r.status for r in result] == ["ok", "rejected", "rejected"]
        assert all(overloaded(r) for r in list(result)[1:])
        assert ex.drain_events()
        assert len(rec.of(bus.BATCH_COMPLETE)) == 1
    assert ex.stats().queued == 0


def test_a_quota_unit_comes_back_for_a_call_refused_for_a_full_queue(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=1)
    hold(ex, scene)
    handles = [ex.submit(call("counted", f"c{i}")) for i in range(3)]
    assert [h.done() for h in handles] == [False, True, True]
    assert scene.quota.used("counted") == 1  # the two refused gave theirs back
    scene.gate.set()
    assert handles[0].result(10).status == "ok"
    assert scene.quota.used("counted") == 1


# -- tool:queued ----------------------------------------------------------------------------


def test_queued_says_what_a_call_waits_for_its_place_and_the_queue_length(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1)
    with bus.Recorder(sender=ex) as rec:
        hold(ex, scene)
        ex.submit(read("a"))
        ex.submit(read("b"))
        ex.submit(read("high"), priority=5)
        batch = ex.submit_batch([read("c1"), read("c2")])
        rec.wait_for(bus.QUEUED, 5)
        assert queued_events(rec) == [
            ("a", "max_parallel", 1, 1),
            ("b", "max_parallel", 2, 2),
            ("high", "max_parallel", 1, 3),
            ("c1", "max_parallel", 4, 5),
            ("c2", "max_parallel", 5, 5),
        ]
        events = rec.of(bus.QUEUED)
        assert all(isinstance(e, bus.CallQueued) for e in events)
        assert [(e.tool, e.attempt, e.parent_call_id) for e in events] == [("read", 1, None)] * 5
        assert [e.batch_id for e in events] == [None, None, None, batch.batch_id, batch.batch_id]
        assert ex.stats().queues == {"max_parallel": 5}
        scene.gate.set()
        batch.result(10)
        assert ex.drain_events()
        assert len(rec.of(bus.QUEUED)) == 5  # once per wait, not per pump


def test_queued_names_the_group_a_call_is_parked_on(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=4, groups={"db": 1})
    with bus.Recorder(bus.QUEUED, sender=ex) as rec:
        hold(ex, scene, "narrow")
        scene.blocking.clear()
        db_hold = ex.submit(call("db", "hold"))
        assert scene.blocking.wait(5)
        ex.submit(call("narrow", "n2"))
        ex.submit(call("db", "d2"))
        ex.submit(call("db", "d3"))
        rec.wait_for(bus.QUEUED, 3)
        assert queued_events(rec) == [
            ("n2", "tool:narrow", 1, 1),
            ("d2", "db", 1, 1),
            ("d3", "db", 2, 2),
        ]
        assert ex.stats().queues == {"max_parallel": 0, "tool:narrow": 1, "db": 2}
        scene.gate.set()
        assert db_hold.result(10).status == "ok"


def test_no_queued_for_calls_a_batch_holds_back_or_a_policy_delays(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    release: cf.Future[None] = cf.Future()
    asked = threading.Event()

    class DelayOnce(BasePolicy):
        name = "delay_once"

        def __init__(self) -> None:
            self.delayed = False

        def admit(self, call: ToolCall, tool: Any, now: float) -> Decision:
            asked.set()
            if self.delayed:
                return Admit()
            self.delayed = True
            return Delay(30, until=release)

    reg = scene.registry

    @reg.tool(read_only=True, policies=[DelayOnce()])
    def delayed() -> str:
        return "late"

    ex = new(make_executor, scene, max_parallel=8)
    with bus.Recorder(sender=ex) as rec:
        batch = ex.submit_batch([ToolCall(id="w", name="write_hold"), read("after")])
        assert scene.blocking.wait(5)
        waiting = ex.submit(ToolCall(id="d", name="delayed"))
        assert asked.wait(5)
        stats = ex.stats()
        assert stats.queued == 0 and stats.queues == {"max_parallel": 0}
        scene.gate.set()
        release.set_result(None)
        assert [r.status for r in batch.result(10)] == ["ok", "ok"]
        assert waiting.result(10).status == "ok"
        assert ex.drain_events()
        assert rec.of(bus.QUEUED) == []


def test_a_call_waiting_for_a_thread_is_queued_for_threads(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=8, max_abandoned_per_tool=1)
    with bus.Recorder(bus.QUEUED, sender=ex) as rec:
        hold(ex, scene)
        second = ex.submit(ToolCall(id="second", name="blocker"))
        rec.wait_for(bus.QUEUED)
        assert queued_events(rec) == [("second", "threads", 1, 1)]
        assert ex.stats().queues == {"max_parallel": 0, "threads": 1}
        scene.gate.set()
        assert second.result(10).status == "ok"


# -- on_full="wait" ------------------------------------------------------------------------


def _blocked(ex: Executor, n: int) -> None:
    wait_until(lambda: ex._scheduler.blocked == n, what=f"{n} producers waiting for room")


def test_on_full_wait_blocks_a_sync_producer_until_there_is_room(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=1, on_full="wait")
    hold(ex, scene)
    first = ex.submit(read("first"))  # fills the queue
    pool = cf.ThreadPoolExecutor(4)
    try:
        waiting = [pool.submit(ex.execute, read(f"w{i}")) for i in range(4)]
        _blocked(ex, 4)
        assert ex.stats().submitted == 2  # not submitted yet: they wait before
        assert not any(f.done() for f in waiting)
        scene.gate.set()  # room comes one call at a time: each producer in turn
        results = [f.result(10) for f in waiting]
    finally:
        pool.shutdown(wait=False)
    assert [r.status for r in results] == ["ok"] * 4
    assert first.result(10).status == "ok"
    stats = ex.stats()
    assert stats.rejected == 0 and stats.submitted == 6
    assert ex._scheduler.blocked == 0


def _db_full(
    make_executor: MakeExecutor,
) -> tuple[Executor, dict[str, threading.Event], cf.Future[ToolResult], cf.Future[ToolResult]]:
    """An executor (`max_parallel=2`, `on_full="wait"`, group `db` of limit 1
    and queue 1) whose call g0 holds db's one slot and f1 max_parallel's
    other, each until its gate opens; with the gates and their handles."""
    gates = {tag: threading.Event() for tag in ("g0", "f1")}
    started = {tag: threading.Event() for tag in gates}

    def held(tag: str) -> str:
        if tag in gates:
            started[tag].set()
            assert gates[tag].wait(30), "the test never opened the gate"
        return tag

    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=30)
    def f(tag: str) -> str:
        return held(tag)

    @reg.tool(read_only=True, groups=["db"], timeout=30)
    def g(tag: str) -> str:
        return held(tag)

    ex = make_executor(
        reg, max_parallel=2, on_full="wait", timeout=None,
        groups={"db": {"limit": 1, "max_queued": 1}},
    )  # fmt: skip
    g0 = ex.submit(call("g", "g0"))
    f1 = ex.submit(call("f", "f1"))
    assert started["g0"].wait(10) and started["f1"].wait(10)
    return ex, gates, g0, f1


def test_on_full_wait_counts_the_calls_bound_for_a_full_group_still_in_the_ready_queue(
    make_executor: MakeExecutor,
) -> None:
    """A call of a group still waits for `max_parallel` in the ready queue:
    it reaches the group before a newcomer does. A producer whose call
    would then be one too many for the group's bounded queue waits for room,
    rather than get in and be shed `OVERLOADED` there."""
    ex, gates, g0, f1 = _db_full(make_executor)
    pool = cf.ThreadPoolExecutor(2)
    try:
        g1 = pool.submit(ex.execute, call("g", "g1"))  # in, waiting for max_parallel
        wait_until(lambda: ex.stats().queues.get("max_parallel") == 1, what="g1 queued")
        g2 = pool.submit(ex.execute, call("g", "g2"))
        _blocked(ex, 1)  # db's queue is g1's once a slot of max_parallel frees
        gates["f1"].set()
        wait_until(lambda: ex.stats().queues.get("db") == 1, what="g1 queued on db")
        assert not g2.done()
        gates["g0"].set()
        results = [h.result(10) for h in (g0, f1)] + [p.result(10) for p in (g1, g2)]
    finally:
        for gate in gates.values():
            gate.set()
        pool.shutdown(wait=False)
    assert [(r.status, r.output) for r in results] == [
        ("ok", "g0"),
        ("ok", "f1"),
        ("ok", "g1"),
        ("ok", "g2"),
    ]
    assert ex.stats().rejected == 0


def test_on_full_wait_wakes_a_producer_when_a_call_bound_for_the_group_leaves_the_ready_queue(
    make_executor: MakeExecutor,
) -> None:
    """A call of a bounded group, cancelled while it waits for `max_parallel`,
    leaves room in the group for a producer that waited behind it."""
    gates = {tag: threading.Event() for tag in ("g0", "f1")}
    started = {tag: threading.Event() for tag in gates}

    def held(tag: str) -> str:
        if tag in gates:
            started[tag].set()
            assert gates[tag].wait(30), "the test never opened the gate"
        return tag

    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=30)
    def f(tag: str) -> str:
        return held(tag)

    @reg.tool(read_only=True, groups=["db"], timeout=30)
    def g(tag: str) -> str:
        return held(tag)

    ex = make_executor(
        reg,
        max_parallel=2,
        on_full="wait",
        timeout=None,
        groups={"db": {"limit": 1, "max_queued": 1}},
    )
    g0 = ex.submit(call("g", "g0"))  # holds db's one slot
    f1 = ex.submit(call("f", "f1"))  # and max_parallel's other
    assert started["g0"].wait(10) and started["f1"].wait(10)
    pool = cf.ThreadPoolExecutor(1)
    try:
        g1 = ex.submit(call("g", "g1"))  # waiting for max_parallel, then db
        wait_until(lambda: ex.stats().queues.get("max_parallel") == 1, what="g1 queued")
        g2 = pool.submit(ex.execute, call("g", "g2"))
        _blocked(ex, 1)
        g1.cancel()
        assert g1.result(10).status == "cancelled"
        _blocked(ex, 0)  # woken, and taken: g1's place is g2's
        wait_until(lambda: ex.stats().queues.get("max_parallel") == 1, what="g2 queued")
        assert not g2.done()
        for gate in gates.values():
            gate.set()
        results = [h.result(10) for h in (g0, f1)] + [g2.result(10)]
    finally:
        for gate in gates.values():
            gate.set()
        pool.shutdown(wait=False)
    assert [(r.status, r.output) for r in results] == [("ok", "g0"), ("ok", "f1"), ("ok", "g2")]
    assert ex.stats().rejected == 0


def test_on_full_wait_gives_up_after_the_timeout(make_executor: MakeExecutor, scene: Scene) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=1, on_full="wait", timeout=0.3)
    hold(ex, scene)
    first = ex.submit(read("first"))
    began = time.monotonic()
    result = ex.execute(read("late"))
    waited = time.monotonic() - began
    assert overloaded(result)
    assert waited >= 0.25, waited
    assert not first.done()  # the call that was queued keeps its place
    scene.gate.set()
    assert first.result(10).status == "ok"


def test_on_full_wait_lets_a_higher_priority_batch_in_at_once(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=2, on_full="wait")
    hold(ex, scene)
    lows = [ex.submit(read(f"low{i}")) for i in range(2)]
    done = threading.Event()
    out: list[Any] = []

    def produce() -> None:
        out.append(ex.execute_batch([read("h1"), read("h2")], priority=3))
        done.set()

    threading.Thread(target=produce, daemon=True).start()
    # It does not wait: its calls shed the lower ones.
    assert all(overloaded(h.result(5)) for h in lows)
    scene.gate.set()
    assert done.wait(10)
    assert [r.status for r in out[0]] == ["ok", "ok"]


async def test_on_full_wait_never_blocks_async_callers_or_submit(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=1, on_full="wait")
    await asyncio.to_thread(hold, ex, scene)
    first = ex.submit(read("first"))
    assert overloaded(await ex.aexecute(read("async")))
    assert overloaded(ex.submit(read("handle")).result(5))
    assert ex._scheduler.blocked == 0
    scene.gate.set()
    assert (await asyncio.wrap_future(first)).status == "ok"


def test_closing_releases_the_producers_waiting_for_room(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = new(make_executor, scene, max_parallel=1, max_queued=1, on_full="wait")
    hold(ex, scene)
    ex.submit(read("first"))
    pool = cf.ThreadPoolExecutor(1)
    try:
        waiting = pool.submit(ex.execute, read("waiting"))
        _blocked(ex, 1)
        ex.close()  # the blocker still holds its slot: no room ever came
        result = waiting.result(10)
    finally:
        pool.shutdown(wait=False)
    assert (result.status, result.error) == ("cancelled", "the executor is closed")


# -- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ({"max_queued": 0}, ValueError, "Executor: max_queued must be >= 1, got 0"),
        ({"max_queued": "5"}, TypeError, "Executor: max_queued must be an integer"),
        ({"max_queued": True}, TypeError, "Executor: max_queued must be an integer"),
        ({"on_full": "block"}, ValueError, 'Executor: on_full must be "reject" or "wait"'),
        ({"on_full": None}, TypeError, 'Executor: on_full must be "reject" or "wait"'),
        ({"groups": {"db": {"limit": 0}}}, ValueError, "groups['db']['limit'] must be >= 1"),
        (
            {"groups": {"db": {"limit": 2, "max_queued": -1}}},
            ValueError,
            "groups['db']['max_queued'] must be >= 1",
        ),
        ({"groups": {"db": {"max_queued": 3}}}, ValueError, "groups['db'] needs a limit"),
        (
            {"groups": {"db": {"limit": 2, "max_queue": 3}}},
            ValueError,
            "groups['db']: unknown key 'max_queue' (known: limit, max_queued)",
        ),
    ],
)
def test_bad_backpressure_options_are_refused_naming_them(
    scene: Scene, options: dict[str, Any], error: type[Exception], text: str
) -> None:
    with pytest.raises(error) as caught:
        Executor(scene.registry, **{"groups": {"db": 1}, **options})
    assert text in str(caught.value)


def test_groups_take_a_limit_or_a_table(make_executor: MakeExecutor, scene: Scene) -> None:
    ex = new(
        make_executor,
        scene,
        groups={"db": {"limit": 3, "max_queued": 7}, "other": 2, "plain": {"limit": 1}},
        max_queued=5,
        on_full="wait",
    )
    assert ex._groups == {"db": 3, "other": 2, "plain": 1}
    assert ex._group_queues == {"db": 7}
    assert ex._scheduler.slots.max_queued == 5 and ex._waits_for_room


def test_a_cancelled_lower_priority_entry_is_not_room_and_one_live_one_is_room_for_one(
    make_executor: MakeExecutor,
) -> None:
    """A call cancelled while queued stays as a dead entry: a waiting producer
    took it for a lower-priority call to shed and was refused at once; and one
    live lower-priority call counted as room for a whole batch (review of
    issue 21)."""
    gate, entered = threading.Event(), threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def hold() -> str:
        entered.set()
        gate.wait(60)
        return "held"

    @reg.tool(read_only=True)
    def quick(i: int = 0) -> int:
        return i

    ex = make_executor(reg, max_parallel=1, max_queued=1, on_full="wait", timeout=60)
    holder = ex.submit(ToolCall(name="hold"))
    assert entered.wait(30)
    low = ex.submit(ToolCall(name="quick"), priority=-1)
    assert low.cancel() and low.result(30).status == "cancelled"
    queued = ex.submit(ToolCall(name="quick", arguments={"i": 1}))
    out: list[ToolResult] = []
    producer = threading.Thread(target=lambda: out.append(ex.execute(ToolCall(name="quick"))))
    producer.start()
    wait_until(lambda: ex._scheduler.blocked == 1, 30, "the producer waiting for room")
    gate.set()
    producer.join(60)
    assert [r.status for r in out] == ["ok"]  # it waited for room, then ran
    assert holder.result(30).status == queued.result(30).status == "ok"


@pytest.mark.parametrize("name", ["max_parallel", "threads", "tool:b", "batch:1"])
def test_a_group_may_not_take_the_name_of_a_queue_of_its_own(name: str) -> None:
    """A group named so was reported as that queue (review of issue 21)."""
    with pytest.raises(ValueError, match="reserved name"):
        Executor(ToolRegistry(), groups={name: 1})


def test_a_waiting_producers_submission_cut_short_by_ctrl_c_ends_its_calls_once(
    make_executor: MakeExecutor,
    scene: Scene,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while the scheduler admits an `on_full="wait"` producer's calls
    (on the producer's thread, as it looks for room): they end `cancelled`,
    once, counted, and the quota that counted them gets its units back (they
    were left half admitted, never ended)."""
    from toolbus.actors import _admission

    real = _admission.Admission._pool

    def interrupted(self: Any, run: Any) -> Any:
        monkeypatch.setattr(_admission.Admission, "_pool", real)  # once
        raise KeyboardInterrupt

    ex = new(make_executor, scene, max_queued=10, on_full="wait")
    monkeypatch.setattr(_admission.Admission, "_pool", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ex.execute_batch([call("counted", f"c{i}") for i in range(3)])
    ended = recorder.wait_for(bus.FINISHED, 3, timeout=20)
    assert sorted(e.call_id for e in ended) == ["c0", "c1", "c2"]
    assert {e.result.status for e in ended} == {"cancelled"}
    stats = ex.stats()
    assert (stats.submitted, stats.cancelled, stats.in_flight, stats.queued) == (3, 3, 0, 0)
    assert scene.quota.used("counted") == 0 and scene.started == []
