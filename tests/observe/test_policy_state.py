"""What the live state shows of the policies (`toolbus.observe._policy_state`).

Pure, as `test_state.py`: records written by hand (as `_wire.encode`
makes them), then one test feeds the records of a real executor's policies.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from tests.observe.test_state import T0, Feed
from toolbus import Executor, ToolCall, ToolError, ToolRegistry, bus
from toolbus.observe import _policy_state
from toolbus.observe._state import LiveState
from toolbus.observe._wire import encode
from toolbus.policies import (
    CACHE_HIT,
    CIRCUIT_CLOSED,
    CIRCUIT_HALF_OPEN,
    CIRCUIT_OPEN,
    THROTTLED,
    cache,
    circuit_breaker,
    requires_approval,
)


@pytest.fixture
def feed() -> Feed:
    return Feed(LiveState())


def changed(feed: Feed, signal: str, at: float, tool: str, failures: int, **f: Any) -> None:
    feed(signal, at, tool=tool, state=signal.rpartition("-")[2], failures=failures, **f)


def policies(feed: Feed) -> dict[str, Any]:
    snap: dict[str, Any] = feed.state.snapshot(T0 + 100)["policies"]
    return snap


def test_a_breaker_opens_half_opens_and_closes(feed: Feed) -> None:
    assert policies(feed) == {
        "breakers": [], "tools": [], "waiting": [],
        "totals": {"throttled": 0, "cache_hits": 0, "shared": 0, "waiting": 0,
                   "open": 0, "half-open": 0, "closed": 0},
    }  # fmt: skip
    changed(feed, CIRCUIT_OPEN, 1.0, "rates", 3, call_id="c3")
    [breaker] = policies(feed)["breakers"]
    assert breaker == {
        "tool": "rates", "key": None, "state": "open", "failures": 3, "since": T0 + 1.0,
        "opened": 1, "call_id": "c3",
    }  # fmt: skip
    assert policies(feed)["tools"][0]["breaker"] == "open"
    assert policies(feed)["totals"]["open"] == 1

    changed(feed, CIRCUIT_HALF_OPEN, 31.0, "rates", 3, call_id="c9")
    [breaker] = policies(feed)["breakers"]
    assert (breaker["state"], breaker["since"], breaker["call_id"]) == ("half-open", T0 + 31, "c9")
    changed(feed, CIRCUIT_OPEN, 31.5, "rates", 4, call_id="c9")
    changed(feed, CIRCUIT_HALF_OPEN, 62.0, "rates", 4, call_id="c12")
    changed(feed, CIRCUIT_CLOSED, 62.1, "rates", 0, call_id="c12")
    [breaker] = policies(feed)["breakers"]
    assert (breaker["state"], breaker["failures"], breaker["opened"]) == ("closed", 0, 2)
    totals = policies(feed)["totals"]
    assert (totals["open"], totals["half-open"], totals["closed"]) == (0, 0, 1)
    assert feed.state.snapshot(T0)["signals"][CIRCUIT_OPEN] == 2  # still counted by signal


def test_a_breaker_per_key_shows_each_key_and_the_tool_its_worst(feed: Feed) -> None:
    changed(feed, CIRCUIT_OPEN, 1.0, "search", 2, key="tenant-a")
    changed(feed, CIRCUIT_OPEN, 2.0, "search", 2, key="tenant-b")
    changed(feed, CIRCUIT_HALF_OPEN, 3.0, "search", 2, key="tenant-a")
    snap = policies(feed)
    assert [(b["key"], b["state"]) for b in snap["breakers"]] == [
        ("tenant-a", "half-open"),
        ("tenant-b", "open"),
    ]
    assert snap["tools"] == [
        {"tool": "search", "breaker": "open", "throttled": 0, "throttle_wait": 0.0,
         "cache_hits": 0, "shared": 0, "waiting": 0},
    ]  # fmt: skip
    changed(feed, CIRCUIT_HALF_OPEN, 4.0, "search", 2, key="tenant-b")
    assert policies(feed)["tools"][0]["breaker"] == "half-open"


def test_circuits_are_bounded_forgetting_closed_ones_first(
    feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_policy_state, "_MAX_CIRCUITS", 3)
    changed(feed, CIRCUIT_OPEN, 1.0, "t", 1, key="k1")
    changed(feed, CIRCUIT_CLOSED, 2.0, "t", 0, key="k2")
    changed(feed, CIRCUIT_OPEN, 3.0, "t", 1, key="k3")
    changed(feed, CIRCUIT_OPEN, 4.0, "t", 1, key="k4")  # k2, closed, goes
    assert [b["key"] for b in policies(feed)["breakers"]] == ["k1", "k3", "k4"]
    changed(feed, CIRCUIT_OPEN, 5.0, "t", 1, key="k5")  # none closed: the oldest change goes
    assert [b["key"] for b in policies(feed)["breakers"]] == ["k3", "k4", "k5"]


def test_throttled_calls_and_cache_hits_are_counted_per_tool(feed: Feed) -> None:
    for i, wait in enumerate((0.25, 0.5)):
        feed.call(THROTTLED, i, f"c{i}", "fetch", 0, wait=wait, limit="5 per 1 second", key=None)
    feed.call(CACHE_HIT, 3.0, "c3", "lookup", 0, shared=False)
    feed.call(CACHE_HIT, 3.0, "c4", "lookup", 0, shared=True)
    snap = policies(feed)
    tools = {t["tool"]: t for t in snap["tools"]}
    assert (tools["fetch"]["throttled"], tools["fetch"]["throttle_wait"]) == (2, 0.75)
    assert (tools["lookup"]["cache_hits"], tools["lookup"]["shared"]) == (2, 1)
    assert tools["fetch"]["breaker"] is None and tools["lookup"]["cache_hits"] == 2
    assert {k: snap["totals"][k] for k in ("throttled", "cache_hits", "shared")} == {
        "throttled": 2,
        "cache_hits": 2,
        "shared": 1,
    }
    assert feed.state.snapshot(T0)["in_flight"] == []  # held back is not running


def test_deferred_calls_wait_for_approval_until_submitted_again(feed: Feed) -> None:
    why = "Tool 'refund' needs approval before it runs: refunds need a person"
    for i in range(3):
        feed.finish(i, f"r{i}", "refund", "deferred", code="APPROVAL_REQUIRED", attempts=0,
                    duration=0.0, error=why)  # fmt: skip
    snap = feed.state.snapshot(T0 + 10)
    waiting = snap["policies"]["waiting"]
    assert [w["call_id"] for w in waiting] == ["r2", "r1", "r0"]  # newest first
    assert waiting[0] | {"seq": 0} == {
        "seq": 0, "timestamp": T0 + 2, "call_id": "r2", "batch_id": None, "tool": "refund",
        "reason": why,
    }  # fmt: skip
    assert snap["policies"]["totals"]["waiting"] == 3
    assert snap["policies"]["tools"][0]["waiting"] == 3
    assert snap["errors"] == []  # waiting is not failing
    assert snap["totals"]["deferred"] == 3

    feed.call(bus.EXECUTING, 11.0, "r0", "refund")  # approved: it runs
    feed.finish(11.1, "r0", "refund")
    feed.finish(12.0, "r1", "refund", "rejected", code="TOOL_NOT_ALLOWED", attempts=0)  # denied
    feed.finish(13.0, "r2", "refund", "deferred", code="APPROVAL_REQUIRED", attempts=0)  # again
    snap = feed.state.snapshot(T0 + 20)
    assert [w["call_id"] for w in snap["policies"]["waiting"]] == ["r2"]
    assert snap["policies"]["waiting"][0]["timestamp"] == T0 + 13
    assert [e["call_id"] for e in snap["errors"]] == ["r1"]


def test_calls_waiting_for_approval_are_bounded(
    feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_policy_state, "_MAX_WAITING", 2)
    for i in range(4):
        feed.finish(i, f"r{i}", "refund", "deferred", code="APPROVAL_REQUIRED", attempts=0)
    assert [w["call_id"] for w in policies(feed)["waiting"]] == ["r3", "r2"]


def test_policies_restore_from_a_snapshot_and_go_on(feed: Feed) -> None:
    changed(feed, CIRCUIT_OPEN, 1.0, "rates", 1, key="eu", call_id="c1")
    changed(feed, CIRCUIT_OPEN, 2.0, "rates", 1, call_id="c2")
    feed.call(THROTTLED, 3.0, "c3", "fetch", 0, wait=0.5, limit="5 per 1 second", key=None)
    feed.call(CACHE_HIT, 4.0, "c4", "lookup", 0, shared=True)
    feed.finish(5.0, "r1", "refund", "deferred", code="APPROVAL_REQUIRED", attempts=0)
    feed.finish(6.0, "r2", "refund", "deferred", code="APPROVAL_REQUIRED", attempts=0)
    snap = feed.state.snapshot(T0 + 10)
    restored = LiveState.restore(orjson.loads(orjson.dumps(snap)))  # as /status serves it
    assert restored.snapshot(T0 + 10) == snap

    follow = Feed(restored)
    follow.seq = itertools.count(snap["seq"] + 1)
    follow.finish(7.0, "r1", "refund")  # approved and run
    changed(follow, CIRCUIT_HALF_OPEN, 8.0, "rates", 1, call_id="c9")
    after = restored.snapshot(T0 + 10)["policies"]
    assert [w["call_id"] for w in after["waiting"]] == ["r2"]
    assert [(b["key"], b["state"]) for b in after["breakers"]] == [
        (None, "half-open"),
        ("eu", "open"),
    ]


def test_a_real_executors_policy_events_make_the_same_state() -> None:
    """A circuit breaker that opens after one failure, a cache and an approval,
    on a real executor: its events, encoded as the feeds encode them."""
    registry = ToolRegistry()

    @registry.tool(read_only=True, policies=[circuit_breaker(failures=1, reset_after=60)])
    def rates(currency: str) -> float:
        """Down: every call fails."""
        raise ToolError("rates service unavailable (503)")

    @registry.tool(read_only=True, policies=[cache(ttl=60)])
    def lookup(sku: str) -> str:
        """Cached."""
        return sku

    @registry.tool(policies=[requires_approval(reason="refunds need a person")])
    def refund(order: str) -> str:
        """Waits for a person."""
        return order

    state = LiveState()
    with Executor(registry, name="policies") as ex, bus.Recorder(sender=ex) as rec:
        assert ex.execute(ToolCall(name="rates", arguments={"currency": "EUR"})).status == "error"
        refused = ex.execute(ToolCall(name="rates", arguments={"currency": "EUR"}))
        assert refused.error_code is not None and refused.error_code.value == "CIRCUIT_OPEN"
        for _ in range(2):
            assert ex.execute(ToolCall(name="lookup", arguments={"sku": "A"})).status == "ok"
        deferred = ex.execute(ToolCall(id="r1", name="refund", arguments={"order": "o-1"}))
        assert deferred.status == "deferred"
        ex.drain_events()
        for name, event in list(rec.events):
            assert state.apply(orjson.loads(orjson.dumps(encode(name, event, light=True))))
    snap = state.snapshot(T0)
    pol = snap["policies"]
    [breaker] = pol["breakers"]
    assert (breaker["tool"], breaker["state"], breaker["failures"], breaker["opened"]) == (
        "rates",
        "open",
        1,
        1,
    )
    tools = {t["tool"]: t for t in pol["tools"]}
    assert tools["lookup"]["cache_hits"] == 1 and tools["rates"]["breaker"] == "open"
    assert [w["call_id"] for w in pol["waiting"]] == ["r1"]
    assert pol["waiting"][0]["reason"].endswith("refunds need a person")
    rejected = {t["tool"]: t for t in snap["tools"]}["rates"]["outcomes"]
    assert rejected == {"error/TOOL_ERROR": 1, "rejected/CIRCUIT_OPEN": 1}
