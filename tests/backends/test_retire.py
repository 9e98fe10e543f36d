"""When idle worker processes and Ray actors retire: the pure decision, and
its timer on a real event loop (no threads)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from toolbus.backends._retire import KEEP, Retirement, overdue


@dataclass(eq=False)
class W:
    idle_since: float


def test_nothing_retires_at_the_floor() -> None:
    w = W(0.0)
    assert KEEP == 1
    assert overdue([w], live=1, now=1000.0, idle_timeout=60.0) == ([], None)
    assert overdue([], live=3, now=1000.0, idle_timeout=60.0) == ([], None)


def test_the_longest_idle_go_first_and_the_floor_stays() -> None:
    old, older, oldest = W(30.0), W(20.0), W(10.0)
    gone, again = overdue([old, oldest, older], live=3, now=100.0, idle_timeout=60.0)
    assert gone == [oldest, older]  # `old` is due too, but it is the one kept
    assert again is None


def test_a_worker_not_yet_due_sets_the_next_look() -> None:
    due, fresh = W(10.0), W(90.0)
    gone, again = overdue([fresh, due], live=3, now=100.0, idle_timeout=60.0)
    assert gone == [due]
    assert again == 150.0  # when `fresh` comes due; the third is busy


def test_busy_workers_count_toward_the_floor() -> None:
    idle = W(0.0)
    gone, again = overdue([idle], live=2, now=100.0, idle_timeout=60.0)
    assert gone == [idle]  # the busy one is the one kept
    assert again is None


def test_the_timer_retires_when_due_and_stops_at_the_floor() -> None:
    async def scenario() -> tuple[list[W], int]:
        loop = asyncio.get_running_loop()
        now = loop.time()
        workers = [W(now), W(now), W(now)]
        idle = list(workers)
        retired: list[W] = []
        done = asyncio.Event()

        def retire(w: W) -> bool:
            idle.remove(w)
            retired.append(w)
            if len(idle) == KEEP:
                done.set()
            return True

        r = Retirement(0.05, lambda: (idle, len(idle)), retire)
        r.idle(loop)
        r.idle(loop)  # one timer, however many go idle
        await asyncio.wait_for(done.wait(), 10)
        assert r._timer is None  # at the floor: nothing more to wake for
        return retired, r.retired

    retired, count = asyncio.run(scenario())
    assert len(retired) == count == 2


def test_a_worker_taken_meanwhile_is_not_counted_and_a_stopped_timer_retires_nothing() -> None:
    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        idle = [W(loop.time() - 1), W(loop.time() - 1)]
        fired = asyncio.Event()

        def taken(w: W) -> bool:
            fired.set()
            return False  # popped by a call between the decision and the stop

        r = Retirement(0.01, lambda: (idle, 2), taken)
        r.idle(loop)
        await asyncio.wait_for(fired.wait(), 10)
        stopped = Retirement(0.01, lambda: (idle, 2), taken)
        stopped.stop()
        stopped.idle(loop)
        return r.retired, int(stopped._timer is not None)

    assert asyncio.run(scenario()) == (0, 0)
