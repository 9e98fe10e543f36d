"""A policy's own result (`Respond`, an `on_result` replacement) is sent as a
tool's output is: made JSON data (`normalize_output`), or, when it cannot be,
refused (`Respond`: the call ends `rejected` naming the policy) or ignored (a
replacement: the result stands). So it can be formatted, fed to `run_agent`
and journaled like any other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import (
    ErrorCode,
    Executor,
    ToolCall,
    ToolRegistry,
    ToolResult,
    format_result_for_context,
)
from toolbus.policies import BasePolicy, Respond


def cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


class Answers(BasePolicy):
    name = "answers"

    def __init__(self, output: Any) -> None:
        self.output = output

    def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
        return Respond(ToolResult(call_id="", name="", status="ok", output=self.output))


class Replaces(BasePolicy):
    name = "replaces"

    def __init__(self, output: Any) -> None:
        self.output = output

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> Any:
        return result.model_copy(update={"output": self.output})


def registry(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    def write(k: str) -> str:
        ran.append(k)
        return "written"

    return reg


@pytest.mark.parametrize("policy", [Answers, Replaces])
def test_a_policys_output_is_made_json_data(make_executor: MakeExecutor, policy: Any) -> None:
    ex = make_executor(registry([]), policies=[policy({"tags": {1}, "pair": (1, 2)})])
    r = ex.execute(ToolCall(name="write", arguments={"k": "x"}))
    assert r.status == "ok"
    assert r.output == {"tags": [1], "pair": [1, 2]}
    format_result_for_context(r)


def test_a_response_that_cannot_be_sent_refuses_the_call(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    ex = make_executor(registry(ran), policies=[Answers(cyclic())])
    r = ex.execute(ToolCall(name="write", arguments={"k": "x"}))
    assert r.status == "rejected" and r.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert "answers" in (r.error or "")
    assert ran == []
    format_result_for_context(r)


def test_a_replacement_that_cannot_be_sent_is_ignored_and_journaled(tmp_path: Path) -> None:
    ran: list[str] = []
    path = tmp_path / "journal.sqlite"
    with Executor(registry(ran), policies=[Replaces(cyclic())], journal=path) as ex:
        first = ex.execute(ToolCall(name="write", arguments={"k": "x"}, idempotency_key="k1"))
        again = ex.execute(ToolCall(name="write", arguments={"k": "x"}, idempotency_key="k1"))
    assert first.status == "ok" and first.output == "written"
    format_result_for_context(first)
    # The journal recorded the result: the mutating tool did not run again.
    assert again.status == "ok" and again.output == "written" and again.attempts == 0
    assert ran == ["x"]
