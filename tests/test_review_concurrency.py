"""Regressions from the review of the concurrency core: each test once showed a bug.

Every wait has a timeout; a "hang" is asserted as "no result within N seconds".
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import wait_until
from toolbus import Executor, RetryPolicy, ToolCall, ToolRegistry, bus
from toolbus.actors import _scheduler
from toolbus.actors._messages import Close
from toolbus.actors._timers import TimerService
from toolbus.retry import RetryDecision


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    th = threading.Thread(target=lambda: out.setdefault("r", fn()), daemon=True)
    th.start()
    return th, out


def _finished(th: threading.Thread, out: dict[str, Any], timeout: float = 2.0) -> bool:
    th.join(timeout)
    return "r" in out


# -- 1. parked runs: pool.waiting / batch.waiting ----------------------------------------


def test_cancelled_call_parked_in_tool_queue_blocks_the_next_call() -> None:
    reg = ToolRegistry()
    gate = threading.Event()

    @reg.tool(read_only=True, max_concurrency=1)
    def slow(i: int) -> int:
        gate.wait(5)
        return i

    ex = Executor(reg, timeout=None)

    async def main() -> str:
        a = asyncio.create_task(ex.aexecute(ToolCall(id="a", name="slow", arguments={"i": 1})))
        await asyncio.sleep(0.1)
        b = asyncio.create_task(ex.aexecute(ToolCall(id="b", name="slow", arguments={"i": 2})))
        await asyncio.sleep(0.05)
        c = asyncio.create_task(ex.aexecute(ToolCall(id="c", name="slow", arguments={"i": 3})))
        await asyncio.sleep(0.05)
        b.cancel()  # b is parked in pool.waiting behind a
        await asyncio.sleep(0.05)
        gate.set()
        await a
        try:
            return (await asyncio.wait_for(c, 2)).status
        except TimeoutError:
            return "hang"

    try:
        assert asyncio.run(main()) == "ok"
        # A single call's caller is woken before its worker reports: stats catch up.
        wait_until(lambda: _load(ex) == (0, 0), what="no call in flight or queued")
    finally:
        gate.set()
        ex.close(timeout=1)


def test_stop_on_error_abort_parked_in_tool_queue_blocks_another_call() -> None:
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
    reg = ToolRegistry()
    gate_q, gate_a = threading.Event(), threading.Event()

    @reg.tool(read_only=True)
    def q(i: int) -> int:
        gate_q.wait(5)
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
        assert _finished(tc, oc, 1.0), f"c waits for the batch's q; stats {ex.stats().pools}"
    finally:
        gate_q.set()
        gate_a.set()
        ex.close(timeout=1)


def _load(ex: Executor) -> tuple[int, int]:
    st = ex.stats()
    return st.in_flight, st.queued


# -- 2. _batch_done called twice --------------------------------------------------------


def test_batch_of_unknown_tools_completes_once() -> None:
    with bus.Recorder("tool:batch-complete") as rec, Executor(ToolRegistry()) as ex:
        ex.execute_batch([ToolCall(name="ghost", arguments={})])
        ex.drain_events()
        assert len(rec.of("tool:batch-complete")) == 1


def test_stop_on_error_batch_completes_once() -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def boom(i: int) -> int:
        raise ValueError("x")

    @reg.tool
    def write(i: int) -> int:
        return i

    with bus.Recorder("tool:batch-complete") as rec, Executor(reg) as ex:
        calls = [
            ToolCall(name="boom", arguments={"i": 1}),
            ToolCall(name="write", arguments={"i": 1}),
        ]
        ex.execute_batch(calls, stop_on_error=True)
        ex.drain_events()
        assert len(rec.of("tool:batch-complete")) == 1


# -- 3. cancellation lost while the worker holds the outcome ----------------------------------


class _SlowRetry(Executor):
    def should_retry(self, call: ToolCall, failure: Any) -> RetryDecision:
        time.sleep(0.3)  # tool-side: a slow hook under test
        return RetryDecision(True, 0.0)


def test_cancel_while_should_retry_runs_is_lost() -> None:
    reg = ToolRegistry()
    invoked: list[float] = []

    @reg.tool(read_only=True)
    def flaky(i: int) -> int:
        invoked.append(time.monotonic())
        if len(invoked) == 1:
            raise ConnectionError("once")
        return i

    with bus.Recorder("tool:finished") as rec:
        ex = _SlowRetry(reg, timeout=None)

        async def main() -> float:
            t = asyncio.create_task(ex.aexecute(ToolCall(name="flaky", arguments={"i": 1})))
            await asyncio.sleep(0.1)  # attempt 1 failed; should_retry is running
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            cancelled_at = time.monotonic()
            await asyncio.sleep(0.6)
            return cancelled_at

        try:
            cancelled_at = asyncio.run(main())
            ex.drain_events()
            assert [e.result.status for e in rec.of("tool:finished")] == ["cancelled"]
            assert not [t for t in invoked if t > cancelled_at]
        finally:
            ex.close(timeout=1)


# -- 4. close() racing submission -----------------------------------------------------------


def _ok_registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(i: int) -> int:
        return i

    return reg


def test_batch_submitted_after_close_was_handled_is_released() -> None:
    # What happens when execute_batch passed `_tell`'s `_closed` check just before
    # close() set it and its Submit reaches the supervisor after Close.
    ex = Executor(_ok_registry())
    try:
        ex._supervisor.ask(Close("closed"))
        th, out = _in_thread(lambda: ex.execute_batch([ToolCall(name="ok", arguments={"i": 1})]))
        assert _finished(th, out), "execute_batch hangs"
    finally:
        ex.close(timeout=1)


def test_submit_after_the_supervisor_actor_stopped_is_not_lost() -> None:
    # Submissions no longer go through the actor's mailbox (admission is inline,
    # under the scheduler's lock); an actor stopped some other way than close()
    # closes the scheduler, and later calls still get exactly one result.
    ex = Executor(_ok_registry())
    try:
        ex._supervisor.stop()
        th, out = _in_thread(lambda: ex.execute(ToolCall(name="ok", arguments={"i": 1})))
        assert _finished(th, out), "execute hangs"
        assert out["r"].status == "cancelled"
    finally:
        ex.close(timeout=1)


# -- 5. stale Deadline after a 'retry' report ------------------------------------------------


def test_stale_deadline_after_retry_report_does_not_end_the_call(monkeypatch: Any) -> None:
    # /tmp stress (tools failing right at their deadline) hits this naturally (~3% of calls);
    # here the supervisor is made busy while the Deadline pops, to make it deterministic.
    reg = ToolRegistry()
    n = {"calls": 0}

    @reg.tool(
        read_only=True,
        timeout=0.1,
        retry=RetryPolicy(max_retries=1, backoff_base=0.3, backoff_factor=1, jitter=0),
    )
    def flaky(i: int) -> int:
        n["calls"] += 1
        if n["calls"] == 1:
            time.sleep(0.05)  # tool under test: fails right at its deadline
            raise ConnectionError("flaky")
        return i

    on_report = _scheduler.Scheduler._on_report
    post = _scheduler.Scheduler.post
    deadline_posted = threading.Event()

    def noting_post(self: Any, message: Any) -> None:
        if type(message).__name__ == "Deadline":
            deadline_posted.set()
        post(self, message)

    def busy_on_report(self: Any, msg: Any) -> None:
        if msg.outcome.kind == "retry":
            # Fault injection: the supervisor is busy with the retry report
            # until the attempt's Deadline has been posted behind it.
            deadline_posted.wait(5)
        on_report(self, msg)

    monkeypatch.setattr(_scheduler.Scheduler, "post", noting_post)
    monkeypatch.setattr(_scheduler.Scheduler, "_on_report", busy_on_report)
    ex = Executor(reg, hook_grace=2.0)  # a loaded machine must not turn this into a grace timeout
    try:
        th, out = _in_thread(lambda: ex.execute(ToolCall(name="flaky", arguments={"i": 7})))
        assert _finished(th, out, 3)
        r = out["r"]
        assert (r.status, r.attempts, r.error) == ("ok", 2, None)
    finally:
        ex.close(timeout=1)


# -- 6. TimerService ---------------------------------------------------------------------


def test_cancelling_a_fired_timer_keeps_len_non_negative() -> None:
    ts = TimerService()
    try:
        fired = threading.Event()
        h = ts.schedule(0.0, fired.set)
        assert fired.wait(5)
        ts.cancel(h)  # the supervisor does this when a Report beats the popped Deadline
        assert len(ts) == 0
    finally:
        ts.close()


def test_timer_delays_are_clamped_to_what_a_wait_accepts() -> None:
    ts = TimerService()
    try:
        for delay in (float("inf"), 1e12, float("nan"), -1.0):
            before = time.monotonic()
            h = ts.schedule(delay, lambda: None)
            assert before <= h.when <= time.monotonic() + threading.TIMEOUT_MAX
            ts.cancel(h)
    finally:
        ts.close()


def test_infinite_timeout_does_not_kill_the_timer_thread() -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(i: int) -> int:
        return i

    @reg.tool(read_only=True, timeout=0.1)
    def sleepy(i: int) -> int:
        time.sleep(0.4)  # tool under test: outlives its deadline
        return i

    ex = Executor(reg, timeout=float("inf"))  # accepted: only <= 0 is refused
    try:
        assert ex.execute(ToolCall(name="ok", arguments={"i": 1})).status == "ok"
        assert ex.execute(ToolCall(name="sleepy", arguments={"i": 1})).status == "timeout"
    finally:
        ex.close(timeout=1)


class _DelayHook(Executor):
    delay: Any = None

    def should_retry(self, call: ToolCall, failure: Any) -> RetryDecision:
        return RetryDecision(failure.attempt < 2, self.delay)


@pytest.mark.parametrize("delay", [None, "0.1", float("nan")])
def test_garbage_retry_delay_still_ends_the_call(delay: Any) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def fail(i: int) -> int:
        raise ConnectionError("x")

    ex = _DelayHook(reg)
    ex.delay = delay
    try:
        th, out = _in_thread(lambda: ex.execute(ToolCall(name="fail", arguments={"i": 1})))
        assert _finished(th, out, 2), "the call never ends"
    finally:
        ex.close(timeout=1)


# -- 7. BaseException from subscribers and async tools -------------------------------------


def _subprocess(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]


def test_subscriber_raising_base_exception_is_contained() -> None:
    out = _subprocess(
        """
        import threading, time
        from toolbus import Executor, ToolRegistry, ToolCall, bus
        reg = ToolRegistry()
        @reg.tool(read_only=True)
        def slowok(i: int) -> int:
            time.sleep(0.1); return i  # tool under test
        other = Executor(reg)
        ex = Executor(reg, max_parallel=1)
        def rx(sender, event, signal):
            if event.call_id == "c0":
                raise SystemExit("a subscriber called sys.exit()")
        sub = bus.subscribe(rx, "tool:executing", sender=ex)
        out = {}
        calls = [ToolCall(id=f"c{i}", name="slowok", arguments={"i": i}) for i in range(3)]
        th = threading.Thread(target=lambda: out.setdefault("b", ex.execute_batch(calls)), daemon=True)
        th.start(); th.join(3)
        print("b" in out, other._supervisor.is_alive())
        """
    )
    assert out == "True True", out


def test_async_tool_raising_system_exit_does_not_kill_the_loop() -> None:
    out = _subprocess(
        """
        import asyncio
        from toolbus import Executor, ToolRegistry, ToolCall
        reg = ToolRegistry()
        @reg.tool(read_only=True)
        async def quitter(i: int) -> int:
            await asyncio.sleep(0)
            raise SystemExit("tool calls sys.exit()")
        @reg.tool(read_only=True)
        async def aok(i: int) -> int:
            await asyncio.sleep(0)
            return i
        ex = Executor(reg, timeout=1.0)
        a = ex.execute(ToolCall(name="quitter", arguments={"i": 1}))
        b = ex.execute(ToolCall(name="aok", arguments={"i": 1}))
        print(a.status, b.status)
        """
    )
    assert out == "error ok", out


# -- 8. an exception inside a supervisor handler loses the run ------------------------------


def test_worker_start_failure_still_ends_the_call(monkeypatch: Any) -> None:
    from toolbus.backends import _thread

    real = _thread.ToolWorker.start
    fail = {"n": 1}

    def start(*a: Any, **k: Any) -> Any:
        if fail["n"]:
            fail["n"] -= 1
            raise RuntimeError("can't start new thread")
        return real(*a, **k)

    monkeypatch.setattr(_thread.ToolWorker, "start", start)
    ex = Executor(_ok_registry())
    try:
        th, out = _in_thread(lambda: ex.execute(ToolCall(name="ok", arguments={"i": 1})))
        assert _finished(th, out), "execute hangs"
    finally:
        ex.close(timeout=1)


# -- 9. regression in af84076 (hot path): coroutines from sync callables -----------------------


def test_coroutine_returned_by_sync_wrapper_is_awaited() -> None:
    import functools

    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*a: Any, **k: Any) -> Any:
            return fn(*a, **k)

        return wrapper

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    @logged
    async def fetch(i: int) -> int:
        await asyncio.sleep(0)
        return i * 2

    with Executor(reg) as ex:
        r = ex.execute(ToolCall(name="fetch", arguments={"i": 21}))
        assert (r.status, r.output) == ("ok", 42)
