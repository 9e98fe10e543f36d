"""`policies.adaptive_timeout`: a tool's deadline learned from its calls.

Directly: samples in, deadlines out (`timeout(tool, default)`), no clock
needed. Through an executor, the deadline each attempt gets is the
`Executing` event's `timeout`: it shrinks after fast calls and grows to the
ceiling when calls keep timing out.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from tests.conftest import HANG_TIMEOUT, MakeExecutor
from toolbus import ToolCall, ToolRegistry, ToolResult, bus, tool
from toolbus.policies import AdaptiveTimeout, adaptive_timeout
from toolbus.policies._adaptive import _percentile
from toolbus.policies._signals import asking, done_asking


@tool(read_only=True)
def plain(q: str) -> str:
    return q


@tool(read_only=True, timeout=7.0)
def pinned(q: str) -> str:
    return q


def _result(status: str = "ok", duration: float = 0.1, attempts: int = 1) -> ToolResult:
    return ToolResult(
        call_id="c",
        name="plain",
        status=status,
        duration=duration,
        attempts=attempts,  # type: ignore[arg-type]
    )


CALL = ToolCall(id="c", name="plain", arguments={"q": "x"})


def _feed(policy: AdaptiveTimeout, *durations: float) -> None:
    for d in durations:
        policy.on_result(CALL, _result(duration=d), 0.0)


def test_until_min_samples_the_tools_own_timeout_applies() -> None:
    p = adaptive_timeout(min_samples=3, floor=0.01, ceiling=100)
    _feed(p, 1.0, 1.0)
    assert p.timeout(plain, 30.0) == 30.0 and p.timeout(plain, None) is None
    _feed(p, 1.0)
    assert p.timeout(plain, 30.0) == 2.0  # percentile 1.0 * factor 2


def test_the_deadline_is_the_percentile_times_the_factor_clamped() -> None:
    p = adaptive_timeout(percentile=0.5, factor=3.0, floor=0.5, ceiling=10.0, min_samples=3)
    _feed(p, 0.1, 0.2, 0.3)
    assert p.timeout(plain, 30.0) == pytest.approx(0.6)  # median 0.2 * 3
    q = adaptive_timeout(percentile=0.5, floor=0.5, ceiling=10.0, min_samples=1)
    _feed(q, 0.01)
    assert q.timeout(plain, 30.0) == 0.5  # the floor
    _feed(q, 60.0, 60.0)
    assert q.timeout(plain, 30.0) == 10.0  # the ceiling


def test_percentile_interpolates_between_neighbours() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert _percentile(values, 0.5) == 3.0
    assert _percentile(values, 1.0) == 5.0
    assert _percentile(values, 0.99) == pytest.approx(4.96)
    assert _percentile([2.0], 0.3) == 2.0


def test_only_single_attempt_successes_and_timeouts_are_samples() -> None:
    p = adaptive_timeout(min_samples=1, window=10)
    p.on_result(CALL, _result(duration=0.4), 0.0)
    p.on_result(CALL, _result(duration=9.0, attempts=2), 0.0)  # retries and backoff in it
    p.on_result(CALL, _result("error", duration=5.0), 0.0)
    p.on_result(CALL, _result("rejected", duration=0.0, attempts=0), 0.0)
    p.on_result(CALL, _result(duration=0.0, attempts=0), 0.0)  # a cache hit: nothing ran
    assert p.samples("plain") == [0.4]
    # A timeout counts at the deadline it missed (the asked call's timeout).
    token = asking(None, None, 3.0)  # type: ignore[arg-type]
    try:
        p.on_result(CALL, _result("timeout", duration=3.1), 0.0)
    finally:
        done_asking(token)
    p.on_result(CALL, _result("timeout", duration=3.1), 0.0)  # no deadline known: skipped
    assert p.samples("plain") == [0.4, 3.0]


def test_the_window_keeps_the_latest_samples() -> None:
    p = adaptive_timeout(percentile=1.0, factor=1.0, floor=0.1, min_samples=2, window=3)
    _feed(p, 50.0, 1.0, 1.0, 1.0)
    assert p.samples("plain") == [1.0, 1.0, 1.0]
    assert p.timeout(plain, 30.0) == 1.0


def test_an_explicit_tool_timeout_wins_unless_overridden() -> None:
    keep = adaptive_timeout(min_samples=1, floor=0.1)
    over = adaptive_timeout(min_samples=1, floor=0.1, override=True)
    for p in (keep, over):
        p.on_result(ToolCall(id="c", name="pinned", arguments={}), _result(duration=0.1), 0.0)
    assert keep.timeout(pinned, 7.0) == 7.0
    assert over.timeout(pinned, 7.0) == pytest.approx(0.2)


def test_samples_are_per_tool() -> None:
    p = adaptive_timeout(min_samples=1, floor=0.1)
    _feed(p, 1.0)
    other = tool(read_only=True, name="other")(lambda q: q)
    assert p.timeout(other, 30.0) == 30.0


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"percentile": 0}, ValueError),
        ({"percentile": 1.5}, ValueError),
        ({"percentile": "high"}, TypeError),
        ({"factor": 0}, ValueError),
        ({"floor": 0}, ValueError),
        ({"floor": 5, "ceiling": 4}, ValueError),
        ({"ceiling": math.inf}, ValueError),
        ({"min_samples": 0}, ValueError),
        ({"min_samples": 2.5}, ValueError),
        ({"min_samples": 10, "window": 5}, ValueError),
        ({"override": "yes"}, TypeError),
    ],
)
def test_bad_settings_are_refused(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        adaptive_timeout(**options)


# -- through an executor ---------------------------------------------------------------


def test_after_min_samples_fast_calls_the_deadline_shrinks(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def fast(q: str) -> str:
        return q

    # A floor of 5 s: twice any quick call's time, however busy the machine,
    # stays under it (0.5 s is passed by one descheduled for 0.25 s), and
    # the sixth call, the one the floor now bounds, has room to end ok.
    policy = adaptive_timeout(min_samples=5, floor=5.0, ceiling=60)
    ex = make_executor(reg, timeout=30.0, policies=[policy])
    for i in range(6):
        assert ex.execute({"id": f"c{i}", "name": "fast", "arguments": {"q": "x"}}).ok
    events = recorder.wait_for(bus.EXECUTING, 6)
    assert [e.timeout for e in events] == [30.0] * 5 + [5.0]


def test_calls_that_keep_timing_out_grow_the_deadline_to_the_ceiling(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def stuck(q: str) -> str:
        await asyncio.sleep(30)  # cancelled at its deadline
        return q

    # Deadlines a tool starts within however busy the machine (each call must
    # reach its tool: a deadline in admission teaches nothing and sends no
    # tool:executing); the fourth timeout would teach 8 s, over the ceiling.
    t = HANG_TIMEOUT
    policy = adaptive_timeout(percentile=1.0, factor=2.0, floor=0.01, ceiling=4 * t, min_samples=2)
    ex = make_executor(reg, timeout=t, policies=[policy])
    for i in range(4):
        r = ex.execute({"id": f"c{i}", "name": "stuck", "arguments": {"q": "x"}})
        assert r.status == "timeout"
    events = recorder.wait_for(bus.EXECUTING, 4)
    assert [e.timeout for e in events] == pytest.approx([t, t, 2 * t, 4 * t])
    assert policy.learned("stuck") == 4 * t
