"""Halting an agent run: from a policy (at submission, before a run), from
`Executor.halt`; what ends, what is announced, and what is left alone.

Every call submitted gets exactly one result and one `tool:finished`
whatever the halt catches it doing: queued, running, not yet submitted.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, ToolCall, ToolContext, ToolRegistry, agent_run, bus
from toolbus.policies import Admit, BasePolicy, Decision, Halt, run_limit
from toolbus.tools import Tool


class HaltOn(BasePolicy):
    """Halts the run at the call whose id is `call_id` (asked before its run);
    its reason quotes the call's `api_key`, which must never be published."""

    name = "halt-on"

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        if call.id == self.call_id:
            return Halt(f"tripped on key {call.arguments.get('api_key')}")
        return Admit()


def finished_ids(rec: bus.Recorder) -> list[str]:
    return [e.call_id for name, e in rec.events if name == bus.FINISHED]


def test_a_run_limit_halting_at_submission_ends_the_batch_and_the_run(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()
    ran: list[int] = []

    @reg.tool(read_only=True)
    def look(i: int) -> int:
        ran.append(i)
        return i

    ex = make_executor(reg, policies=[run_limit(3, on_limit="halt")])
    first = ex.execute_batch(
        [ToolCall(id=f"a{i}", name="look", arguments={"i": i}) for i in range(2)], agent_run="r"
    )
    assert first.summary.succeeded == 2
    second = ex.execute_batch(
        [ToolCall(id=f"b{i}", name="look", arguments={"i": i}) for i in range(4)], agent_run="r"
    )
    # The run stops as a whole: none of the second batch had started.
    assert [(r.status, r.error_code) for r in second.results] == [
        ("cancelled", ErrorCode.HALTED)
    ] * 4
    assert "run_limit: at most 3 tool calls per run" in (second.results[0].error or "")
    later = ex.execute(ToolCall(id="c", name="look", arguments={"i": 9}), agent_run="r")
    assert later.error_code is ErrorCode.HALTED
    other = ex.execute(ToolCall(id="d", name="look", arguments={"i": 9}), agent_run="other")
    assert other.status == "ok"
    assert ex.halted("r") == "run_limit: at most 3 tool calls per run"
    assert ex.halted("other") is None
    assert sorted(ran) == [0, 1, 9]
    ex.drain_events()
    assert sorted(finished_ids(recorder)) == sorted(["a0", "a1", "b0", "b1", "b2", "b3", "c", "d"])
    [halted] = recorder.of(bus.RUN_HALTED)
    assert (halted.agent_run, halted.call_id) == ("r", "b1")
    s = ex.stats()
    assert (s.in_flight, s.cancelled) == (0, 5)


def test_a_halt_before_a_run_stops_the_running_calls_of_its_run(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """Calls of the run already running end HALTED at once (their threads are
    told to stop); calls of another run and of no run go on."""
    reg = ToolRegistry()
    release = threading.Event()
    started: list[str] = []
    lock = threading.Lock()

    @reg.tool(read_only=True)
    def work(ctx: ToolContext, api_key: str = "") -> str:
        with lock:
            started.append(ctx.call_id)
        release.wait(30)  # (a halted call's thread is let go: it returns late)
        return "finished"

    secret = "sk-live-4f9a8b7c6d5e4f3a2b1c"
    ex = make_executor(reg, policies=[HaltOn("trip")], max_parallel=8)
    running = ex.submit_batch([ToolCall(id=f"w{i}", name="work") for i in range(3)], agent_run="r")
    bystander = ex.submit(ToolCall(id="other", name="work"), agent_run="r2")
    wait_until(lambda: len(started) == 4, what="four calls running")
    tripped = ex.execute(
        ToolCall(id="trip", name="work", arguments={"api_key": secret}), agent_run="r"
    )
    assert (tripped.status, tripped.error_code) == ("cancelled", ErrorCode.HALTED)
    results = running.result(30).results
    assert [(r.status, r.error_code) for r in results] == [("cancelled", ErrorCode.HALTED)] * 3
    assert not bystander.done()
    release.set()
    assert bystander.result(30).status == "ok"
    ex.drain_events()
    everything = repr(recorder.events) + repr(results) + repr(tripped)
    assert secret not in everything
    assert "[REDACTED]" in (tripped.error or "") or "***" in (tripped.error or "")
    [halted] = recorder.of(bus.RUN_HALTED)
    assert (halted.agent_run, halted.call_id, halted.cancelled) == ("r", "trip", 3)
    assert sorted(finished_ids(recorder)) == sorted(["w0", "w1", "w2", "other", "trip"])


def test_executor_halt_ends_a_runs_calls_across_batches_and_threads(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def wait() -> str:
        release.wait(30)
        return "done"

    ex = make_executor(reg, max_parallel=2)
    # Two running, three queued behind them (max_parallel=2), from two batches.
    a = ex.submit_batch([ToolCall(id=f"a{i}", name="wait") for i in range(3)], agent_run="r")
    b = ex.submit_batch([ToolCall(id=f"b{i}", name="wait") for i in range(2)], agent_run="r")
    wait_until(
        lambda: (s := ex.stats()).in_flight == 2 and s.queued == 3, what="two running, three queued"
    )
    assert ex.halt("r", "the user pressed stop") == 5
    results = [*a.result(30).results, *b.result(30).results]
    assert {(r.status, r.error_code) for r in results} == {("cancelled", ErrorCode.HALTED)}
    assert "the user pressed stop" in (results[0].error or "")
    assert ex.halt("r", "again") == 0  # halted already: nothing left, nothing announced
    assert ex.halted("r") == "the user pressed stop"
    release.set()
    ex.drain_events()
    [halted] = recorder.of(bus.RUN_HALTED)
    assert (halted.call_id, halted.cancelled, halted.reason) == (None, 5, "the user pressed stop")
    s = ex.stats()
    assert (s.in_flight, s.cancelled) == (0, 5)


def test_nested_calls_belong_to_their_callers_run(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    seen: list[Any] = []

    @reg.tool(read_only=True)
    def inner() -> str:
        from toolbus import current_agent_run

        seen.append(current_agent_run())
        return "inner"

    @reg.tool(read_only=True)
    def outer() -> str:
        result = ex.execute(ToolCall(name="inner"))
        return f"{result.status}:{result.error_code}"

    ex = make_executor(reg)
    assert ex.execute(ToolCall(name="outer"), agent_run="r").output == "ok:None"
    assert seen == ["r"]
    ex.halt("r")
    assert ex.execute(ToolCall(name="outer"), agent_run="r").error_code is ErrorCode.HALTED
    with agent_run("r2"):
        assert ex.execute(ToolCall(name="outer")).output == "ok:None"
    assert seen == ["r", "r2"]


def test_a_halt_of_no_run_ends_its_batch_alone(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def look(i: int) -> int:
        return i

    ex = make_executor(reg, policies=[HaltOn("c2")], max_parallel=1)
    batch = ex.execute_batch(
        [ToolCall(id=f"c{i}", name="look", arguments={"i": i}) for i in range(5)]
    )
    statuses = [(r.status, r.error_code) for r in batch.results]
    # One at a time (max_parallel=1): the calls before it ran, the rest ended with it.
    assert statuses[:2] == [("ok", None)] * 2
    assert statuses[2:] == [("cancelled", ErrorCode.HALTED)] * 3
    assert ex.execute(ToolCall(name="look", arguments={"i": 1})).status == "ok"


def test_async_callers_halt_the_same_way(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def alook(i: int) -> int:
        await asyncio.sleep(0)
        return i

    ex = make_executor(reg, policies=[run_limit(per_tool=2, on_limit="halt")])

    async def main() -> list[Any]:
        one = await ex.aexecute(ToolCall(name="alook", arguments={"i": 0}), agent_run="r")
        batch = await ex.aexecute_batch(
            [ToolCall(id=f"c{i}", name="alook", arguments={"i": i}) for i in range(3)],
            agent_run="r",
        )
        return [one, *batch.results]

    got = asyncio.run(main())
    assert [r.status for r in got] == ["ok", "cancelled", "cancelled", "cancelled"]
    assert ex.halted("r") == "run_limit: at most 2 calls of tool 'alook' per run"


@pytest.mark.parametrize(
    ("args", "error"),
    [((123,), TypeError), (("",), ValueError), (("x" * 201,), ValueError), (("r", ""), ValueError)],
)
def test_bad_halts_and_run_names_are_refused(
    make_executor: MakeExecutor, args: tuple[Any, ...], error: type
) -> None:
    ex = make_executor(ToolRegistry())
    with pytest.raises(error):
        ex.halt(*args)


def test_a_bad_agent_run_is_refused_where_it_is_given(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def look() -> str:
        return "ok"

    ex = make_executor(reg)
    with pytest.raises(TypeError, match="agent_run must be a string"):
        ex.execute(ToolCall(name="look"), agent_run=7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 to 200 characters"):
        ex.execute_batch([ToolCall(name="look")], agent_run="")
    with pytest.raises(ValueError), agent_run(""):
        pass
    assert ex.stats().submitted == 0


def test_a_halt_ends_a_stop_on_error_batch_halted_not_aborted(make_executor: MakeExecutor) -> None:
    """The first call a halt cancelled set off the batch's stop_on_error, which
    ended the rest ABORTED before the halt reached them (review of issue 28)."""
    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def slow() -> str:
        release.wait(30)
        return "done"

    ex = make_executor(reg, max_parallel=2)
    try:
        handle = ex.submit_batch(
            [ToolCall(id=f"c{i}", name="slow") for i in range(4)], stop_on_error=True, agent_run="r"
        )
        wait_until(lambda: (s := ex.stats()).in_flight == 2 and s.queued == 2, what="2 running")
        assert ex.halt("r", "stop") == 4
        codes = {(r.status, r.error_code) for r in handle.result(30).results}
        assert codes == {("cancelled", ErrorCode.HALTED)}
    finally:
        release.set()


def test_a_later_policy_refusing_at_submission_leaves_no_open_admission(
    make_executor: MakeExecutor,
) -> None:
    """run_limit's book of open admissions kept every call a later quota refused
    (review of issue 28): told how the call ended, it lets go of it."""
    from toolbus.policies import quota

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def look() -> str:
        return "x"

    limit = run_limit(100)
    ex = make_executor(reg, policies=[limit, quota(1)])
    results = [ex.execute(ToolCall(id="same", name="look"), agent_run="q") for _ in range(10)]
    assert [r.status for r in results] == ["ok"] + ["rejected"] * 9
    assert limit._open == {}


def test_run_limit_tells_runs_apart_when_call_ids_repeat(make_executor: MakeExecutor) -> None:
    """A call of run B with the same id as one of run A gave B's unit back to A
    (review of issue 28): an admission is known by the call object asked about."""
    from toolbus.policies import requires_approval

    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def slow() -> str:
        release.wait(30)
        return "x"

    @reg.tool(read_only=True, policies=[requires_approval()])
    def guarded() -> str:
        return "x"

    limit = run_limit(1)
    ex = make_executor(reg, policies=[limit])
    try:
        running = ex.submit(ToolCall(id="c1", name="slow"), agent_run="A")
        wait_until(lambda: ex.stats().in_flight == 1, what="A's call running")
        deferred = ex.execute(ToolCall(id="c1", name="guarded"), agent_run="B")
        assert deferred.status == "deferred"
        assert (limit.used("A"), limit.used("B")) == (1, 0)
        again = ex.execute(ToolCall(id="c2", name="slow"), agent_run="A")
        assert again.error_code is ErrorCode.QUOTA_EXCEEDED
    finally:
        release.set()
    assert running.result(30).ok


def test_a_custom_output_check_tripping_without_a_reason_still_halts(
    make_executor: MakeExecutor,
) -> None:
    """`Trip(None)` from a policy's own check_output recorded None as the run's
    reason: the run seemed not halted, and could never be halted again (review)."""
    from toolbus.policies import BasePolicy, Trip

    class Checker(BasePolicy):
        name = "checker"

        def check_output(self, call: ToolCall, result: Any, now: float) -> Any:
            return Trip(None)  # type: ignore[arg-type]

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def look() -> str:
        return "x"

    ex = make_executor(reg, policies=[Checker()])
    r = ex.execute(ToolCall(name="look"), agent_run="T")
    assert r.error_code is ErrorCode.HALTED
    assert ex.halted("T") == "guardrail checker tripped"
    assert ex.execute(ToolCall(name="look"), agent_run="T").error_code is ErrorCode.HALTED
