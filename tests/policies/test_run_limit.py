"""`run_limit`: calls per agent run and per tool within a run, refused or halting.

Exact counts under concurrency (16 threads submitting one run's calls), the
batch's order, units given back, runs kept apart, and the policy alone on a
fake run identity (its decisions need no executor).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import MakeExecutor, at_once
from toolbus import ErrorCode, ToolCall, ToolRegistry, ToolResult, agent_run
from toolbus.policies import Admit, Halt, Reject, requires_approval, run_limit


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def look(i: int) -> int:
        return i

    @reg.tool(read_only=True)
    def fetch(i: int) -> int:
        return i

    return reg


def calls(n: int, name: str = "look", prefix: str = "c") -> list[ToolCall]:
    return [ToolCall(id=f"{prefix}{i}", name=name, arguments={"i": i}) for i in range(n)]


def test_the_policy_alone_counts_per_run_and_per_tool() -> None:
    limit = run_limit(3, per_tool={"look": 2})
    tool = registry().get("look")
    other = registry().get("fetch")
    assert tool is not None and other is not None

    def ask(run: str | None, t: Any = tool, i: int = 0) -> Any:
        if run is None:
            return limit.admit(ToolCall(id=f"x{i}", name=t.name), t, 0.0)
        with agent_run(run):
            return limit.admit(ToolCall(id=f"x{i}", name=t.name), t, 0.0)

    assert [type(ask("a", i=i)) for i in range(3)] == [Admit, Admit, Reject]  # look: 2 per run
    assert type(ask("a", other)) is Admit  # the run's third call
    refused = ask("a", other)
    assert type(refused) is Reject and refused.code is ErrorCode.QUOTA_EXCEEDED
    assert "at most 3 tool calls" in refused.message
    assert type(ask("b")) is Admit  # another run: its own counts
    assert type(ask(None)) is Admit  # no run: not counted
    assert (limit.used("a"), limit.used("a", "look"), limit.used("b")) == (3, 2, 1)


def test_halt_mode_decides_halt_with_the_limit_in_its_reason() -> None:
    limit = run_limit(1, on_limit="halt")
    tool = registry().get("look")
    assert tool is not None
    with agent_run("r"):
        assert type(limit.admit(ToolCall(name="look"), tool, 0.0)) is Admit
        decision = limit.admit(ToolCall(name="look"), tool, 0.0)
    assert decision == Halt("run_limit: at most 1 tool call per run")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({}, ValueError),
        ({"max_calls": 0}, ValueError),
        ({"max_calls": 1.5}, TypeError),
        ({"per_tool": {"look": 0}}, ValueError),
        ({"per_tool": {1: 2}}, TypeError),
        ({"max_calls": 1, "on_limit": "stop"}, ValueError),
        ({"max_calls": 1, "runs_kept": 0}, ValueError),
    ],
)
def test_bad_options_are_refused_when_made(args: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        run_limit(**args)


def test_a_batch_over_the_limit_runs_its_first_calls_in_order(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(registry(), policies=[run_limit(4)])
    batch = ex.execute_batch(calls(6), agent_run="r1")
    assert [r.status for r in batch.results] == ["ok"] * 4 + ["rejected"] * 2
    assert batch.results[4].error_code is ErrorCode.QUOTA_EXCEEDED
    assert "Do not call it again in this run" in (batch.results[4].error or "")
    # Spent for r1, whole for r2; calls of no run are not counted.
    assert ex.execute(ToolCall(name="look", arguments={"i": 1}), agent_run="r1").status == (
        "rejected"
    )
    assert ex.execute(ToolCall(name="look", arguments={"i": 1}), agent_run="r2").status == "ok"
    assert ex.execute(ToolCall(name="look", arguments={"i": 1})).status == "ok"


def test_sixteen_threads_submitting_one_run_admit_exactly_the_limit(
    make_executor: MakeExecutor,
) -> None:
    limit = run_limit(50)
    ex = make_executor(registry(), policies=[limit], max_parallel=16)

    def submit(t: int) -> list[ToolResult]:
        with agent_run("shared"):
            return [
                r for k in range(5) for r in ex.execute_batch(calls(2, prefix=f"t{t}k{k}c")).results
            ]

    results = [r for got in at_once(16, submit) for r in got]
    assert len(results) == 160  # one result per call
    statuses = [r.status for r in results]
    assert statuses.count("ok") == 50
    assert statuses.count("rejected") == 110
    assert limit.used("shared") == 50


def test_a_call_that_ends_unanswered_gives_its_unit_back(make_executor: MakeExecutor) -> None:
    """Deferred for an approval: not a call of the run yet (as a quota counts)."""
    reg = registry()

    @reg.tool(policies=[requires_approval()])
    def deploy() -> str:
        return "deployed"

    limit = run_limit(2)
    ex = make_executor(reg, policies=[limit])
    with agent_run("r"):
        deferred = ex.execute(ToolCall(id="d", name="deploy"))
        assert deferred.status == "deferred"
        assert limit.used("r") == 0
        assert ex.execute_batch(calls(2)).summary.succeeded == 2
        assert deferred.approval_request is not None
        approved = ex.execute(
            ToolCall(id="d", name="deploy"), approval=deferred.approval_request.approve()
        )
    assert approved.error_code is ErrorCode.QUOTA_EXCEEDED


def test_a_limit_given_to_one_tool_counts_that_tool_alone(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[run_limit(1)])
    def expensive() -> str:
        return "done"

    @reg.tool(read_only=True)
    def cheap() -> str:
        return "done"

    ex = make_executor(reg)
    with agent_run("r"):
        got = ex.execute_batch(
            [ToolCall(id=f"c{i}", name=n) for i, n in enumerate(["cheap", "expensive"] * 2)]
        )
    assert [r.status for r in got.results] == ["ok", "ok", "ok", "rejected"]


def test_one_call_object_in_two_runs_is_given_back_to_its_own_run(
    make_executor: MakeExecutor,
) -> None:
    """The same `ToolCall` object submitted in two runs at once: the one that
    ended unanswered gave its unit back to the other run."""
    started, go = threading.Event(), threading.Event()
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def pay(amount: int) -> str:
        started.set()
        assert go.wait(60)
        return "paid"

    limit = run_limit(5)
    ex = make_executor(reg, policies=[limit], max_parallel=2)
    call = ToolCall(id="p", name="pay", arguments={"amount": 1})
    asked = ex.execute(call, agent_run="ask")
    assert asked.approval_request is not None and limit.used("ask") == 0
    approval = ex.approve(asked.approval_request)
    results: list[ToolResult] = []
    paying = threading.Thread(
        target=lambda: results.append(ex.execute(call, approval=approval, agent_run="a"))
    )
    paying.start()
    try:
        assert started.wait(60)
        assert ex.execute(call, agent_run="b").status == "deferred"
        assert (limit.used("a"), limit.used("b")) == (1, 0)
    finally:
        go.set()
        paying.join(60)
    assert [r.status for r in results] == ["ok"] and limit.used("a") == 1
