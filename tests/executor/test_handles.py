"""Handles: `Executor.submit`, `submit_batch` and `cancel`, from any thread.

A handle is a `concurrent.futures.Future` of the call's result. Cancelling it
ends the call `cancelled` in whatever state it is (queued, waiting on a
policy, backing off before a retry, running), exactly once, and leaves
nothing held: no slot, no queue entry, no quota unit, no rate-limit turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, RetryPolicy, ToolCall, ToolRegistry, ToolResult, bus
from toolbus.policies import quota, rate_limit
from toolbus.tools import ToolError


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Holds the blocking tools until the test ends (never left hung)."""
    event = threading.Event()
    yield event
    event.set()


def _registry(gate: threading.Event, entered: threading.Event) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def quick(i: int = 0) -> int:
        return i

    @reg.tool(read_only=True)
    def block(i: int = 0) -> int:
        entered.set()
        gate.wait(60)
        return i

    @reg.tool(read_only=True)
    async def ablock(i: int = 0) -> int:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled_tasks.append(i)
            raise
        return i

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=3, backoff_base=60, jitter=0))
    def flaky() -> None:
        raise ToolError("try again", retryable=True)

    return reg


cancelled_tasks: list[int] = []


def _finished(recorder: bus.Recorder, call_id: str) -> list[ToolResult]:
    return [e for e in recorder.of(bus.FINISHED) if e.call_id == call_id]


def _idle(ex: Executor) -> Callable[[], bool]:
    def check() -> bool:
        s = ex.stats()
        return s.in_flight == 0 and s.queued == 0 and s.timers == 0

    return check


def test_a_handle_is_a_future_of_the_result(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry(threading.Event(), threading.Event()))
    handle = ex.submit(ToolCall(id="q", name="quick", arguments={"i": 7}))
    assert isinstance(handle, cf.Future)
    done, _ = cf.wait([handle], timeout=30)
    assert done == {handle}
    assert handle.result().output == 7 and handle.call_id == "q"
    assert not handle.cancel() and not handle.cancelled()  # finished: nothing to stop
    unknown = ex.submit(ToolCall(name="nope"))
    assert unknown.result(30).error_code is ErrorCode.TOOL_NOT_FOUND  # never raises
    many = [ex.submit(ToolCall(name="quick", arguments={"i": i})) for i in range(20)]
    assert sorted(f.result().output for f in cf.as_completed(many, timeout=30)) == list(range(20))


@pytest.mark.parametrize("state", ["queued", "running", "async running", "policy", "backoff"])
def test_cancel_from_another_thread_ends_the_call_once_in_each_state(
    make_executor: MakeExecutor,
    recorder: bus.Recorder,
    gate: threading.Event,
    state: str,
) -> None:
    entered = threading.Event()
    reg = _registry(gate, entered)
    limit = rate_limit("1/minute")
    if state == "policy":
        reg.get("quick").policies = [limit]  # type: ignore[union-attr]
    ex = make_executor(reg, max_parallel=1, timeout=120)
    if state == "queued":
        blocker = ex.submit(ToolCall(name="block"))
        assert entered.wait(30)
        handle = ex.submit(ToolCall(id="x", name="quick"))
        wait_until(lambda: ex.stats().queued == 1, 30, "the call queued")
    elif state == "running":
        handle = ex.submit(ToolCall(id="x", name="block"))
        assert entered.wait(30)
    elif state == "async running":
        handle = ex.submit(ToolCall(id="x", name="ablock", arguments={"i": 5}))
        assert entered.wait(30)
    elif state == "policy":
        assert ex.execute(ToolCall(name="quick")).status == "ok"  # the minute's one call
        handle = ex.submit(ToolCall(id="x", name="quick"))
        wait_until(lambda: limit.waiting == 1, 30, "the call waiting for its turn")
    else:
        handle = ex.submit(ToolCall(id="x", name="flaky"))
        recorder.wait_for(bus.ERROR, timeout=30)  # its first attempt failed...

        def backing_off() -> bool:  # ...and it waits a minute for its second
            s = ex.stats()
            return s.in_flight == 0 and s.timers == 1

        wait_until(backing_off, 30, "the call backing off")
    stopped: list[bool] = []
    canceller = threading.Thread(target=lambda: stopped.append(handle.cancel()))
    canceller.start()
    canceller.join(30)
    assert stopped == [True]
    result = handle.result(30)
    assert (result.status, result.error_code) == ("cancelled", ErrorCode.CANCELLED)
    assert handle.cancelled() and not handle.cancel()
    if state == "queued":
        gate.set()
        assert blocker.result(30).status == "ok"
    if state == "async running":
        wait_until(lambda: 5 in cancelled_tasks, 30, "the task cancelled for real")
    ex.drain_events(timeout=30)
    assert len(_finished(recorder, "x")) == 1
    assert [e.call_id for e in recorder.of(bus.CANCELLED)].count("x") == 1
    gate.set()
    wait_until(_idle(ex), 30, "nothing left held")
    if state == "policy":
        assert limit.waiting == 0  # its turn given back


def test_a_quota_unit_comes_back_when_a_queued_call_is_cancelled(
    make_executor: MakeExecutor, gate: threading.Event
) -> None:
    entered = threading.Event()
    reg = _registry(gate, entered)
    reg.get("quick").policies = [quota(1)]  # type: ignore[union-attr]
    ex = make_executor(reg, max_parallel=1)
    ex.submit(ToolCall(name="block"))
    assert entered.wait(30)
    first = ex.submit(ToolCall(name="quick", arguments={"i": 1}))
    wait_until(lambda: ex.stats().queued == 1, 30, "the call queued")
    assert first.cancel() and first.result(30).status == "cancelled"
    gate.set()
    assert ex.execute(ToolCall(name="quick", arguments={"i": 2})).output == 2  # the unit is back


def test_a_batch_cancelled_midway_keeps_what_finished(
    make_executor: MakeExecutor, recorder: bus.Recorder, gate: threading.Event
) -> None:
    entered = threading.Event()
    ex = make_executor(_registry(gate, entered), max_parallel=1)
    calls = [
        ToolCall(id="a", name="quick", arguments={"i": 1}),
        ToolCall(id="b", name="block"),
        ToolCall(id="c", name="quick", arguments={"i": 3}),
    ]
    handle = ex.submit_batch(calls)
    assert [c.call_id for c in handle.calls] == ["a", "b", "c"]
    assert handle.calls[0].result(30).output == 1
    assert entered.wait(30)  # "b" runs, "c" waits for the slot
    assert handle.cancel()
    batch = handle.result(30)
    assert [r.status for r in batch.results] == ["ok", "cancelled", "cancelled"]
    assert [c.result().status for c in handle.calls] == ["ok", "cancelled", "cancelled"]
    assert not handle.cancelled()  # one call ran to its end
    assert handle.batch_id is not None and not handle.cancel()
    ex.drain_events(timeout=30)
    assert sorted(e.call_id for e in recorder.of(bus.FINISHED)) == ["a", "b", "c"]
    gate.set()
    wait_until(_idle(ex), 30, "nothing left held")


def test_cancel_by_id_stops_every_unfinished_match(
    make_executor: MakeExecutor, gate: threading.Event
) -> None:
    entered = threading.Event()
    ex = make_executor(_registry(gate, entered), max_parallel=1)
    running = ex.submit(ToolCall(id="same", name="block"))
    assert entered.wait(30)
    queued = ex.submit(ToolCall(id="same", name="quick"))
    other = ex.submit(ToolCall(id="other", name="quick"))
    wait_until(lambda: ex.stats().queued == 2, 30, "two calls queued")
    assert ex.cancel(call_id="same") == 2  # a model may repeat an id: both go
    assert ex.cancel(call_id="same") == 0  # nothing unfinished left by that id
    assert running.result(30).status == queued.result(30).status == "cancelled"
    gate.set()
    assert other.result(30).status == "ok"
    batch = ex.submit_batch([ToolCall(name="block"), ToolCall(name="quick")])
    assert batch.batch_id is not None
    assert ex.cancel(batch_id=batch.batch_id) in (0, 1, 2)  # the gate is open: may be done
    assert all(r.status in ("ok", "cancelled") for r in batch.result(30).results)
    with pytest.raises(TypeError, match="call_id=, batch_id="):
        ex.cancel()
    with pytest.raises(TypeError, match="call_id must be a string"):
        ex.cancel(call_id=3)  # type: ignore[arg-type]


def test_a_done_callback_may_call_the_executor(make_executor: MakeExecutor) -> None:
    """A callback added before the call ends runs off the scheduler's lock: it
    may submit, wait and read stats without a deadlock."""
    ex = make_executor(_registry(threading.Event(), threading.Event()))
    got: list[int] = []
    done = threading.Event()

    def again(future: cf.Future[ToolResult]) -> None:
        got.append(ex.execute(ToolCall(name="quick", arguments={"i": 2})).output)
        got.append(ex.stats().submitted)
        done.set()

    gate = threading.Event()
    entered = threading.Event()
    ex2 = make_executor(_registry(gate, entered))
    handle = ex2.submit(ToolCall(name="block", arguments={"i": 1}))
    handle.add_done_callback(again)
    assert entered.wait(30)
    gate.set()
    assert done.wait(30)
    assert got[0] == 2 and handle.result().output == 1


def test_an_empty_batch_handle_is_done_at_once(make_executor: MakeExecutor) -> None:
    ex = make_executor(ToolRegistry())
    handle = ex.submit_batch([])
    assert handle.done() and handle.result().results == () and handle.calls == ()
    assert not handle.cancel() and not handle.cancelled()  # nothing was cancelled


def test_a_batch_that_ends_before_submit_batch_returns_still_gives_its_handle(
    make_executor: MakeExecutor,
) -> None:
    """A batch refused whole at submission (an unknown tool, a closed executor)
    ended before its handle was wired to its runs: `submit_batch` raised
    ValueError from a zip (review of issue 21)."""
    ex = make_executor(_registry(threading.Event(), threading.Event()))
    handle = ex.submit_batch([ToolCall(id="a", name="nope")])
    assert handle.calls[0].call_id == "a" and handle.batch_id is not None
    assert handle.result(30).results[0].error_code is ErrorCode.TOOL_NOT_FOUND
    for _ in range(200):  # quick calls: often done before submit_batch returns
        quick = ex.submit_batch([ToolCall(name="quick", arguments={"i": 1})])
        assert quick.result(30).results[0].output == 1
    ex.close()
    closed = ex.submit_batch([ToolCall(name="quick")])
    assert closed.result(30).results[0].status == "cancelled"


async def test_await_a_handle_from_a_coroutine(make_executor: MakeExecutor) -> None:
    """`await handle` gives the result, a cancelled one too (asyncio.wrap_future
    would read it as the future's own cancellation and raise)."""
    gate, entered = threading.Event(), threading.Event()
    ex = make_executor(_registry(gate, entered))
    assert (await ex.submit(ToolCall(name="quick", arguments={"i": 4}))).output == 4
    handle = ex.submit(ToolCall(name="block"))
    assert await asyncio.to_thread(entered.wait, 30)
    assert handle.cancel()
    assert (await handle).status == "cancelled"
    batch = ex.submit_batch([ToolCall(name="quick", arguments={"i": i}) for i in range(3)])
    assert [r.output for r in (await batch).results] == [0, 1, 2]
    gate.set()


def test_waiting_on_a_handle_inside_an_async_tool_is_refused(make_executor: MakeExecutor) -> None:
    """A handle's result() from an async tool would block the loop its calls
    run on, for good (review of issue 21): refused, as execute() is there."""
    gate = threading.Event()
    reg = _registry(gate, threading.Event())
    seen: list[str] = []

    @reg.tool(read_only=True)
    async def waits() -> str:
        handle = ex.submit(ToolCall(name="block"))  # pending until the gate opens
        for wait in (handle.result, handle.exception):
            try:
                wait(5)
            except RuntimeError as e:
                seen.append(str(e))
        return "done"

    ex = make_executor(reg)
    assert ex.execute(ToolCall(name="waits")).output == "done"
    gate.set()
    assert len(seen) == 2 and all("await the handle instead" in text for text in seen)


def test_done_callbacks_share_one_thread(make_executor: MakeExecutor) -> None:
    """A callback per handle started a thread per handle (review of issue 21)."""
    gate, entered = threading.Event(), threading.Event()
    ex = make_executor(_registry(gate, entered), max_parallel=64)
    threads: set[int] = set()
    done = threading.Barrier(2, timeout=30)
    handles = [ex.submit(ToolCall(name="block", arguments={"i": i})) for i in range(50)]
    left = [len(handles)]
    lock = threading.Lock()

    def note(future: cf.Future[ToolResult]) -> None:
        with lock:
            threads.add(threading.get_ident())
            left[0] -= 1
            last = left[0] == 0
        if last:
            done.wait()

    for h in handles:
        h.add_done_callback(note)
    gate.set()
    done.wait()
    assert len(threads) == 1 and threading.get_ident() not in threads
