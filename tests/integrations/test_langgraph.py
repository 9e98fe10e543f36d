"""ToolbusNode against LangGraph's own ToolNode, and LangChain tools in a registry.

The cases that describe what a tool executor does (parallel calls, errors and
`status="error"`, an unknown tool, invalid arguments, async tools, a compiled
graph with `tools_condition`) run on both nodes with the same input; ids,
names, statuses and order must be the same, and the content of every call that
succeeded. Then what toolbus adds, inside LangGraph: `max_parallel`, masking,
barrier order, deadlines, and a node that never raises a tool's failure.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, NoReturn

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForToolRun, Callbacks
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import (
    BaseTool,
    InjectedToolArg,
    InjectedToolCallId,
    StructuredTool,
    Tool,
    ToolException,
)
from langchain_core.tools import tool as lc_tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphBubbleUp
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, InjectedStore, ToolNode, ToolRuntime, tools_condition
from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field

from tests.conftest import HANG_TIMEOUT
from toolbus import ErrorCode, Executor, Injected, RetryPolicy, ToolCall, ToolRegistry, bus
from toolbus.integrations.langchain import LangChainTool, UnsupportedToolError
from toolbus.integrations.langgraph import ToolbusNode, ToolCallFailed
from toolbus.providers import anthropic, openai
from toolbus.tools import DuplicateToolError

# ToolNode needs a runtime in its config outside a graph (LangGraph 1.2).
RUNTIME_CONFIG: Any = {"configurable": {"__pregel_runtime": Runtime()}}


# -- the tools of LangGraph's ToolNode tests (plain functions: both nodes make tools) --


def tool1(some_val: int, some_other_val: str) -> str:
    """Tool 1 docstring."""
    if some_val == 0:
        raise ValueError("Test error")
    return f"{some_val} - {some_other_val}"


async def tool2(some_val: int, some_other_val: str) -> str:
    """Tool 2 docstring."""
    if some_val == 0:
        raise ToolException("Test error")
    return f"tool2: {some_val} - {some_other_val}"


async def tool3(some_val: int, some_other_val: str) -> list[dict[str, Any]]:
    """Tool 3 docstring."""
    return [{"key_1": some_val, "key_2": "foo"}, {"key_1": some_other_val, "key_2": "baz"}]


async def tool4(some_val: int, some_other_val: str) -> list[dict[str, Any]]:
    """Tool 4 docstring."""
    return [{"type": "image_url", "image_url": {"url": "abdc"}}]


@lc_tool
def tool5(some_val: int) -> NoReturn:
    """Tool 5 docstring."""
    raise ToolException("Test error")


tool5.handle_tool_error = "foo"


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def state_of(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"messages": [HumanMessage("hi"), AIMessage("hi?", tool_calls=list(calls))]}


@pytest.fixture
def nodes() -> Iterator[list[ToolbusNode]]:
    made: list[ToolbusNode] = []
    yield made
    for node in made:
        node.close()


def toolbus_node(nodes: list[ToolbusNode], tools: Any, **options: Any) -> ToolbusNode:
    node = ToolbusNode(tools, **options)
    nodes.append(node)
    return node


def messages_of(output: Any) -> list[ToolMessage]:
    found = output["messages"] if isinstance(output, dict) else output
    assert all(isinstance(m, ToolMessage) for m in found)
    return list(found)


def assert_same(expected: Sequence[ToolMessage], got: Sequence[ToolMessage]) -> None:
    """Same ids, names, statuses and order; the same content where the call succeeded."""
    assert [(m.tool_call_id, m.name, m.status) for m in got] == [
        (m.tool_call_id, m.name, m.status) for m in expected
    ]
    for mine, theirs in zip(got, expected, strict=True):
        if theirs.status == "success":
            assert mine.content == theirs.content
            assert mine.artifact == theirs.artifact


def both(
    nodes: list[ToolbusNode], tools: Sequence[Any], input: Any, **options: Any
) -> tuple[list[ToolMessage], list[ToolMessage]]:
    """(ToolNode's answer, ToolbusNode's answer) to `input`, with async tools awaited."""
    theirs = asyncio.run(ToolNode(tools, handle_tool_errors=True).ainvoke(input, RUNTIME_CONFIG))
    mine = toolbus_node(nodes, tools, **options).invoke(input)
    return messages_of(theirs), messages_of(mine)


# -- ToolNode's cases, on both nodes ---------------------------------------------------


def test_results_match_toolnode(nodes: list[ToolbusNode]) -> None:
    input = state_of(
        call("tool1", "some 0", some_val=1, some_other_val="foo"),
        call("tool2", "some 1", some_val=2, some_other_val="bar"),
        call("tool3", "some 2", some_val=2, some_other_val="bar"),
        call("tool4", "some 3", some_val=2, some_other_val="bar"),
    )
    theirs, mine = both(nodes, [tool1, tool2, tool3, tool4], input)
    assert_same(theirs, mine)
    assert [m.content for m in mine] == [
        "1 - foo",
        "tool2: 2 - bar",
        '[{"key_1": 2, "key_2": "foo"}, {"key_1": "bar", "key_2": "baz"}]',
        [{"type": "image_url", "image_url": {"url": "abdc"}}],
    ]
    assert mine == theirs  # ToolMessages equal field by field


async def test_async_invoke_matches_toolnode(nodes: list[ToolbusNode]) -> None:
    input = state_of(
        call("tool2", "a", some_val=2, some_other_val="bar"),
        call("tool1", "b", some_val=1, some_other_val="foo"),
        call("tool2", "c", some_val=0, some_other_val="x"),
    )
    theirs = await ToolNode([tool1, tool2], handle_tool_errors=True).ainvoke(input, RUNTIME_CONFIG)
    mine = await toolbus_node(nodes, [tool1, tool2]).ainvoke(input)
    assert_same(messages_of(theirs), messages_of(mine))


def test_async_only_tools_run_from_a_sync_invoke(nodes: list[ToolbusNode]) -> None:
    input = state_of(call("tool2", "a", some_val=3, some_other_val="x"))
    # ToolNode cannot run an async-only tool from invoke; toolbus runs it on its loop.
    with pytest.raises(NotImplementedError):
        ToolNode([tool2]).invoke(input, RUNTIME_CONFIG)
    (message,) = messages_of(toolbus_node(nodes, [tool2]).invoke(input))
    assert (message.content, message.status) == ("tool2: 3 - x", "success")


def test_input_shapes_match_toolnode(nodes: list[ToolbusNode]) -> None:
    c1 = call("tool1", "some 0", some_val=1, some_other_val="foo")
    c2 = call("tool1", "some 1", some_val=2, some_other_val="bar")
    unknown = {**c1, "name": "tool9"}
    node = toolbus_node(nodes, [tool1])
    tn = ToolNode([tool1])
    for input in (
        [c1, c2, unknown],  # tool calls (a Send's payload): a dict comes back
        [HumanMessage("hi"), AIMessage("", tool_calls=[c1, c2])],  # messages: a list
        {"__type": "tool_call_with_context", "tool_call": c2, "state": {"messages": []}},
    ):
        theirs, mine = tn.invoke(input, RUNTIME_CONFIG), node.invoke(input)
        assert type(mine) is type(theirs)
        assert messages_of(mine) == messages_of(theirs)
    # A bare AIMessage too (ToolNode needs it in a list).
    ai = AIMessage("", tool_calls=[c1, c2])
    assert node.invoke(ai) == tn.invoke([ai], RUNTIME_CONFIG)
    # No tool calls: no messages.
    assert node.invoke({"messages": [AIMessage("done")]}) == {"messages": []}
    with pytest.raises(ValueError, match="No message found"):
        node.invoke({"messages": []})
    with pytest.raises(ValueError, match="No AIMessage found"):
        node.invoke([HumanMessage("hi")])


def test_parallel_calls(nodes: list[ToolbusNode]) -> None:
    """Read-only calls run at once in both nodes (each waits for the other two)."""
    barrier = threading.Barrier(3, timeout=5)

    @lc_tool
    def meet(who: str) -> str:
        """Wait until three are here."""
        barrier.wait()
        return f"met {who}"

    input = state_of(*(call("meet", f"m{i}", who=str(i)) for i in range(3)))
    theirs = ToolNode([meet]).invoke(input, RUNTIME_CONFIG)
    barrier.reset()
    mine = toolbus_node(nodes, [meet], read_only=True).invoke(input)
    assert_same(messages_of(theirs), messages_of(mine))
    assert [m.content for m in messages_of(mine)] == ["met 0", "met 1", "met 2"]


def test_tool_errors_are_messages_and_the_node_never_raises(nodes: list[ToolbusNode]) -> None:
    input = state_of(
        call("tool1", "some id", some_val=0, some_other_val="foo"),
        call("tool2", "some other id", some_val=0, some_other_val="bar"),
        call("tool3", "another id", some_val=0),
        call("tool1", "ok id", some_val=1, some_other_val="fine"),
    )
    # ToolNode's default re-raises what a tool raises; ToolbusNode's answers.
    with pytest.raises(ValueError, match="Test error"):
        ToolNode([tool1, tool2, tool3]).invoke(input, RUNTIME_CONFIG)
    theirs, mine = both(nodes, [tool1, tool2, tool3], input)
    assert_same(theirs, mine)
    assert [m.status for m in mine] == ["error", "error", "error", "success"]
    assert mine[0].content == "Error: ValueError: Test error\n Please fix your mistakes."
    assert mine[1].content == "Error: ToolException: Test error\n Please fix your mistakes."
    assert "some_other_val" in str(mine[2].content)  # the field the model must fix
    assert mine[3].content == "1 - fine"


def test_handle_tool_errors_string_false_and_callable(nodes: list[ToolbusNode]) -> None:
    input = state_of(
        call("tool1", "a", some_val=0, some_other_val="foo"),
        call("tool1", "b", some_val="x", some_other_val="foo"),
    )
    seen: list[ToolCallFailed] = []

    def handle(e: ToolCallFailed) -> str:
        seen.append(e)
        return f"handled {e.code}"

    def broken(e: ToolCallFailed) -> str:
        raise RuntimeError("handler bug")

    expected = {
        "Value error": ["Value error", "Value error"],
        False: [
            "ValueError: Test error",
            "Invalid arguments for 'tool1': some_val: Input should be a valid integer, "
            "unable to parse string as an integer",
        ],
        handle: ["handled TOOL_ERROR", "handled INVALID_ARGUMENTS"],
        broken: [
            "Error: ValueError: Test error\n Please fix your mistakes.",
            "Error: Invalid arguments for 'tool1': some_val: Input should be a valid integer, "
            "unable to parse string as an integer\n Please fix your mistakes.",
        ],
    }
    for handler, contents in expected.items():
        out = messages_of(toolbus_node(nodes, [tool1], handle_tool_errors=handler).invoke(input))
        assert [m.content for m in out] == contents
        assert [m.status for m in out] == ["error", "error"]
    assert isinstance(seen[0], ToolException)
    assert str(seen[0]) == "ValueError: Test error"
    assert seen[0].result.status == "error" and seen[1].result.status == "rejected"
    with pytest.raises(TypeError, match="handle_tool_errors"):
        ToolbusNode([tool1], handle_tool_errors=(ValueError,))  # type: ignore[arg-type]


def test_a_tools_own_error_handling_wins(nodes: list[ToolbusNode]) -> None:
    input = state_of(call("tool5", "some 0", some_val=0))
    theirs = ToolNode([tool5], handle_tool_errors="bar").invoke(input, RUNTIME_CONFIG)
    mine = toolbus_node(nodes, [tool5], handle_tool_errors="bar").invoke(input)
    assert messages_of(mine) == messages_of(theirs)
    assert messages_of(mine)[0].content == "foo"


def test_an_unknown_tool(nodes: list[ToolbusNode]) -> None:
    input = state_of(call("tool3", "some 0", some_val=1, some_other_val="foo"))
    theirs, mine = both(nodes, [tool1, tool2], input)
    assert mine == theirs
    assert mine[0].content == "Error: tool3 is not a valid tool, try one of [tool1, tool2]."


def test_invalid_arguments(nodes: list[ToolbusNode]) -> None:
    ran: list[int] = []

    @lc_tool
    def count(n: int, label: str = "x") -> str:
        """Count."""
        ran.append(n)
        return label * n

    input = state_of(
        call("count", "missing"),
        call("count", "wrong", n="many"),
        call("count", "extra", n=2, colour="red"),
        call("count", "ok", n=3),
    )
    theirs, mine = both(nodes, [count], input)
    assert_same(theirs, mine)
    assert [m.status for m in mine] == ["error", "error", "success", "success"]
    assert "n: Field required" in str(mine[0].content)
    assert "n: Input should be a valid integer" in str(mine[1].content)
    assert "many" not in str(mine[1].content)  # values are never echoed
    # ToolNode's run, then toolbus's: the invalid calls never ran. (ToolNode
    # runs a message's calls on a thread pool, in whatever order it gets to
    # them: a loaded machine ran 3 before 2.)
    assert sorted(ran[:2]) == [2, 3] and sorted(ran[2:]) == [2, 3]


def test_tools_condition_in_a_compiled_graph(nodes: list[ToolbusNode]) -> None:
    turns = [
        AIMessage(
            "",
            tool_calls=[
                call("tool1", "c1", some_val=1, some_other_val="a"),
                call("tool2", "c2", some_val=2, some_other_val="b"),
                call("nope", "c3"),
            ],
        ),
        AIMessage("", tool_calls=[call("tool1", "c4", some_val=0, some_other_val="c")]),
        AIMessage("all done"),
    ]

    def build(tools_node: Any) -> Any:
        model = GenericFakeChatModel(messages=iter(turns))

        def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            return {"messages": [model.invoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", tools_node)
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        return graph.compile()

    tools = [tool1, tool2]
    start = {"messages": [HumanMessage("go")]}
    # Awaited: ToolNode cannot run tool2 (async only) in a sync graph.
    theirs = asyncio.run(build(ToolNode(tools, handle_tool_errors=True)).ainvoke(start))
    theirs = theirs["messages"]
    mine = build(toolbus_node(nodes, tools)).invoke(start)["messages"]
    amine = asyncio.run(build(toolbus_node(nodes, tools)).ainvoke(start))["messages"]
    for got in (mine, amine):
        assert [type(m) for m in got] == [type(m) for m in theirs]
        assert got[-1].content == "all done"
        assert_same(
            [m for m in theirs if isinstance(m, ToolMessage)],
            [m for m in got if isinstance(m, ToolMessage)],
        )
    assert [m.status for m in mine if isinstance(m, ToolMessage)] == [
        "success",
        "success",
        "error",
        "error",
    ]


def test_a_tool_returning_a_tool_message(nodes: list[ToolbusNode]) -> None:
    @lc_tool
    def with_artifact(x: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Returns its own message."""
        return ToolMessage(f"got {x}", artifact={"x": x}, tool_call_id=tool_call_id)

    @lc_tool
    async def failing(x: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Says it failed."""
        return ToolMessage(f"no {x}", tool_call_id=tool_call_id, status="error")

    input = state_of(call("with_artifact", "w", x=1), call("failing", "f", x=2))
    theirs, mine = both(nodes, [with_artifact, failing], input)
    assert mine == theirs
    assert mine[0].artifact == {"x": 1} and mine[1].content == "no 2"


def test_injected_state_and_tool_call_id(nodes: list[ToolbusNode]) -> None:
    @lc_tool
    def whole(x: int, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Reads the whole state."""
        return f"{x}: {len(state['messages'])} messages, foo={state.get('foo')}"

    @lc_tool
    def field(
        x: int, foo: Annotated[str, InjectedState("foo")], me: Annotated[str, InjectedToolCallId]
    ) -> str:
        """Reads one field."""
        return f"{foo}{x} ({me})"

    @lc_tool
    def messages(msgs: Annotated[list[Any], InjectedState("messages")]) -> int:
        """Counts messages."""
        return len(msgs)

    calls = [call("whole", "1", x=1), call("field", "2", x=2), call("messages", "3")]
    tools = [whole, field, messages]
    state = {**state_of(*calls), "foo": "bar"}
    theirs, mine = both(nodes, tools, state)
    assert mine == theirs
    assert [m.content for m in mine] == ["1: 2 messages, foo=bar", "bar2 (2)", "2"]
    # A list of messages as the state: what ToolNode makes of it.
    as_list = [HumanMessage("hi"), AIMessage("", tool_calls=[calls[0], calls[2]])]
    node = toolbus_node(nodes, tools)
    theirs_list = ToolNode(tools, handle_tool_errors=True).invoke(as_list, RUNTIME_CONFIG)
    assert messages_of(node.invoke(as_list)) == messages_of(theirs_list)
    # A field of a list: ToolNode raises; toolbus answers.
    with pytest.raises(ValueError, match="requires graph state dict"):
        ToolNode(tools).invoke([AIMessage("", tool_calls=[calls[1]])], RUNTIME_CONFIG)
    (refused,) = messages_of(node.invoke([AIMessage("", tool_calls=[calls[1]])]))
    assert refused.status == "error" and "needs the graph state as a dict" in str(refused.content)
    # The model cannot set them: they are not in the schema, and a value is refused.
    assert convert_to_openai_tool(field)["function"]["parameters"]["properties"].keys() == {"x"}
    forged = state_of(call("field", "9", x=1, foo="forged", me="other"))
    (answer,) = messages_of(node.invoke({**forged, "foo": "bar"}))
    assert answer.content == "bar1 (9)"  # as in ToolNode: what the model sent is not used

    @lc_tool
    def optional(x: int, foo: Annotated[str, InjectedState("foo")] = "default") -> str:
        """An optional state field."""
        return foo

    forged = state_of(call("optional", "o", x=1, foo="forged"))
    theirs, mine = both(nodes, [optional], forged)
    assert mine == theirs and mine[0].content == "default"


def test_tools_toolbus_cannot_run_are_refused_at_construction() -> None:
    @lc_tool
    def needs_store(x: int, store: Annotated[Any, InjectedStore()]) -> str:
        """Uses the store."""
        return "x"

    @lc_tool
    def needs_runtime(x: int, runtime: ToolRuntime) -> str:
        """Uses the runtime."""
        return "x"

    @lc_tool
    def commands(x: int) -> Command:  # type: ignore[type-arg]
        """Returns a command."""
        return Command(goto="elsewhere")

    @lc_tool(response_format="content_and_artifact")
    def artifact(x: int) -> tuple[str, int]:
        """Content and artifact."""
        return "x", x

    for t, reason in [
        (needs_store, "InjectedStore"),
        (needs_runtime, "ToolRuntime"),
        (commands, "Command"),
        (artifact, "content_and_artifact"),
    ]:
        with pytest.raises(UnsupportedToolError, match=reason) as info:
            ToolbusNode([t])
        assert t.name in str(info.value) and "ToolNode" in str(info.value)
        with pytest.raises(ValueError, match=reason):
            ToolRegistry().add_langchain(t)


def test_a_command_returned_anyway_is_an_error(nodes: list[ToolbusNode]) -> None:
    @lc_tool
    def sneaky(x: int):  # type: ignore[no-untyped-def]
        """No return annotation."""
        return Command(goto="elsewhere")

    (message,) = messages_of(
        toolbus_node(nodes, [sneaky]).invoke(state_of(call("sneaky", "s", x=1)))
    )
    assert message.status == "error"
    assert "returned a LangGraph Command" in str(message.content)


def test_an_interrupt_reaches_the_graph(nodes: list[ToolbusNode]) -> None:
    def bubbles(some_val: int) -> None:
        """Raises GraphBubbleUp."""
        raise GraphBubbleUp("foo")

    for handler in (True, "handled", False):
        node = toolbus_node(nodes, [bubbles], handle_tool_errors=handler)
        with pytest.raises(GraphBubbleUp):
            node.invoke(state_of(call("bubbles", "1", some_val=0)))

    @lc_tool
    def transfer(amount: int) -> str:
        """Moves money, after a person approves."""
        answer = interrupt(f"approve {amount}?")
        return f"moved {amount}" if answer == "yes" else "not moved"

    graph = StateGraph(MessagesState)
    graph.add_node("tools", toolbus_node(nodes, [transfer]))
    graph.add_edge(START, "tools")
    app = graph.compile(checkpointer=InMemorySaver())
    thread: Any = {"configurable": {"thread_id": "t1"}}
    paused = app.invoke(state_of(call("transfer", "t", amount=5)), thread)
    assert paused["__interrupt__"][0].value == "approve 5?"
    resumed = app.invoke(Command(resume="yes"), thread)
    assert resumed["messages"][-1].content == "moved 5"


# -- what toolbus adds inside LangGraph ------------------------------------------------------


def test_barrier_order_holds_inside_a_graph(nodes: list[ToolbusNode]) -> None:
    """LangChain tools mutate unless marked read-only: mutating calls run in
    order, one at a time; read-only ones in parallel."""
    log: list[tuple[str, str, float]] = []
    lock = threading.Lock()

    def note(what: str, who: str) -> None:
        with lock:
            log.append((what, who, time.monotonic()))

    @lc_tool
    def write(key: str) -> str:
        """Writes."""
        note("start", key)
        time.sleep(0.03)  # tool under test: takes a while
        note("end", key)
        return key

    both_reads = threading.Barrier(2, timeout=10)

    @lc_tool
    def read(key: str) -> str:
        """Reads."""
        note("start", key)
        if key in ("r1", "r2"):
            both_reads.wait()  # passes only if the two reads run at the same time
        note("end", key)
        return key

    input = state_of(
        call("read", "r1", key="r1"),
        call("read", "r2", key="r2"),
        call("write", "w1", key="w1"),
        call("write", "w2", key="w2"),
        call("read", "r3", key="r3"),
    )
    node = toolbus_node(nodes, [write, read], read_only=["read"])
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    out = messages_of(graph.compile().invoke(input)["messages"][2:])
    assert [m.content for m in out] == ["r1", "r2", "w1", "w2", "r3"]
    order = [(what, who) for what, who, _ in log]
    # r1 and r2 overlap; w1 waits for both; w2 for w1; r3 for w2.
    assert set(order[:2]) == {("start", "r1"), ("start", "r2")}
    assert order[4:] == [
        ("start", "w1"),
        ("end", "w1"),
        ("start", "w2"),
        ("end", "w2"),
        ("start", "r3"),
        ("end", "r3"),
    ]
    assert node.registry.get("write").read_only is False  # type: ignore[union-attr]
    assert node.registry.get("read").read_only is True  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="reed"):
        ToolbusNode([write, read], read_only=["reed"])


def test_max_parallel_holds_inside_a_graph(nodes: list[ToolbusNode]) -> None:
    inside = threading.Condition()
    running = [0, 0]  # now, peak

    @lc_tool
    def slow(i: int) -> int:
        """Takes a while."""
        with inside:
            running[0] += 1
            running[1] = max(running[1], running[0])
            inside.notify_all()
            # Held until two calls are inside at once: proves they run together.
            assert inside.wait_for(lambda: running[1] >= 2, 10), "never two calls at once"
            running[0] -= 1
        return i

    graph = StateGraph(MessagesState)
    graph.add_node("tools", toolbus_node(nodes, [slow], read_only=True, max_parallel=2))
    graph.add_edge(START, "tools")
    out = graph.compile().invoke(state_of(*(call("slow", f"s{i}", i=i) for i in range(6))))
    assert [m.content for m in out["messages"][2:]] == [str(i) for i in range(6)]
    assert running[1] == 2


def test_secrets_never_reach_the_bus_inside_a_graph(nodes: list[ToolbusNode]) -> None:
    secret, injected = "sk-live-0a1b2c3d4e", "tenant-8f7e6d"

    @lc_tool
    def login(user: str, password: str) -> str:
        """Logs in (the model sends the password: its name masks it)."""
        raise RuntimeError(f"bad password {password} for {user}")

    @lc_tool
    def lookup(item: str, tenant: Annotated[str, InjectedToolArg]) -> str:
        """Looks up an item for the application's tenant."""
        return f"{item} of {tenant}"

    node = toolbus_node(nodes, [login, lookup], inject={"tenant": lambda call: injected})
    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    with bus.Recorder(sender=node.executor) as rec:
        out = graph.compile().invoke(
            state_of(call("login", "l", user="ann", password=secret), call("lookup", "k", item="x"))
        )
        node.executor.drain_events()
    answers = messages_of(out["messages"][2:])
    assert (
        answers[0].content
        == "Error: RuntimeError: bad password *** for ann\n Please fix your mistakes."
    )
    assert answers[1].content == "x of ***"
    events = repr([e for name in rec.names() for e in rec.of(name)])
    assert "tool:executing" in rec.names() and "ann" in events
    assert secret not in events and injected not in events


def test_a_deadline_holds_where_toolnode_would_wait(nodes: list[ToolbusNode]) -> None:
    release = threading.Event()

    @lc_tool
    def hangs(x: int) -> str:
        """Never answers in time."""
        release.wait(60)  # (until the test is done: what ToolNode would wait for)
        return "late"

    # Only the hanging tool is held to 0.2 s: tool1, which must answer, gets
    # the node's 60 s (a busy machine can take longer than 0.2 s).
    held = ToolRegistry().add_langchain(hangs, timeout=0.2)
    try:
        started = time.monotonic()
        out = messages_of(
            toolbus_node(nodes, [held, tool1], timeout=60).invoke(
                state_of(
                    call("hangs", "h", x=1), call("tool1", "t", some_val=1, some_other_val="a")
                )
            )
        )
    finally:
        release.set()
    assert time.monotonic() - started < 30  # loose: far from the hung tool's 60 s
    assert out[0].status == "error" and "timed out after 0.2s" in str(out[0].content)
    assert (out[1].content, out[1].status) == ("1 - a", "success")


# -- the node's executor ---------------------------------------------------------------------


def test_an_own_executor_is_closed_and_a_given_one_is_not() -> None:
    with ToolbusNode([tool1]) as node:
        executor = node.executor
        assert not executor.closed
    assert executor.closed

    node = ToolbusNode([tool1])
    executor = node.executor
    del node
    gc.collect()
    assert executor.closed  # collected: closed too (and at exit)

    registry = ToolRegistry()
    with Executor(registry) as given:
        node = ToolbusNode([tool1], given)
        assert node.registry is registry and "tool1" in registry
        node.close()
        assert not given.closed
        with pytest.raises(TypeError, match="timeout"):
            ToolbusNode([tool1], given, timeout=3)
        with pytest.raises(ValueError, match="another registry"):
            ToolbusNode(ToolRegistry(), given)


def test_a_registry_of_toolbus_tools(nodes: list[ToolbusNode]) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def weather(city: str) -> dict[str, Any]:
        """Weather."""
        return {"city": city, "sky": "clear", "note": "Ærø"}

    node = toolbus_node(nodes, registry)
    (message,) = messages_of(node.invoke(state_of(call("weather", "w", city="Oslo"))))
    assert (
        message.content == '{"city": "Oslo", "sky": "clear", "note": "Ærø"}'
    )  # as ToolNode writes it
    with pytest.raises(TypeError, match="read_only"):
        ToolbusNode(registry, read_only=True)


def test_import_toolbus_loads_no_framework() -> None:
    code = (
        "import sys, toolbus, toolbus.integrations\n"
        "toolbus.ToolRegistry().tool(name='echo')(lambda x: x)\n"
        "assert not [m for m in sys.modules if m.startswith(('langgraph', 'langchain'))], "
        "sorted(m for m in sys.modules if m.startswith(('langgraph', 'langchain')))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- LangChain tools in a registry -------------------------------------------------------------


class SearchArgs(BaseModel):
    """Search the web."""

    query: str = Field(description="what to look for")
    limit: int = Field(default=3, ge=1, le=10)


@lc_tool(args_schema=SearchArgs)
def search(query: str, limit: int = 5) -> list[str]:
    """Search the web."""
    return [f"{query} {i}" for i in range(limit)]


@lc_tool
def book(
    restaurant: str,
    people: int,
    api_key: Annotated[str, InjectedToolArg],
    call_id: Annotated[str, InjectedToolCallId],
) -> str:
    """Book a table."""
    return f"booked {restaurant} for {people} ({call_id}, key ok: {api_key == 'k-123456'})"


json_tool = StructuredTool.from_function(
    func=lambda city, days=1: {"city": city, "days": days},
    name="forecast",
    description="Forecast for a city.",
    args_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"],
    },
)


class Echo(BaseTool):
    name: str = "echo"
    description: str = "Echo the text."

    def _run(self, text: str) -> str:
        return text.upper()

    async def _arun(self, text: str) -> str:
        await asyncio.sleep(0)
        return text.lower()


def test_an_imported_tool_keeps_its_schema() -> None:
    registry = ToolRegistry()
    tools: list[BaseTool] = [search, book, json_tool, Echo(), lc_tool(tool1)]
    for t in tools:
        registry.add_langchain(t)
    chat = {d["function"]["name"]: d["function"] for d in openai.chat_tool_definitions(registry)}
    claude = {d["name"]: d for d in anthropic.tool_definitions(registry)}
    for t in tools:
        before = convert_to_openai_tool(t)["function"]
        after = registry.get(t.name).to_openai()["function"]  # type: ignore[union-attr]
        assert after == before
        assert chat[t.name] == before
        assert claude[t.name]["input_schema"] == before["parameters"]
        assert claude[t.name]["description"] == before["description"]
    assert set(chat["book"]["parameters"]["properties"]) == {"restaurant", "people"}


def test_imported_tools_run_with_toolbus_guarantees() -> None:
    registry = ToolRegistry()
    registry.add_langchain(search, read_only=True, timeout=5)
    imported = registry.add_langchain(book)
    registry.add_langchain(json_tool, read_only=True)
    registry.add_langchain(Echo())
    assert isinstance(imported, LangChainTool)
    assert imported.injected == ("api_key",) and imported.read_only is False
    assert imported.injected_required == frozenset({"api_key"})
    with Executor(registry, inject={"api_key": lambda call: "k-123456"}) as ex:
        batch = ex.execute_batch(
            [
                ToolCall(id="s", name="search", arguments='{"query": "oslo"}'),
                ToolCall(id="b", name="book", arguments={"restaurant": "Maaemo", "people": 2}),
                ToolCall(id="f", name="forecast", arguments={"city": "Oslo"}),
                ToolCall(id="e", name="echo", arguments={"text": "Hi"}),
                ToolCall(id="x", name="forecast", arguments={"city": "Oslo", "days": 0}),
                ToolCall(
                    id="k",
                    name="book",
                    arguments={"restaurant": "R", "people": 1, "api_key": "mine"},
                ),
            ]
        )
        # LangChain's defaults from the args_schema (limit=3, not the function's 5).
        assert batch[0].output == '["oslo 0", "oslo 1", "oslo 2"]'
        assert batch[1].output == "booked Maaemo for 2 (b, key ok: True)"
        assert batch[2].output == '{"city": "Oslo", "days": 1}'
        assert batch[3].output == "hi"  # the async path of a tool that has one
        assert batch[4].error_code == ErrorCode.INVALID_ARGUMENTS
        assert batch[5].error_code == ErrorCode.INVALID_ARGUMENTS
        assert "'api_key' cannot be set by the model" in (batch[5].error or "")
        assert ex.execute(ToolCall(name="echo", arguments={"text": "Hi", "x": 1})).output == "hi"


def test_injected_state_outside_a_node_says_what_is_missing() -> None:
    @lc_tool
    def needs_state(x: int, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Reads the state."""
        return "x"

    registry = ToolRegistry()
    registry.add_langchain(needs_state)
    with Executor(registry) as ex:
        result = ex.execute(ToolCall(name="needs_state", arguments={"x": 1}))
    assert result.status == "rejected"
    assert "ToolbusNode" in (result.error or "")


def test_add_langchain_takes_only_langchain_tools() -> None:
    with pytest.raises(TypeError, match="BaseTool"):
        ToolRegistry().add_langchain(tool1)


async def test_an_async_tool_returning_a_tool_message_through_aexecute() -> None:
    @lc_tool
    async def own(x: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Returns its own message."""
        return ToolMessage(f"own {x}", tool_call_id=tool_call_id)

    registry = ToolRegistry()
    registry.add_langchain(own)
    async with Executor(registry) as ex:
        result = await ex.aexecute(ToolCall(id="o", name="own", arguments={"x": 4}))
    assert result.output == "own 4"


def test_a_secret_in_an_exception_is_scrubbed_from_the_message(nodes: list[ToolbusNode]) -> None:
    @lc_tool
    def leaky(token: str) -> str:
        """Raises with the token in the message."""
        raise ValueError(f"token {token} expired")

    (message,) = messages_of(
        toolbus_node(nodes, [leaky]).invoke(state_of(call("leaky", "l", token="tok-998877")))
    )
    assert message.content == "Error: ValueError: token *** expired\n Please fix your mistakes."


class _AliasedArgs(BaseModel):
    q: str
    tenant: Annotated[str, InjectedToolArg] = Field("none", alias="tenantId")
    call_ref: Annotated[str, InjectedToolCallId] = Field(alias="callRef")


def _aliased(q: str, call_ref: str, tenant: str = "none") -> str:
    return f"q={q} tenant={tenant} call={call_ref}"


@pytest.mark.parametrize("path", ["direct", "through invoke"])
def test_an_injected_field_with_an_alias(path: str) -> None:
    t = StructuredTool.from_function(
        _aliased, name="aliased", description="d", args_schema=_AliasedArgs
    )
    if path == "through invoke":
        t.verbose = True  # off toolbus's direct path: LangChain validates the input again
    registry = ToolRegistry()
    imported = registry.add_langchain(t, read_only=True)
    assert imported.injected == ("tenant",)
    assert set(imported.schema["properties"]) == {"q"}
    with Executor(registry, inject={"tenant": lambda call: "app-tenant-42"}) as ex:
        # The model can set it by no name: its alias, nor its parameter name.
        for name in ("tenantId", "tenant"):
            refused = ex.execute(ToolCall(name="aliased", arguments={"q": "x", name: "EVIL"}))
            assert refused.error_code == ErrorCode.INVALID_ARGUMENTS
            assert f"'{name}' cannot be set by the model" in (refused.error or "")
        # The value the application supplies reaches the tool (masked in the output).
        ok = ex.execute(ToolCall(id="c1", name="aliased", arguments={"q": "x"}))
    assert ok.status == "ok", ok.error
    assert ok.output == "q=x tenant=*** call=c1"


def test_nodes_on_a_shared_executor_run_only_their_own_tools() -> None:
    deleted: list[str] = []

    @lc_tool
    def search_docs(q: str) -> str:
        """Search."""
        return f"results for {q}"

    @lc_tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    def lookup(key: str) -> str:
        """A plain function, which each node makes a LangChain tool of."""
        return key.upper()

    with Executor(ToolRegistry()) as shared:
        researcher = ToolbusNode([search_docs, lookup], shared, read_only=True)
        writer = ToolbusNode([delete_file], shared)
        # The same tools again on the same executor: no clash, the same tool.
        again = ToolbusNode([search_docs, lookup], shared, read_only=True)
        assert researcher.tool_names == ["search_docs", "lookup"] == again.tool_names
        assert writer.tool_names == ["delete_file"]
        assert set(shared.registry.names()) == {"search_docs", "lookup", "delete_file"}
        with pytest.raises(DuplicateToolError, match="read_only=True"):
            ToolbusNode([search_docs], shared)  # the same tool, mutating this time

        state = state_of(
            call("search_docs", "1", q="x"),
            call("delete_file", "2", path="/etc/important"),
            call("lookup", "3", key="k"),
        )
        mine = messages_of(researcher.invoke(state))
        theirs = messages_of(ToolNode([search_docs, lookup]).invoke(state, RUNTIME_CONFIG))
        assert_same(theirs, mine)
        assert (
            mine[1].content
            == theirs[1].content
            == ("Error: delete_file is not a valid tool, try one of [search_docs, lookup].")
        )
        assert deleted == []
        amine = messages_of(asyncio.run(researcher.ainvoke(state)))
        assert [(m.tool_call_id, m.status) for m in amine] == [
            ("1", "success"),
            ("2", "error"),
            ("3", "success"),
        ]
        assert deleted == []
        (done,) = messages_of(writer.invoke(state_of(call("delete_file", "4", path="/tmp/x"))))
        assert done.status == "success" and deleted == ["/tmp/x"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_interrupt_in_a_toolbus_tool_reaches_the_graph(
    kind: str, nodes: list[ToolbusNode]
) -> None:
    registry = ToolRegistry()
    if kind == "sync":

        @registry.tool(read_only=True)
        def approve_refund(order: str) -> str:
            """Ask a person before refunding."""
            answer = interrupt({"refund": order, "note": "VALUE-ONLY-THE-PERSON-SEES"})
            return f"refund {order}: {answer}"

    else:

        @registry.tool(read_only=True)
        async def approve_refund(order: str) -> str:
            """Ask a person before refunding."""
            await asyncio.sleep(0)
            answer = interrupt({"refund": order, "note": "VALUE-ONLY-THE-PERSON-SEES"})
            return f"refund {order}: {answer}"

    retry = RetryPolicy(max_retries=3, backoff_base=0.01, retry_on=(Exception,))  # never used
    for node in (
        toolbus_node(nodes, registry, retry=retry),
        toolbus_node(nodes, [registry.get("approve_refund")], retry=retry),
    ):
        graph = StateGraph(MessagesState)
        graph.add_node("tools", node)
        graph.add_edge(START, "tools")
        app = graph.compile(checkpointer=InMemorySaver())
        thread: Any = {"configurable": {"thread_id": f"t-{id(node)}"}}
        with bus.Recorder(sender=node.executor) as rec:
            paused = app.invoke(state_of(call("approve_refund", "r", order="A1")), thread)
            node.executor.drain_events()
        assert paused["__interrupt__"][0].value["refund"] == "A1"
        assert not [m for m in paused["messages"] if isinstance(m, ToolMessage)]
        published = repr([e for name in rec.names() for e in rec.of(name)])
        assert "VALUE-ONLY-THE-PERSON-SEES" not in published
        assert "interrupted the graph" in published
        assert [e.result.attempts for e in rec.of("tool:finished")] == [1]  # never retried
        resumed = app.invoke(Command(resume="yes"), thread)
        assert resumed["messages"][-1].content == "refund A1: yes"
        assert resumed["messages"][-1].status == "success"


def test_sync_tools_off_the_direct_path_run_on_toolbus_worker_threads(
    release: threading.Event,
) -> None:
    started: list[str] = []

    class Handler(BaseCallbackHandler):
        def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
            started.append(input_str)

    def hang(i: int) -> str:
        """Hangs until released."""
        release.wait(30)
        return "late"

    def where(i: int) -> str:
        """Says where it runs."""
        return threading.current_thread().name

    class Subclassed(StructuredTool):
        pass

    tools: list[BaseTool] = [
        StructuredTool.from_function(hang, callbacks=[Handler()]),
        StructuredTool.from_function(where, name="with_callbacks", callbacks=[Handler()]),
        StructuredTool.from_function(where, name="verbose", verbose=True),
        Subclassed.from_function(where, name="subclassed"),
    ]
    registry = ToolRegistry()
    for t in tools:
        imported = registry.add_langchain(
            t, read_only=True, timeout=HANG_TIMEOUT if t.name == "hang" else None
        )
        assert imported.is_async is False
    assert registry.add_langchain(Echo()).is_async is True  # an _arun of its own
    with Executor(registry) as ex:
        assert ex.execute(ToolCall(name="hang", arguments={"i": 1})).status == "timeout"
        # The hung call holds one of toolbus's threads, counted: not one of the
        # event loop's default thread pool, unseen and soon exhausted.
        assert ex.stats().abandoned_workers == 1
        for name in ("with_callbacks", "verbose", "subclassed"):
            result = ex.execute(ToolCall(name=name, arguments={"i": 2}))
            assert result.ok and not str(result.output).startswith("asyncio"), result
    assert len(started) == 2  # LangChain's callbacks still run (through its invoke)


def test_toolbus_injected_on_a_langchain_tool_is_refused_with_the_fix() -> None:
    @lc_tool
    def lookup(q: str, tenant: Annotated[str, Injected]) -> str:
        """LangChain shows `tenant` to the model: toolbus's marker means nothing to it."""
        return q

    with pytest.raises(UnsupportedToolError, match=r"InjectedToolArg"):
        ToolRegistry().add_langchain(lookup)
    with pytest.raises(UnsupportedToolError, match=r"'tenant' is marked with toolbus's Injected"):
        ToolbusNode([lookup])


class _RunManagerTool(BaseTool):
    name: str = "with_run_manager"
    description: str = "LangChain's documented custom tool shape."

    def _run(self, query: str, run_manager: CallbackManagerForToolRun | None = None) -> str:
        return f"rm:{query}"


class _ConfigTool(BaseTool):
    name: str = "with_config"
    description: str = "Takes the run's config."

    def _run(self, query: str, config: RunnableConfig) -> str:
        return f"cfg:{query}:{sorted(config)[:1]}"


def test_langchain_tool_variants_run_as_on_toolnode(nodes: list[ToolbusNode]) -> None:
    single = Tool(name="single", func=lambda q: f"single:{q}", description="One string in.")

    @lc_tool
    def with_callbacks(x: int, callbacks: Callbacks) -> str:
        """LangChain passes the run's callbacks."""
        return f"x={x} callbacks={type(callbacks).__name__}"

    @lc_tool
    async def awith_callbacks(x: int, callbacks: Callbacks) -> str:
        """Async, with the run's callbacks."""
        return f"x={x} callbacks={type(callbacks).__name__}"

    @lc_tool
    def strict(x: int) -> str:
        """Handles its own validation errors."""
        return str(x)

    strict.handle_validation_error = "please send an integer x"
    tools = [single, _RunManagerTool(), _ConfigTool(), with_callbacks, awith_callbacks, strict]
    state = state_of(
        call("single", "1", __arg1="hello"),
        call("single", "2", q="any name, as ToolNode takes it"),
        call("with_run_manager", "3", query="q"),
        call("with_config", "4", query="q"),
        call("with_callbacks", "5", x=1),
        call("awith_callbacks", "6", x=2),
        call("strict", "7", x="not a number"),
    )
    theirs, mine = both(nodes, tools, state)
    assert_same(theirs, mine)
    assert [m.status for m in mine] == ["success"] * 6 + ["error"]
    assert mine[0].content == "single:hello"
    assert mine[4].content == "x=1 callbacks=CallbackManager"
    assert mine[6].content == theirs[6].content == "please send an integer x"
    # Two inputs to a single-input tool: refused before it runs, as invalid.
    (two,) = messages_of(
        toolbus_node(nodes, [single]).invoke(state_of(call("single", "8", a="x", b="y")))
    )
    assert two.status == "error" and "takes a single input" in str(two.content)


def test_a_returned_tool_message_keeps_no_secret_in_any_field(nodes: list[ToolbusNode]) -> None:
    secret = "sk-live-XYZZY-424242"

    @lc_tool
    def own(
        q: str,
        api_key: Annotated[str, InjectedToolArg],
        call_id: Annotated[str, InjectedToolCallId],
    ) -> ToolMessage:
        """Returns its own message, the key in every field."""
        return ToolMessage(
            f"content {api_key}",
            tool_call_id=call_id,
            artifact={"key": api_key, "rows": [1, 2], "note": f"for {api_key}"},
            additional_kwargs={"k": api_key},
            response_metadata={"k": [api_key]},
        )

    node = toolbus_node(nodes, [own], inject={"api_key": lambda call: secret})
    (message,) = messages_of(node.invoke(state_of(call("own", "o1", q="x"))))
    assert message.status == "success" and message.tool_call_id == "o1"
    assert secret not in repr(message.model_dump())
    assert message.content == "content ***"
    assert message.artifact == {"key": "***", "rows": [1, 2], "note": "for ***"}
    assert message.additional_kwargs == {"k": "***"}
    assert message.response_metadata == {"k": ["***"]}


def test_calls_with_the_same_id_keep_their_own_tool_messages(nodes: list[ToolbusNode]) -> None:
    @lc_tool
    def art(x: int, call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Returns a ToolMessage with an artifact."""
        return ToolMessage(f"x={x}", tool_call_id=call_id, artifact={"x": x})

    state = state_of(call("art", "d", x=1), call("art", "d", x=2))
    theirs, mine = both(nodes, [art], state, read_only=True)
    assert_same(theirs, mine)
    assert [m.artifact for m in mine] == [{"x": 1}, {"x": 2}]


@pytest.mark.parametrize("args", [[1, 2], None, 5, "not json", object()])
def test_arguments_that_are_not_an_object_are_invalid(args: Any, nodes: list[ToolbusNode]) -> None:
    ran: list[Any] = []

    @lc_tool
    def add(a: int = 1, b: int = 1) -> int:
        """Every parameter has a default: empty arguments would do."""
        ran.append((a, b))
        return a + b

    message = AIMessage("", tool_calls=[call("add", "x")])
    message.tool_calls[0]["args"] = args
    node = toolbus_node(nodes, [add])
    with bus.Recorder("tool:finished", sender=node.executor) as rec:
        (answer,) = messages_of(node.invoke([message]))
        (finished,) = rec.wait_for("tool:finished", 1)
    assert answer.status == "error" and "Invalid arguments for 'add'" in str(answer.content)
    assert finished.result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert ran == []
