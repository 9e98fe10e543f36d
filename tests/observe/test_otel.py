"""OpenTelemetry: one span per call under the caller's span, GenAI attributes, the
duration histogram; checked with the SDK's in-memory span exporter and metric reader."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, RetryPolicy, ToolCall, ToolError, ToolRegistry
from toolbus.observe import OtelInstrumentation, instrument_otel

SECRET = "sk-otel-5c1e7d0a93b2"


class Otel:
    """A tracer provider and a meter provider writing to memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("the-caller")
        self.handles: list[OtelInstrumentation] = []

    def instrument(self, ex: Executor, **options: Any) -> OtelInstrumentation:
        handle = instrument_otel(ex, self.tracer_provider, self.meter_provider, **options)
        self.handles.append(handle)
        return handle

    def spans(self, prefix: str = "execute_tool") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def by_call(self) -> dict[str, ReadableSpan]:
        return {str(s.attributes["gen_ai.tool.call.id"]): s for s in self.spans()}

    def durations(self) -> list[Any]:
        points = []
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "gen_ai.execute_tool.duration":
                        assert metric.unit == "s"
                        points.extend(metric.data.data_points)
        return points


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    for handle in o.handles:
        handle.close()
    o.tracer_provider.shutdown()
    o.meter_provider.shutdown()


def make_registry(release: threading.Event | None = None) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def get_weather(city: str, api_key: str = "") -> dict[str, Any]:
        """Forecast for a city."""
        return {"city": city, "sky": "clear"}

    @registry.tool
    def book(restaurant: str) -> str:
        """Book a table."""
        raise ToolError(f"fully booked: {restaurant}")

    flaky_calls: list[int] = []

    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=2, backoff_base=0.001))
    def flaky() -> str:
        """Fails once, then works."""
        flaky_calls.append(1)
        if len(flaky_calls) == 1:
            raise ConnectionError("try again")
        return "fine"

    @registry.tool(read_only=True, timeout=0.2)
    def slow() -> str:
        """Hangs past its deadline."""
        if release is not None:
            release.wait(5)
        return "late"

    @registry.tool(read_only=True)
    async def aweather(city: str) -> str:
        """Async forecast."""
        await asyncio.sleep(0)
        return f"{city}: clear"

    return registry


def test_a_span_per_call_with_the_genai_attributes(make_executor: MakeExecutor, otel: Otel) -> None:
    ex = make_executor(make_registry(), name="agent")
    handle = otel.instrument(ex)
    ex.execute(ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"}))
    ex.drain_events()
    (span,) = otel.spans()
    assert span.name == "execute_tool get_weather"
    assert span.kind is SpanKind.INTERNAL
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "toolbus"
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.description": "Forecast for a city.",
        "gen_ai.tool.type": "function",
        "toolbus.executor": "agent",
        "toolbus.status": "ok",
        "toolbus.attempts": 1,
    }
    assert span.status.status_code is StatusCode.UNSET
    (attempt,) = span.events
    assert attempt.name == "toolbus.attempt"
    assert attempt.attributes is not None
    assert attempt.attributes["toolbus.attempt"] == 1
    assert attempt.attributes["toolbus.status"] == "ok"
    assert span.start_time is not None and span.end_time is not None
    assert span.start_time <= attempt.timestamp <= span.end_time
    handle.close()


def test_failure_timeout_retry_and_unknown_tools(
    make_executor: MakeExecutor, otel: Otel, release: threading.Event
) -> None:
    ex = make_executor(make_registry(release))
    with otel.instrument(ex):
        ex.execute(ToolCall(id="err", name="book", arguments={"restaurant": "Maaemo"}))
        ex.execute(ToolCall(id="retry", name="flaky"))
        ex.execute(ToolCall(id="late", name="slow"))
        ex.execute(ToolCall(id="invented", name="get_wether", arguments={"city": "Oslo"}))
        ex.execute(ToolCall(id="bad", name="get_weather", arguments={"town": "Oslo"}))
        ex.drain_events()
    spans = otel.by_call()

    err = spans["err"]
    assert err.status.status_code is StatusCode.ERROR
    assert err.status.description == "TOOL_ERROR"  # no error text without capture_content
    assert err.attributes is not None
    assert err.attributes["error.type"] == "TOOL_ERROR"
    assert err.attributes["toolbus.status"] == "error"
    assert err.attributes["toolbus.error_code"] == "TOOL_ERROR"
    assert [e.attributes["toolbus.status"] for e in err.events if e.attributes] == ["error"]

    retry = spans["retry"]
    assert retry.attributes is not None
    assert retry.attributes["toolbus.attempts"] == 2
    assert retry.attributes["toolbus.status"] == "ok"
    assert "error.type" not in retry.attributes
    assert [e.name for e in retry.events] == ["toolbus.attempt", "toolbus.retry", "toolbus.attempt"]
    first, again, second = retry.events
    assert first.attributes is not None and again.attributes is not None
    assert second.attributes is not None
    assert (first.attributes["toolbus.attempt"], first.attributes["toolbus.status"]) == (1, "error")
    assert again.attributes["toolbus.attempt"] == 2
    assert "toolbus.retry.delay" in again.attributes
    assert (second.attributes["toolbus.attempt"], second.attributes["toolbus.status"]) == (2, "ok")
    assert first.timestamp <= again.timestamp <= second.timestamp

    late = spans["late"]
    assert late.attributes is not None
    assert late.attributes["error.type"] == ErrorCode.EXECUTION_TIMEOUT.value
    assert late.attributes["toolbus.status"] == "timeout"
    assert [e.attributes["toolbus.status"] for e in late.events if e.attributes] == ["timeout"]

    invented = spans["invented"]
    assert invented.name == "execute_tool <unknown>"
    assert invented.attributes is not None
    assert invented.attributes["gen_ai.tool.name"] == "<unknown>"
    assert invented.attributes["error.type"] == "TOOL_NOT_FOUND"
    assert invented.attributes["toolbus.attempts"] == 0
    assert "gen_ai.tool.description" not in invented.attributes
    assert "get_wether" not in str(dict(invented.attributes))

    bad = spans["bad"]
    assert bad.attributes is not None
    assert bad.attributes["error.type"] == "INVALID_ARGUMENTS"
    assert bad.status.status_code is StatusCode.ERROR


def _assert_children_of(parent: ReadableSpan, spans: list[ReadableSpan]) -> None:
    assert spans
    for span in spans:
        assert span.parent is not None, span.name
        assert span.parent.span_id == parent.context.span_id
        assert span.context.trace_id == parent.context.trace_id
        # Its times are the events', within the caller's span.
        assert parent.start_time is not None and parent.end_time is not None
        assert span.start_time is not None and span.end_time is not None
        assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time


def test_parent_is_the_callers_span_for_execute_and_execute_batch(
    make_executor: MakeExecutor, otel: Otel
) -> None:
    ex = make_executor(make_registry())
    otel.instrument(ex)
    with otel.tracer.start_as_current_span("turn-1"):
        ex.execute(ToolCall(id="one", name="get_weather", arguments={"city": "Oslo"}))
    with otel.tracer.start_as_current_span("turn-2"):
        ex.execute_batch(
            [
                ToolCall(id="b1", name="get_weather", arguments={"city": "Oslo"}),
                ToolCall(id="b2", name="aweather", arguments={"city": "Bergen"}),
                ToolCall(id="b3", name="nope"),
            ]
        )
    ex.execute(ToolCall(id="orphan", name="get_weather", arguments={"city": "Oslo"}))
    ex.drain_events()
    (turn1,) = otel.spans("turn-1")
    (turn2,) = otel.spans("turn-2")
    spans = otel.by_call()
    _assert_children_of(turn1, [spans["one"]])
    _assert_children_of(turn2, [spans["b1"], spans["b2"], spans["b3"]])
    assert spans["orphan"].parent is None  # no span was current: a trace of its own
    assert spans["orphan"].context.trace_id not in {turn1.context.trace_id, turn2.context.trace_id}


async def test_parent_is_the_callers_span_for_aexecute_and_aexecute_batch(
    make_executor: MakeExecutor, otel: Otel
) -> None:
    ex = make_executor(make_registry())
    otel.instrument(ex)

    async def turn(n: int) -> None:
        # Tasks run at once: each call must find its own task's span.
        with otel.tracer.start_as_current_span(f"aturn-{n}"):
            await asyncio.sleep(0)
            await ex.aexecute(ToolCall(id=f"s{n}", name="aweather", arguments={"city": "Oslo"}))
            await ex.aexecute_batch(
                [
                    ToolCall(id=f"x{n}", name="get_weather", arguments={"city": "Oslo"}),
                    ToolCall(id=f"y{n}", name="aweather", arguments={"city": "Bergen"}),
                ]
            )

    await asyncio.gather(*(turn(n) for n in range(4)))
    assert await asyncio.to_thread(ex.drain_events)
    spans = otel.by_call()
    assert len(spans) == 12
    for n in range(4):
        (parent,) = otel.spans(f"aturn-{n}")
        _assert_children_of(parent, [spans[f"s{n}"], spans[f"x{n}"], spans[f"y{n}"]])


def test_parentage_from_threads_and_a_nested_call(make_executor: MakeExecutor, otel: Otel) -> None:
    registry = make_registry()
    ex = make_executor(registry)

    @registry.tool(read_only=True)
    def outer() -> str:
        """Calls another tool through the same executor."""
        return str(ex.execute(ToolCall(id="inner", name="get_weather", arguments={"city": "A"})))

    otel.instrument(ex)

    def worker(n: int) -> None:
        with otel.tracer.start_as_current_span(f"thread-{n}"):
            ex.execute(ToolCall(id=f"t{n}", name="get_weather", arguments={"city": "Oslo"}))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with otel.tracer.start_as_current_span("nesting"):
        ex.execute(ToolCall(id="outer", name="outer"))
    ex.drain_events()
    spans = otel.by_call()
    for n in range(6):
        (parent,) = otel.spans(f"thread-{n}")
        _assert_children_of(parent, [spans[f"t{n}"]])
    # A nested call runs in the outer call's copy of the caller's context.
    (nesting,) = otel.spans("nesting")
    _assert_children_of(nesting, [spans["outer"], spans["inner"]])


def test_content_only_when_asked_and_masked(make_executor: MakeExecutor, otel: Otel) -> None:
    ex = make_executor(make_registry())
    with otel.instrument(ex):
        ex.execute(ToolCall(id="quiet", name="get_weather", arguments={"city": "Oslo"}))
        ex.drain_events()
    with otel.instrument(ex, capture_content=True):
        args = {"city": "Oslo", "api_key": SECRET}
        ex.execute(ToolCall(id="loud", name="get_weather", arguments=args))
        ex.execute(ToolCall(id="fails", name="book", arguments={"restaurant": "Maaemo"}))
        bad_args = {"town": "Oslo", "password": SECRET}
        ex.execute(ToolCall(id="rejected", name="get_weather", arguments=bad_args))
        ex.drain_events()
    spans = otel.by_call()
    quiet = dict(spans["quiet"].attributes or {})
    assert "gen_ai.tool.call.arguments" not in quiet
    assert "gen_ai.tool.call.result" not in quiet
    loud = dict(spans["loud"].attributes or {})
    assert loud["gen_ai.tool.call.arguments"] == '{"city":"Oslo","api_key":"***"}'
    assert loud["gen_ai.tool.call.result"] == '{"city":"Oslo","sky":"clear"}'
    fails = spans["fails"]
    assert fails.status.description == "fully booked: Maaemo"
    assert "gen_ai.tool.call.result" not in (fails.attributes or {})
    rejected = dict(spans["rejected"].attributes or {})
    assert rejected["gen_ai.tool.call.arguments"] == '{"town":"Oslo","password":"***"}'
    assert "gen_ai.tool.call.result" not in rejected
    for span in otel.spans():
        assert SECRET not in str(dict(span.attributes or {}))
        assert SECRET not in str(span.status.description)


@pytest.mark.parametrize("value", ["false", "true", 1, "yes"])
def test_content_is_captured_only_with_true_itself(
    make_executor: MakeExecutor, otel: Otel, value: Any
) -> None:
    """`capture_content="false"` (read from the environment, say) captured
    everything: it was read for its truthiness (issue 21). Only True captures."""
    ex = make_executor(make_registry())
    with otel.instrument(ex, capture_content=value):
        ex.execute(ToolCall(id="quiet", name="get_weather", arguments={"city": "Oslo"}))
        ex.drain_events()
    quiet = dict(otel.by_call()["quiet"].attributes or {})
    assert "gen_ai.tool.call.arguments" not in quiet
    assert "gen_ai.tool.call.result" not in quiet


def test_the_duration_histogram(make_executor: MakeExecutor, otel: Otel) -> None:
    ex = make_executor(make_registry(), name="histo")
    otel.instrument(ex)
    for i in range(3):
        ex.execute(ToolCall(id=f"w{i}", name="get_weather", arguments={"city": "Oslo"}))
    ex.execute(ToolCall(id="e", name="book", arguments={"restaurant": "x"}))
    ex.execute(ToolCall(id="u", name="made_up"))
    ex.drain_events()
    points = {
        (p.attributes["gen_ai.tool.name"], p.attributes.get("error.type")): p
        for p in otel.durations()
    }
    assert set(points) == {
        ("get_weather", None),
        ("book", "TOOL_ERROR"),
        ("<unknown>", "TOOL_NOT_FOUND"),
    }
    ok = points[("get_weather", None)]
    assert ok.count == 3
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
    assert ok.attributes["toolbus.executor"] == "histo"
    assert ok.explicit_bounds[0] == 0.01 and ok.explicit_bounds[-1] == pytest.approx(81.92)
    spans = otel.by_call()
    total = sum((spans[f"w{i}"].end_time or 0) - (spans[f"w{i}"].start_time or 0) for i in range(3))
    assert ok.sum == pytest.approx(total / 1e9, rel=1e-3, abs=1e-6)


def test_mcp_tools_are_extensions(make_executor: MakeExecutor, otel: Otel) -> None:
    pytest.importorskip("mcp")
    import mcp_types

    from toolbus.mcp import MCPTool

    class Port:
        name = "remote"

    spec = mcp_types.Tool(
        name="remote_search",
        description="Search, on a server.",
        input_schema={
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
        },
    )
    registry = ToolRegistry()
    registry.register(MCPTool(spec, Port()))  # type: ignore[arg-type]
    ex = make_executor(registry)
    otel.instrument(ex)
    # Rejected before it runs (q is missing): no server needed for its span.
    ex.execute(ToolCall(id="m", name="remote_search", arguments={}))
    ex.drain_events()
    attributes = dict(otel.by_call()["m"].attributes or {})
    assert attributes["gen_ai.tool.type"] == "extension"
    assert attributes["gen_ai.tool.description"] == "Search, on a server."


def test_two_executors_and_closing(make_executor: MakeExecutor, otel: Otel) -> None:
    a = make_executor(make_registry(), name="a")
    b = make_executor(make_registry(), name="b")
    ha, hb = otel.instrument(a), otel.instrument(b)
    a.execute(ToolCall(id="from-a", name="get_weather", arguments={"city": "Oslo"}))
    b.execute(ToolCall(id="from-b", name="get_weather", arguments={"city": "Oslo"}))
    a.drain_events()
    b.drain_events()
    spans = otel.by_call()
    assert spans["from-a"].attributes is not None
    assert spans["from-b"].attributes is not None
    assert spans["from-a"].attributes["toolbus.executor"] == "a"
    assert spans["from-b"].attributes["toolbus.executor"] == "b"
    ha.close()
    ha.close()  # twice: nothing
    assert ha.closed
    assert a._submit_hooks == ()
    a.execute(ToolCall(id="after", name="get_weather", arguments={"city": "Oslo"}))
    a.drain_events()
    assert "after" not in otel.by_call()
    hb.close()
    assert repr(hb) == "<OtelInstrumentation of 'b', closed>"


def test_a_call_in_flight_at_close_leaves_no_span_and_nothing_behind(
    make_executor: MakeExecutor, otel: Otel, release: threading.Event
) -> None:
    registry = ToolRegistry()
    started = threading.Event()

    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=0.001))
    def wait() -> str:
        if not started.is_set():
            started.set()
            raise ConnectionError("again")
        release.wait(5)
        return "done"

    ex = make_executor(registry)
    handle = otel.instrument(ex)
    done: list[Any] = []
    t = threading.Thread(target=lambda: done.append(ex.execute(ToolCall(id="w", name="wait"))))
    t.start()
    assert started.wait(5)
    wait_until(lambda: ex.stats().retries == 1, what="the retry")
    ex.drain_events()
    assert handle._pending  # the first attempt's span events wait for the call to finish
    handle.close(timeout=1)
    assert (handle._pending, handle._singles, handle._batches) == ({}, {}, {})
    release.set()
    t.join()
    assert done[0].status == "ok"
    ex.drain_events()
    assert otel.spans() == []


def test_concurrent_calls_with_the_same_id_each_get_their_own_parent(
    make_executor: MakeExecutor, otel: Otel
) -> None:
    """Submissions are matched to results by the call (its run), not its id: a
    long call and a short one both named `call_0` keep their own parents and
    start times (review 10)."""
    registry = ToolRegistry()
    long_running = threading.Event()
    short_done = threading.Event()

    @registry.tool(read_only=True)
    def work(which: str) -> str:
        """Works for a while."""
        if which == "long":  # runs until the short call has ended
            long_running.set()
            assert short_done.wait(10)
        return "ok"

    ex = make_executor(registry, max_parallel=4)
    otel.instrument(ex, capture_content=True)  # the arguments tell the spans apart
    parents: dict[str, int] = {}
    submitted: dict[str, int] = {}
    returned: dict[str, int] = {}

    def conversation(which: str) -> None:
        if which == "short":  # the short call runs inside the long one's span
            assert long_running.wait(10)
        with otel.tracer.start_as_current_span(which) as span:
            parents[which] = span.get_span_context().span_id
            # In the spans' own units (time.time() as int ns), so comparable.
            submitted[which] = int(time.time() * 1e9)
            ex.execute(ToolCall(id="call_0", name="work", arguments={"which": which}))
            returned[which] = int(time.time() * 1e9)
        if which == "short":
            short_done.set()

    threads = [threading.Thread(target=conversation, args=(w,)) for w in ("long", "short")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ex.drain_events()
    spans = otel.spans()
    assert len(spans) == 2
    starts: dict[str, int] = {}
    for span in spans:
        assert span.start_time is not None and span.end_time is not None
        which = json.loads(str((span.attributes or {})["gen_ai.tool.call.arguments"]))["which"]
        assert span.parent is not None and span.parent.span_id == parents[which]
        starts[which] = span.start_time
    assert sorted(starts) == ["long", "short"]
    # Each span starts at its own call's submission: the long call's before the
    # short one was submitted, the short call's after, each before its return.
    assert submitted["long"] <= starts["long"] < submitted["short"]
    assert submitted["short"] <= starts["short"] <= returned["short"]


def test_a_deferred_call_is_not_an_error(make_executor: MakeExecutor, otel: Otel) -> None:
    """A call waiting for an approval (APPROVAL_REQUIRED) feeds no error rate."""
    from toolbus.policies import requires_approval

    registry = ToolRegistry()

    @registry.tool(policies=[requires_approval(reason="it deletes")])
    def delete(path: str) -> str:
        """Deletes a file."""
        return "gone"

    ex = make_executor(registry)
    otel.instrument(ex, capture_content=True)
    assert (
        ex.execute(ToolCall(id="d", name="delete", arguments={"path": "/x"})).status == "deferred"
    )
    ex.drain_events()
    (span,) = otel.spans()
    assert span.status.status_code is StatusCode.UNSET
    attributes = dict(span.attributes or {})
    assert attributes["toolbus.status"] == "deferred"
    assert attributes["toolbus.error_code"] == "APPROVAL_REQUIRED"
    assert "error.type" not in attributes and "gen_ai.tool.call.result" not in attributes
    (point,) = otel.durations()
    assert "error.type" not in point.attributes


def test_an_executor_is_instrumented_once_at_a_time(
    make_executor: MakeExecutor, otel: Otel
) -> None:
    ex = make_executor(make_registry(), name="twice")
    first = otel.instrument(ex)
    with pytest.raises(ValueError, match="'twice' is instrumented already"):
        otel.instrument(ex)
    assert len(ex._submit_hooks) == 1  # the refused one left nothing behind
    ex.execute(ToolCall(id="one", name="get_weather", arguments={"city": "Oslo"}))
    ex.drain_events()
    assert [s.attributes["gen_ai.tool.call.id"] for s in otel.spans() if s.attributes] == ["one"]
    first.close()
    otel.instrument(ex)  # closed: it may be instrumented anew


def test_a_lone_surrogate_in_a_call_id_is_written_as_a_replacement(
    make_executor: MakeExecutor, otel: Otel
) -> None:
    """An exporter encodes attributes as UTF-8: a model's lone surrogate is U+FFFD."""
    bad = json.loads('"call\\ud800"')
    ex = make_executor(make_registry(), name=json.loads('"ex\\udfff"'))
    otel.instrument(ex)
    ex.execute(ToolCall(id=bad, name="get_weather", arguments={"city": "Oslo"}))
    ex.drain_events()
    (span,) = otel.spans()
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.tool.call.id"] == "call\ufffd"
    assert attributes["toolbus.executor"] == "ex\ufffd"


def test_otel_histogram_survives_a_failing_span_processor() -> None:
    """A span processor raising in on_end lost the duration histogram's point too (review 10b).

    The span and the histogram point are independent signals; a span
    processor (a vendor exporter's) raising in on_end makes `_finished` stop
    before `histogram.record`, so no call is measured at all.
    """
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from toolbus import bus
    from toolbus.observe import instrument_otel

    class Failing(SpanProcessor):
        def on_end(self, span: object) -> None:
            raise RuntimeError("exporter down")

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def work() -> str:
        """Works."""
        return "ok"

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(Failing())
    reader = InMemoryMetricReader()
    with Executor(reg) as ex:
        handle = instrument_otel(
            ex, tracer_provider=tracer_provider, meter_provider=MeterProvider([reader])
        )
        with bus.Recorder(bus.FINISHED, sender=ex) as rec:
            for i in range(3):
                assert ex.execute(ToolCall(id=f"c{i}", name="work", arguments={})).ok
            rec.wait_for(bus.FINISHED, 3, timeout=5)
        handle.close()
    data = reader.get_metrics_data()
    points = (
        [
            p.count
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "gen_ai.execute_tool.duration"
            for p in m.data.data_points
        ]
        if data is not None
        else []
    )
    assert sum(points) == 3, points
