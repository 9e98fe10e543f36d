"""A Ctrl-C on the main thread as it handles another thread's call that would
leave the call waiting for nothing: a timer's message cut before it was taken,
a retry's backoff cut before its timer was armed, a slot given back to only
some of its groups (`toolbus/actors/_lost.py`).

As in `test_interrupted_handlers.py`, the `KeyboardInterrupt` a signal
handler would raise is raised once, on the main thread, where the test
chooses; every wait is bounded, and nothing is synchronized by sleeping.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.actors._capacity import Capacity
from toolbus.actors._messages import Expired, Report, RetryDue
from toolbus.actors._timers import TimerService
from toolbus.pipeline import Run
from toolbus.retry import RetryPolicy

from .test_interrupted_handlers import (
    WAIT,
    _caller_done,
    _in_thread,
    _interrupt_once,
    _main_handles,
)


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


class Gates:
    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.go = threading.Event()
        self.parked = threading.Event()  # `b` parked for its tool's slot


@pytest.fixture
def gates() -> Gates:
    return Gates()


@pytest.fixture
def ex(make_executor: MakeExecutor, gates: Gates) -> Executor:
    reg = ToolRegistry()

    @reg.tool(timeout=0.05, read_only=True)
    def hold(i: int, ctx: ToolContext) -> int:
        gates.started.release()
        ctx.wait_cancelled(WAIT)  # until its timeout (the wait is a hang guard)
        return i

    @reg.tool(read_only=True)
    def flaky(i: int, ctx: ToolContext) -> int:
        if ctx.attempt == 1:
            gates.started.release()
            assert gates.go.wait(WAIT)
            raise ConnectionError("once")
        return i

    @reg.tool(read_only=True, max_concurrency=1, groups=["db"])
    def one(i: int) -> int:
        gates.started.release()
        assert gates.go.wait(WAIT)
        return i

    return make_executor(
        reg, retry=RetryPolicy(max_retries=1, backoff_base=0.01, jitter=0), groups={"db": 1}
    )


def _ended(ex: Executor, recorder: bus.Recorder, t: threading.Thread, ids: list[str]) -> None:
    _caller_done(ex, recorder, t, ids, "the call was left waiting for nothing")
    assert ex._scheduler._interrupt is None


def test_a_deadline_cut_before_it_was_taken_still_times_the_call_out(
    ex: Executor, gates: Gates, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its caller saw the attempt overdue and posted `Expired`; the main
    # thread handles it, cut as `_current` lets go of the run's timer.
    hold = _main_handles(ex, gates, monkeypatch, Expired)
    raised = _interrupt_once(monkeypatch, TimerService, "cancel")
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="a", name="hold", arguments={"i": 1})))
    with pytest.raises(KeyboardInterrupt):
        hold()
    assert raised[0] == 1
    _ended(ex, recorder, t, ["a"])
    assert out[0].status == "timeout", out[0]


def _retry_arm(timers: Any, delay: float, fn: Any, *args: Any) -> bool:
    return bool(args) and args[0] is RetryDue


@pytest.mark.parametrize("where", ["arming", "backing-off"])
def test_a_backoff_cut_before_its_timer_was_armed_still_retries(
    ex: Executor,
    gates: Gates,
    recorder: bus.Recorder,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    # The first attempt failed (retryable); the main thread handles its
    # report, cut as the backoff's timer is scheduled, or as the backoff
    # gives back the run's slot (before it arms the timer).
    hold = _main_handles(ex, gates, monkeypatch, Report)
    if where == "arming":
        raised = _interrupt_once(monkeypatch, TimerService, "schedule", when=_retry_arm)
    else:
        raised = _interrupt_once(monkeypatch, Capacity, "release")
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="b", name="flaky", arguments={"i": 2})))
    with pytest.raises(KeyboardInterrupt):
        hold()
    assert raised[0] == 1
    _ended(ex, recorder, t, ["b"])
    assert (out[0].status, out[0].output, out[0].attempts) == ("ok", 2, 2), out[0]


def test_a_slot_given_back_to_only_some_of_its_groups_is_given_back_whole(
    ex: Executor, gates: Gates, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `c1` holds the tool's only slot and the "db" group's; `c2` waits for
    # the tool's. The main thread closes `c1`, cut as its tool's slot, given
    # back, is handed on to `c2` (before the "db" group's is given back).
    real_park = Capacity._park

    def park(self: Capacity, group: Any, run: Run) -> None:
        real_park(self, group, run)
        if run.call.id == "c2":
            gates.parked.set()

    monkeypatch.setattr(Capacity, "_park", park)
    hold = _main_handles(ex, gates, monkeypatch, Report)
    raised = _interrupt_once(monkeypatch, Capacity, "_unpark_one")
    t1, out1 = _in_thread(lambda: ex.execute(ToolCall(id="c1", name="one", arguments={"i": 1})))
    assert gates.started.acquire(timeout=WAIT)
    gates.started.release()  # (for `hold`)
    t2, out2 = _in_thread(lambda: ex.execute(ToolCall(id="c2", name="one", arguments={"i": 2})))
    assert gates.parked.wait(WAIT)
    with pytest.raises(KeyboardInterrupt):
        hold()
    assert raised[0] == 1
    t1.join(WAIT)
    _ended(ex, recorder, t2, ["c1", "c2"])
    assert (out1[0].status, out2[0].status, out2[0].output) == ("ok", "ok", 2), out2[0]
    assert [g.in_flight for g in ex._scheduler.groups.values()] == [0]
