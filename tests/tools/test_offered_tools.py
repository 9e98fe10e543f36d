"""Tools offered per step: `Tool.is_enabled`, an executor's `prepare`, what
every export offers, and a call of a tool not offered (`TOOL_NOT_OFFERED`).

The exports: the registry's own (`to_openai`, `to_anthropic`, `to_mcp`),
the provider formats, `run_agent` through the real SDKs, the MCP server's
`tools/list` and `tools/call` (the SDK's client), pydantic-ai's toolset (a
real agent on a `FunctionModel`), the Agents SDK both ways (a real Runner on
a fake model) and LangGraph's `ToolbusNode`.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, agent_run
from toolbus.providers import anthropic as tba
from toolbus.providers import openai as tbo
from toolbus.tools import StepContext, Tool

seen_steps: list[StepContext] = []


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def search(query: str) -> str:
        """Search the shop."""
        return f"results for {query}"

    def later(step: StepContext) -> bool:
        seen_steps.append(step)
        return step.step >= 2

    @reg.tool(is_enabled=later)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    @reg.tool(read_only=True, is_enabled=False)
    def internal() -> str:
        """Never offered to a model."""
        return "internal"

    return reg


def names(tools: list[Any], key: str = "name") -> list[str]:
    out = []
    for t in tools:
        if isinstance(t, Tool):
            out.append(t.name)
        elif "function" in t:
            out.append(t["function"]["name"])
        else:
            out.append(t[key])
    return out


def test_is_enabled_decides_what_every_registry_export_offers() -> None:
    reg = registry()
    seen_steps.clear()
    one, two = StepContext("r", 1, "mine"), StepContext("r", 2)
    assert names(reg.to_openai(one)) == ["search"]
    assert names(reg.to_openai(two)) == ["search", "refund"]
    assert names(reg.to_anthropic(one)) == ["search"]
    assert names(reg.to_mcp(two)) == ["search", "refund"]
    assert names(tbo.chat_tool_definitions(reg, step=two)) == ["search", "refund"]
    assert names(tbo.responses_tool_definitions(reg, step=one)) == ["search"]
    assert names(tba.tool_definitions(reg, step=one)) == ["search"]
    assert seen_steps[0] == StepContext("r", 1, "mine")  # the step as given
    # No step given: the current one (of no agent loop: step 0, the context's run).
    with agent_run("ctx-run"):
        assert names(reg.to_openai()) == ["search"]
    assert seen_steps[-1] == StepContext("ctx-run", 0, None)
    assert [t.name for t in reg.list()] == ["search", "refund", "internal"]  # all still there


def test_a_broken_is_enabled_fails_closed(caplog: pytest.LogCaptureFixture) -> None:
    reg = ToolRegistry()

    @reg.tool(is_enabled=lambda step: 1 / 0)
    def raises() -> str:
        return "x"

    @reg.tool(is_enabled=lambda step: "yes")
    def odd() -> str:
        return "x"

    with caplog.at_level(logging.WARNING, logger="toolbus"):
        assert reg.to_openai(StepContext()) == []
    assert "is_enabled raised ZeroDivisionError" in caplog.text
    assert "is_enabled returned str" in caplog.text
    with pytest.raises(TypeError, match="is_enabled must be True, False or a function"):
        reg.tool(name="t", is_enabled="sometimes")(lambda: 1)


def test_prepare_drops_and_describes_and_fails_closed(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    reg = registry()

    def prepare(step: StepContext, tools: list[Tool]) -> list[Tool]:
        if step.context == "no refunds":
            tools = [t for t in tools if t.name != "refund"]
        return [t.described(f"{t.description} (step {step.step})") for t in tools]

    ex = make_executor(reg, prepare=prepare)
    offered = ex.offered(StepContext(step=2))
    assert [(t.name, t.description) for t in offered] == [
        ("search", "Search the shop. (step 2)"),
        ("refund", "Refund an order. (step 2)"),
    ]
    assert reg.get("search").description == "Search the shop."  # type: ignore[union-attr]
    assert names(ex.offered(StepContext(step=2, context="no refunds"))) == ["search"]
    # A prepare may not bring back what was not offered, nor give non-tools.
    ex.__dict__["_prepare"] = lambda step, tools: [reg.get("internal"), "search", *tools]
    with caplog.at_level(logging.WARNING, logger="toolbus"):
        assert names(ex.offered(StepContext(step=1))) == ["search"]
        ex.__dict__["_prepare"] = lambda step, tools: 1 / 0
        assert ex.offered(StepContext(step=1)) == []
    assert "not tools offered to it" in caplog.text
    assert "prepare failed (ZeroDivisionError)" in caplog.text
    with pytest.raises(TypeError, match="prepare must be a function"):
        Executor(reg, prepare="yes")  # type: ignore[arg-type]


def test_calls_of_tools_not_offered_end_tool_not_offered(make_executor: MakeExecutor) -> None:
    reg = registry()
    ex = make_executor(reg, prepare=lambda step, tools: [t for t in tools if t.name != "search"])
    # Held to is_enabled at the current step alone (no offer made).
    r = ex.execute(ToolCall(name="internal"))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.TOOL_NOT_OFFERED)
    assert r.error == "Tool 'internal' is not offered at this step"
    assert ex.execute(ToolCall(name="search", arguments={"query": "x"})).status == "ok"
    # Inside an offer: held to what it offered (prepare dropped search).
    with ex.offer(StepContext(step=2)) as tools:
        assert names(tools) == ["refund"]
        r = ex.execute(ToolCall(name="search", arguments={"query": "x"}))
        assert (r.error_code, r.error) == (
            ErrorCode.TOOL_NOT_OFFERED,
            "Tool 'search' is not offered at this step. Available tools: refund",
        )
        assert ex.execute(ToolCall(name="refund", arguments={"order": "7"})).status == "ok"
        unknown = ex.execute(ToolCall(name="serch"))
        assert unknown.error_code is ErrorCode.TOOL_NOT_FOUND
        assert "search" not in (unknown.error or "")  # suggests only what is offered
    with ex.offer(StepContext(step=1)):
        assert ex.execute(ToolCall(name="refund", arguments={"order": "7"})).error_code is (
            ErrorCode.TOOL_NOT_OFFERED
        )


def test_calls_a_tool_makes_are_not_held_to_the_offer(make_executor: MakeExecutor) -> None:
    reg = registry()

    @reg.tool(read_only=True)
    def lookup(query: str) -> str:
        inner = ex.execute(ToolCall(name="internal"))
        return f"{inner.status}: {inner.output}"

    ex = make_executor(reg)
    with ex.offer(StepContext(step=1)):
        assert ex.execute(ToolCall(name="lookup", arguments={"query": "q"})).output == (
            "ok: internal"
        )


# -- found by the second review of issue 28 ----------------------------------------------


def test_an_is_enabled_or_prepare_raising_anything_fails_closed(
    make_executor: MakeExecutor,
) -> None:
    """SystemExit from either escaped out of execute and every export."""
    reg = ToolRegistry()

    def leaves(step: StepContext) -> bool:
        raise SystemExit(3)

    @reg.tool(read_only=True, is_enabled=leaves)
    def odd() -> str:
        return "x"

    @reg.tool(read_only=True)
    def plain() -> str:
        return "x"

    async def later(step: StepContext) -> bool:
        return True

    @reg.tool(read_only=True, is_enabled=later)
    def asynchronous() -> str:
        return "x"

    ex = make_executor(reg)
    assert [t.name for t in ex.offered(StepContext())] == ["plain"]
    assert ex.execute(ToolCall(name="odd")).error_code is ErrorCode.TOOL_NOT_OFFERED
    assert ex.execute(ToolCall(name="asynchronous")).error_code is ErrorCode.TOOL_NOT_OFFERED
    assert names(reg.to_openai()) == ["plain"]

    def exits(step: StepContext, tools: list[Tool]) -> list[Tool]:
        raise KeyboardInterrupt

    ex2 = make_executor(reg, prepare=exits)
    assert ex2.offered(StepContext()) == []


def test_prepare_may_not_swap_in_another_tool(make_executor: MakeExecutor) -> None:
    reg = registry()
    impostor = registry().get("search")
    assert impostor is not None
    ex = make_executor(reg, prepare=lambda step, tools: [impostor])
    assert ex.offered(StepContext(step=1)) == []


def test_a_step_is_checked_when_made_and_when_given() -> None:
    """`StepContext(step="two")` and `registry.to_openai("x")` were taken as
    they came (third review of issue 28)."""
    from toolbus.tools import StepContext

    with pytest.raises(TypeError, match="step must be an int"):
        StepContext(step="two")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="0 or more"):
        StepContext(step=-1)
    with pytest.raises(ValueError, match="agent_run"):
        StepContext(agent_run="")
    empty = ToolRegistry()
    with pytest.raises(TypeError, match="StepContext or None"):
        empty.to_openai("x")  # type: ignore[arg-type]
    with Executor(empty) as ex, pytest.raises(TypeError, match="StepContext or None"):
        ex.offered("x")  # type: ignore[arg-type]
    reg = ToolRegistry()
    reg.tool(lambda: 1, name="one")
    with pytest.raises(TypeError, match="StepContext or None"):
        reg.to_openai("x")  # type: ignore[arg-type]
    assert [t["function"]["name"] for t in reg.to_openai(StepContext(step=2))] == ["one"]


def test_the_tools_offered_at_any_step_follow_every_change(make_executor: MakeExecutor) -> None:
    """Where no tool's `is_enabled` asks the step, what is offered is worked
    out once and kept: each change that could alter it is seen at once."""
    from toolbus.tools._offer import granted

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def a() -> str:
        return "a"

    @reg.tool(read_only=True, scopes=["admin"])
    def b() -> str:
        return "b"

    ex: Executor = make_executor(reg)
    assert names(ex.offered()) == ["a", "b"]
    token = granted.set(frozenset({"read"}))
    try:
        assert names(ex.offered()) == ["a"]  # the grants changed
        b.scopes = ("read",)
        assert names(ex.offered()) == ["a", "b"]  # a tool's scopes changed
    finally:
        granted.reset(token)
    a.is_enabled = False
    assert names(ex.offered()) == ["b"]  # a tool's flag changed
    a.is_enabled = True

    @reg.tool(read_only=True)
    def c() -> str:
        return "c"

    assert names(ex.offered()) == ["a", "b", "c"]  # the registry changed
    seen: list[StepContext] = []
    c.is_enabled = lambda step: seen.append(step) or step.step == 3
    assert names(ex.offered(StepContext(step=3))) == ["a", "b", "c"]  # now it asks the step
    assert names(ex.offered(StepContext(step=1))) == ["a", "b"] and len(seen) == 2
    listed = ex.offered()
    listed.clear()  # the caller's own list
    assert names(ex.offered(StepContext(step=3))) == ["a", "b", "c"]
    with pytest.raises(TypeError, match="StepContext"):
        ex.offered("step 3")  # type: ignore[arg-type]
    c.is_enabled = True
    with pytest.raises(TypeError, match="StepContext"):
        ex.offered("step 3")  # type: ignore[arg-type]


def test_a_step_made_for_an_export_is_the_one_its_class_makes() -> None:
    from toolbus.tools._offer import step_in

    for run in (None, "run-7"):
        made, built = step_in(run, {"k": 1}), StepContext(agent_run=run, context={"k": 1})
        assert made == built and repr(made) == repr(built) and type(made) is StepContext
        assert (made.agent_run, made.step, made.context) == (run, 0, {"k": 1})
        with pytest.raises(AttributeError):
            made.step = 2  # type: ignore[misc]
    assert hash(step_in("r", 5)) == hash(StepContext(agent_run="r", context=5))


def test_a_tool_whose_flag_is_not_its_own_value_is_asked_every_time(
    make_executor: MakeExecutor,
) -> None:
    """What is offered is kept only for tools whose `is_enabled` and `scopes`
    change by being set on them: a property, a class's attribute or a list
    changed in place is read again at every offer."""
    from toolbus.tools._offer import granted

    class Flagged(Tool):
        name = "flagged"
        description = "Flagged."
        read_only = True
        on = False

        @property  # type: ignore[override]
        def is_enabled(self) -> bool:  # type: ignore[override]
            return type(self).on

        @is_enabled.setter
        def is_enabled(self, value: object) -> None:
            pass

        def run(self, args: Any = None) -> str:
            return "ran"

    reg = ToolRegistry([Flagged()])

    @reg.tool(read_only=True)
    def other() -> str:
        """Other."""
        return "o"

    ex: Executor = make_executor(reg)
    assert names(ex.offered()) == ["other"]
    Flagged.on = True
    assert names(ex.offered()) == ["flagged", "other"]
    other.scopes = ["s1"]  # type: ignore[assignment]
    token = granted.set(frozenset({"s1"}))
    try:
        assert names(ex.offered()) == ["flagged", "other"]
        other.scopes.append("s2")  # type: ignore[attr-defined]
        assert names(ex.offered()) == ["flagged"]
    finally:
        granted.reset(token)
