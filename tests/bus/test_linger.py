"""A lingering subscription (`subscribe(..., linger=s)`): its events gather and are
delivered in one go; waiting for delivery (drain_events, close) cuts the wait short;
other subscriptions are not held back."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry, bus
from toolbus.bus import _subscribe as bus_subscribe


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def echo(i: int) -> int:
        return i

    return registry


def test_events_gather_and_arrive_in_one_go(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A linger of 3 s (past the usual cap of 1 s): five calls finish well
    # within it however loaded the machine (a stall of 0.5 s is not rare there).
    monkeypatch.setattr(bus_subscribe, "MAX_LINGER", 60.0)
    ex = make_executor(_registry())
    calls_done = threading.Event()
    got: list[tuple[int, bool, float]] = []
    arrived = threading.Event()

    def receive(sender: Any, *, event: bus.CallFinished, signal: str) -> None:
        got.append((event.result.output, calls_done.is_set(), time.time() - event.timestamp))
        if len(got) == 5:
            arrived.set()

    with bus.subscribe(receive, bus.FINISHED, sender=ex, linger=3.0):
        for i in range(5):
            ex.execute(ToolCall(name="echo", arguments={"i": i}))
        calls_done.set()
        assert arrived.wait(10)
    assert [i for i, _, _ in got] == [0, 1, 2, 3, 4]
    # Nothing was handed over before the five calls were done: one burst.
    assert all(done for _, done, _ in got)
    assert got[0][2] >= 2.5  # the first event waited for more (the lower bound holds under load)


def test_drain_events_and_close_do_not_wait_for_it(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A linger (30 s, past the usual cap of 1 s) far from the bounds below, so
    # "waited for the linger" cannot pass for "cut it short" however loaded
    # the machine.
    monkeypatch.setattr(bus_subscribe, "MAX_LINGER", 60.0)
    ex = make_executor(_registry())
    got: list[int] = []

    def receive(sender: Any, *, event: bus.CallFinished, signal: str) -> None:
        got.append(event.result.output)

    with bus.subscribe(receive, bus.FINISHED, sender=ex, linger=30):
        ex.execute(ToolCall(name="echo", arguments={"i": 1}))
        t0 = time.monotonic()
        assert ex.drain_events(10)
        assert got == [1]
        assert time.monotonic() - t0 < 10
        ex.execute(ToolCall(name="echo", arguments={"i": 2}))
        t0 = time.monotonic()
        ex.close()
        assert got == [1, 2]
        assert time.monotonic() - t0 < 10
    assert ex.stats().events_dropped == 0


def test_other_subscriptions_are_not_held_back(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry())
    slow: list[float] = []

    def lingering(sender: Any, *, event: bus.Event, signal: str) -> None:
        slow.append(time.monotonic())

    with (
        bus.subscribe(lingering, bus.FINISHED, sender=ex, linger=1.0),
        bus.Recorder(bus.FINISHED, sender=ex) as prompt,
    ):
        t0 = time.monotonic()
        ex.execute(ToolCall(name="echo", arguments={"i": 1}))
        prompt.wait_for(bus.FINISHED, timeout=5)
        assert slow == [] or slow[0] - t0 >= 0.9
        assert ex.drain_events()
    assert len(slow) == 1


@pytest.mark.parametrize("bad", [-0.1, 1.5, math.nan, math.inf, True, "0.1", None])
def test_linger_is_checked(bad: Any) -> None:
    with pytest.raises(ValueError, match="linger must be"):
        bus.subscribe(lambda *a, **k: None, linger=bad)
    with bus.subscribe(lambda *a, **k: None, linger=0) as fine:
        assert fine.linger == 0.0
