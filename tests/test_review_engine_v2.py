"""Regression tests for the Engine v2 review's findings (each reproduced by running code)."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from tests.backends.test_seam import RecordingBackend
from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, bus
from toolbus.backends import Host, Job


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.__setitem__("r", fn()), daemon=True)
    t.start()
    return t, out


# -- 1, 2. nested calls behind queued top-level calls ----------------------------------------


@pytest.mark.parametrize("nested", ["batch", "single"])
def test_a_nested_call_is_not_stuck_behind_a_queued_caller(
    make_executor: MakeExecutor, nested: str
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    go = threading.Event()

    @reg.tool(read_only=True)
    def inner(x: int) -> int:
        return x

    @reg.tool(read_only=True)
    def plain() -> str:
        return "plain"

    @reg.tool(read_only=True)
    def outer() -> Any:
        go.wait(10)  # until another caller queues behind this call
        ex = holder["ex"]
        if nested == "batch":
            return ex.execute_batch([ToolCall(name="inner", arguments={"x": 1})]).results[0].output
        return ex.execute(ToolCall(name="inner", arguments={"x": 1})).output

    ex = holder["ex"] = make_executor(reg, max_parallel=1, timeout=None)
    t1, o1 = _in_thread(lambda: ex.execute(ToolCall(name="outer")))
    wait_until(lambda: ex.stats().in_flight == 1)
    t2, o2 = _in_thread(lambda: ex.execute(ToolCall(name="plain")))
    wait_until(lambda: ex.stats().queued == 1)
    go.set()
    t1.join(10)
    t2.join(10)
    assert o1["r"].output == 1
    assert o2["r"].output == "plain"


def test_a_nested_call_parked_on_a_tool_limit_is_let_out_first(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    q_in, q_go = threading.Event(), threading.Event()

    @reg.tool(read_only=True, max_concurrency=1)
    def y(tag: str) -> str:
        if tag == "Q":
            q_in.set()
            q_go.wait(10)
        return tag

    @reg.tool(read_only=True)
    def w() -> str:
        return "w:" + holder["ex"].execute(ToolCall(name="y", arguments={"tag": "n"})).status

    @reg.tool(read_only=True)
    def p() -> str:
        return "p:" + str(holder["ex"].execute(ToolCall(name="w")).output)

    ex = holder["ex"] = make_executor(reg, max_parallel=2, timeout=None)
    tq, oq = _in_thread(lambda: ex.execute(ToolCall(name="y", arguments={"tag": "Q"})))
    assert q_in.wait(10)
    tr, orr = _in_thread(lambda: ex.execute(ToolCall(name="y", arguments={"tag": "R"})))
    wait_until(lambda: ex.stats().queued == 1)
    tp, op = _in_thread(lambda: ex.execute(ToolCall(name="p")))
    wait_until(lambda: ex.stats().queued == 2)  # the nested y call waits behind R
    q_go.set()
    for t in (tq, tr, tp):
        t.join(10)
    assert (oq["r"].output, orr["r"].output, op["r"].output) == ("Q", "R", "p:w:ok")


# -- 3. two tools calling each other ----------------------------------------------------------


def test_tools_calling_each_other_fail_fast_instead_of_deadlocking(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    both_in = threading.Barrier(2, timeout=10)

    def body(other: str, depth: int) -> Any:
        if depth:
            return "leaf"
        both_in.wait()  # each holds its own slot before calling the other
        r = holder["ex"].execute(ToolCall(name=other, arguments={"depth": 1}))
        return [r.status, r.error_code]

    @reg.tool(read_only=True, max_concurrency=1)
    def a(depth: int = 0) -> Any:
        return body("b", depth)

    @reg.tool(read_only=True, max_concurrency=1)
    def b(depth: int = 0) -> Any:
        return body("a", depth)

    ex = holder["ex"] = make_executor(reg, timeout=None)
    batch = ex.execute_batch([ToolCall(name="a"), ToolCall(name="b")])
    outputs = sorted(r.output for r in batch)
    # One of them is refused at once; the other then gets its slot and runs.
    assert outputs == [["ok", None], ["rejected", ErrorCode.TOOL_UNAVAILABLE]]


# -- 4. hooks that run after a timeout make nested calls -----------------------------------


def test_a_post_call_hook_may_call_its_executor_after_a_timeout(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True)
    def audit() -> str:
        return "audited"

    @reg.tool(timeout=0.1)
    def slow() -> str:
        release.wait(30)
        return "late"

    def post(call: ToolCall, result: Any) -> Any:
        if call.name == "audit":
            return result
        r = holder["ex"].execute(ToolCall(name="audit"))
        return result.model_copy(update={"metadata": {"audit": r.output}})

    ex = holder["ex"] = make_executor(reg, max_parallel=1, post_call=[post], hook_grace=30)
    r = ex.execute(ToolCall(name="slow"))
    assert (r.status, r.metadata) == ("timeout", {"audit": "audited"})


# -- 5, 6. custom backends that misbehave ---------------------------------------------------


class _Faulty(RecordingBackend):
    def __init__(self, fail: str) -> None:
        super().__init__()
        self.fail = fail

    def release(self, job: Job, worker: Any) -> None:
        super().release(job, worker)
        if self.fail == "release":
            raise RuntimeError("release is broken")

    def cancel(self, job: Job) -> None:
        super().cancel(job)
        if self.fail == "cancel":
            raise RuntimeError("cancel is broken")

    def busy(self, tool: Any = None) -> int:
        if self.fail == "busy":
            raise RuntimeError("busy is broken")
        return super().busy(tool)


@pytest.mark.parametrize("fail", ["release", "cancel", "busy"])
def test_a_backend_that_raises_never_loses_a_call(
    make_executor: MakeExecutor, release: threading.Event, fail: str
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, backend="custom")
    def quick() -> str:
        return "ok"

    @reg.tool(backend="custom", timeout=0.1)
    def slow() -> str:
        release.wait(30)
        return "late"

    ex = make_executor(reg, backends={"custom": _Faulty(fail)})
    name = "slow" if fail == "cancel" else "quick"
    t, out = _in_thread(lambda: ex.execute(ToolCall(name=name)))
    t.join(10)
    assert not t.is_alive(), "the caller hangs"
    assert out["r"].status == ("timeout" if fail == "cancel" else "ok")


class _Inline:
    """Runs each job inside `submit` and reports from there (the protocol allows it)."""

    name = "inline"
    can_kill = False
    uses_threads = False
    carries_context = "all"

    def check(self, tool: Any) -> None:
        return None

    def start(self, host: Host) -> None:
        self.host = host

    def submit(self, job: Job) -> None:
        from toolbus.pipeline import drive_sync

        outcome = job.context.copy().run(
            drive_sync, job.steps(self.host.services), job.run, self.host.loop
        )
        self.host.report(job, outcome)

    def release(self, job: Job, worker: Any) -> None:
        return None

    def cancel(self, job: Job) -> None:
        return None

    def kill(self, job: Job) -> bool:
        return False

    def busy(self, tool: Any = None) -> int:
        return 0

    def abandoned(self, tool: Any = None) -> int:
        return 0

    def stop(self) -> None:
        return None


def test_a_backend_reporting_from_inside_submit_does_not_recurse(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, backend="inline")
    def echo(x: int) -> int:
        return x

    ex = make_executor(reg, backends={"inline": _Inline()}, max_parallel=8, timeout=None)
    batch = ex.execute_batch([ToolCall(name="echo", arguments={"x": i}) for i in range(2000)])
    assert [r.output for r in batch] == list(range(2000))


# -- 7. a hook raising CancelledError ---------------------------------------------------------


@pytest.mark.parametrize("tool_name", ["s", "a"])
@pytest.mark.parametrize("where", ["pre", "pre_async", "post"])
def test_a_hook_raising_cancelled_error_is_a_failing_hook(
    make_executor: MakeExecutor, tool_name: str, where: str
) -> None:
    reg = ToolRegistry()

    @reg.tool
    def s() -> str:
        return "s"

    @reg.tool
    async def a() -> str:
        return "a"

    def raise_sync(*_: Any) -> Any:
        raise asyncio.CancelledError()

    async def raise_async(*_: Any) -> Any:
        raise asyncio.CancelledError()

    hooks: dict[str, Any] = {
        "pre": {"pre_call": [raise_sync]},
        "pre_async": {"pre_call": [raise_async]},
        "post": {"post_call": [raise_sync]},
    }[where]
    ex = make_executor(reg, timeout=None, **hooks)
    t, out = _in_thread(lambda: ex.execute(ToolCall(name=tool_name)))
    t.join(10)
    assert not t.is_alive(), "the call never ends"
    # CancelledError means cancellation: in a post-call hook the call ends
    # cancelled, in a pre-call hook it is refused.
    expected = (
        ("cancelled", ErrorCode.CANCELLED)
        if where == "post"
        else ("rejected", ErrorCode.TOOL_NOT_ALLOWED)
    )
    assert (out["r"].status, out["r"].error_code) == expected


# -- 8. stats are exact when execute returns -----------------------------------------------


def test_stats_count_an_async_tools_call_before_execute_returns(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def aquick(i: int) -> int:
        return i

    ex = make_executor(reg)
    for i in range(300):
        ex.execute(ToolCall(name="aquick", arguments={"i": i}))
        s = ex.stats()
        assert (s.in_flight, s.ok) == (0, i + 1)


# -- 9, 10. the thread budget holds for nested calls and per tool -------------------------


def test_nested_calls_respect_the_thread_budget(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True, timeout=0.05)
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
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=0.05)
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


# -- 11, 12. exceptions that escaped the executor ----------------------------------------------


def test_a_backend_check_raising_anything_is_a_result(make_executor: MakeExecutor) -> None:
    class Picky(RecordingBackend):
        def check(self, tool: Any) -> None:
            if tool.name == "late":
                raise RuntimeError("cannot run this one")

    reg = ToolRegistry()
    ex = make_executor(reg, backends={"picky": Picky()})

    @reg.tool(backend="picky")
    def late() -> int:
        return 1

    r = ex.execute(ToolCall(name="late"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert r.error is not None and "cannot run this one" in r.error


class _Stop(BaseException):
    pass


def test_a_concurrency_hook_raising_a_base_exception_is_contained(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(key: str) -> str:
        return "ok"

    def hook(calls: Any) -> int:
        raise _Stop(f"gave up on {calls[0].arguments['key']}")

    ex = make_executor(reg, concurrency=hook)
    with caplog.at_level(logging.DEBUG):
        batch = ex.execute_batch([ToolCall(name="ok", arguments={"key": "hunter2-very-secret"})])
    assert [r.status for r in batch] == ["ok"]
    assert "hunter2-very-secret" not in caplog.text  # 14: no traceback, no message logged


# -- 13. a blocking execute refused on the executor's own loop is counted and announced ------


def test_a_refused_blocking_execute_is_counted_and_announced(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool
    def leaf() -> str:
        return "leaf"

    @reg.tool
    async def top() -> Any:
        r = holder["ex"].execute(ToolCall(id="nested", name="leaf"))
        b = holder["ex"].execute_batch([ToolCall(id="nested-b", name="leaf")])
        return [r.status, b.results[0].status]

    ex = holder["ex"] = make_executor(reg)
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        assert ex.execute(ToolCall(id="top", name="top")).output == ["rejected", "rejected"]
        rec.wait_for(bus.FINISHED, 3)
    assert sorted(e.call_id for e in rec.of(bus.FINISHED)) == ["nested", "nested-b", "top"]
    s = ex.stats()
    assert (s.submitted, s.rejected, s.ok) == (3, 2, 1)


# -- 15. no event loop thread is left behind a close ----------------------------------------


def test_close_leaves_no_event_loop_thread_behind() -> None:
    reg = ToolRegistry()
    started = threading.Event()

    @reg.tool(read_only=True)
    async def hang() -> int:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # cleanup that outlives close(), in the tool under test
        return 1

    def loops() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "toolbus-async")

    before = loops()
    for _ in range(3):
        started.clear()
        ex = Executor(reg, timeout=None)
        t, _out = _in_thread(lambda ex=ex: ex.execute(ToolCall(name="hang")))
        assert started.wait(10)
        ex.close()
        t.join(10)
    wait_until(lambda: loops() <= before, what="the executors' loop threads to end")


# -- found by the long-run benchmark: the async backstop held every call for its timeout ------


def test_async_callers_do_not_keep_finished_calls_alive(make_executor: MakeExecutor) -> None:
    import gc

    from toolbus.pipeline import Run

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def noop(i: int) -> int:
        return i

    ex = make_executor(reg, timeout=30)
    loop = asyncio.new_event_loop()
    try:
        for i in range(300):
            loop.run_until_complete(ex.aexecute(ToolCall(name="noop", arguments={"i": i})))
        gc.collect()
        alive = sum(1 for o in gc.get_objects() if isinstance(o, Run))
    finally:
        loop.close()
    assert alive < 20, f"{alive} finished calls are still held"


# -- the second review ---------------------------------------------------------------------


def test_a_report_posted_while_stats_holds_the_lock_is_not_stranded(
    make_executor: MakeExecutor,
) -> None:
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


def test_a_blocking_execute_from_an_async_tool_on_the_callers_loop_is_refused(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True, max_concurrency=1)
    def limited() -> int:
        return 1

    @reg.tool(read_only=True)
    async def caller_tool() -> Any:
        r = holder["ex"].execute(ToolCall(name="limited"))
        return [r.status, r.error_code]

    ex = holder["ex"] = make_executor(reg, timeout=None)

    async def main() -> Any:
        return await ex.aexecute_batch([ToolCall(name="caller_tool"), ToolCall(name="limited")])

    t, out = _in_thread(lambda: asyncio.run(main()))
    t.join(10)
    assert not t.is_alive(), "deadlock: the blocking call froze the caller's loop"
    first, second = out["r"].results
    assert first.output == ["rejected", ErrorCode.TOOL_UNAVAILABLE]
    assert second.output == 1


def test_calls_in_flight_when_asyncio_run_ends_end_cancelled(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    started = threading.Event()

    @reg.tool(read_only=True)
    async def slow(i: int) -> int:
        started.set()
        await asyncio.Event().wait()
        return i

    ex = make_executor(reg, timeout=None, max_parallel=20)

    pending: list[asyncio.Future[Any]] = []

    async def main() -> None:
        for i in range(20):
            call = ToolCall(id=f"c{i}", name="slow", arguments={"i": i})
            pending.append(asyncio.ensure_future(ex.aexecute(call)))
        await asyncio.to_thread(started.wait, 10)
        await asyncio.sleep(0)  # then return, leaving the calls to asyncio.run's cleanup

    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        asyncio.run(main())
        rec.wait_for(bus.FINISHED, 20, timeout=10)
    assert {e.result.status for e in rec.of(bus.FINISHED)} == {"cancelled"}
    assert ex.stats().in_flight == 0


@pytest.mark.parametrize("how", ["gather", "batch"])
def test_nested_fan_out_stays_within_max_parallel(make_executor: MakeExecutor, how: str) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    lock = threading.Lock()
    now = {"n": 0, "peak": 0}

    @reg.tool(read_only=True)
    async def leaf(i: int) -> int:
        with lock:
            now["n"] += 1
            now["peak"] = max(now["peak"], now["n"])
        await asyncio.sleep(0.01)  # the tool under test works for a moment
        with lock:
            now["n"] -= 1
        return i

    @reg.tool(read_only=True)
    async def fan() -> int:
        ex = holder["ex"]
        calls = [ToolCall(name="leaf", arguments={"i": i}) for i in range(20)]
        if how == "batch":
            return sum(int(r.output) for r in await ex.aexecute_batch(calls))
        rs = await asyncio.gather(*(ex.aexecute(c) for c in calls))
        return sum(int(r.output) for r in rs)

    ex = holder["ex"] = make_executor(reg, timeout=None, max_parallel=2)
    assert ex.execute(ToolCall(name="fan")).output == 190
    # The caller holds one slot and lends one share: at most max_parallel leaves run.
    assert now["peak"] <= 2
    assert ex.stats().peak_in_flight <= 3


def test_event_loops_that_called_are_not_kept_alive(make_executor: MakeExecutor) -> None:
    import gc
    import weakref

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def quick() -> int:
        return 1

    ex = make_executor(reg)
    refs = []
    for _ in range(5):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(ex.aexecute(ToolCall(name="quick")))
        loop.close()
        refs.append(weakref.ref(loop))
        del loop
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_no_hook_can_retry_a_mutating_call_that_timed_out(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    from toolbus import RetryDecision

    reg = ToolRegistry()
    runs = []

    @reg.tool(timeout=0.05)
    def write() -> str:
        runs.append(1)
        release.wait(30)
        return "written"

    class Retrying(Executor):
        def should_retry(self, call: ToolCall, failure: Any) -> RetryDecision:
            return RetryDecision(retry=True, delay=0)

    ex = Retrying(reg)
    try:
        r = ex.execute(ToolCall(name="write"))
    finally:
        ex.close()
    assert (r.status, r.attempts, len(runs)) == ("timeout", 1, 1)


# -- the third review -----------------------------------------------------------------------


def test_a_timed_out_caller_lends_no_share_to_its_late_nested_calls(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}
    lock = threading.Lock()
    now = {"n": 0, "peak": 0}
    parents_timed_out = threading.Event()
    nested_done = threading.Barrier(4, timeout=20)

    overlap = threading.Event()

    @reg.tool(read_only=True)
    def leaf() -> str:
        with lock:
            now["n"] += 1
            now["peak"] = max(now["peak"], now["n"])
            if now["n"] > 1:
                overlap.set()
        overlap.wait(0.3)  # gives the others a moment to overlap, if they may
        with lock:
            now["n"] -= 1
        return "leaf"

    @reg.tool(read_only=True, timeout=0.1)
    def parent() -> str:
        parents_timed_out.wait(10)  # ignores its deadline; its caller is gone
        holder["ex"].execute(ToolCall(name="leaf"))
        nested_done.wait()
        return "late"

    ex = holder["ex"] = make_executor(reg, max_parallel=1)
    for _ in range(3):
        assert ex.execute(ToolCall(name="parent")).status == "timeout"
    parents_timed_out.set()
    nested_done.wait()  # the three abandoned parents' nested calls have all run
    assert now["peak"] <= 1
    assert ex.stats().peak_in_flight <= 2


def test_a_nested_call_from_a_job_run_inside_submit_is_refused_not_hung(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    holder: dict[str, Executor] = {}

    @reg.tool(read_only=True, backend="inline")
    def leaf() -> str:
        return "leaf"

    @reg.tool(read_only=True, backend="inline")
    def outer() -> Any:
        r = holder["ex"].execute(ToolCall(name="leaf"))
        return [r.status, r.error_code]

    ex = holder["ex"] = make_executor(reg, backends={"inline": _Inline()}, timeout=1)
    t, out = _in_thread(lambda: ex.execute(ToolCall(name="outer")))
    t.join(10)
    assert not t.is_alive(), "the executor hangs"
    assert out["r"].output == ["rejected", ErrorCode.TOOL_UNAVAILABLE]
    assert ex.stats().in_flight == 0


def test_asyncio_run_ending_in_an_async_post_call_hook_ends_cancelled(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    in_hook = threading.Event()

    @reg.tool(read_only=True)
    async def quick() -> str:
        return "done"

    async def post(call: ToolCall, result: Any) -> Any:
        in_hook.set()
        await asyncio.Event().wait()
        return result

    ex = make_executor(reg, timeout=None, post_call=[post])
    pending: list[asyncio.Future[Any]] = []

    async def main() -> None:
        pending.append(asyncio.ensure_future(ex.aexecute(ToolCall(id="q", name="quick"))))
        await asyncio.to_thread(in_hook.wait, 10)

    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        asyncio.run(main())
        (finished,) = rec.wait_for(bus.FINISHED, timeout=10)
    assert finished.result.status == "cancelled"
