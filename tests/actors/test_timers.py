"""The supervisor's timers (`toolbus.actors._timers.TimerService`): what a
cancelled, clamped or infinite deadline does to the timer thread."""

from __future__ import annotations

import threading
import time

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.actors._timers import TimerService


def test_cancelling_a_fired_timer_keeps_len_non_negative() -> None:
    """Cancelling a timer that had fired made the TimerService's length negative
    (concurrency review)."""
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
    """A timer delay of inf, 1e12, NaN or below 0 was not clamped to what a wait accepts
    (concurrency review)."""
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
    """An infinite executor timeout killed the timer thread (concurrency review)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ok(i: int) -> int:
        return i

    release = threading.Event()

    @reg.tool(read_only=True, timeout=0.1)
    def sleepy(i: int) -> int:
        release.wait(30)  # tool under test: outlives its deadline, until the test is done
        return i

    ex = Executor(reg, timeout=float("inf"))  # accepted: only <= 0 is refused
    try:
        assert ex.execute(ToolCall(name="ok", arguments={"i": 1})).status == "ok"
        assert ex.execute(ToolCall(name="sleepy", arguments={"i": 1})).status == "timeout"
    finally:
        release.set()
        ex.close(timeout=1)
