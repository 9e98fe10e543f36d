"""The waiting side's backstop (`toolbus.actors._backstop.overdue`), pure: when
a caller looks again, and which attempts it reports overdue, once each."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry
from toolbus.actors._backstop import POLL, SLACK, SPENT, overdue
from toolbus.pipeline import Run


def _run(timeout: float | None = 1.0) -> Run:
    from toolbus import RetryPolicy

    return Run(
        ToolCall(name="t"),
        None,
        context=contextvars.copy_context(),
        timeout=timeout,
        policy=RetryPolicy(),
    )


def test_backstop_waits_for_the_earliest_deadline() -> None:
    a, b = _run(), _run()
    a.begin_attempt(1)
    b.begin_attempt(1)
    a.deadline, b.deadline = 100.0, 50.0
    late, wake = overdue([a, b], 10.0, set())
    assert late == []
    assert wake == pytest.approx(40.0 + SLACK)


def test_backstop_reports_an_overdue_attempt_once() -> None:
    a = _run()
    a.begin_attempt(1)
    a.deadline = 5.0
    noticed: set[tuple[Run, int]] = set()
    late, wake = overdue([a], 5.0 + SLACK, noticed)
    assert late == [(a, 1)]
    assert wake == POLL
    assert overdue([a], 6.0, noticed)[0] == []  # noticed already
    a.begin_attempt(2)  # a retry is a new attempt with a deadline of its own
    a.deadline = 7.0
    assert overdue([a], 8.0, noticed)[0] == [(a, 2)]


def test_backstop_reports_a_spent_whole_call_budget_once() -> None:
    """Whatever the call is doing (queued here: no attempt, no deadline), its
    whole-call deadline wakes the caller, who reports it once; an attempt
    under way is reported for its own deadline too, which is never later."""
    queued, running = _run(None), _run(None)
    queued.due = running.due = 20.0
    running.begin_attempt(1)
    assert running.deadline == 20.0  # no timeout of its own: the call's deadline
    noticed: set[tuple[Run, int]] = set()
    assert overdue([running], 10.0, noticed) == ([], pytest.approx(10.0 + SLACK))
    late, wake = overdue([queued, running], 10.0, noticed)
    assert late == []
    assert wake == POLL  # a queued call is looked at again soon anyway
    late, _ = overdue([queued, running], 20.0 + SLACK, noticed)
    assert sorted(late, key=lambda k: (id(k[0]), k[1])) == sorted(
        [(queued, SPENT), (running, SPENT), (running, 1)], key=lambda k: (id(k[0]), k[1])
    )
    assert overdue([queued, running], 30.0, noticed)[0] == []


def test_an_attempt_gets_the_earlier_of_its_two_clocks() -> None:
    run = _run(5.0)
    run.bound(2.0, None)
    run.begin_attempt(1)
    assert run.deadline == run.due and run.out_of_budget()
    loose = _run(1.0)
    loose.bound(60.0, None)
    loose.begin_attempt(1)
    assert loose.deadline is not None and loose.due is not None
    assert loose.deadline < loose.due and not loose.out_of_budget()
    # Time off the attempt's clock never moves it past the call's deadline.
    loose.move_deadline(3600.0)
    assert loose.deadline == loose.due and loose.out_of_budget()


def test_a_nested_call_is_bounded_by_what_its_caller_has_left() -> None:
    parent = _run(10.0)
    parent.begin_attempt(1)
    child = _run(None)
    child.bound(None, parent)
    assert child.due == parent.deadline and child.budget is None
    tight = _run(None)
    tight.bound(0.001, parent)  # its own budget is tighter: it keeps it
    assert tight.due is not None and parent.deadline is not None
    assert tight.due < parent.deadline and tight.budget == 0.001


def test_backstop_ignores_finished_and_untimed_calls_not_settled_ones() -> None:
    queued, settled, untimed, done = _run(), _run(), _run(None), _run()
    settled.begin_attempt(1)
    settled.deadline = 1.0
    settled.try_settle(1)  # returned, but its post-call hooks are still running
    untimed.begin_attempt(1)
    done.begin_attempt(1)
    done.deadline = 1.0
    from toolbus import ToolResult

    done.result = ToolResult(call_id="x", name="t", status="ok")
    # The settled one is reported, so its hooks get bounded by hook_grace.
    assert overdue([queued, settled, done], 100.0, set()) == ([(settled, 1)], POLL)
    assert overdue([untimed, done], 100.0, set()) == ([], None)


def test_an_infinite_tool_timeout_means_no_deadline(make_executor: MakeExecutor) -> None:
    import math

    reg = ToolRegistry()

    @reg.tool(timeout=math.inf)
    def quick() -> int:
        return 1

    ex = make_executor(reg, timeout=0.01)
    assert ex.execute(ToolCall(name="quick")).status == "ok"
    assert overdue([_run(math.inf)], 1e9, set()) == ([], None)


def test_an_attempt_its_blocking_caller_watches_gets_no_timer(make_executor: MakeExecutor) -> None:
    """Dispatched on its caller's thread before that caller waits, an attempt's
    deadline is the caller's first look; a handle's attempt (nobody blocks on
    it) keeps its timer. Either way a stuck attempt still times out."""
    import threading

    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(timeout=30)
    def timers() -> int:
        return len(ex._scheduler.timers)

    @reg.tool(timeout=0.2)
    def stuck() -> None:
        release.wait(30)

    ex = make_executor(reg)
    try:
        assert ex.execute(ToolCall(name="timers")).output == 0
        assert ex.submit(ToolCall(name="timers")).result(30).output == 1
        timed_out = ex.execute(ToolCall(name="stuck"))
        assert (timed_out.status, timed_out.error_code) == ("timeout", "EXECUTION_TIMEOUT")
    finally:
        release.set()


def test_an_attempt_started_by_its_callers_look_keeps_its_timer(
    make_executor: MakeExecutor,
) -> None:
    """At max_parallel=1 the first call's timeout, noticed by the waiting
    caller, starts the second call on that caller's thread after its look:
    that caller may next wake only at its poll, so the second keeps a timer."""
    import threading

    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(timeout=0.2, read_only=True)
    def stuck() -> None:
        release.wait(30)

    @reg.tool(timeout=30, read_only=True)
    def timers() -> int:
        return len(ex._scheduler.timers)

    ex = make_executor(reg, max_parallel=1)
    try:
        batch = ex.execute_batch([ToolCall(name="stuck"), ToolCall(name="timers")])
        assert [r.status for r in batch.results] == ["timeout", "ok"]
        assert batch.results[1].output == 1
    finally:
        release.set()


def _stuck_tools(timeout: float, release: threading.Event) -> ToolRegistry:
    """A registry with `stuck` (an async tool) and `sync_stuck` (a sync one,
    freed by `release`), each stuck past its `timeout`."""
    reg = ToolRegistry()

    @reg.tool(timeout=timeout, read_only=True)
    async def stuck() -> None:
        await asyncio.Event().wait()

    @reg.tool(timeout=timeout, read_only=True)
    def sync_stuck() -> None:
        release.wait(30)

    return reg


def _deadline_timers(ex: Any, push: float = 0.0) -> list[tuple[float, int]]:
    """Record the delay of every deadline timer `ex`'s scheduler arms from now
    on, and the thread that arms it; `push`: arm each that much later (1000:
    it never fires in a test)."""
    from toolbus.actors._messages import Deadline

    timers = ex._scheduler.timers
    schedule = timers.schedule
    delays: list[tuple[float, int]] = []

    def recording(delay: float, callback: Any, *args: Any) -> Any:
        if args and args[0] is Deadline:
            delays.append((delay, threading.get_ident()))
            delay += push
        return schedule(delay, callback, *args)

    timers.schedule = recording
    return delays


def test_an_attempt_on_its_awaiting_callers_loop_gets_no_timer_of_its_own(
    make_executor: MakeExecutor,
) -> None:
    """Dispatched on its awaiting caller's loop as it is submitted, an attempt
    (an async tool's task there, a sync tool's on a worker thread) has no
    deadline timer: the loop's watch looks at its deadline, and keeps one
    timer for all the calls it watches, for a loop that cannot look.
    Dispatched from another thread, an attempt has its own."""
    import asyncio

    reg = ToolRegistry()

    @reg.tool(timeout=30, read_only=True)
    async def timers() -> int:
        return len(ex._scheduler.timers)

    @reg.tool(timeout=30, read_only=True)
    def sync_timers() -> int:
        return len(ex._scheduler.timers)

    ex = make_executor(reg)
    delays = _deadline_timers(ex)

    async def main() -> None:
        assert (await ex.aexecute(ToolCall(name="timers"))).output == 1  # the watch's
        batch = await ex.aexecute_batch([ToolCall(name="timers"), ToolCall(name="timers")])
        assert [r.output for r in batch.results] == [1, 1]
        # Last: the report of a worker thread's attempt may still hold the
        # scheduler when its caller resumes, and then dispatch what that
        # caller submits next on the worker's thread (with timers).
        assert (await ex.aexecute(ToolCall(name="sync_timers"))).output == 1

    asyncio.run(main())
    assert delays == []
    ex.submit(ToolCall(name="timers")).result(30)  # (from this thread: no loop watches it)
    assert len(delays) == 1 and 0 < delays[0][0] <= 30


@pytest.mark.parametrize("clock", [0.0, -1000.0, 1000.0])
def test_the_loops_watch_times_out_attempts_whose_timers_never_fire(
    make_executor: MakeExecutor, clock: float
) -> None:
    """With every deadline timer pushed out of reach, calls awaited on a loop
    still time out, alone and in a batch, async or sync: the loop's watch
    acts at their deadlines, also on a loop whose clock (`loop.time()`) is
    not `time.monotonic()`'s."""
    import asyncio
    import threading

    release = threading.Event()
    reg = _stuck_tools(0.1, release)

    @reg.tool(timeout=30, read_only=True)
    async def quick() -> int:
        return 1

    class Clocked(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() + clock

    ex = make_executor(reg)
    _deadline_timers(ex, push=1000.0)

    async def main() -> None:
        for name in ("stuck", "sync_stuck"):
            r = await ex.aexecute(ToolCall(name=name))
            assert (r.status, r.error_code) == ("timeout", "EXECUTION_TIMEOUT")
        batch = await ex.aexecute_batch(
            [ToolCall(name="stuck"), ToolCall(name="quick"), ToolCall(name="sync_stuck")]
        )
        assert [r.status for r in batch.results] == ["timeout", "ok", "timeout"]

    loop = Clocked()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 20))
    finally:
        release.set()
        loop.close()


def test_an_attempt_started_later_on_its_loop_is_timed_by_the_loops_watch(
    make_executor: MakeExecutor,
) -> None:
    """At max_parallel=1 the calls of an awaited batch after the first start
    as the one before ends, after the loop began watching the batch. Started
    on that loop, each is timed by its watch (`LoopWatch.expect`): no deadline
    timer is armed on the loop's thread, and with every timer armed elsewhere
    pushed out of reach the stuck calls time out all the same."""
    import asyncio

    reg = ToolRegistry()

    @reg.tool(timeout=0.2, read_only=True)
    async def stuck() -> None:
        await asyncio.Event().wait()

    @reg.tool(timeout=30, read_only=True)
    async def quick() -> int:
        return 1

    ex = make_executor(reg, max_parallel=1)
    delays = _deadline_timers(ex, push=1000.0)
    loop_thread = threading.get_ident()

    async def main() -> None:
        batch = await ex.aexecute_batch(
            [ToolCall(name="stuck"), ToolCall(name="quick"), ToolCall(name="stuck")]
        )
        assert [r.status for r in batch.results] == ["timeout", "ok", "timeout"]

    asyncio.run(asyncio.wait_for(main(), 20))
    assert [d for d, thread in delays if thread == loop_thread] == [], delays


@pytest.mark.parametrize("name", ["stuck", "sync_stuck"])
def test_an_attempt_times_out_while_its_callers_loop_is_blocked(
    make_executor: MakeExecutor, name: str
) -> None:
    """An attempt awaited on a loop (a task there, or a sync tool's on a
    worker thread) is timed by that loop's watch, and by the watch's timer on
    the timer thread `BLOCKED_LOOP` later: with the loop blocked (by other code),
    the call still times out (its slot given back: the next call from
    another thread runs at max_parallel=1), seen before the loop is free."""
    import asyncio
    import threading

    release = threading.Event()
    reg = _stuck_tools(0.05, release)

    @reg.tool(timeout=30, read_only=True)
    def quick() -> int:
        return 1

    ex = make_executor(reg, max_parallel=1)
    seen: list[str] = []

    async def main() -> None:
        task = asyncio.ensure_future(ex.aexecute(ToolCall(name=name)))
        await asyncio.sleep(0)  # (one turn: the call is submitted and dispatched)
        assert ex.stats().in_flight == 1  # it holds the only slot: `quick` must wait for it
        # The loop blocks here until a call from another thread got the slot.
        other = threading.Thread(
            target=lambda: seen.append(ex.execute(ToolCall(name="quick")).status)
        )
        other.start()
        other.join(10)
        assert seen == ["ok"]
        r = await task
        assert (r.status, r.error_code) == ("timeout", "EXECUTION_TIMEOUT")

    try:
        asyncio.run(main())
    finally:
        release.set()


def test_close_from_another_thread_leaves_no_timer_counted(make_executor: MakeExecutor) -> None:
    """Closed from a thread other than the loop a call is awaited on, the
    executor's final stats count no timer: the loop's watch keeps none for a
    loop that may never look again."""
    import asyncio
    import threading

    reg = ToolRegistry()
    started = threading.Event()

    @reg.tool(timeout=30, read_only=True)
    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    ex = make_executor(reg)
    results: list[str] = []
    loop = asyncio.new_event_loop()

    def awaiting() -> None:
        results.append(loop.run_until_complete(ex.aexecute(ToolCall(name="slow"))).status)

    t = threading.Thread(target=awaiting)
    t.start()
    try:
        assert started.wait(10)
        ex.close()
        assert (ex.stats().in_flight, ex.stats().timers) == (0, 0)
    finally:
        t.join(10)
        loop.close()
    assert results == ["cancelled"]
