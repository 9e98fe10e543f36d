"""The deadline watch of an event loop (toolbus/actors/_loopwatch.py): it lets
go of the calls it watches when their waiter is released, without a callback
per call, and when their loop is closed before that."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import time
import weakref

from toolbus import ToolCall, tool
from toolbus.actors._loopwatch import LoopWatch
from toolbus.pipeline import LoopWaiter, Run
from toolbus.retry import RetryPolicy


@tool(name="t", read_only=True)
def _t() -> None:
    return None


def _runs(n: int) -> list[Run]:
    return [
        Run(ToolCall(id=f"c{i}", name="t"), _t, context=contextvars.copy_context(),
            timeout=1.0, policy=RetryPolicy())
        for i in range(n)
    ]  # fmt: skip


def _watching(watch: LoopWatch) -> int:
    return len(watch._runs)


def test_released_calls_are_forgotten_and_the_timer_stops() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        watch = LoopWatch(loop, lambda run, attempt: None)
        waiter = LoopWaiter(loop)
        runs = _runs(3)
        watch.watch(runs, waiter)
        assert _watching(watch) == 3 and watch._handle is not None
        waiter.release("done")  # (on its loop: set now)
        assert await waiter.future == "done"
        assert _watching(watch) == 0 and watch._handle is None
        done = LoopWaiter(loop)
        done.release("already")
        watch.watch(_runs(1), done)  # released before it was watched: not watched
        assert _watching(watch) == 0

    asyncio.run(main())


def test_a_call_released_after_its_loop_closed_is_let_go() -> None:
    """The watch held a finished call, and through it the closed loop, when the
    release came after the loop closed (it can no longer run a callback)."""
    loop = asyncio.new_event_loop()
    watch = LoopWatch(loop, lambda run, attempt: None)
    waiter = LoopWaiter(loop)
    watch.watch(_runs(2), waiter)
    loop.close()
    waiter.release("late")  # (from off the loop: it would hand the value over)
    assert _watching(watch) == 0
    gone = weakref.ref(loop)
    del loop, waiter
    gc.collect()
    assert gone() is None


class _Backstop:
    """The timers a watch keeps for a loop that cannot look, as handed out."""

    def __init__(self) -> None:
        self.armed: list[tuple[float, int]] = []
        self.live: set[int] = set()

    def arm_loop_backstop(self, delay: float, watch: LoopWatch, gen: int) -> int:
        self.armed.append((delay, gen))
        self.live.add(len(self.armed))
        return len(self.armed)

    def disarm_loop_backstop(self, handle: int) -> None:
        self.live.discard(handle)


def test_the_backstops_timer_is_kept_through_a_burst_and_dropped_when_idle() -> None:
    """One backstop timer for a burst of calls watched while others are; none
    once nothing is watched; and a re-arm from the backstop's own thread for a
    generation that was dropped (or replaced) meanwhile arms nothing."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        backstop = _Backstop()
        watch = LoopWatch(loop, lambda run, attempt: None, backstop)
        waiters = [LoopWaiter(loop) for _ in range(3)]
        for w in waiters:
            watch.watch(_runs(2), w)
        assert len(backstop.armed) == 1 and backstop.live == {1}
        gen = watch.backstop_gen
        for w in waiters:
            w.release("done")
        assert _watching(watch) == 0 and backstop.live == set()
        watch.rearm(0.1, gen)  # (its timer fired as the last call was let go)
        assert len(backstop.armed) == 1 and backstop.live == set()
        again = LoopWaiter(loop)
        watch.watch(_runs(1), again)
        assert len(backstop.armed) == 2 and backstop.live == {2}
        watch.rearm(0.1, watch.backstop_gen)  # current: it looks again
        assert len(backstop.armed) == 3
        watch.drop_backstop()  # (the executor closing)
        assert 3 not in backstop.live
        again.release("done")

    asyncio.run(main())


def test_an_attempt_started_while_its_watch_looks_is_looked_at_by_its_deadline() -> None:
    """A look that tells the scheduler of a late call may start a queued one
    on this loop (its slot set free), which tells the watch its deadline
    (`expect`): the watch's next look is at that deadline, not at the look it
    would have made anyway (`POLL` later, for the calls still queued)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        late, queued = _runs(2)
        late.begin_attempt(1)
        late.deadline = time.monotonic() - 1.0  # overdue at the next look
        started: list[float] = []

        def notify(run: Run, attempt: int) -> None:
            assert run is late
            queued.begin_attempt(1)  # (the scheduler starting it in the freed slot)
            deadline = time.monotonic() + 0.01
            started.append(deadline)
            assert watch.expect(deadline)

        watch = LoopWatch(loop, notify)
        waiter = LoopWaiter(loop)
        watch.watch([late, queued], waiter)
        watch._look()  # as its timer would
        assert len(started) == 1
        assert watch._handle is not None and watch._when == started[0]
        waiter.release(None)

    asyncio.run(main())
