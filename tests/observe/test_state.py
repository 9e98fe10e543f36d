"""The live state model (`toolbus.observe._state`): pure, fed with plain records.

No executor, no threads: each test writes the records an executor would
announce (as `_wire.encode` makes them) and reads the snapshot.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import orjson
import pytest

from toolbus import ErrorCode, ToolResult, bus
from toolbus.observe._state import UNKNOWN_TOOL, Latencies, LiveState
from toolbus.observe._wire import encode, plain

T0 = 1_800_000_000.0


class Feed:
    """Writes records in announcement order, with seq and timestamps."""

    def __init__(self, state: LiveState) -> None:
        self.state = state
        self.seq = itertools.count(1)
        self.records: list[dict[str, Any]] = []

    def __call__(self, signal: str, at: float, **fields: Any) -> dict[str, Any]:
        record = {"seq": next(self.seq), "signal": signal, "timestamp": T0 + at, **fields}
        self.records.append(record)
        self.state.apply(record)
        return record

    def call(
        self, signal: str, at: float, call_id: str, tool: str, attempt: int = 1, **f: Any
    ) -> None:
        self(
            signal,
            at,
            call_id=call_id,
            tool=tool,
            batch_id=f.pop("batch_id", None),
            attempt=attempt,
            **f,
        )

    def finish(
        self,
        at: float,
        call_id: str,
        tool: str,
        status: str = "ok",
        *,
        code: str | None = None,
        attempts: int = 1,
        duration: float = 0.1,
        error: str | None = None,
        batch_id: str | None = None,
        **extra: Any,
    ) -> None:
        result = {
            "call_id": call_id,
            "name": tool,
            "status": status,
            "error": error,
            "error_code": code,
            "attempts": attempts,
            "duration": duration,
        }
        self.call(
            bus.FINISHED, at, call_id, tool, attempts, batch_id=batch_id, result=result, **extra
        )


@pytest.fixture
def feed() -> Feed:
    return Feed(LiveState())


def test_a_call_is_in_flight_from_executing_to_finished(feed: Feed) -> None:
    feed.call(bus.EXECUTING, 0.0, "c1", "search", arguments={"q": "x"}, timeout=5)
    snap = feed.state.snapshot(T0 + 0.25)
    [call] = snap["in_flight"]
    assert (call["call_id"], call["tool"], call["attempt"], call["state"]) == (
        "c1",
        "search",
        1,
        "running",
    )
    assert call["elapsed"] == pytest.approx(0.25)
    assert snap["tools"][0]["in_flight"] == 1

    feed.finish(0.3, "c1", "search", duration=0.3)
    snap = feed.state.snapshot(T0 + 1)
    assert snap["in_flight"] == []
    assert snap["recent"][0] | {"timestamp": 0} == {
        "seq": 2, "timestamp": 0, "call_id": "c1", "batch_id": None, "tool": "search",
        "status": "ok", "error_code": None, "error": None, "duration": 0.3, "attempts": 1,
    }  # fmt: skip
    assert snap["errors"] == []
    assert snap["totals"]["finished"] == snap["totals"]["ok"] == 1
    tool = snap["tools"][0]
    assert (tool["tool"], tool["calls"], tool["ok"], tool["in_flight"]) == ("search", 1, 1, 0)
    assert tool["p50"] == pytest.approx(0.3, rel=0.025)
    assert snap["seq"] == 2 and snap["events"] == 2 and snap["since"] == T0


def test_retries_timeouts_kills_and_late_results_are_counted(feed: Feed) -> None:
    feed.call(bus.EXECUTING, 0.0, "c1", "flaky")
    feed.call(
        bus.ERROR, 0.1, "c1", "flaky", error="reset by peer", error_code="TOOL_ERROR", duration=0.1
    )
    assert feed.state.snapshot(T0)["in_flight"][0]["state"] == "failed"
    feed.call(bus.RETRY_ATTEMPT, 0.2, "c1", "flaky", 2, previous_error="reset by peer", delay=0.1)
    [call] = feed.state.snapshot(T0 + 0.2)["in_flight"]
    assert (call["state"], call["attempt"], call["detail"]) == ("retrying", 2, "reset by peer")
    feed.call(bus.EXECUTING, 0.2, "c1", "flaky", 2)
    [call] = feed.state.snapshot(T0 + 0.5)["in_flight"]
    assert (call["state"], call["attempt"]) == ("running", 2)
    assert call["elapsed"] == pytest.approx(0.5)  # from the first attempt, not this one
    feed.finish(0.3, "c1", "flaky", attempts=2, duration=0.3)

    feed.call(bus.EXECUTING, 1.0, "c2", "hang")
    feed.call(bus.TIMEOUT, 2.0, "c2", "hang", timeout=1.0)
    assert feed.state.snapshot(T0 + 2)["in_flight"][0]["state"] == "timed out"
    feed.call(bus.KILLED, 2.0, "c2", "hang", pid=123, reason="timeout")
    feed.finish(
        2.0, "c2", "hang", "timeout", code="EXECUTION_TIMEOUT", duration=1.0, error="timed out"
    )
    feed.call(bus.LATE_RESULT, 3.0, "c2", "hang", status="ok", duration=2.0)

    snap = feed.state.snapshot(T0 + 3)
    assert snap["totals"] == {
        "finished": 2, "ok": 1, "error": 0, "timeout": 1, "rejected": 0, "cancelled": 0, "deferred": 0,
        "retries": 1, "timeouts": 1, "killed": 1, "late_results": 1, "batches": 0, "queued": 0,
    }  # fmt: skip
    tools = {t["tool"]: t for t in snap["tools"]}
    assert tools["flaky"]["retries"] == 1 and tools["flaky"]["ok"] == 1
    assert tools["hang"]["timeouts"] == tools["hang"]["killed"] == tools["hang"]["timeout"] == 1
    assert tools["hang"]["outcomes"] == {"timeout/EXECUTION_TIMEOUT": 1}
    assert [e["call_id"] for e in snap["errors"]] == ["c2"]
    assert snap["errors"][0]["error"] == "timed out"


def test_progress_shows_on_the_call(feed: Feed) -> None:
    feed.call(bus.EXECUTING, 0.0, "c1", "index")
    feed.call(bus.PROGRESS, 0.1, "c1", "index", message="page 3 of 4", fraction=0.75, data=None)
    [call] = feed.state.snapshot(T0)["in_flight"]
    assert (call["detail"], call["fraction"]) == ("page 3 of 4", 0.75)


def test_a_tool_the_model_made_up_is_counted_as_unknown(feed: Feed) -> None:
    for i in range(3):
        name = f"invented_{i}" * 20  # long and different each time
        feed.call(
            bus.REJECTED,
            i,
            f"u{i}",
            name,
            0,
            error="no such tool",
            error_code="TOOL_NOT_FOUND",
            arguments={},
        )
        feed.finish(i, f"u{i}", name, "rejected", code="TOOL_NOT_FOUND", attempts=0, duration=0.0)
    snap = feed.state.snapshot(T0 + 5)
    assert [t["tool"] for t in snap["tools"]] == [UNKNOWN_TOOL]
    unknown = snap["tools"][0]
    assert unknown["rejected"] == 3 and unknown["outcomes"] == {"rejected/TOOL_NOT_FOUND": 3}
    assert unknown["p50"] is None  # calls that never started have no latency
    assert all(len(r["tool"]) <= 64 for r in snap["recent"])


def test_same_call_id_in_two_batches_are_two_calls(feed: Feed) -> None:
    feed.call(bus.EXECUTING, 0.0, "1", "search", batch_id="b1")
    feed.call(bus.EXECUTING, 0.0, "1", "search", batch_id="b2")
    assert len(feed.state.snapshot(T0)["in_flight"]) == 2
    feed.finish(0.1, "1", "search", batch_id="b1")
    [left] = feed.state.snapshot(T0)["in_flight"]
    assert left["batch_id"] == "b2"


def test_events_at_or_before_the_last_seq_are_skipped(feed: Feed) -> None:
    feed.call(bus.EXECUTING, 0.0, "c1", "search")
    feed.finish(0.1, "c1", "search")
    for record in feed.records:  # a client resuming from a snapshot sees them again
        assert feed.state.apply(record) is False
    assert feed.state.snapshot(T0)["totals"]["finished"] == 1


def test_malformed_records_are_counted_never_raised(feed: Feed) -> None:
    state = feed.state
    assert state.apply({"seq": 1}) is False  # no signal
    assert state.apply({"seq": 2, "signal": bus.FINISHED, "call_id": "x", "tool": "t"}) is False
    assert state.apply({"seq": "three", "signal": bus.EXECUTING}) is False
    assert state.snapshot(T0)["malformed"] == 3
    assert state.seq == 0


def test_numbers_out_of_range_make_a_record_malformed(feed: Feed) -> None:
    """A JSON number beyond a float (1e400) is infinite: `int()` of it raised
    OverflowError out of `apply` (and out of `toolbus top`'s reading thread)."""
    state = feed.state
    records = [
        {"seq": 1e400, "signal": bus.FINISHED, "call_id": "a"},
        {"seq": 5, "signal": bus.EXECUTING, "call_id": "a", "run": 1e400},
        {"seq": 6, "signal": bus.EXECUTING, "call_id": "a", "attempt": -math.inf},
        {
            "seq": 7,
            "signal": bus.FINISHED,
            "call_id": "b",
            "result": {"status": "ok", "attempts": math.inf},
        },
    ]
    assert [state.apply(r) for r in records] == [False] * 4
    assert state.snapshot(T0)["malformed"] == 4


def test_batches_and_signals_of_your_own(feed: Feed) -> None:
    feed(bus.BATCH_START, 0.0, batch_id="b1", count=2, read_only=2, mutating=0)
    feed("myapp:breaker-open", 0.1, breaker="payments")
    snap = feed.state.snapshot(T0)
    assert snap["totals"]["batches"] == 1
    assert snap["signals"] == {"myapp:breaker-open": 1, bus.BATCH_START: 1}


def test_recent_lists_are_bounded_and_newest_first() -> None:
    feed = Feed(LiveState(recent=5, errors=2))
    for i in range(10):
        feed.call(bus.EXECUTING, i, f"c{i}", "t")
        feed.finish(
            i + 0.5, f"c{i}", "t", "error" if i % 2 else "ok", code="TOOL_ERROR" if i % 2 else None
        )
    snap = feed.state.snapshot(T0 + 20)
    assert [r["call_id"] for r in snap["recent"]] == ["c9", "c8", "c7", "c6", "c5"]
    assert [r["call_id"] for r in snap["errors"]] == ["c9", "c7"]


def test_snapshot_restores_to_the_same_state(feed: Feed) -> None:
    feed(bus.BATCH_START, 0.0, batch_id="b", count=3, read_only=3, mutating=0)
    for i in range(3):
        feed.call(bus.EXECUTING, i * 0.1, f"c{i}", "search", batch_id="b")
    feed.finish(0.5, "c0", "search", duration=0.5, batch_id="b")
    feed.finish(
        0.6, "c1", "search", "error", code="TOOL_ERROR", error="boom", duration=0.5, batch_id="b"
    )
    snap = feed.state.snapshot(T0 + 1)
    wire = orjson.loads(orjson.dumps(snap))  # as /status serves it
    restored = LiveState.restore(wire)
    assert restored.snapshot(T0 + 1) == snap
    # and it goes on from there, as a client following /events does
    follow = Feed(restored)
    follow.seq = itertools.count(snap["seq"] + 1)
    follow.finish(0.7, "c2", "search", duration=0.7, batch_id="b")
    after = restored.snapshot(T0 + 2)
    assert after["in_flight"] == [] and after["tools"][0]["calls"] == 3


def test_latency_quantiles_are_within_two_and_a_half_percent() -> None:
    values = [0.001 * 1.013**i for i in range(1000)]  # 1 ms to ~0.4 s
    lat = Latencies()
    for v in values:
        lat.add(v)
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.95, 0.99, 1.0):
        exact = ordered[max(1, math.ceil(q * len(ordered))) - 1]
        got = lat.quantile(q)
        assert got is not None
        assert abs(got - exact) / exact <= 0.025, (q, got, exact)
    assert lat.quantile(1.0) <= lat.max
    assert Latencies.from_json(lat.to_json()).quantile(0.5) == lat.quantile(0.5)
    empty = Latencies()
    assert empty.quantile(0.5) is None and empty.mean is None
    empty.add(float("nan"))
    empty.add(-1.0)
    assert empty.count == 0
    empty.add(0.0)
    assert empty.quantile(0.5) == 0.0


def test_wire_records_from_real_events_are_plain_and_bounded() -> None:
    result = ToolResult(
        call_id="c1", name="t", status="error", error="bad", error_code=ErrorCode.TOOL_ERROR,
        attempts=1, duration=0.2, output={"big": "x" * 5000},
    )  # fmt: skip
    record = encode(bus.FINISHED, bus.CallFinished("c1", "t", None, 1, result, seq=7, timestamp=T0))
    assert record["seq"] == 7 and record["signal"] == bus.FINISHED and record["timestamp"] == T0
    assert record["result"]["error_code"] == "TOOL_ERROR"
    assert isinstance(record["result"]["output"], str) and len(record["result"]["output"]) <= 2000
    assert orjson.loads(orjson.dumps(record)) == record  # JSON as it is
    state = LiveState()
    assert state.apply(record)
    assert state.snapshot(T0)["errors"][0]["error"] == "bad"
    assert orjson.loads(orjson.dumps(plain({"a": (1, 2)}))) == {"a": [1, 2]}
    assert plain({"when": T0, "odd": {1, 2}}) == {"when": T0, "odd": "{1, 2}"}
    assert plain(object()).startswith("<object")


def test_calls_with_the_same_id_at_once_are_two_calls_by_run(feed: Feed) -> None:
    # A model may give two calls the same id: the record's `run` tells them apart.
    feed.call(bus.EXECUTING, 0.0, "c", "search", run=7)
    feed.call(bus.EXECUTING, 0.1, "c", "search", run=8)
    snap = feed.state.snapshot(T0 + 1)
    assert [(c["call_id"], c["run"]) for c in snap["in_flight"]] == [("c", 7), ("c", 8)]
    assert snap["tools"][0]["in_flight"] == 2
    restored = LiveState.restore(orjson.loads(orjson.dumps(snap)))  # as /status serves it
    assert restored.snapshot(T0 + 1) == snap
    feed.call(bus.PROGRESS, 0.2, "c", "search", run=8, message="half", fraction=0.5)
    feed.finish(0.3, "c", "search", run=7)
    [left] = feed.state.snapshot(T0 + 1)["in_flight"]
    assert (left["run"], left["detail"], left["fraction"]) == (8, "half", 0.5)


def test_wire_records_of_a_call_carry_its_run() -> None:
    event = bus.Executing("c", "search", None, 1, {"q": "x"}, None, _run=41)
    assert encode(bus.EXECUTING, event)["run"] == 41
    assert "run" not in encode(bus.EXECUTING, bus.Executing("c", "search", None, 1, {}, None))
    assert "_run" not in encode(bus.EXECUTING, event)


def test_calls_waiting_for_capacity_are_counted_by_queue_until_they_start(feed: Feed) -> None:
    feed.call(bus.QUEUED, 0.0, "a", "search", group="max_parallel", position=1, queue_length=1)
    feed.call(bus.QUEUED, 0.1, "b", "search", group="max_parallel", position=2, queue_length=2)
    feed.call(bus.QUEUED, 0.2, "d", "query", group="db", position=1, queue_length=1)
    snap = feed.state.snapshot(T0 + 1)
    assert snap["queues"] == {"db": 1, "max_parallel": 2}
    assert [q["call_id"] for q in snap["queued"]] == ["a", "b", "d"]
    assert snap["totals"]["queued"] == 3 and snap["in_flight"] == []
    # A restored state goes on from there, as a client following /events does.
    restored = LiveState.restore(orjson.loads(orjson.dumps(snap)))
    assert restored.snapshot(T0 + 1) == snap
    feed.call(bus.EXECUTING, 0.3, "a", "search")  # started: no longer waits
    feed.finish(0.4, "b", "search", "rejected", code="OVERLOADED", attempts=0)  # shed
    snap = feed.state.snapshot(T0 + 1)
    assert snap["queues"] == {"db": 1}
    assert [c["call_id"] for c in snap["in_flight"]] == ["a"]
    follow = Feed(restored)
    follow.seq = itertools.count(feed.seq.__next__())
    follow.call(bus.EXECUTING, 0.5, "d", "query")
    assert restored.snapshot(T0 + 1)["queues"] == {"max_parallel": 2}
