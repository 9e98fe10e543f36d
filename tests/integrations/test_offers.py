"""Tools offered per step through each framework adapter, against the real frameworks:
pydantic-ai's `ToolbusToolset` (an agent on a `FunctionModel`; an imported
tool's own `prepare`), the OpenAI Agents SDK both ways (a `Runner` on a fake
model; an imported tool's callable `is_enabled`), LangGraph's `ToolbusNode(step=)`.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")
pytest.importorskip("langgraph")

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.tool_context import ToolContext as AgentsToolContext
from langchain_core.messages import AIMessage, HumanMessage
from pydantic_ai import RunContext
from pydantic_ai import Tool as PAITool
from pydantic_ai.tools import ToolDefinition

from tests.conftest import MakeExecutor
from tests.integrations.test_openai_agents import FakeModel
from tests.integrations.test_pydantic_ai import Script, agent_for, call
from toolbus import ErrorCode, ToolCall, ToolRegistry
from toolbus.integrations.langgraph import ToolbusNode
from toolbus.integrations.openai_agents import function_tools
from toolbus.integrations.pydantic_ai import ToolbusToolset
from toolbus.tools import StepContext, Tool


def shop(ran: list[str]) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def search(query: str) -> str:
        """Search the shop."""
        ran.append("search")
        return f"results for {query}"

    @reg.tool(is_enabled=lambda step: step.step >= 2)
    def refund(order: str) -> str:
        """Refund an order."""
        ran.append("refund")
        return f"refunded {order}"

    return reg


def tagged(step: StepContext, tools: list[Tool]) -> list[Tool]:
    return [t.described(f"{t.description} (step {step.step})") for t in tools]


async def test_pydantic_ai_toolset_offers_per_run_step(make_executor: MakeExecutor) -> None:
    """Step 1 lists only `search` (refund is enabled from step 2); a refund the
    model makes anyway is pydantic-ai's unknown tool; step 2 lists it, described
    by the executor's prepare for the step."""
    ran: list[str] = []
    reg = shop(ran)
    ex = make_executor(reg, prepare=tagged)
    script = Script(
        [call("search", {"query": "boots"}, "c1")],
        [call("refund", {"order": "7"}, "c2")],
        "done",
    )
    result = await agent_for(script, ToolbusToolset(reg, ex)).run("hi")
    assert result.output == "done"
    listed = [{t.name: t.description for t in info.function_tools} for info in script.infos]
    assert listed[0] == {"search": "Search the shop. (step 1)"}
    assert listed[1] == {
        "search": "Search the shop. (step 2)",
        "refund": "Refund an order. (step 2)",
    }
    assert ran == ["search", "refund"]


async def test_an_imported_pydantic_ai_tools_prepare_runs_in_the_toolset(
    make_executor: MakeExecutor,
) -> None:
    async def only_for_admins(
        ctx: RunContext[str], tool_def: ToolDefinition
    ) -> ToolDefinition | None:
        if ctx.deps != "admin":
            return None
        return ToolDefinition(
            name="renamed",
            description="for admins",
            parameters_json_schema=tool_def.parameters_json_schema,
        )

    def wipe(table: str) -> str:
        """Wipe a table."""
        return f"wiped {table}"

    reg = ToolRegistry()
    reg.add_pydantic_ai(PAITool(wipe, prepare=only_for_admins))
    ex = make_executor(reg)
    for deps, expected in (("guest", {}), ("admin", {"wipe": "for admins"})):
        script = Script("done")
        await agent_for(script, ToolbusToolset(reg, ex)).run("hi", deps=deps)
        assert {t.name: t.description for t in script.infos[0].function_tools} == expected
    # Outside pydantic-ai its prepare cannot be asked: not offered (fails closed).
    assert ex.offered(StepContext()) == []
    r = ex.execute(ToolCall(name="wipe", arguments={"table": "t"}))
    assert r.error_code is ErrorCode.TOOL_NOT_OFFERED


async def test_agents_sdk_export_offers_what_the_executor_offers(
    make_executor: MakeExecutor,
) -> None:
    """The exported tools' `is_enabled` asks the executor with the SDK's run
    context: `refund` is offered only to a run whose context says so."""
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def search(query: str) -> str:
        """Search the shop."""
        ran.append("search")
        return "results"

    @reg.tool(is_enabled=lambda step: getattr(step.context, "context", None) == "staff")
    def refund(order: str) -> str:
        """Refund an order."""
        ran.append("refund")
        return "refunded"

    ex = make_executor(reg)
    tools = function_tools(reg, ex)
    from agents import Agent, Runner

    from tests.integrations.test_openai_agents import OFFLINE

    for context, offered in (("customer", ["search"]), ("staff", ["search", "refund"])):
        model = FakeModel("done")
        agent = Agent(name="shop", model=model, tools=tools)
        await Runner.run(agent, "hi", context=context, run_config=OFFLINE)
        assert [t.name for t in model.tools[0]] == offered
    # The Runner never calls a tool it did not offer; invoked anyway, it is refused, unrun.
    [exported] = [t for t in tools if t.name == "refund"]
    text = '{"order": "1"}'
    ctx = AgentsToolContext("customer", tool_name="refund", tool_call_id="r1", tool_arguments=text)
    answer = await exported.on_invoke_tool(ctx, text)
    assert answer.endswith("(TOOL_NOT_OFFERED)")
    staff = AgentsToolContext("staff", tool_name="refund", tool_call_id="r2", tool_arguments=text)
    assert await exported.on_invoke_tool(staff, text) == "refunded"
    assert ran.count("refund") == 1


def test_agents_sdk_import_takes_a_callable_is_enabled(make_executor: MakeExecutor) -> None:
    @function_tool(is_enabled=lambda ctx, agent: ctx.context == "staff")
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    @function_tool(is_enabled=False)
    def hidden() -> str:
        """Never."""
        return "x"

    reg = ToolRegistry()
    reg.add_openai_agents(refund)
    reg.add_openai_agents(hidden)
    assert isinstance(refund, FunctionTool)
    ex = make_executor(reg)
    assert [t.name for t in ex.offered(StepContext(context="customer"))] == []
    assert [t.name for t in ex.offered(StepContext(context="staff"))] == ["refund"]
    wrapped = RunContextWrapper(context="staff")
    assert [t.name for t in ex.offered(StepContext(context=wrapped))] == ["refund"]
    with ex.offer(StepContext(context="staff")):
        assert ex.execute(ToolCall(name="refund", arguments={"order": "3"})).output == "refunded 3"
    r = ex.execute(ToolCall(name="refund", arguments={"order": "3"}))  # no context: not enabled
    assert r.error_code is ErrorCode.TOOL_NOT_OFFERED


def test_toolbus_node_holds_its_calls_to_the_step(make_executor: MakeExecutor) -> None:
    ran: list[str] = []
    reg = shop(ran)
    ex = make_executor(reg)

    def step_of(state: Any, config: Any) -> StepContext:
        return StepContext(step=len([m for m in state["messages"] if isinstance(m, AIMessage)]))

    node = ToolbusNode(reg, ex, step=step_of)
    calls = [
        {"name": "search", "args": {"query": "q"}, "id": "a", "type": "tool_call"},
        {"name": "refund", "args": {"order": "7"}, "id": "b", "type": "tool_call"},
    ]
    first = node.invoke({"messages": [HumanMessage("hi"), AIMessage("", tool_calls=calls)]})
    statuses = [(m.tool_call_id, m.status) for m in first["messages"]]
    assert statuses == [("a", "success"), ("b", "error")]
    assert "not offered at this step" in first["messages"][1].content
    assert ran == ["search"]
    second = node.invoke(
        {"messages": [HumanMessage("hi"), AIMessage("x"), AIMessage("", tool_calls=calls[1:])]}
    )
    assert second["messages"][0].status == "success"
    assert ran == ["search", "refund"]
    with pytest.raises(TypeError, match="step must be a function"):
        ToolbusNode(reg, ex, step="yes")  # type: ignore[arg-type]
