"""pydantic-ai, both ways, against the real framework (offline: `FunctionModel`).

toolbus's tools in an `Agent` through `ToolbusToolset`, every call run by the
executor; pydantic-ai's tools in a registry through `add_pydantic_ai`.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, ModelRetry, RunContext, Tool
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.conftest import MakeExecutor
from toolbus import Attachment, ErrorCode, Injected, ToolCall, ToolOutput, ToolRegistry, bus
from toolbus.integrations.pydantic_ai import PydanticAITool, ToolbusToolset

Turn = Sequence[ToolCallPart] | str


class Script:
    """A `FunctionModel` function: turn n answers with `turns[n]` (tool calls, or
    a final text); it records what the model was shown at every turn."""

    def __init__(self, *turns: Turn | Callable[[list[ModelMessage]], Turn]) -> None:
        self.turns = list(turns)
        self.seen: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        self.infos.append(info)
        turn = self.turns[len(self.seen) - 1]
        if callable(turn):
            turn = turn(messages)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        return ModelResponse(parts=list(turn))

    def returned(self, turn: int) -> list[Any]:
        """The parts the model read at the start of `turn` (tool returns, retry prompts)."""
        request = self.seen[turn][-1]
        assert isinstance(request, ModelRequest)
        return list(request.parts)


def call(name: str, args: dict[str, Any] | str, call_id: str) -> ToolCallPart:
    return ToolCallPart(name, args, tool_call_id=call_id)


def by_id(parts: list[Any]) -> dict[str, Any]:
    return {p.tool_call_id: p for p in parts if hasattr(p, "tool_call_id")}


def model_text(part: Any) -> str:
    """What the model reads for a tool's return or retry prompt."""
    if isinstance(part, RetryPromptPart):
        return part.model_response()
    return str(part.model_response_str())


def outcome(part: Any) -> str:
    """'retried' for a retry prompt (either form pydantic-ai uses), else the part's outcome."""
    if isinstance(part, RetryPromptPart):
        return "retried"
    assert isinstance(part, ToolReturnPart)
    return str(part.outcome)


def agent_for(script: Script, toolset: ToolbusToolset) -> Agent[None, str]:
    return Agent(FunctionModel(script), toolsets=[toolset])


# -- lazy import ----------------------------------------------------------------------------


def test_import_toolbus_does_not_import_the_frameworks() -> None:
    code = (
        "import sys, toolbus, toolbus.tools, toolbus.integrations\n"
        "r = toolbus.ToolRegistry()\n"
        "print(sorted(m for m in ('pydantic_ai', 'agents', 'langgraph') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- toolbus's tools in an agent ----------------------------------------------------------


def _weather_registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def get_weather(city: str, days: int = 1) -> dict[str, Any]:
        """Forecast for a city."""
        return {"city": city, "days": days, "sky": "clear"}

    @reg.tool
    def book_table(restaurant: str, people: int) -> str:
        """Book a table."""
        return f"booked {restaurant} for {people}"

    @reg.tool(type="custom")
    def shell(command: str) -> str:
        """Free text: not offered to pydantic-ai."""
        return command

    return reg


async def test_agent_sees_toolbus_tools_with_their_schemas_and_barriers(
    make_executor: MakeExecutor,
) -> None:
    reg = _weather_registry()
    ex = make_executor(reg)
    script = Script("done")
    result = await agent_for(script, ToolbusToolset(reg, ex)).run("hi")
    assert result.output == "done"
    shown = {t.name: t for t in script.infos[0].function_tools}
    assert sorted(shown) == ["book_table", "get_weather"]  # the custom tool is left out
    for name, t in shown.items():
        tool = reg.get(name)
        assert tool is not None
        assert t.parameters_json_schema == tool.schema
        assert t.description == tool.description
        assert t.sequential is (not tool.read_only)
        assert t.metadata == {"toolbus": {"read_only": tool.read_only}}
        assert t.timeout is None  # toolbus's timeout governs


async def test_parallel_calls_and_a_validation_error_the_model_corrects(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()
    both_in = threading.Barrier(2, timeout=5)  # passes only if two calls run at once
    seen: list[dict[str, Any]] = []

    @reg.tool(read_only=True)
    def lookup(city: str, days: int = 1) -> dict[str, Any]:
        """Look a city up."""
        if city in ("Oslo", "Bergen"):  # the first turn's two valid calls
            both_in.wait()
        seen.append({"city": city, "days": days})
        return {"city": city, "days": days}

    ex = make_executor(reg, max_parallel=4)
    script = Script(
        [
            call("lookup", {"city": "Oslo"}, "c1"),
            call("lookup", '{"city": "Bergen", "days": 2}', "c2"),
            call("lookup", {"town": "Tromsø"}, "c3"),  # invalid: becomes a retry prompt
        ],
        [call("lookup", {"city": "Tromsø"}, "c4")],
        "done",
    )
    with bus.Recorder("tool:finished", sender=ex) as rec:
        result = await agent_for(script, ToolbusToolset(reg, ex)).run("weather?")
        assert ex.drain_events()
    assert result.output == "done"
    first = by_id(script.returned(1))
    assert outcome(first["c1"]) == outcome(first["c2"]) == "success"
    assert first["c1"].content == {"city": "Oslo", "days": 1}
    assert first["c2"].content == {"city": "Bergen", "days": 2}
    assert outcome(first["c3"]) == "retried"
    retry_text = model_text(first["c3"])
    assert "city" in retry_text and "Field required" in retry_text
    assert "Tromsø" not in retry_text  # toolbus never echoes values
    assert by_id(script.returned(2))["c4"].content == {"city": "Tromsø", "days": 1}
    finished = {e.call_id: e.result for e in rec.of("tool:finished")}
    assert {k: r.status for k, r in finished.items()} == {
        "c1": "ok",
        "c2": "ok",
        "c3": "rejected",
        "c4": "ok",
    }
    assert finished["c3"].error_code == ErrorCode.INVALID_ARGUMENTS


async def test_max_parallel_holds_inside_the_agent(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    inside = threading.Condition()
    running = [0]
    peak = [0]

    @reg.tool(read_only=True)
    def slow(i: int) -> int:
        with inside:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            inside.notify_all()
            # Held until two calls are inside at once: proves they run together.
            assert inside.wait_for(lambda: peak[0] >= 2, 10), "never two calls at once"
            running[0] -= 1
        return i

    ex = make_executor(reg, max_parallel=2)
    script = Script([call("slow", {"i": i}, f"c{i}") for i in range(8)], "done")
    await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    returned = by_id(script.returned(1))
    assert [returned[f"c{i}"].content for i in range(8)] == list(range(8))
    assert peak[0] == 2
    assert ex.stats().peak_in_flight == 2


async def test_a_secret_argument_never_reaches_the_bus(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    secret = "sk-live-9f8e7d6c5b4a"
    received: list[str] = []

    @reg.tool(read_only=True)
    def fetch(url: str, api_key: str) -> str:
        """Fetch a URL with a key."""
        received.append(api_key)
        return f"fetched {url}"

    @reg.tool(read_only=True)
    def leak(api_key: str) -> str:
        raise RuntimeError(f"upstream refused key {api_key}")

    ex = make_executor(reg)
    script = Script(
        [
            call("fetch", {"url": "https://example.org", "api_key": secret}, "c1"),
            call("leak", {"api_key": secret}, "c2"),
        ],
        "done",
    )
    with bus.Recorder(sender=ex) as rec:
        await agent_for(script, ToolbusToolset(reg, ex)).run("go")
        assert ex.drain_events()
    assert received == [secret]  # the tool got the raw value
    assert rec.events
    assert all(secret not in repr(event) for _, event in rec.events)
    executing = rec.of("tool:executing")
    assert {e.arguments["api_key"] for e in executing} == {"***"}
    parts = by_id(script.returned(1))
    assert outcome(parts["c2"]) == "failed"
    assert secret not in str(parts["c2"].content)  # scrubbed from the error the model reads


async def test_barrier_order_holds_inside_the_agent(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    spans: dict[str, tuple[float, float]] = {}
    # Each pair of reads between two barriers meets here: it passes only if
    # the two run at the same time.
    pairs = {"r1": threading.Barrier(2, timeout=10), "r3": threading.Barrier(2, timeout=10)}
    pairs["r2"], pairs["r4"] = pairs["r1"], pairs["r3"]

    @reg.tool(read_only=True)
    def read(label: str) -> str:
        start = time.monotonic()
        if label in pairs:
            pairs[label].wait()
        spans[label] = (start, time.monotonic())
        return label

    @reg.tool
    def write(label: str) -> str:
        start = time.monotonic()
        time.sleep(0.01)  # tool under test: takes a while (an overlap would show)
        spans[label] = (start, time.monotonic())
        return label

    ex = make_executor(reg, max_parallel=8)
    order = [("read", "r1"), ("read", "r2"), ("write", "w1"), ("read", "r3"), ("read", "r4")]
    order += [("write", "w2"), ("write", "w3"), ("read", "r5")]
    script = Script([call(tool, {"label": label}, label) for tool, label in order], "done")
    await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    shown = {t.name: t.sequential for t in script.infos[0].function_tools}
    assert shown == {"read": False, "write": True}
    # Every call of the turn ran, and each result reached the model under its id.
    assert {k: p.content for k, p in by_id(script.returned(1)).items()} == {
        label: label for _, label in order
    }

    def before(a: str, b: str) -> bool:
        return spans[a][1] <= spans[b][0]

    # A mutating call waits for every earlier call and holds back every later one.
    for i, (tool, label) in enumerate(order):
        if tool != "write":
            continue
        assert all(before(e, label) for _, e in order[:i]), label
        assert all(before(label, later) for _, later in order[i + 1 :]), label
    # Read-only calls between barriers overlap (their barrier proved it).
    assert spans["r1"][0] < spans["r2"][1] and spans["r2"][0] < spans["r1"][1]
    assert spans["r3"][0] < spans["r4"][1] and spans["r4"][0] < spans["r3"][1]


async def test_failures_reach_the_model_as_failed_results(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def broken() -> str:
        raise ValueError("the disk is full")

    @reg.tool(read_only=True, timeout=0.05)
    async def hangs() -> str:
        await asyncio.sleep(5)
        return "never"

    ex = make_executor(reg)
    script = Script([call("broken", {}, "c1"), call("hangs", {}, "c2")], "done")
    result = await agent_for(script, ToolbusToolset(reg, ex, max_retries=0)).run("go")
    assert result.output == "done"  # no retry budget spent: max_retries=0 still finishes
    parts = by_id(script.returned(1))
    assert outcome(parts["c1"]) == outcome(parts["c2"]) == "failed"
    assert parts["c1"].content == "Error: ValueError: the disk is full (TOOL_ERROR)"
    assert "timed out" in parts["c2"].content and "(EXECUTION_TIMEOUT)" in parts["c2"].content


async def test_retries_beyond_the_budget_end_the_run_as_for_pydantic_ais_own_tools(
    make_executor: MakeExecutor,
) -> None:
    reg = _weather_registry()
    ex = make_executor(reg)
    bad = [call("get_weather", {"town": "Oslo"}, "c1")]
    script = Script(bad, bad, bad, "done")
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 1"):
        await agent_for(script, ToolbusToolset(reg, ex, max_retries=1)).run("go")


async def test_an_unknown_tool_removed_after_listing_becomes_a_retry_prompt(
    make_executor: MakeExecutor,
) -> None:
    reg = _weather_registry()
    ex = make_executor(reg)
    toolset = ToolbusToolset(reg, ex)

    def remove_then_call(_m: list[ModelMessage]) -> Turn:
        reg.unregister("book_table")  # listed for this step, gone when the call runs
        return [call("book_table", {"restaurant": "Maaemo", "people": 2}, "c1")]

    script = Script(remove_then_call, "done")
    await agent_for(script, toolset).run("go")
    assert outcome(by_id(script.returned(1))["c1"]) == "retried"
    assert [t.name for t in script.infos[1].function_tools] == ["get_weather"]


async def test_tools_registered_later_are_listed_at_the_next_step(
    make_executor: MakeExecutor,
) -> None:
    reg = _weather_registry()
    ex = make_executor(reg)

    def ping() -> str:
        return "pong"

    def add_tool(_m: list[ModelMessage]) -> Turn:
        reg.register(ping)  # a plain function: a tool named "ping"
        return [call("get_weather", {"city": "Oslo"}, "c1")]

    script = Script(add_tool, "done")
    await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    assert "ping" in [t.name for t in script.infos[1].function_tools]


async def test_outputs_with_attachments_and_metadata_are_tool_returns(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def chart(city: str) -> ToolOutput:
        return ToolOutput(
            content=f"chart of {city}",
            attachments=(Attachment(type="image", url="https://example.org/c.png"),),
            metadata={"source": "met.no"},
        )

    ex = make_executor(reg)
    script = Script([call("chart", {"city": "Oslo"}, "c1")], "done")
    result = await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    part = by_id(script.returned(1))["c1"]
    assert part.content == "chart of Oslo\n[attachment: image https://example.org/c.png]"
    assert part.metadata == {"source": "met.no"}
    assert result.output == "done"


ODD_NAME = b"report-\xe9.txt".decode("utf-8", "surrogateescape")


def _sized_registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def page(size: int) -> str:
        return "x" * size

    @reg.tool(read_only=True)
    def rows(count: int) -> dict[str, Any]:
        return {"rows": ["y" * 40] * count}

    @reg.tool(read_only=True)
    def listing(structured: bool) -> Any:
        return {"names": [ODD_NAME]} if structured else f"found {ODD_NAME}"

    @reg.tool(read_only=True)
    def chart(title_length: int) -> ToolOutput:
        return ToolOutput(
            content="z" * 5000,
            attachments=(Attachment(type="image/png", title="T" * title_length),),
            metadata={"rows": 5000},
        )

    @reg.tool(read_only=True)
    def total(values: list[int]) -> int:
        return sum(values)

    return reg


async def test_an_output_too_long_for_max_length_reaches_the_model_cut(
    make_executor: MakeExecutor,
) -> None:
    """Outputs went to the model whole, however long (a 10,000-character page,
    a structure of any size): every other path cuts them after `max_length`
    characters (4,000 unless set) with a note (bug hunt). Short ones are
    still values."""
    reg = _sized_registry()
    ex = make_executor(reg)
    calls = [
        call("page", {"size": 10_000}, "long_text"),
        call("rows", {"count": 200}, "long_rows"),
        call("rows", {"count": 1}, "short_rows"),
        call("chart", {"title_length": 500}, "attached"),
    ]
    script = Script(calls, "done")
    await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    parts = by_id(script.returned(1))
    assert parts["long_text"].content == "x" * 4000 + "\n... (truncated, 6000 characters omitted)"
    rows = model_text(parts["long_rows"])
    assert rows.startswith('{\n  "rows": [') and rows.endswith(
        "(truncated, 5618 characters omitted)"
    )
    assert parts["short_rows"].content == {"rows": ["y" * 40]}  # a value, as before
    attached = parts["attached"]
    assert attached.content == (
        "z" * 4000 + "\n... (truncated, 1000 characters omitted)\n"
        "[attachment: image/png " + "T" * 200 + "\n... (truncated, 300 characters omitted)]"
    )
    assert attached.metadata == {"rows": 5000}
    # Its own limit: a value while it fits.
    script = Script([call("page", {"size": 60}, "fits"), call("page", {"size": 150}, "cut")], "-")
    await agent_for(script, ToolbusToolset(reg, ex, max_length=100)).run("go")
    parts = by_id(script.returned(1))
    assert parts["fits"].content == "x" * 60
    assert parts["cut"].content == "x" * 100 + "\n... (truncated, 50 characters omitted)"


async def test_a_retry_prompt_is_cut_at_max_length(make_executor: MakeExecutor) -> None:
    """The text of an invalid call went to the model whole (over 20,000
    characters for 300 bad values); other paths cut it (bug hunt)."""
    reg = _sized_registry()
    ex = make_executor(reg)
    script = Script([call("total", {"values": ["x"] * 300}, "c1")], "done")
    await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    part = by_id(script.returned(1))["c1"]
    assert outcome(part) == "retried"
    assert part.content.startswith("Invalid arguments for 'total': values.0: Input should be")
    assert len(part.content) < 4100 and part.content.endswith("characters omitted)")


async def test_a_lone_surrogate_in_an_output_reaches_the_model_as_a_replacement_character(
    make_executor: MakeExecutor,
) -> None:
    """It went to pydantic-ai as it was: no request can carry it, and pydantic
    refused to write a structure holding one (bug hunt)."""
    reg = _sized_registry()
    ex = make_executor(reg)
    script = Script(
        [
            call("listing", {"structured": False}, "text"),
            call("listing", {"structured": True}, "s"),
        ],
        "done",
    )
    await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    parts = by_id(script.returned(1))
    assert parts["text"].content == "found report-\ufffd.txt"
    assert parts["s"].content == {"names": ["report-\ufffd.txt"]}
    assert model_text(parts["s"]) == '{"names":["report-\ufffd.txt"]}'


async def test_metadata_holding_a_lone_surrogate_leaves_the_history_writable(
    make_executor: MakeExecutor,
) -> None:
    """A result's metadata went to pydantic-ai as it was: the run ended, but
    its message history could not be written (`all_messages_json` raised),
    as the output could not before (review)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def find(q: str) -> ToolOutput:
        """Find a file."""
        return ToolOutput(content="found 1 file", metadata={"path": ODD_NAME, ODD_NAME: 1})

    ex = make_executor(reg)
    script = Script([call("find", {"q": "x"}, "c1")], "done")
    run = await agent_for(script, ToolbusToolset(reg, ex)).run("go")
    part = by_id(script.returned(1))["c1"]
    assert part.content == "found 1 file"
    assert part.metadata == {"path": "report-\ufffd.txt", "report-\\udce9.txt": 1}
    assert b"report-\xef\xbf\xbd.txt" in run.all_messages_json()


def test_the_toolset_refuses_another_registry(make_executor: MakeExecutor) -> None:
    reg = _weather_registry()
    ex = make_executor(reg)
    with pytest.raises(ValueError, match="the executor's registry"):
        ToolbusToolset(ToolRegistry(), ex)
    with pytest.raises(ValueError, match="max_retries"):
        ToolbusToolset(reg, ex, max_retries=-1)
    with pytest.raises(ValueError, match="max_length"):
        ToolbusToolset(reg, ex, max_length=-1)
    assert ToolbusToolset(reg, ex, id="weather").id == "weather"


@pytest.mark.parametrize(
    ("bad", "error"),
    [(0, ValueError), (None, TypeError), ("4000", TypeError), (1.5, TypeError), (True, TypeError)],
)
def test_max_length_is_an_integer_of_at_least_one_as_everywhere(
    make_executor: MakeExecutor, bad: Any, error: type[Exception]
) -> None:
    """0 left the model a note that something was cut, and none of the text:
    refused, as `function_tools`, `run_agent` and `format_result_for_context` refuse it."""
    reg = _weather_registry()
    with pytest.raises(error, match=r"^ToolbusToolset: max_length must be"):
        ToolbusToolset(reg, make_executor(reg), max_length=bad)


def test_a_pydantic_ai_tool_whose_name_toolbus_refuses_says_to_pass_name() -> None:
    def search(q: str) -> str:
        return q

    source = Tool(search, name="web search")
    with pytest.raises(
        ValueError, match=r"' ' is not one \(it is the pydantic-ai tool's name: pass name=\)"
    ):
        ToolRegistry().add_pydantic_ai(source)
    assert ToolRegistry().add_pydantic_ai(source, name="web_search").name == "web_search"


# -- pydantic-ai's tools in a registry ----------------------------------------------------


def forecast(city: str, days: int = 1, units: str = "metric") -> dict[str, Any]:
    """Forecast for a city.

    Args:
        city: The city's name.
        days: How many days ahead.
        units: metric or imperial.
    """
    return {"city": city, "days": days, "units": units}


async def afetch(url: str, retries: int = 0) -> str:
    """Fetch a URL."""
    await asyncio.sleep(0)
    return f"fetched {url} ({retries})"


def test_an_imported_tool_keeps_its_schema() -> None:
    pa = Tool(forecast)
    reg = ToolRegistry()
    imported = reg.add_pydantic_ai(pa)
    assert isinstance(imported, PydanticAITool)
    assert imported.schema == pa.tool_def.parameters_json_schema
    assert imported.description == pa.description
    props = imported.schema["properties"]
    assert props["city"]["description"] == "The city's name."  # from the docstring
    # A plain function is described by pydantic-ai in the same way.
    assert reg.add_pydantic_ai(afetch).schema == Tool(afetch).tool_def.parameters_json_schema


async def test_schemas_are_the_same_in_both_directions(make_executor: MakeExecutor) -> None:
    # pydantic-ai -> toolbus -> pydantic-ai: the model sees what a plain agent shows it.
    direct = Script("done")
    await Agent(FunctionModel(direct), tools=[Tool(forecast), Tool(afetch)]).run("hi")
    reg = ToolRegistry()
    reg.add_pydantic_ai(forecast)
    reg.add_pydantic_ai(afetch)
    ex = make_executor(reg)
    through = Script("done")
    await agent_for(through, ToolbusToolset(reg, ex)).run("hi")

    def schemas(s: Script) -> dict[str, Any]:
        return {t.name: t.parameters_json_schema for t in s.infos[0].function_tools}

    assert schemas(through) == schemas(direct)
    # toolbus -> pydantic-ai -> toolbus: the imported definition keeps toolbus's schema.
    tb = _weather_registry()
    tb_ex = make_executor(tb)
    shown = Script("done")
    await agent_for(shown, ToolbusToolset(tb, tb_ex)).run("hi")
    for t in shown.infos[0].function_tools:
        original = tb.get(t.name)
        assert original is not None
        back = Tool.from_schema(lambda **kw: kw, t.name, t.description, t.parameters_json_schema)
        assert ToolRegistry().add_pydantic_ai(back).schema == original.schema


async def test_imported_tools_run_through_the_executor(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    reg.add_pydantic_ai(forecast, read_only=True)
    reg.add_pydantic_ai(Tool(afetch, timeout=3.0))

    def retry_me(n: int) -> int:
        raise ModelRetry(f"try a number above {n}")

    reg.add_pydantic_ai(retry_me)
    ex = make_executor(reg)
    with bus.Recorder("tool:finished", sender=ex) as rec:
        batch = await ex.aexecute_batch(
            [
                ToolCall(id="1", name="forecast", arguments={"city": "Oslo", "days": "3"}),
                ToolCall(id="2", name="afetch", arguments='{"url": "https://example.org"}'),
                ToolCall(id="3", name="forecast", arguments={"city": 7, "secret_city": "Oz"}),
                ToolCall(id="4", name="retry_me", arguments={"n": 5}),
            ]
        )
        assert ex.drain_events()
    ok, fetched, invalid, retried = batch
    assert ok.output == {"city": "Oslo", "days": 3, "units": "metric"}  # pydantic's coercion
    assert fetched.output == "fetched https://example.org (0)"
    assert invalid.status == "rejected" and invalid.error_code == ErrorCode.INVALID_ARGUMENTS
    assert "Oz" not in (invalid.error or "")
    assert retried.status == "error" and retried.error == "try a number above 5"
    assert retried.attempts == 1  # a ModelRetry is not retried with the same arguments
    assert len(rec.of("tool:finished")) == 4
    assert reg.get("afetch") is not None and reg.get("afetch").timeout == 3.0  # type: ignore[union-attr]
    assert reg.get("forecast").read_only and not reg.get("afetch").read_only  # type: ignore[union-attr]


async def test_a_from_schema_tool_is_validated_against_its_schema(
    make_executor: MakeExecutor,
) -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    }
    pa = Tool.from_schema(lambda q: f"searched {q}", "search", "Search.", schema)
    reg = ToolRegistry()
    reg.add_pydantic_ai(pa)
    ex = make_executor(reg)
    good = await ex.aexecute(ToolCall(name="search", arguments={"q": "toolbus"}))
    bad = await ex.aexecute(ToolCall(name="search", arguments={"query": "toolbus"}))
    assert good.output == "searched toolbus"
    assert bad.error_code == ErrorCode.INVALID_ARGUMENTS


async def test_a_tool_return_becomes_output_and_metadata(make_executor: MakeExecutor) -> None:
    def report(city: str) -> ToolReturn[str]:
        return ToolReturn(return_value=f"report for {city}", metadata={"rows": 3})

    reg = ToolRegistry()
    reg.add_pydantic_ai(report)
    ex = make_executor(reg)
    result = await ex.aexecute(ToolCall(name="report", arguments={"city": "Oslo"}))
    assert result.output == "report for Oslo"
    assert result.metadata == {"rows": 3}


def test_tools_that_need_a_run_context_are_refused() -> None:
    def with_ctx(ctx: RunContext[int], x: int) -> int:
        return ctx.deps + x

    reg = ToolRegistry()
    with pytest.raises(TypeError, match="takes a RunContext as its first parameter"):
        reg.add_pydantic_ai(with_ctx)
    with pytest.raises(TypeError, match="takes a RunContext"):
        reg.add_pydantic_ai(Tool(with_ctx))

    async def validate(ctx: RunContext[Any], **kwargs: Any) -> None:
        return None

    # (A `prepare` function is taken now: ToolbusToolset asks it, see test_offered_tools.py.)
    with pytest.raises(TypeError, match="args_validator function"):
        reg.add_pydantic_ai(Tool(forecast, args_validator=validate))
    with pytest.raises(TypeError, match="requires approval"):
        reg.add_pydantic_ai(Tool(forecast, requires_approval=True))
    with pytest.raises(TypeError, match=r"takes a pydantic_ai\.Tool or a function"):
        reg.add_pydantic_ai(42)
    assert len(reg) == 0


async def test_injected_parameters_of_an_imported_function_are_honoured(
    make_executor: MakeExecutor,
) -> None:
    def lookup(q: str, tenant: Annotated[str, Injected], limit: int = 2) -> str:
        """Look up, for the signed-in tenant."""
        return f"{q} for tenant {tenant} (limit {limit})"

    reg = ToolRegistry()
    imported = reg.add_pydantic_ai(lookup, read_only=True)
    assert imported.injected == ("tenant",)
    assert set(imported.schema["properties"]) == {"q", "limit"}
    assert "tenant" not in imported.schema.get("required", [])
    ex = make_executor(reg, inject={"tenant": lambda call: "tenant-4711"})
    with bus.Recorder("tool:executing", sender=ex) as rec:
        ok = await ex.aexecute(ToolCall(name="lookup", arguments={"q": "x"}))
        refused = await ex.aexecute(ToolCall(name="lookup", arguments={"q": "x", "tenant": "EVIL"}))
        (event,) = rec.wait_for("tool:executing", 1)
    assert ok.output == "x for tenant *** (limit 2)"  # the value reached it, masked
    assert event.arguments == {"q": "x", "tenant": "***"}
    assert refused.error_code == ErrorCode.INVALID_ARGUMENTS
    # The model is never shown it through the toolset either.
    toolset = ToolbusToolset(reg, ex)
    seen: list[Any] = []

    def record(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("done")])

    model = FunctionModel(record)
    await Agent(model, toolsets=[toolset]).run("go")
    (definition,) = seen
    assert set(definition.parameters_json_schema["properties"]) == {"q", "limit"}
