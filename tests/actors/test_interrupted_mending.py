"""What mending after a Ctrl-C on the main thread must not do, and must do
even when it is cut short or fails (`toolbus/actors/_mend.py`).

As in `test_interrupted_handlers.py`, the `KeyboardInterrupt` a signal
handler would raise is raised once, on the main thread, where the test
chooses; every wait is bounded, and nothing is synchronized by sleeping.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.actors import _scheduler
from toolbus.actors._capacity import Capacity
from toolbus.actors._messages import RetryDue
from toolbus.actors._supervisor import Supervisor
from toolbus.pipeline import Run
from toolbus.retry import RetryPolicy

from .test_interrupted_handlers import WAIT, _finished_once, _in_thread, _settled


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


class Retried:
    """A call `r` whose first attempt times out (the scheduler claims it) and
    is retried; the events tell where its retry is."""

    def __init__(self) -> None:
        self.go = threading.Event()  # lets the `gate` tool return
        self.gate_started = threading.Event()
        self.first = threading.Event()  # `r`'s first attempt began
        self.requeued = threading.Event()  # `r` queued again for its retry
        # Lets the timer thread post `r`'s `RetryDue` (set by the test).
        self.retry_waits = threading.Event()
        self.retry_due = threading.Event()
        self.retry_posted = threading.Event()


@pytest.fixture
def retried(make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch) -> Any:
    reg = ToolRegistry()
    state = Retried()

    @reg.tool(timeout=0.05, read_only=True)
    def slow(i: int, ctx: ToolContext) -> int:
        if ctx.attempt == 1:
            state.first.set()
            ctx.wait_cancelled(WAIT)  # until its timeout (the wait is a hang guard)
        return i

    @reg.tool(read_only=True)
    def gate(i: int) -> int:
        state.gate_started.set()
        assert state.go.wait(WAIT)
        return i

    def make(**options: Any) -> tuple[Executor, Retried]:
        ex = make_executor(
            reg, retry=RetryPolicy(max_retries=1, backoff_base=0.01, jitter=0), **options
        )
        real = Capacity.enqueue

        def enqueue(self: Capacity, run: Run, *, front: bool = False) -> None:
            real(self, run, front=front)
            if run.call.id == "r" and run.attempt == 1:
                state.requeued.set()

        monkeypatch.setattr(Capacity, "enqueue", enqueue)
        real_receive = Supervisor.on_receive

        def on_receive(self: Supervisor, message: Any) -> Any:
            if type(message) is not RetryDue:
                return real_receive(self, message)
            state.retry_waits.set()
            assert state.retry_due.wait(WAIT)
            try:
                return real_receive(self, message)
            finally:
                state.retry_posted.set()

        monkeypatch.setattr(Supervisor, "on_receive", on_receive)
        return ex, state

    return make


# -- 1. a run merely seen in an interrupted frame is not ended -------------------------


class _Runs(set[Run]):
    """`runs_open`, raising KeyboardInterrupt on the main thread (once, when
    armed) as its iteration goes past the run called `r`."""

    armed = False

    def __iter__(self) -> Iterator[Run]:
        for run in list(super().__iter__()):
            yield run
            if self.armed and _main() and run.call.id == "r":
                self.armed = False
                raise KeyboardInterrupt


def test_a_ctrl_c_in_stats_leaves_a_timed_out_call_waiting_for_its_retry_alone(
    retried: Any, recorder: bus.Recorder
) -> None:
    # `r` timed out (claimed by the scheduler), and waits in the ready queue
    # for its retry behind `g`, which holds the only slot; `stats()` is cut
    # short as it looks at `r` (a local of `_status.queues`).
    ex, state = retried(max_parallel=1)
    sv = ex._scheduler
    runs = _Runs(sv.runs_open)
    sv.runs_open = runs
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="r", name="slow", arguments={"i": 1})))
    assert state.first.wait(WAIT)
    tg, og = _in_thread(lambda: ex.execute(ToolCall(id="g", name="gate", arguments={"i": 0})))
    assert state.gate_started.wait(WAIT)  # (once `r` timed out and let go of the slot)
    state.retry_due.set()
    assert state.requeued.wait(WAIT)
    runs.armed = True
    with pytest.raises(KeyboardInterrupt):
        ex.stats()
    assert not runs.armed
    state.go.set()
    t.join(WAIT)
    tg.join(WAIT)
    assert not t.is_alive() and not tg.is_alive()
    assert (out[0].status, out[0].output, out[0].attempts) == ("ok", 1, 2), out[0]
    assert og[0].status == "ok"
    _finished_once(ex, recorder, ["g", "r"])
    _settled(ex)


class _Ready(deque[Run]):
    """The ready queue, raising KeyboardInterrupt on the main thread (once)
    just after a retry is put at its front (in `Capacity.enqueue`)."""

    armed = True

    def appendleft(self, run: Run) -> None:
        super().appendleft(run)
        if self.armed and _main():
            self.armed = False
            raise KeyboardInterrupt


def test_a_ctrl_c_as_a_timed_out_call_is_queued_for_its_retry_does_not_end_it(
    retried: Any, recorder: bus.Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its `RetryDue` is handled by the main thread (held in `stats()` until
    # the timer posts it), cut short once `r` is back in the ready queue,
    # where it waits: `g` holds the only slot.
    ex, state = retried(max_parallel=1)
    sv = ex._scheduler
    q = sv.slots.ready
    ready = _Ready(q.default)
    q.default = q._levels[0] = q._queues[0] = ready
    real_status = _scheduler.status

    def status(s: Any) -> Any:
        if _main() and not state.retry_due.is_set():
            state.retry_due.set()  # (the supervisor's thread posts it: the main one holds the lock)
            assert state.retry_posted.wait(WAIT)
        return real_status(s)

    monkeypatch.setattr(_scheduler, "status", status)
    t, out = _in_thread(lambda: ex.execute(ToolCall(id="r", name="slow", arguments={"i": 1})))
    assert state.first.wait(WAIT)
    tg, og = _in_thread(lambda: ex.execute(ToolCall(id="g", name="gate", arguments={"i": 0})))
    assert state.gate_started.wait(WAIT)
    assert state.retry_waits.wait(WAIT)
    with pytest.raises(KeyboardInterrupt):
        ex.stats()
    assert not ready.armed
    state.go.set()
    t.join(WAIT)
    tg.join(WAIT)
    assert not t.is_alive() and not tg.is_alive()
    assert (out[0].status, out[0].output, out[0].attempts) == ("ok", 1, 2), out[0]
    assert og[0].status == "ok"
    _finished_once(ex, recorder, ["g", "r"])
    _settled(ex)
