"""A tool's progress (`ctx.progress`, `pipeline/_reports.py`): published
while its call has no result, its fraction within 0..1."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolContext, ToolRegistry, bus
from toolbus.pipeline import progress_fraction


@pytest.mark.parametrize(
    ("given", "published"),
    [(0.5, 0.5), (0, 0.0), (1, 1.0), (1.0000001, 1.0), (7, 1.0), (-0.2, 0.0),
     (float("nan"), None), (float("inf"), 1.0), ("half", None), (None, None),
     (10**400, None), (True, 1.0)],
)  # fmt: skip
def test_a_fraction_is_published_within_0_and_1(given: object, published: float | None) -> None:
    assert progress_fraction(given) == published


def test_progress_reaches_the_event_within_0_and_1(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def steps(ctx: ToolContext) -> str:
        ctx.progress("over", fraction=7)
        ctx.progress("odd", fraction=float("nan"))
        return "done"

    ex = make_executor(reg)
    assert ex.execute(ToolCall(id="s", name="steps", arguments={})).status == "ok"
    recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "s")
    assert [(e.message, e.fraction) for e in recorder.of(bus.PROGRESS)] == [
        ("over", 1.0),
        ("odd", None),
    ]


def test_no_progress_is_published_once_the_call_has_its_result(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """A tool let go at its deadline runs on: what it reports afterwards
    would follow the call's `tool:finished`."""
    reg = ToolRegistry()
    ended = threading.Event()
    reported = threading.Event()

    @reg.tool(read_only=True, timeout=0.05)
    def slow(ctx: ToolContext) -> str:
        ctx.progress("before")
        assert ended.wait(30), "the test never saw the call end"
        ctx.progress("after")
        reported.set()
        return "late"

    ex = make_executor(reg)
    assert ex.execute(ToolCall(id="p", name="slow", arguments={})).status == "timeout"
    recorder.wait_for(bus.FINISHED, where=lambda e: e.call_id == "p")
    ended.set()
    assert reported.wait(30)
    recorder.wait_for(bus.LATE_RESULT, where=lambda e: e.call_id == "p")  # (after "after")
    # ("before" too, unless the deadline came first on a slow machine.)
    assert "after" not in [e.message for e in recorder.of(bus.PROGRESS)]


def test_no_progress_is_numbered_after_the_calls_finished_event_under_a_race(
    make_executor: MakeExecutor,
) -> None:
    """Tools report progress as fast as they can while their deadlines end
    their calls: no progress event of a call comes after its `tool:finished`."""
    reg = ToolRegistry()
    stop = threading.Event()

    @reg.tool(read_only=True, timeout=0.02)
    def spam(ctx: ToolContext, n: int) -> str:
        while not stop.is_set() and not ctx.cancelled:
            ctx.progress("p", fraction=0.5)
        return "done"

    ex = make_executor(reg, max_parallel=8)
    with bus.Recorder(bus.FINISHED, bus.PROGRESS, sender=ex) as rec:
        for i in range(0, 48, 8):
            batch = [ToolCall(id=f"c{j}", name="spam", arguments={"n": j}) for j in range(i, i + 8)]
            assert {r.status for r in ex.execute_batch(batch)} == {"timeout"}
        stop.set()
        ended = {e.call_id: e.seq for e in rec.wait_for(bus.FINISHED, 48, timeout=30)}
        assert ex.drain_events(30)
    late = [e for e in rec.of(bus.PROGRESS) if e.seq > ended[e.call_id]]
    assert late == []
