"""The OpenAI Agents SDK, both ways, against the real framework (offline: a fake `Model`).

toolbus's tools in an `Agent` through `function_tools`, every call run by the
executor; the SDK's function tools in a registry through `add_openai_agents`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Annotated, Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    FunctionTool,
    RunConfig,
    RunContextWrapper,
    Runner,
    ToolExecutionConfig,
    ToolGuardrailFunctionOutput,
    function_tool,
    tool_input_guardrail,
)
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models.interface import Model, ModelTracing
from agents.testing import assistant_message, function_call
from agents.tool_context import ToolContext as AgentsToolContext
from agents.usage import Usage

from tests.conftest import HANG_TIMEOUT, MakeExecutor
from toolbus import (
    ErrorCode,
    Injected,
    RetryPolicy,
    ToolCall,
    ToolRegistry,
    bus,
    format_result_for_context,
)
from toolbus import FunctionTool as ToolbusFunctionTool
from toolbus.integrations.openai_agents import OpenAIAgentsTool, function_tool_for, function_tools

Turn = Sequence[TResponseOutputItem] | str


class FakeModel(Model):
    """The SDK's `Model` interface, offline: turn n answers with `turns[n]` (tool
    calls, or a final text), as the SDK's own tests do with their fake model. It
    records the tools and the input it was given at every turn."""

    def __init__(self, *turns: Turn | Callable[[list[Any]], Turn]) -> None:
        self.turns = list(turns)
        self.inputs: list[list[Any]] = []
        self.tools: list[list[Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        self.tools.append(list(tools))
        turn = self.turns[len(self.inputs) - 1]
        if callable(turn):
            turn = turn(items)
        output = [assistant_message(turn)] if isinstance(turn, str) else list(turn)
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("not used offline")

    def outputs(self, turn: int) -> dict[str, str]:
        """The tool outputs the model read at the start of `turn`, by call id."""
        return {
            item["call_id"]: item["output"]
            for item in self.inputs[turn]
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        }


OFFLINE = RunConfig(tracing_disabled=True)


async def run(model: FakeModel, tools: list[Any], config: RunConfig = OFFLINE) -> Any:
    agent = Agent(name="assistant", model=model, tools=tools)
    return await Runner.run(agent, "go", run_config=config)


# -- toolbus's tools in an agent ------------------------------------------------------------


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def get_weather(city: str, days: int = 1, units: str | None = None) -> dict[str, Any]:
        """Forecast for a city."""
        return {"city": city, "days": days, "units": units}

    @reg.tool
    def book_table(restaurant: str, people: int) -> str:
        """Book a table."""
        return f"booked {restaurant} for {people}"

    @reg.tool(read_only=True)
    def tally(counts: dict[str, int]) -> int:
        """Free-form keys: strict mode cannot express them."""
        return sum(counts.values())

    @reg.tool(type="custom")
    def shell(command: str) -> str:
        return command

    return reg


async def test_the_model_sees_strict_schemas(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    reg = _registry()
    ex = make_executor(reg)
    with caplog.at_level(logging.WARNING, logger="toolbus.integrations"):
        tools = function_tools(reg, ex)
    model = FakeModel("done")
    await run(model, tools)
    shown = {t.name: t for t in model.tools[0]}
    assert sorted(shown) == ["book_table", "get_weather", "tally"]  # no custom tool
    for t in shown.values():
        assert isinstance(t, FunctionTool)
        assert t.timeout_seconds is None  # toolbus's timeout governs
    weather = shown["get_weather"]
    assert weather.strict_json_schema
    schema = weather.params_json_schema
    assert schema["required"] == ["city", "days", "units"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["days"]["type"] == ["integer", "null"]  # null: "not given"
    # Already strict: sent exactly as toolbus has it.
    book = reg.get("book_table")
    assert book is not None
    assert shown["book_table"].strict_json_schema
    assert shown["book_table"].params_json_schema == book.schema
    # Cannot be strict: offered non-strict, with its own schema, and logged.
    tally = reg.get("tally")
    assert tally is not None
    assert not shown["tally"].strict_json_schema
    assert shown["tally"].params_json_schema == tally.schema
    assert "'tally' is offered non-strict" in caplog.text


async def test_the_runner_calls_the_tools_and_every_failure_comes_back_as_text(
    make_executor: MakeExecutor,
) -> None:
    reg = _registry()

    @reg.tool(read_only=True, timeout=0.05)
    async def slow_report(city: str) -> str:
        """Hangs past its timeout."""
        await asyncio.sleep(5)
        return "never"

    @reg.tool
    def broken() -> str:
        raise ValueError("the disk is full")

    ex = make_executor(reg)
    model = FakeModel(
        [
            function_call("get_weather", {"city": "Oslo", "days": 2, "units": None}, call_id="c1"),
            function_call("slow_report", {"city": "Oslo"}, call_id="c2"),
            function_call("get_weather", {"town": "Oslo"}, call_id="c3"),
            function_call("broken", {}, call_id="c4"),
            function_call("tally", '{"counts": {"a": 1, "b": 2}}', call_id="c5"),
        ],
        "done",
    )
    with bus.Recorder("tool:finished", sender=ex) as rec:
        result = await run(model, function_tools(reg, ex))
        assert ex.drain_events()
    assert result.final_output == "done"
    out = model.outputs(1)
    assert out["c1"] == '{\n  "city": "Oslo",\n  "days": 2,\n  "units": null\n}'
    assert out["c2"] == "Error: Tool 'slow_report' timed out after 0.05s (EXECUTION_TIMEOUT)"
    assert out["c3"].startswith("Error: Invalid arguments for 'get_weather': city: Field required")
    assert out["c3"].endswith("(INVALID_ARGUMENTS)")
    assert out["c4"] == "Error: ValueError: the disk is full (TOOL_ERROR)"
    assert out["c5"] == "3"
    statuses = {e.call_id: e.result.status for e in rec.of("tool:finished")}
    assert statuses == {"c1": "ok", "c2": "timeout", "c3": "rejected", "c4": "error", "c5": "ok"}


async def test_what_the_model_reads_is_the_text_every_other_path_gives_it(
    make_executor: MakeExecutor,
) -> None:
    """A text output holding a lone surrogate (a file name decoded with
    surrogateescape) went to the SDK as it was, which no request can carry;
    `format_result_for_context` writes U+FFFD (bug hunt). Long outputs were
    cut already, and stay so."""
    reg = ToolRegistry()
    name = b"report-\xe9.txt".decode("utf-8", "surrogateescape")

    @reg.tool(read_only=True)
    def listing(structured: bool) -> Any:
        return {"names": [name]} if structured else f"found {name}"

    @reg.tool(read_only=True)
    def page() -> str:
        return "x" * 500

    ex = make_executor(reg)
    calls = {
        "text": ("listing", {"structured": False}),
        "s": ("listing", {"structured": True}),
        "long": ("page", {}),
    }
    model = FakeModel([function_call(t, a, call_id=i) for i, (t, a) in calls.items()], "done")
    await run(model, function_tools(reg, ex, max_length=100))
    out = model.outputs(1)
    assert out == {
        "text": "found report-\ufffd.txt",
        "s": '{\n  "names": [\n    "report-\ufffd.txt"\n  ]\n}',
        "long": "x" * 100 + "\n... (truncated, 400 characters omitted)",
    }
    for call_id, (tool, arguments) in calls.items():
        result = await ex.aexecute(ToolCall(name=tool, arguments=arguments))
        assert format_result_for_context(result, 100, include_metadata=False) == out[call_id]


async def test_nulls_for_optional_fields_take_the_defaults(make_executor: MakeExecutor) -> None:
    reg = _registry()
    ex = make_executor(reg)
    model = FakeModel(
        [function_call("get_weather", {"city": "Oslo", "days": None, "units": None}, call_id="c1")],
        "done",
    )
    with bus.Recorder("tool:executing", sender=ex) as rec:
        await run(model, function_tools(reg, ex))
        assert ex.drain_events()
    # `days` (not nullable) takes its default; `units` accepts null and keeps it.
    assert model.outputs(1)["c1"] == '{\n  "city": "Oslo",\n  "days": 1,\n  "units": null\n}'
    assert rec.of("tool:executing")[0].arguments == {"city": "Oslo", "units": None}


async def test_max_parallel_holds_inside_the_runner(make_executor: MakeExecutor) -> None:
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
    model = FakeModel([function_call("slow", {"i": i}, call_id=f"c{i}") for i in range(8)], "done")
    await run(model, function_tools(reg, ex))
    assert model.outputs(1) == {f"c{i}": str(i) for i in range(8)}
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
    model = FakeModel(
        [
            function_call("fetch", {"url": "https://example.org", "api_key": secret}, call_id="c1"),
            function_call("leak", {"api_key": secret}, call_id="c2"),
        ],
        "done",
    )
    with bus.Recorder(sender=ex) as rec:
        await run(model, function_tools(reg, ex))
        assert ex.drain_events()
    assert received == [secret]
    assert rec.events
    assert all(secret not in repr(event) for _, event in rec.events)
    assert {e.arguments["api_key"] for e in rec.of("tool:executing")} == {"***"}
    assert secret not in model.outputs(1)["c2"]  # scrubbed from the error the model reads


async def test_calls_run_one_by_one_keep_their_order_with_the_sdks_own_setting(
    make_executor: MakeExecutor,
) -> None:
    # The Runner invokes each call on its own: toolbus cannot order a turn's calls
    # (documented). The SDK's max_function_tool_concurrency=1 runs them in order.
    reg = ToolRegistry()
    spans: list[tuple[str, float, float]] = []

    @reg.tool(read_only=True)
    def read(label: str) -> str:
        start = time.monotonic()
        time.sleep(0.02)  # tool under test: takes a while
        spans.append((label, start, time.monotonic()))
        return label

    @reg.tool
    def write(label: str) -> str:
        start = time.monotonic()
        spans.append((label, start, time.monotonic()))
        return label

    ex = make_executor(reg)
    labels = [("read", "r1"), ("write", "w1"), ("read", "r2"), ("write", "w2")]
    model = FakeModel([function_call(t, {"label": lab}, call_id=lab) for t, lab in labels], "done")
    config = RunConfig(
        tracing_disabled=True,
        tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1),
    )
    await run(model, function_tools(reg, ex), config)
    assert [s[0] for s in spans] == ["r1", "w1", "r2", "w2"]
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(spans))


# -- the SDK's tools in a registry --------------------------------------------------------


@function_tool
def forecast(city: str, days: int = 1) -> str:
    """Forecast for a city.

    Args:
        city: The city's name.
        days: How many days ahead.
    """
    return f"{city}: clear for {days} day(s)"


@function_tool(timeout=2.5)
async def afetch(url: str) -> dict[str, Any]:
    """Fetch a URL."""
    await asyncio.sleep(0)
    return {"url": url, "status": 200}


def test_an_imported_tool_keeps_its_schema() -> None:
    reg = ToolRegistry()
    imported = reg.add_openai_agents(forecast)
    assert isinstance(imported, OpenAIAgentsTool)
    assert imported.schema == forecast.params_json_schema
    assert imported.description == forecast.description
    assert imported.schema["properties"]["city"]["description"] == "The city's name."


async def test_schemas_are_the_same_in_both_directions(make_executor: MakeExecutor) -> None:
    # SDK -> toolbus -> SDK: the model sees what the plain SDK tools show it.
    direct = FakeModel("done")
    await run(direct, [forecast, afetch])
    reg = ToolRegistry()
    reg.add_openai_agents(forecast)
    reg.add_openai_agents(afetch)
    ex = make_executor(reg)
    through = FakeModel("done")
    await run(through, function_tools(reg, ex))

    def shown(m: FakeModel) -> dict[str, Any]:
        return {t.name: (t.params_json_schema, t.strict_json_schema) for t in m.tools[0]}

    assert shown(through) == shown(direct)
    # toolbus -> SDK -> toolbus: the exported tool, imported again, keeps the schema
    # the SDK sent (and toolbus's own where it was already strict).
    tb = _registry()
    tb_ex = make_executor(tb)
    for exported in function_tools(tb, tb_ex):
        back = ToolRegistry().add_openai_agents(exported)
        assert back.schema == exported.params_json_schema
        original = tb.get(exported.name)
        assert original is not None
        if exported.name in ("book_table", "tally"):
            assert back.schema == original.schema


async def test_imported_tools_run_through_the_executor(make_executor: MakeExecutor) -> None:
    attempts = [0]

    @function_tool
    def flaky(n: int) -> int:
        """Fails once."""
        attempts[0] += 1
        if attempts[0] == 1:
            raise ConnectionError("reset by peer")
        return n * 2

    @function_tool
    def broken() -> str:
        """Always fails."""
        raise ValueError("no such file")

    @function_tool
    def whoami(ctx: AgentsToolContext[Any]) -> str:
        """The call's id, from the SDK's ToolContext."""
        return f"{ctx.tool_call_id}:{ctx.context['user']}"

    reg = ToolRegistry()
    reg.add_openai_agents(forecast, read_only=True)
    reg.add_openai_agents(afetch)
    reg.add_openai_agents(flaky, retry=RetryPolicy(max_retries=2, backoff_base=0.001))
    reg.add_openai_agents(broken)
    reg.add_openai_agents(whoami, context={"user": "ada"})
    fetch_tool = reg.get("afetch")
    assert fetch_tool is not None and fetch_tool.timeout == 2.5  # the SDK's timeout_seconds
    assert fetch_tool.is_async and not fetch_tool.read_only
    ex = make_executor(reg)
    batch = await ex.aexecute_batch(
        [
            ToolCall(id="1", name="forecast", arguments={"city": "Oslo", "days": 2}),
            ToolCall(id="2", name="afetch", arguments='{"url": "https://example.org"}'),
            ToolCall(id="3", name="forecast", arguments={"town": "Oslo", "days": 1}),
            ToolCall(id="4", name="flaky", arguments={"n": 21}),
            ToolCall(id="5", name="broken", arguments={}),
            ToolCall(id="6", name="whoami", arguments={}),
        ]
    )
    ok, fetched, invalid, retried, failed, who = batch
    assert ok.output == "Oslo: clear for 2 day(s)"
    assert fetched.output == {"url": "https://example.org", "status": 200}
    assert invalid.error_code == ErrorCode.INVALID_ARGUMENTS  # toolbus validated first
    assert retried.status == "ok" and retried.output == 42 and retried.attempts == 2
    # A failure is a failure, not the SDK's "An error occurred ..." success text.
    assert failed.status == "error" and failed.error == "ValueError: no such file"
    assert who.output == "6:ada"


async def test_a_round_trip_through_both_runs_every_call_once(
    make_executor: MakeExecutor,
) -> None:
    # An SDK tool, imported into toolbus, exported back, called by the Runner.
    calls: list[str] = []

    @function_tool
    def note(text: str) -> str:
        """Save a note."""
        calls.append(text)
        return f"saved {text}"

    reg = ToolRegistry()
    reg.add_openai_agents(note)
    ex = make_executor(reg)
    model = FakeModel([function_call("note", {"text": "hi"}, call_id="c1")], "done")
    await run(model, function_tools(reg, ex))
    assert calls == ["hi"]
    assert model.outputs(1) == {"c1": "saved hi"}


def test_tools_the_sdk_must_run_itself_are_refused() -> None:
    reg = ToolRegistry()

    @function_tool(needs_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return path

    @tool_input_guardrail
    def no_root(data: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.allow()

    @function_tool(tool_input_guardrails=[no_root])
    def guarded(path: str) -> str:
        """Guarded."""
        return path

    async def asking(ctx: Any, agent: Any) -> bool:
        return True

    @function_tool(is_enabled=asking)
    def sometimes(x: int) -> int:
        """Sometimes enabled (asked asynchronously)."""
        return x

    @function_tool
    def with_ctx(ctx: RunContextWrapper[Any], x: int) -> int:
        """Needs the run context."""
        return x

    with pytest.raises(TypeError, match="needs approval"):
        reg.add_openai_agents(delete)
    with pytest.raises(TypeError, match="guardrails"):
        reg.add_openai_agents(guarded)
    # (A sync callable is_enabled is taken now: see tests/tools/test_offered_tools.py.)
    with pytest.raises(TypeError, match="async is_enabled"):
        reg.add_openai_agents(sometimes)
    with pytest.raises(TypeError, match=r"takes a RunContextWrapper/ToolContext"):
        reg.add_openai_agents(with_ctx)
    with pytest.raises(TypeError, match=r"takes an agents\.FunctionTool"):
        reg.add_openai_agents(lambda x: x)
    assert len(reg) == 0


def test_function_tools_refuses_another_registry(make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry())
    with pytest.raises(ValueError, match="the executor's registry"):
        function_tools(ToolRegistry(), ex)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (None, TypeError),
        (1.5, TypeError),
        ("4000", TypeError),
        (False, TypeError),
        (float("nan"), TypeError),
        (0, ValueError),
        (-1, ValueError),
    ],
)
async def test_a_bad_max_length_is_refused_when_the_tools_are_made(
    make_executor: MakeExecutor, bad: Any, error: type[Exception]
) -> None:
    """Taken, it let each call run its tool, then raised out of `on_invoke_tool`
    (which the Runner does not catch) as the result was cut: the result was
    lost after the tool's effect. Now nothing is made, and nothing runs."""
    booked: list[str] = []
    reg = ToolRegistry()

    @reg.tool
    def book(what: str) -> str:
        """Book something (mutating)."""
        booked.append(what)
        return f"booked {what}"

    ex = make_executor(reg)
    with pytest.raises(error, match=r"^function_tools: max_length must be"):
        function_tools(reg, ex, max_length=bad)
    with pytest.raises(error, match=r"^function_tool_for: max_length must be"):
        function_tool_for(reg.get("book"), ex, max_length=bad)  # type: ignore[arg-type]
    assert booked == []


@pytest.mark.parametrize(
    ("name", "problem"),
    [("admin.panel", "'.' is not one"), ("x" * 100, "it is 100 characters long")],
)
def test_a_name_openai_refuses_is_refused_when_the_tools_are_made(
    make_executor: MakeExecutor, name: str, problem: str
) -> None:
    """Such a name went into the SDK's tool definitions, and failed at the API."""
    reg = ToolRegistry([ToolbusFunctionTool(lambda: 1, name="fine")])
    reg.register(ToolbusFunctionTool(lambda: 1, name=name))
    with pytest.raises(ValueError) as caught:
        function_tools(reg, make_executor(reg))
    text = str(caught.value)
    assert text.startswith(f"tool {name[:39] + '…' if len(name) > 40 else name!r}: OpenAI takes")
    assert problem in text and "Register it under another name (name=)" in text


def test_an_sdk_tool_whose_name_toolbus_refuses_says_to_pass_name() -> None:
    def search(q: str) -> str:
        return q

    source = function_tool(search, name_override="web search")
    with pytest.raises(
        ValueError, match=r"' ' is not one \(it is the Agents SDK tool's name: pass name=\)"
    ):
        ToolRegistry().add_openai_agents(source)
    assert ToolRegistry().add_openai_agents(source, name="web_search").name == "web_search"


def test_a_sync_tool_runs_on_toolbus_worker_threads(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    threads: list[str] = []

    @function_tool
    def hang(i: int) -> str:
        """Hangs until released."""
        release.wait(30)
        return "late"

    @function_tool
    def where(i: int) -> str:
        """Says where it runs."""
        threads.append(threading.current_thread().name)
        return f"ran {i}"

    @function_tool
    async def awhere(i: int) -> str:
        """Async: runs on toolbus's loop."""
        await asyncio.sleep(0)
        return f"async {i}"

    reg = ToolRegistry()
    reg.add_openai_agents(hang, read_only=True, timeout=HANG_TIMEOUT)
    reg.add_openai_agents(where, read_only=True)
    reg.add_openai_agents(awhere, read_only=True)
    assert reg.get("hang").is_async is False and reg.get("where").is_async is False  # type: ignore[union-attr]
    assert reg.get("awhere").is_async is True  # type: ignore[union-attr]
    ex = make_executor(reg)
    assert ex.execute(ToolCall(name="hang", arguments={"i": 1})).status == "timeout"
    # The hung call holds one of toolbus's threads, counted (not one of a
    # thread pool of the event loop's, unseen and soon exhausted).
    assert ex.stats().abandoned_workers == 1
    batch = ex.execute_batch([ToolCall(name="where", arguments={"i": i}) for i in range(3)])
    assert [r.output for r in batch] == ["ran 0", "ran 1", "ran 2"]
    assert not [t for t in threads if t.startswith("asyncio")]
    assert ex.execute(ToolCall(name="awhere", arguments={"i": 4})).output == "async 4"
    # The SDK's own validation still applies (and its errors are toolbus's).
    bad = ex.execute(ToolCall(name="where", arguments={"i": "x"}))
    assert bad.error_code == ErrorCode.INVALID_ARGUMENTS


async def test_injected_parameters_of_an_imported_function_are_honoured(
    make_executor: MakeExecutor,
) -> None:
    def lookup(q: str, tenant: Annotated[str, Injected]) -> str:
        """Look up, for the signed-in tenant."""
        return f"{q} for tenant {tenant}"

    reg = ToolRegistry()
    imported = reg.add_openai_agents(function_tool(lookup), read_only=True)
    assert imported.injected == ("tenant",)
    assert set(imported.schema["properties"]) == {"q"}
    assert imported.schema["required"] == ["q"]
    ex = make_executor(reg, inject={"tenant": lambda call: "tenant-4711"})
    with bus.Recorder("tool:executing", sender=ex) as rec:
        ok = await ex.aexecute(ToolCall(name="lookup", arguments={"q": "x"}))
        refused = await ex.aexecute(ToolCall(name="lookup", arguments={"q": "x", "tenant": "EVIL"}))
        (event,) = rec.wait_for("tool:executing", 1)
    assert ok.output == "x for tenant ***"  # the value reached it, masked
    assert event.arguments == {"q": "x", "tenant": "***"}
    assert refused.error_code == ErrorCode.INVALID_ARGUMENTS
    # Exported back to the SDK, the model never sees it.
    (exported,) = function_tools(reg, ex)
    assert set(exported.params_json_schema["properties"]) == {"q"}
    model = FakeModel([function_call("lookup", {"q": "y"}, call_id="c1")], "done")
    await run(model, [exported])
    assert model.outputs(1) == {"c1": "y for tenant ***"}


@pytest.mark.parametrize("given", [None, 5, b'{"a": "x"}', '["a"]', "{not json"])
async def test_arguments_that_are_not_a_json_object_come_back_as_an_error_text(
    make_executor: MakeExecutor, given: Any
) -> None:
    """Whatever `on_invoke_tool` is handed (the Runner hands JSON text; a caller
    of the tool itself may hand anything), it answers in text, never raises."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def req(a: str) -> str:
        return a

    ex = make_executor(reg)
    (tool,) = function_tools(reg, ex)
    ctx = AgentsToolContext(None, tool_name="req", tool_call_id="c1", tool_arguments="{}")
    text = await tool.on_invoke_tool(ctx, given)
    assert text.startswith("Error: ") and text.endswith("(INVALID_ARGUMENTS)")
