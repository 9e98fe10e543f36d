"""Hung tools: callers are freed at the deadline, everything else keeps flowing."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import textwrap
import threading
import time

from tests.concurrency_tools import in_thread as _in_thread
from tests.conftest import HANG_TIMEOUT, MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, bus


def _registry(release: threading.Event, entered: threading.Event) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def stuck() -> str:
        entered.set()
        release.wait()  # blocks like a socket read that never returns
        return "late"

    @reg.tool(read_only=True)
    def quick(i: int) -> int:
        return i

    return reg


def test_hung_tool_frees_its_caller_while_others_flow(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    entered = threading.Event()
    ex = make_executor(_registry(release, entered), max_parallel=4, timeout=10)
    out: list[object] = []
    caller = threading.Thread(target=lambda: out.append(ex.execute(ToolCall(name="stuck"))))
    caller.start()
    assert entered.wait(5)

    # While the tool hangs: other calls complete and the supervisor answers at once.
    latencies = []
    for i in range(50):
        assert ex.execute(ToolCall(name="quick", arguments={"i": i})).output == i
        if i % 5 == 0:
            t0 = time.perf_counter()
            stats = ex.stats()
            latencies.append(time.perf_counter() - t0)
            assert stats.in_flight >= 0
    # The supervisor answers while the tool hangs: bounded loosely (seconds, not
    # the timeout of 10 s it would wait for if blocked), as a loaded machine
    # slows every answer; how fast it answers is the benchmark suite's figure.
    assert statistics.median(latencies) < 2

    caller.join(10)
    assert not caller.is_alive(), "the caller was not freed at the deadline"
    (result,) = out
    assert result.status == "timeout"  # type: ignore[attr-defined]
    assert ex.stats().abandoned_workers == 1


def test_late_result_is_discarded_and_reported(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    entered = threading.Event()
    ex = make_executor(_registry(release, entered))
    with bus.Recorder(sender=ex) as rec:
        r = ex.execute(ToolCall(id="s1", name="stuck"))
        assert r.status == "timeout"
        release.set()  # the abandoned attempt now finishes
        (late,) = rec.wait_for(bus.LATE_RESULT)
        ex.drain_events()
    assert (late.call_id, late.status, late.attempt) == ("s1", "ok", 1)
    finished = rec.of(bus.FINISHED)
    assert len(finished) == 1 and finished[0].result.status == "timeout"


def test_worker_replaced_after_timeout(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    entered = threading.Event()
    reg = ToolRegistry()
    threads: list[str] = []

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT, max_concurrency=1)
    def sometimes_stuck(hang: bool) -> str:
        threads.append(threading.current_thread().name)
        if hang:
            entered.set()
            release.wait()
        return "ok"

    ex = make_executor(reg)
    assert (
        ex.execute(ToolCall(name="sometimes_stuck", arguments={"hang": True})).status == "timeout"
    )
    # Only the hanging call is held to the tool's short timeout: this one must end ok,
    # which can take longer on a busy machine.
    again = ex.execute(ToolCall(name="sometimes_stuck", arguments={"hang": False}), timeout=60)
    assert again.status == "ok"
    assert threads[0] != threads[1]
    wait_until(lambda: ex.stats().in_flight == 0, what="the last call's report")
    assert ex.stats().abandoned_workers == 1


async def test_async_tool_is_cancelled_for_real(make_executor: MakeExecutor) -> None:
    import asyncio

    cancelled = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    async def sleepy() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    ex = make_executor(reg)
    r = await ex.aexecute(ToolCall(name="sleepy"))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert await asyncio.to_thread(cancelled.wait, 5)


def test_an_async_tool_cancelled_at_its_deadline_is_a_timeout_and_not_a_late_result(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """An async attempt cancelled at its deadline raised the cancellation it
    was given, which was counted and announced as a late result (status
    `error`) after its timeout. Only a value (or an error of its own) that an
    attempt comes back with after its deadline is late."""
    cancelled = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    async def sleepy() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    async def stubborn() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "came back anyway"  # ignores its cancellation: a late result
        return "never"

    @reg.tool(read_only=True)
    async def probe() -> str:
        return "ok"

    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="s", name="sleepy"))
    assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert cancelled.wait(10)
    # The probe runs on the same loop, after the cancelled attempt's report:
    # once it is back, that report has been counted (or not).
    assert ex.execute(ToolCall(name="probe")).output == "ok"
    stats = ex.stats()
    assert (stats.timeouts, stats.late_results, stats.timeout) == (1, 0, 1)
    ex.drain_events()
    mine = [name for name, event in recorder.events if getattr(event, "call_id", None) == "s"]
    assert mine == ["tool:executing", "tool:timeout", "tool:finished"]

    r = ex.execute(ToolCall(id="t", name="stubborn"))
    assert r.status == "timeout"
    [late] = recorder.wait_for(bus.LATE_RESULT)
    assert (late.call_id, late.status) == ("t", "ok")
    assert ex.stats().late_results == 1


def test_cooperative_tool_sees_cancellation(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    from toolbus import ToolContext

    saw_cancel = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=HANG_TIMEOUT)
    def polite(ctx: ToolContext) -> str:
        if ctx.wait_cancelled(10):
            saw_cancel.set()
        return "stopped"

    ex = make_executor(reg)
    assert ex.execute(ToolCall(name="polite")).status == "timeout"
    assert saw_cancel.wait(5)


def test_process_exits_promptly_with_a_tool_still_hung() -> None:
    script = textwrap.dedent(
        """
        import threading, time
        from toolbus import Executor, ToolRegistry, ToolCall
        reg = ToolRegistry()

        @reg.tool(timeout=0.2)
        def forever() -> None:
            threading.Event().wait()

        ex = Executor(reg)
        print(ex.execute(ToolCall(name="forever")).status, flush=True)
        # No close(): a forgotten executor must not keep the process alive either.
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "timeout"


def test_process_exits_promptly_after_close_with_a_tool_hung() -> None:
    script = textwrap.dedent(
        """
        import threading
        from toolbus import Executor, ToolRegistry, ToolCall
        reg = ToolRegistry()
        entered = threading.Event()

        @reg.tool(timeout=30)
        def forever() -> None:
            entered.set()
            threading.Event().wait()

        ex = Executor(reg)
        t = threading.Thread(target=lambda: print(ex.execute(ToolCall(name="forever")).status))
        t.start()
        entered.wait()
        ex.close()  # cancels the call in flight; its caller gets a result
        t.join()
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cancelled"


def test_abandoned_worker_stops_when_it_returns_after_close(release: threading.Event) -> None:
    from toolbus import Executor

    entered = threading.Event()
    before = set(threading.enumerate())
    ex = Executor(_registry(release, entered))
    assert ex.execute(ToolCall(name="stuck")).status == "timeout"
    workers = [t for t in set(threading.enumerate()) - before if t.name.startswith("ToolWorker")]
    # Only the stuck one: its timeout, followed by nothing of the user's, was
    # handled where it was noticed, without a thread of its own.
    assert len(workers) == 1
    ex.close()
    release.set()
    for t in workers:
        t.join(5)
    assert not any(t.is_alive() for t in workers)


def test_late_results_are_counted(make_executor: MakeExecutor, release: threading.Event) -> None:
    entered = threading.Event()
    ex = make_executor(_registry(release, entered))
    with bus.Recorder(bus.LATE_RESULT, sender=ex) as rec:
        assert ex.execute(ToolCall(name="stuck")).status == "timeout"
        release.set()
        rec.wait_for(bus.LATE_RESULT)
    # The worker reported to the supervisor before announcing the late result.
    stats = ex.stats()
    assert stats.late_results == 1
    assert stats.abandoned_total == 1


def test_tool_context_deadline_starts_at_dispatch(make_executor: MakeExecutor) -> None:
    from toolbus import ToolContext

    seen: list[float | None] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=2.0)
    def clock(ctx: ToolContext) -> None:
        seen.append(ctx.remaining)

    ex = make_executor(reg)
    ex.execute(ToolCall(name="clock"))
    (remaining,) = seen
    assert remaining is not None and 0 < remaining <= 2.0


def test_calls_after_close_are_announced(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    entered = threading.Event()
    ex = make_executor(_registry(release, entered))
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        ex.close()
        r = ex.execute(ToolCall(id="after", name="quick", arguments={"i": 1}))
        (finished,) = rec.wait_for(bus.FINISHED)
    assert r.status == "cancelled"
    assert finished.call_id == "after"


def test_close_leaves_no_event_loop_thread_behind() -> None:
    """close() left the executor's event loop thread behind, with a tool still cleaning up (Engine
    v2 review)."""
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
