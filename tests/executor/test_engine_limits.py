"""The limits an executor keeps under concurrency: the thread budget, stats after
close, callers freed by the deadline backstop, named capacity groups. Nested
calls are test_nested_calls.py's; the backstop's pure decision is
tests/actors/test_backstop.py's, an attempt past its deadline
tests/pipeline/test_attempt.py's."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.concurrency_tools import in_thread as _in_thread
from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry

# -- stats survive close -------------------------------------------------------------------


def test_stats_after_close_keep_the_final_counters() -> None:
    reg = ToolRegistry()

    @reg.tool
    def ok() -> int:
        return 1

    ex = Executor(reg)
    for _ in range(3):
        ex.execute(ToolCall(name="ok"))
    ex.execute(ToolCall(name="missing"))
    wait_until(lambda: ex.stats().ok == 3)
    ex.close()
    s = ex.stats()
    assert (s.submitted, s.ok, s.rejected) == (4, 3, 1)


# -- the thread budget holds under concurrency ------------------------------------------------


def test_abandoned_threads_never_exceed_the_budget(release: threading.Event) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def stuck(i: int) -> int:
        release.wait(30)
        return i

    @reg.tool(read_only=True)
    def healthy(i: int) -> int:
        return i

    before = threading.active_count()
    peak = [0]
    with Executor(reg, max_parallel=8, max_abandoned_workers=2, max_abandoned_per_tool=2) as ex:

        def watch(*_: Any, **__: Any) -> None:
            peak[0] = max(peak[0], ex.stats().abandoned_workers)

        from toolbus import bus

        with bus.subscribe(watch, bus.TIMEOUT, sender=ex):
            calls = [ToolCall(name="stuck", arguments={"i": i}) for i in range(9)]
            with ThreadPoolExecutor(3) as pool:
                batches = list(pool.map(lambda _: ex.execute_batch(calls), range(3)))
            ex.drain_events()
        statuses = {r.status for b in batches for r in b}
        assert statuses <= {"timeout", "rejected"}
        rejected = [r for b in batches for r in b if r.status == "rejected"]
        assert rejected and all(r.error_code is ErrorCode.TOOL_UNAVAILABLE for r in rejected)
        assert ex.stats().abandoned_workers <= 2
        assert peak[0] <= 2
        # supervisor, timers, bus, loop, the budget's two threads and a fresh one or two
        assert threading.active_count() <= before + 8
        release.set()
        wait_until(lambda: ex.stats().abandoned_workers == 0)
        assert ex.execute(ToolCall(name="healthy", arguments={"i": 5})).output == 5


async def test_loop_stays_free_while_backstop_watches(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=0.05)
    async def hang() -> None:
        await asyncio.Event().wait()

    ex = make_executor(reg)
    results = await asyncio.gather(*(ex.aexecute(ToolCall(name="hang")) for _ in range(20)))
    assert {r.status for r in results} == {"timeout"}


# -- named capacity groups shared by tools ---------------------------------------------------


def test_tools_sharing_a_group_never_exceed_its_limit(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    lock = threading.Lock()
    now = {"db": 0, "peak": 0}
    two_in = threading.Event()
    gate = threading.Event()

    def enter() -> None:
        with lock:
            now["db"] += 1
            now["peak"] = max(now["peak"], now["db"])
            if now["db"] == 2:
                two_in.set()
        gate.wait(10)
        with lock:
            now["db"] -= 1

    @reg.tool(read_only=True, groups=["db"])
    def read_row(i: int) -> int:
        enter()
        return i

    @reg.tool(read_only=True, groups=["db"])
    async def read_async(i: int) -> int:
        await asyncio.to_thread(enter)
        return i

    @reg.tool(read_only=True)
    def outside(i: int) -> int:
        return i

    ex = make_executor(reg, max_parallel=16, groups={"db": 2})
    calls = [
        ToolCall(name="read_row" if i % 2 else "read_async", arguments={"i": i}) for i in range(8)
    ]
    with ThreadPoolExecutor(2) as pool:
        batch = pool.submit(ex.execute_batch, calls)
        assert two_in.wait(10)
        # The group is full; a tool outside it is not held back.
        assert ex.execute(ToolCall(name="outside", arguments={"i": 1})).output == 1
        assert ex.stats().queued == 6
        gate.set()
        assert [r.output for r in batch.result(30)] == list(range(8))
    assert now["peak"] == 2


def test_an_unknown_group_is_refused() -> None:
    reg = ToolRegistry()

    @reg.tool(groups=["db"])
    def query() -> int:
        return 1

    with pytest.raises(ValueError, match="no capacity group named 'db'"):
        Executor(reg)
    with pytest.raises(ValueError, match="must be"):
        Executor(ToolRegistry(), groups={"db": 0})
    with pytest.raises(TypeError, match="groups must be"):
        reg.tool(name="t", groups=[3])(lambda: 1)  # type: ignore[list-item]


def test_a_tool_added_later_with_an_unknown_group_gets_a_result(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    ex = make_executor(reg, groups={"db": 1})

    @reg.tool(groups=["cache"])
    def warm() -> int:
        return 1

    r = ex.execute(ToolCall(name="warm"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert r.error is not None and "no capacity group named 'cache'" in r.error


def test_a_nested_call_into_a_group_its_caller_fills_fails_fast(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(groups=["db"])
    def inner() -> int:
        return 1

    @reg.tool(groups=["db"])
    def outer() -> Any:
        r = holder["ex"].execute(ToolCall(name="inner"))
        return [r.status, r.error_code]

    ex = holder["ex"] = make_executor(reg, groups={"db": 1}, timeout=None)
    assert ex.execute(ToolCall(name="outer")).output == ["rejected", ErrorCode.TOOL_UNAVAILABLE]


@pytest.fixture
def late_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer thread never gets to a deadline: only the waiting side's backstop can."""
    from toolbus.actors import _timers
    from toolbus.actors._messages import Deadline

    real = _timers.TimerService.schedule

    def schedule(self: Any, delay: float, callback: Any, *args: Any) -> Any:
        if args and isinstance(args[0], Deadline):
            delay = 3600.0
        return real(self, delay, callback, *args)

    monkeypatch.setattr(_timers.TimerService, "schedule", schedule)


@pytest.mark.usefixtures("late_timers")
def test_blocking_callers_are_freed_by_the_backstop(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=0.1)
    def hang() -> None:
        release.wait(30)

    ex = make_executor(reg)
    assert ex.execute(ToolCall(name="hang")).status == "timeout"
    assert [r.status for r in ex.execute_batch([ToolCall(name="hang")] * 3)] == ["timeout"] * 3


@pytest.mark.usefixtures("late_timers")
async def test_awaiting_callers_are_freed_by_the_backstop(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=0.1)
    async def hang() -> None:
        await asyncio.Event().wait()

    ex = make_executor(reg, max_parallel=4)
    singles = await asyncio.gather(*(ex.aexecute(ToolCall(name="hang")) for _ in range(10)))
    batch = await ex.aexecute_batch([ToolCall(name="hang")] * 6)
    assert {r.status for r in [*singles, *batch]} == {"timeout"}


@pytest.mark.usefixtures("late_timers")
@pytest.mark.parametrize("api", ["execute", "aexecute"])
def test_the_backstop_bounds_post_call_hooks_that_hang_past_the_deadline(
    make_executor: MakeExecutor, api: str
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=0.1)
    async def quick() -> str:
        return "done"

    async def post(call: ToolCall, result: Any) -> Any:
        await asyncio.sleep(20)  # a hook under test that hangs past the deadline
        return result

    ex = make_executor(reg, post_call=[post], hook_grace=0.2)
    if api == "execute":
        r = ex.execute(ToolCall(name="quick"))
    else:
        r = asyncio.run(ex.aexecute(ToolCall(name="quick")))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)


def test_nested_calls_respect_the_thread_budget(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    """Nested calls to a hung tool took threads past the budget (Engine v2 review)."""
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def stuck() -> str:
        release.wait(30)
        return "late"

    @reg.tool(read_only=True)
    def fan() -> list[Any]:
        return [holder["ex"].execute(ToolCall(name="stuck")).error_code for _ in range(10)]

    ex = holder["ex"] = make_executor(reg, max_abandoned_workers=3, max_abandoned_per_tool=1)
    codes = ex.execute(ToolCall(name="fan")).output
    assert codes[0] == ErrorCode.EXECUTION_TIMEOUT
    assert set(codes[1:]) == {ErrorCode.TOOL_UNAVAILABLE}
    assert ex.stats().abandoned_workers <= 1


def test_one_tool_cannot_take_the_whole_thread_budget(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    """One hung tool took the whole thread budget (max_abandoned_per_tool was not held)
    (Engine v2 review)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def hang(i: int) -> int:
        release.wait(30)
        return i

    @reg.tool(read_only=True)
    def healthy() -> str:
        return "fine"

    ex = make_executor(reg, max_abandoned_workers=3, max_abandoned_per_tool=1)
    batch = ex.execute_batch([ToolCall(name="hang", arguments={"i": i}) for i in range(3)])
    assert sorted(r.status for r in batch) == ["rejected", "rejected", "timeout"]
    assert ex.stats().abandoned_workers == 1
    assert ex.execute(ToolCall(name="healthy")).output == "fine"


def test_a_report_posted_while_stats_holds_the_lock_is_not_stranded(
    make_executor: MakeExecutor,
) -> None:
    """A report posted while stats() held the scheduler's lock was stranded: execute hung
    (Engine v2 review)."""
    from toolbus.backends import ThreadBackend

    in_stats, go_on = threading.Event(), threading.Event()

    class SlowCount(ThreadBackend):
        def busy(self, tool: Any = None) -> int:
            if threading.current_thread().name == "stats":
                in_stats.set()
                go_on.wait(10)  # stats() holds the scheduler's lock meanwhile
            return super().busy(tool)

    reg = ToolRegistry()
    finish = threading.Event()

    @reg.tool(read_only=True, backend="slow")
    def quick() -> str:
        finish.wait(10)
        return "ok"

    ex = make_executor(reg, timeout=None, backends={"slow": SlowCount()})
    t, out = _in_thread(lambda: ex.execute(ToolCall(name="quick")))
    wait_until(lambda: ex.stats().in_flight == 1)
    st = threading.Thread(target=ex.stats, name="stats")
    st.start()
    assert in_stats.wait(10)
    finish.set()  # the worker reports while stats() holds the lock
    wait_until(lambda: len(ex._scheduler._pending) == 1, what="the report queued")
    go_on.set()
    st.join(10)
    t.join(10)
    assert not t.is_alive(), "execute hangs: its report was stranded"
    assert out["r"].output == "ok"
