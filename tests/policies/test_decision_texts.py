"""A policy's `Reject` message, `Halt` reason or `RequireApproval` reason that
cannot be made text (its `__str__` raises): the policy failed, and the call
ends `rejected` (`TOOL_UNAVAILABLE`) naming it, whether it was asked at
submission or before the run; nothing raises out of `execute*`, and each call
of a batch gets its one result and one `tool:finished`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, ToolCall, ToolRegistry, bus
from toolbus.policies import Admit, BasePolicy, Halt, Reject, RequireApproval, quota


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot print")


def registry(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def t(x: str) -> str:
        ran.append(x)
        return x

    return reg


def decision(kind: str) -> Any:
    if kind == "reject":
        return Reject(ErrorCode.TOOL_NOT_ALLOWED, Unprintable())  # type: ignore[arg-type]
    if kind == "halt":
        return Halt(Unprintable())  # type: ignore[arg-type]
    return RequireApproval(Unprintable())  # type: ignore[arg-type]


class Guard(BasePolicy):
    name = "oddguard"

    def __init__(self, kind: str, at_submission: bool) -> None:
        self.kind = kind
        self.at_submission = at_submission

    def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
        return decision(self.kind) if call.arguments["x"] == "bad" else Admit()


def assert_refused(r: Any) -> None:
    assert r.status == "rejected", r
    assert r.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert "oddguard" in (r.error or "") and "could not be made text" in (r.error or "")


@pytest.mark.parametrize(
    ("kind", "at_submission"),
    [("reject", True), ("halt", True), ("reject", False), ("halt", False), ("approval", False)],
)
def test_a_decision_whose_text_cannot_be_made_refuses_the_call(
    make_executor: MakeExecutor, kind: str, at_submission: bool
) -> None:
    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[Guard(kind, at_submission)])
    assert_refused(ex.execute(ToolCall(name="t", arguments={"x": "bad"})))
    assert ran == []


@pytest.mark.parametrize("how", ["batch", "submit_batch", "aexecute_batch"])
def test_a_batchs_other_calls_run_and_every_call_ends_once(
    make_executor: MakeExecutor, how: str
) -> None:
    ran: list[str] = []
    used = quota(10)
    ex = make_executor(registry(ran), policies=[used, Guard("halt", True)])
    calls = [ToolCall(name="t", arguments={"x": x}) for x in ("ok", "bad")]
    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        if how == "batch":
            results = ex.execute_batch(calls).results
        elif how == "submit_batch":
            results = ex.submit_batch(calls).result(timeout=30).results
        else:
            results = asyncio.run(ex.aexecute_batch(calls)).results
        rec.wait_for(bus.FINISHED, 2)
        assert ex.drain_events(10)
        assert len(rec.of(bus.FINISHED)) == 2
    assert results[0].status == "ok" and ran == ["ok"]
    assert_refused(results[1])
