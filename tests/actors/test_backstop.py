"""The waiting side's backstop (`toolbus.actors._backstop.overdue`), pure: when
a caller looks again, and which attempts it reports overdue, once each."""

from __future__ import annotations

import contextvars

import pytest

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry, bus
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


def test_an_attempt_on_its_awaiting_callers_loop_is_timed_by_that_loop(
    make_executor: MakeExecutor,
) -> None:
    """An async tool's attempt that runs as a task on its caller's own loop,
    dispatched there as it was submitted, gets no timer: the loop's watch arms
    at its deadline, and a stuck attempt still times out there, alone or in a
    batch. Run elsewhere (a sync tool on a worker thread), it keeps its timer."""
    import asyncio

    reg = ToolRegistry()

    @reg.tool(timeout=30, read_only=True)
    async def timers() -> int:
        return len(ex._scheduler.timers)

    @reg.tool(timeout=30, read_only=True)
    def sync_timers() -> int:
        return len(ex._scheduler.timers)

    @reg.tool(timeout=0.2, read_only=True)
    async def stuck() -> None:
        await asyncio.Event().wait()

    ex = make_executor(reg)

    async def main() -> None:
        assert (await ex.aexecute(ToolCall(name="timers"))).output == 0
        both = await ex.aexecute_batch([ToolCall(name="timers"), ToolCall(name="timers")])
        assert [r.output for r in both.results] == [0, 0]
        alone = await ex.aexecute(ToolCall(name="stuck"))
        assert (alone.status, alone.error_code) == ("timeout", "EXECUTION_TIMEOUT")
        batch = await ex.aexecute_batch([ToolCall(name="stuck"), ToolCall(name="timers")])
        assert [(r.status, r.error_code) for r in batch.results] == [
            ("timeout", "EXECUTION_TIMEOUT"),
            ("ok", None),
        ]
        # Last: the report of a worker thread's attempt may still hold the
        # scheduler when its caller resumes, and then dispatch what that
        # caller submits next on the worker's thread (with a timer).
        assert (await ex.aexecute(ToolCall(name="sync_timers"))).output == 1

    asyncio.run(main())


def test_an_attempt_started_after_its_loop_watches_keeps_its_timer(
    make_executor: MakeExecutor,
) -> None:
    """At max_parallel=1 the second call of an awaited batch starts when the
    first ends, after the loop began watching the batch: it has a timer of its
    own, and times out stuck as the first did."""
    import asyncio

    reg = ToolRegistry()

    @reg.tool(timeout=0.2, read_only=True)
    async def stuck() -> None:
        await asyncio.Event().wait()

    @reg.tool(timeout=30, read_only=True)
    async def timers() -> int:
        return len(ex._scheduler.timers)

    ex = make_executor(reg, max_parallel=1)

    async def main() -> None:
        batch = await ex.aexecute_batch(
            [ToolCall(name="stuck"), ToolCall(name="timers"), ToolCall(name="stuck")]
        )
        assert [r.status for r in batch.results] == ["timeout", "ok", "timeout"]
        assert batch.results[1].output == 1

    asyncio.run(main())


def test_a_worker_threads_attempt_times_out_while_its_callers_loop_is_blocked(
    make_executor: MakeExecutor,
) -> None:
    """A sync tool's attempt awaited on a loop is timed by that loop's watch,
    and by a timer `BLOCKED_LOOP` later: with the loop blocked past both, the
    call still times out (its worker and slot given back), seen from another
    thread before the loop is free again."""
    import asyncio
    import threading

    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(timeout=0.05, read_only=True)
    def stuck() -> None:
        release.wait(30)

    ex = make_executor(reg)
    seen = threading.Event()

    async def main() -> None:
        task = asyncio.ensure_future(ex.aexecute(ToolCall(name="stuck")))
        await asyncio.sleep(0)  # (one turn: the call is submitted and dispatched)
        # The loop blocks here until the timeout is published, from the timer.
        assert seen.wait(10)
        r = await task
        assert (r.status, r.error_code) == ("timeout", "EXECUTION_TIMEOUT")

    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        rec_thread = threading.Thread(
            target=lambda: seen.set() if rec.wait_for(bus.FINISHED, timeout=10) else None
        )
        rec_thread.start()
        try:
            asyncio.run(main())
        finally:
            release.set()
            rec_thread.join(10)
