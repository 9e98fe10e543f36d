"""Serving over MCP, each feature with the real SDK client in-process (and trace
context over stdio too): output schemas and structured content, the four
hints and their tool options, progress, cancellation, trace context.

The same over stdio through the command line: test_server.py; over HTTP:
test_server_http.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pytest

pytest.importorskip("mcp")
pytest.importorskip("opentelemetry.sdk")

from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel

from toolbus import Executor, Tool, ToolCall, ToolContext, ToolOutput, ToolRegistry, bus, tool
from toolbus.mcp import build_server, call_result, connect, connect_stdio, mcp_tool
from toolbus.observe import instrument_otel

ROOT = Path(__file__).resolve().parents[2]


class Forecast(BaseModel):
    city: str
    celsius: float


class Reading(TypedDict):  # typing's, which pydantic refuses before Python 3.12
    sensor: str
    value: NotRequired[float]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Node(BaseModel):
    name: str
    children: list[Node] = []


# -- output schemas, worked out from the return annotation --------------------------------------


def test_typed_returns_have_an_output_schema() -> None:
    def forecast() -> Forecast: ...
    def reading() -> Reading: ...
    def point() -> Point: ...
    def count() -> int: ...
    def maybe() -> Forecast | None: ...

    assert tool(forecast).output_schema == Forecast.model_json_schema(mode="serialization")
    schema = tool(reading).output_schema
    assert schema is not None
    assert schema["type"] == "object"
    assert schema["required"] == ["sensor"]
    assert tool(point).output_schema == {
        "type": "object",
        "title": "Point",
        "properties": {
            "x": {"title": "X", "type": "integer"},
            "y": {"title": "Y", "type": "integer"},
        },
        "required": ["x", "y"],
    }
    assert tool(count).output_schema == {"type": "integer"}
    assert "anyOf" in (tool(maybe).output_schema or {})


def test_untyped_returns_have_none_and_are_no_error() -> None:
    def plain(): ...  # type: ignore[no-untyped-def]
    def anything() -> Any: ...
    def rich() -> ToolOutput: ...
    def rich_or_not() -> ToolOutput | str: ...

    class Local(BaseModel):  # under `from __future__ import annotations`: a name
        a: int  # that cannot be resolved once the function has returned

    def local() -> Local: ...

    def a_class() -> type[int]: ...
    def a_function() -> Callable[[], int]: ...

    for fn in (plain, anything, rich, rich_or_not, local, a_class, a_function):
        assert tool(fn).output_schema is None, fn.__name__


def test_a_tool_subclass_declares_its_output_schema() -> None:
    class Lookup(Tool):
        name = "lookup"
        output_schema = {"type": "object", "properties": {"hit": {"type": "boolean"}}}  # noqa: RUF012

        def run(self, params: Any) -> Any:
            return {"hit": True}

    assert Lookup().output_schema == {"type": "object", "properties": {"hit": {"type": "boolean"}}}

    class Bad(Lookup):
        output_schema = {"type": "no such type"}  # noqa: RUF012

    with pytest.raises(ValueError, match="tool 'lookup': output_schema is not a valid JSON schema"):
        Bad()

    class NotADict(Lookup):
        output_schema = "object"  # type: ignore[assignment]

    with pytest.raises(TypeError, match="output_schema must be a JSON schema"):
        NotADict()


def test_output_schema_is_settable_and_made_once() -> None:
    @tool
    def count() -> int:
        return 1

    first = count.output_schema
    assert first is not None
    assert count.output_schema is first
    with pytest.raises(ValueError, match="tool 'count': output_schema is not a valid JSON schema"):
        count.output_schema = {"type": 7}
    assert count.output_schema is first
    count.output_schema = None
    assert count.output_schema is None
    assert mcp_tool(count).output_schema is None


# -- the two new tool options -------------------------------------------------------------------


def test_destructive_and_open_world_options() -> None:
    def f() -> None: ...

    plain = tool(f)
    assert (plain.destructive, plain.open_world) == (None, True)
    additive = tool(destructive=False, open_world=False)(f)
    assert (additive.destructive, additive.open_world) == (False, False)
    for option, value in [("destructive", "yes"), ("destructive", 1), ("open_world", None)]:
        with pytest.raises(TypeError, match=f"tool 'f': {option} must be True"):
            tool(**{option: value})(f)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a read-only tool cannot be destructive"):
        tool(read_only=True, destructive=True)(f)


def test_the_four_hints() -> None:
    def f() -> None: ...

    def hints(t: Tool) -> tuple[bool | None, ...]:
        a = mcp_tool(t).annotations
        assert a is not None
        return (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)

    assert hints(tool(f)) == (False, True, False, True)
    assert hints(tool(read_only=True)(f)) == (True, False, False, True)
    assert hints(tool(destructive=False)(f)) == (False, False, False, True)
    assert hints(tool(idempotent=True, open_world=False)(f)) == (False, True, True, False)


# -- in-process: the SDK's client against build_server -----------------------------------------


registry = ToolRegistry()
interrupted: list[str] = []
waiting = threading.Event()  # a `wait` is running


@registry.tool(read_only=True)
def forecast(city: str) -> Forecast:
    """Tomorrow's weather."""
    return Forecast(city=city, celsius=21.5)


@registry.tool(read_only=True)
def reading(sensor: str) -> Reading:
    """A sensor's value."""
    return {"sensor": sensor}


@registry.tool(read_only=True)
def tree() -> Node:
    """A recursive model: its schema is a $ref into $defs, so it is wrapped."""
    return Node(name="root", children=[Node(name="leaf")])


@registry.tool(read_only=True)
def names() -> list[str]:
    """A list, wrapped."""
    return ["a", "b"]


@registry.tool(read_only=True)
def liar() -> int:
    """Says int, returns text."""
    return "seven"  # type: ignore[return-value]


@registry.tool(read_only=True)
async def steps(n: int, ctx: ToolContext) -> int:
    """Progress with fractions, then with no fraction, then relayed values."""
    for i in range(1, n + 1):
        ctx.progress(f"{i}/{n}", i / n)
    ctx.progress("tidying up")
    ctx.progress("relayed", None, progress=7, total=9)
    return n


@registry.tool
async def wait(seconds: float) -> str:
    """Wait; its start (set `waiting`) and an interruption are noted."""
    waiting.set()
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        interrupted.append("wait")
        raise
    return "waited"


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[Client, Executor]]:
    """The SDK's client on `build_server`, in this task (anyio's cancel scopes
    must be left by the task that entered them: not a fixture)."""
    executor = Executor(registry, timeout=10)
    try:
        async with Client(build_server(registry, executor)) as client:
            yield client, executor
    finally:
        await asyncio.to_thread(executor.close)


async def test_in_process_output_schemas_and_structured_content() -> None:
    async with serving() as (client, _executor):
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert listed["forecast"].output_schema == Forecast.model_json_schema(mode="serialization")
        wrapped = listed["tree"].output_schema
        assert wrapped is not None
        assert wrapped["properties"] == {"result": {"$ref": "#/$defs/Node"}}
        assert set(wrapped["$defs"]) == {"Node"}  # kept at the top, where the $ref points
        # The SDK's client checks each structured content against its listed schema.
        weather = await client.call_tool("forecast", {"city": "Oslo"})
        assert weather.structured_content == {"city": "Oslo", "celsius": 21.5}
        assert (await client.call_tool("reading", {"sensor": "t"})).structured_content == {
            "sensor": "t"
        }
        node = await client.call_tool("tree", {})
        assert node.structured_content == {
            "result": {"name": "root", "children": [{"name": "leaf", "children": []}]}
        }
        listing = await client.call_tool("names", {})
        assert listing.structured_content == {"result": ["a", "b"]}
        assert listing.content == [TextContent(text='[\n  "a",\n  "b"\n]')]


async def test_an_output_its_schema_refuses_is_an_error() -> None:
    async with serving() as (client, _executor):
        result = await client.call_tool("liar", {})
        assert result.is_error
        assert result.content == [
            TextContent(
                text="Tool 'liar' returned an output its output schema refuses "
                "(output: should be of type integer) (TOOL_ERROR)"
            )
        ]
        assert result.meta is not None
        assert result.meta["toolbus/error_code"] == "TOOL_ERROR"


def test_call_result_names_where_an_output_goes_wrong() -> None:
    class Pair(Tool):
        name = "pair"
        output_schema = {  # noqa: RUF012
            "type": "object",
            "properties": {"left": {"type": "integer"}, "right": {"type": "integer"}},
            "required": ["left", "right"],
        }

        def run(self, params: Any) -> Any:
            return {"left": 1, "right": "secret-value"}

    pair = Pair()
    result = call_result(pair.execute({}), pair)
    assert result.is_error
    [text] = result.content
    assert isinstance(text, TextContent)
    assert "right: should be of type integer" in text.text
    assert "secret-value" not in text.text  # never the value: it may be a secret
    missing = call_result(Pair().execute({}).model_copy(update={"output": {"left": 1}}), pair)
    assert isinstance(missing.content[0], TextContent)
    assert "output: lacks 'right'" in missing.content[0].text


async def test_in_process_progress() -> None:
    async with serving() as (client, _executor):
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        result = await client.call_tool("steps", {"n": 2}, progress_callback=on_progress)
        assert result.structured_content == {"result": 2}
        assert seen == [
            (0.5, 1.0, "1/2"),
            (1.0, 1.0, "2/2"),
            (3.0, None, "tidying up"),  # no fraction: the count of reports so far
            (7.0, 9.0, "relayed"),  # another MCP server's values, passed on
        ]


async def test_in_process_cancellation_cancels_the_call() -> None:
    async with serving() as (client, executor):
        interrupted.clear()
        waiting.clear()
        with bus.Recorder("tool:finished", sender=executor) as recorder:
            call = asyncio.create_task(client.call_tool("wait", {"seconds": 20}))
            assert await asyncio.to_thread(waiting.wait, 10)  # the call is running on the server
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await asyncio.to_thread(recorder.wait_for, "tool:finished", timeout=5)
        [(_, finished)] = recorder.events
        assert finished.result.status == "cancelled"
        assert finished.result.error_code is not None
        assert finished.result.error_code.value == "CANCELLED"
        assert interrupted == ["wait"]
        # The server goes on serving.
        assert (await client.call_tool("wait", {"seconds": 0})).structured_content == {
            "result": "waited"
        }


# -- trace context ------------------------------------------------------------------------------


@pytest.fixture
def spans() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _trace_id(span: Any) -> str:
    return format(span.context.trace_id, "032x")


def test_a_served_call_continues_the_toolbus_clients_trace_in_process(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    served_executor = Executor(registry, timeout=10)
    instrument_otel(served_executor, tracer_provider=provider)
    local = ToolRegistry()
    try:
        with connect(build_server(registry, served_executor)) as conn:
            conn.register(local, prefix="remote_", only=["forecast"])
            with Executor(local, timeout=10) as executor:
                instrument_otel(executor, tracer_provider=provider)
                with provider.get_tracer("test").start_as_current_span("agent turn"):
                    result = executor.execute(
                        ToolCall(name="remote_forecast", arguments={"city": "Oslo"})
                    )
                assert result.status == "ok"
                executor.drain_events()
    finally:
        served_executor.close()
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    turn = by_name["agent turn"]
    assert _trace_id(by_name["execute_tool remote_forecast"]) == _trace_id(turn)
    assert _trace_id(by_name["execute_tool forecast"]) == _trace_id(turn)


def test_a_traceparent_is_attached_when_no_span_is_current() -> None:
    """Without the SDK's middleware (which makes a server span current), the
    client's context from `_meta` is attached for the call itself."""
    from opentelemetry import trace

    from toolbus.mcp._server_trace import trace_continued

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with trace_continued({"traceparent": parent}):
        current = trace.get_current_span().get_span_context()
        assert format(current.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
        assert format(current.span_id, "016x") == "b7ad6b7169203331"
    assert not trace.get_current_span().get_span_context().is_valid
    with trace_continued({"traceparent": "garbage"}):
        assert not trace.get_current_span().get_span_context().is_valid


TRACED = StdioServerParameters(
    command=sys.executable,
    args=["-m", "tests.mcp_servers.traced_server", "stdio"],
    cwd=str(ROOT),
    env={"PYTHONPATH": str(ROOT)},
)


async def test_traceparent_travels_in_meta_over_stdio(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """The SDK's client puts the current span's `traceparent` in `_meta`; the
    served call's span (in the server process) is in the client's trace."""
    provider, _ = spans
    async with Client(TRACED) as client:
        with provider.get_tracer("test").start_as_current_span("client call") as span:
            assert not (await client.call_tool("add", {"a": 1, "b": 2})).is_error
        listed = (await client.call_tool("spans", {})).structured_content
    assert listed is not None
    [served] = [s for s in listed["result"] if s["name"] == "execute_tool add"]
    assert served["trace_id"] == format(span.get_span_context().trace_id, "032x")


def test_a_toolbus_client_sends_its_trace_over_stdio(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """Through toolbus's own client (its calls cross to the session's loop)."""
    provider, exporter = spans
    local = ToolRegistry()
    with connect_stdio(
        sys.executable, TRACED.args, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}
    ) as conn:
        conn.register(local, prefix="remote_")
        with Executor(local, timeout=10) as executor:
            instrument_otel(executor, tracer_provider=provider)
            with provider.get_tracer("test").start_as_current_span("agent turn"):
                assert executor.execute(ToolCall(name="remote_add", arguments={"a": 1, "b": 2})).ok
            listed = executor.execute(ToolCall(name="remote_spans", arguments={})).output
            executor.drain_events()
    assert isinstance(listed, list)  # the tool's list, unwrapped from the server's {"result": ...}
    [served] = [s for s in listed if s["name"] == "execute_tool add"]
    mine = {s.name: s for s in exporter.get_finished_spans()}
    assert served["trace_id"] == _trace_id(mine["agent turn"])
    assert served["trace_id"] == _trace_id(mine["execute_tool remote_add"])


async def test_a_served_output_schema_that_cannot_be_resolved_gives_a_result() -> None:
    """A served output schema with an unresolvable $ref gave the client no result (review 12)."""
    from toolbus import Tool

    class Report(Tool):
        name = "report"
        description = "d"
        parameters: dict[str, Any] = {"type": "object"}  # noqa: RUF012
        read_only = True
        # Passes check_output_schema (which does not resolve references).
        output_schema: dict[str, Any] = {  # noqa: RUF012
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/Missing"}},
        }

        def run(self, params: dict[str, Any], ctx: ToolContext) -> Any:
            return {"a": 1}

    # Refused when the tool is made; and set behind the check, the call says why.
    with pytest.raises(ValueError, match=r"\$ref"):
        Report()
    Report.output_schema = None  # type: ignore[assignment]
    report = Report()
    object.__setattr__(
        report,
        "output_schema",
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
    )
    with pytest.raises(TypeError):
        report.output_schema = "x"  # type: ignore[assignment]
    registry = ToolRegistry()
    registry.register(report)
    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            result = await client.call_tool("report", {})
            assert result.is_error


async def test_served_progress_only_increases() -> None:
    """Served progress went down when a tool mixed counts and fractions (MCP: it must increase)
    (review 12)."""
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    async def mixed(ctx: ToolContext) -> str:
        ctx.progress("starting")  # sent as progress=1 (a count)
        ctx.progress("half way", 0.5)  # sent as progress=0.5: down
        ctx.progress("still half way", 0.5)  # 0.5 again
        return "ok"

    got: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        got.append(progress)

    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            await client.call_tool("mixed", {}, progress_callback=on_progress)
    # MCP: "The progress value MUST increase with each notification".
    assert len(got) == 3
    assert all(a < b for a, b in itertools.pairwise(got)), got


async def test_lone_surrogates_in_descriptions_errors_and_outputs_are_sent_as_replacements() -> (
    None
):
    """Lone surrogates in a served description, error or output were not sent as U+FFFD (review 12)."""
    registry = ToolRegistry()

    @registry.tool(read_only=True, description="lists caf\udce9")
    def odd(flag: bool = False) -> Any:
        if flag:
            raise ValueError("bad \udce9")
        return "caf\udce9"

    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            listed = await client.list_tools()
            assert listed.tools[0].description == "lists caf\ufffd"
            result = await client.call_tool("odd", {})
            assert result.content[0].text == "caf\ufffd"  # type: ignore[union-attr]
            failed = await client.call_tool("odd", {"flag": True})
            assert failed.is_error
            assert "\ufffd" in failed.content[0].text  # type: ignore[union-attr]


async def test_keys_holding_a_lone_surrogate_stay_apart_in_a_served_result() -> None:
    """Two file names that differ only in an undecodable byte became one key
    (U+FFFD) in the structured reply and its text, one value lost (review)."""
    registry = ToolRegistry()
    e9, e8 = (
        b.decode("utf-8", "surrogateescape") for b in (b"report-\xe9.txt", b"report-\xe8.txt")
    )

    @registry.tool(read_only=True)
    def sizes() -> dict[str, int]:
        """Sizes by file name."""
        return {e9: 1, e8: 2}

    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            result = await client.call_tool("sizes", {})
    expected = {"report-\\udce9.txt": 1, "report-\\udce8.txt": 2}
    assert result.structured_content == expected
    assert json.loads(result.content[0].text) == expected  # type: ignore[union-attr]


def test_mcp_serve_custom_tool_requires_its_input() -> None:
    """A served custom tool ran without its input (missing, or null) (providers and MCP review)."""
    import anyio
    from mcp import Client

    from toolbus.mcp import build_server

    registry = ToolRegistry()

    @registry.tool(type="custom", read_only=True)
    def shout(text: str) -> str:
        """Upper-case the raw input."""
        return f"ran with {text!r}"

    async def main() -> list[Any]:
        with Executor(registry, timeout=5) as executor:
            server = build_server(registry, executor)
            async with Client(server) as client:
                return [
                    await client.call_tool("shout", {}),
                    await client.call_tool("shout", {"input": None}),
                ]

    for result in anyio.run(main):
        assert result.is_error, result
