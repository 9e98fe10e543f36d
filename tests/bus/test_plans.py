"""What the announcer keeps and defers for speed, and that nobody can tell.

- Who receives a signal is kept between announcements (a plan): a receiver
  that connects or disconnects later, through `subscribe` or blinker itself,
  strongly or weakly, is seen at the next event.
- The engine's per-call events are built on the delivery thread: every
  receiver gets one object, with the step's time (not the delivery's).
- A subscription's `flush` runs after each burst, before `drain_events` returns;
  one that raises or blocks neither loses nor delays a call's result.
- A call's events keep their order (built later or not) and carry its run.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import RetryPolicy, ToolCall, ToolRegistry, bus
from toolbus.bus import _subscribe as bus_subscribe


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo(text: str) -> str:
        time.sleep(0.02)  # tool under test: a step between executing and executed
        return text

    return reg


def _call(i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name="echo", arguments={"text": str(i)})


def test_receivers_connected_and_disconnected_later_are_seen(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry())
    first = bus.Recorder(bus.FINISHED, sender=ex)
    ex.execute(_call(0))  # the plan for tool:finished is made here
    second = bus.Recorder(bus.FINISHED, sender=ex)
    blinker_strong: list[Any] = []
    blinker_weak: list[Any] = []

    def strong(sender: Any, *, event: Any) -> None:
        blinker_strong.append(event)

    class Weak:
        def __call__(self, sender: Any, *, event: Any) -> None:
            blinker_weak.append(event)

    weak = Weak()
    sig = bus.signal(bus.FINISHED)
    sig.connect(strong, sender=ex, weak=False)
    sig.connect(weak, sender=ex)  # weakly: it may die without telling
    ex.execute(_call(1))
    assert ex.drain_events()
    assert [e.call_id for e in first.of(bus.FINISHED)] == ["c0", "c1"]
    assert [e.call_id for e in second.of(bus.FINISHED)] == ["c1"]
    assert [e.call_id for e in blinker_strong] == ["c1"]
    assert [e.call_id for e in blinker_weak] == ["c1"]

    first.close()
    sig.disconnect(strong)
    del weak
    gc.collect()  # the weak receiver is gone: blinker drops it, nobody is told
    ex.execute(_call(2))
    assert ex.drain_events()
    assert [e.call_id for e in first.of(bus.FINISHED)] == ["c0", "c1"]
    assert [e.call_id for e in second.of(bus.FINISHED)] == ["c1", "c2"]
    assert [e.call_id for e in blinker_strong] == ["c1"]
    assert [e.call_id for e in blinker_weak] == ["c1"]
    second.close()


def test_events_built_on_delivery_are_one_object_with_the_steps_time(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(_registry())
    gate = threading.Event()
    held: list[tuple[str, Any]] = []

    def slow(sender: Any, *, event: Any, signal: str) -> None:
        gate.wait(10)  # delivery happens well after the steps
        held.append((signal, event))

    with bus.Recorder(sender=ex) as rec, bus.subscribe(slow, sender=ex):
        before = time.time()
        ex.execute(_call(1))
        after = time.time()
        while time.time() <= after:  # the clock moves on before anything is delivered
            pass
        gate.set()
        assert ex.drain_events()
    recorded = dict(rec.events)
    assert [name for name, _ in held] == [bus.EXECUTING, bus.EXECUTED, bus.FINISHED]
    for name, event in held:
        assert recorded[name] is event  # every receiver gets the same object
        assert before <= event.timestamp <= after  # when the step happened
        assert event.call_id == "c1" and event.attempt == 1
    seqs = [e.seq for _, e in held]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    executing, executed = held[0][1], held[1][1]
    assert executing.arguments == {"text": "1"} and executing.timeout is not None
    # The tool ran in between (wall-clock stamps: only their order is certain).
    assert executed.timestamp > executing.timestamp
    assert held[2][1].result.output == "1"


def test_flush_runs_after_each_burst_before_drain_returns(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A linger (30 s, past the usual cap of 1 s) that cannot end before
    # drain_events cuts it short, however loaded the machine: the five calls'
    # events, gathered meanwhile, are not split by a linger that ran out.
    monkeypatch.setattr(bus_subscribe, "MAX_LINGER", 60.0)
    ex = make_executor(_registry())
    seen: list[str] = []
    flushed: list[list[str]] = []

    def receive(sender: Any, *, event: Any, signal: str) -> None:
        seen.append(event.call_id)

    def flush() -> None:
        time.sleep(0.05)  # a slow write (not a wait for anything): drain_events waits for it
        flushed.append(list(seen))
        seen.clear()

    sub = bus.Subscription((bus.FINISHED,), receive, ex, linger=30, flush=flush)
    try:
        ex.execute_batch([_call(i) for i in range(5)])
        assert ex.drain_events()
        assert sorted(c for burst in flushed for c in burst) == [f"c{i}" for i in range(5)]
        assert seen == []
        assert len(flushed) <= 2  # the calls' events came in one or two bursts, not five
    finally:
        sub.close()


def test_a_flush_that_raises_is_logged_and_delivery_goes_on(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    ex = make_executor(_registry())
    seen: list[str] = []

    def receive(sender: Any, *, event: Any, signal: str) -> None:
        seen.append(event.call_id)

    def flush() -> None:
        raise RuntimeError("disk full")

    with caplog.at_level(logging.ERROR, logger="toolbus.bus"):
        sub = bus.Subscription((bus.FINISHED,), receive, ex, flush=flush)
        try:
            ex.execute(_call(1))
            ex.execute(_call(2))
            assert ex.drain_events()
        finally:
            sub.close()
    assert seen == ["c1", "c2"]
    assert "disk full" in caplog.text


def test_a_flush_that_blocks_delays_no_result(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry())
    gate = threading.Event()
    entered = threading.Event()

    def flush() -> None:
        entered.set()
        gate.wait(10)

    sub = bus.Subscription((bus.FINISHED,), lambda *a, **k: None, ex, flush=flush)
    try:
        first = ex.execute(_call(1))
        assert entered.wait(10)  # its delivery thread is held in flush
        results = [ex.execute(_call(i)) for i in range(2, 5)]  # not held up
        assert [r.status for r in (first, *results)] == ["ok"] * 4
        assert not ex.drain_events(0.01)  # the held flush: not delivered yet
        gate.set()
        assert ex.drain_events(10)
    finally:
        gate.set()
        sub.close()


def test_a_calls_events_keep_their_order_and_carry_its_run(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    tries: list[int] = []

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=2, backoff_base=0.001))
    def flaky(text: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("once")
        return text

    ex = make_executor(reg)
    with bus.Recorder(sender=ex) as rec:
        result = ex.execute(ToolCall(id="f", name="flaky", arguments={"text": "x"}))
        assert ex.drain_events()
    assert result.status == "ok" and result.attempts == 2
    names = [n for n, e in rec.events if getattr(e, "call_id", None) == "f"]
    assert names == [
        bus.EXECUTING,
        bus.ERROR,
        bus.RETRY_ATTEMPT,
        bus.EXECUTING,
        bus.EXECUTED,
        bus.RETRY_SUCCESS,
        bus.FINISHED,
    ]
    events = [e for _, e in rec.events if getattr(e, "call_id", None) == "f"]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps)  # built later or at once: each the time of its step
    assert len({e._run for e in events}) == 1 and events[0]._run > 0
