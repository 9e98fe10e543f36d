"""Closing an executor from one of its receivers: nothing is dropped before its budget is spent."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from tests.bus.echo import echo_call, echo_registry
from tests.conftest import MakeExecutor, wait_until
from toolbus import bus


class _Closer:
    """A receiver that closes its executor on its first event, once `go` is set
    (by then every call's events are queued behind that first one)."""

    def __init__(self, ex: Any, timeout: float) -> None:
        self.ex = ex
        self.timeout = timeout
        self.go = threading.Event()
        self.closed = threading.Event()
        self.closed_at = 0.0
        self.seen: list[tuple[str, str]] = []

    def __call__(self, sender: Any, *, event: Any, signal: str) -> None:
        self.seen.append((signal, event.call_id))
        if not self.closed.is_set():
            assert self.go.wait(30)
            self.closed_at = time.monotonic()
            self.ex.close(timeout=self.timeout)
            self.closed.set()


class _Warnings(logging.Handler):
    """Keeps toolbus.bus's warnings with the (monotonic) time they were logged."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()))


@pytest.fixture
def warnings() -> Any:
    handler = _Warnings()
    logger = logging.getLogger("toolbus.bus")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_close_from_a_receiver_delivers_its_own_events_and_the_others(
    make_executor: MakeExecutor, warnings: _Warnings
) -> None:
    """`executor.close()` from a receiver dropped every subscriber's pending events at
    once, its own included, logged as "close(timeout=5) ran out of time" with no time
    spent (bug hunt 5, s5b)."""
    ex = make_executor(echo_registry())
    gate = threading.Event()
    backlog: list[str] = []

    def slow(sender: Any, *, event: Any, signal: str) -> None:
        assert gate.wait(30)  # a subscriber with events waiting when close comes
        backlog.append(event.call_id)

    closer = _Closer(ex, timeout=30)
    try:
        with (
            bus.subscribe(slow, bus.FINISHED, sender=ex),
            bus.subscribe(closer, sender=ex),
            bus.Recorder(bus.FINISHED, sender=ex) as rec,
        ):
            for i in range(5):
                ex.execute(echo_call(i))
            rec.wait_for(bus.FINISHED, 5)  # every event is queued now
            closer.go.set()
            assert closer.closed.wait(30)
            gate.set()
            assert ex.drain_events(30)
    finally:
        gate.set()
    ids = [f"c{i}" for i in range(5)]
    assert backlog == ids
    assert [c for s, c in closer.seen if s == bus.FINISHED] == ids  # its own queue too
    assert len(closer.seen) == 15  # executing, executed, finished per call
    assert ex.stats().events_dropped == 0
    assert not [line for _, line in warnings.lines if "lost" in line]


def test_close_from_a_receiver_drops_what_is_stuck_only_once_its_budget_is_spent(
    make_executor: MakeExecutor, warnings: _Warnings
) -> None:
    """The same: what a stuck receiver had not got is still dropped, counted and
    logged, but once close's budget is spent, not at once (bug hunt 5, s5b)."""
    ex = make_executor(echo_registry())
    gate, entered = threading.Event(), threading.Event()

    def stuck(sender: Any, *, event: Any, signal: str) -> None:
        entered.set()
        gate.wait(30)

    closer = _Closer(ex, timeout=0.5)
    try:
        with (
            bus.subscribe(stuck, bus.FINISHED, sender=ex),
            bus.subscribe(closer, bus.FINISHED, sender=ex),
            bus.Recorder(bus.FINISHED, sender=ex) as rec,
        ):
            for i in range(5):
                ex.execute(echo_call(i))
            rec.wait_for(bus.FINISHED, 5)
            assert entered.wait(30)  # the first is in the receiver; four wait behind it
            closer.go.set()
            assert closer.closed.wait(30)
            wait_until(lambda: ex.stats().events_dropped > 0, 30, "the stuck receiver's drop")
    finally:
        gate.set()
    assert ex.stats().events_dropped == 4
    ((logged_at, line),) = [(t, line) for t, line in warnings.lines if "lost" in line]
    assert "stuck lost 4 event(s)" in line and "close(timeout=0.5) ran out of time" in line
    assert logged_at - closer.closed_at >= 0.5  # it did run out of time
    assert [c for _, c in closer.seen] == [f"c{i}" for i in range(5)]
