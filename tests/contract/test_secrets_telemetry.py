"""Property: no secret the executor knows of reaches a span attribute, a span event, a
metric label or a log line, whatever the tool does with it.

The secrets come in every way they can: injected by the application
(`Executor(inject=...)`, `Annotated[..., Injected]`), sent by the model under a
secret-looking key, or sent by the model for an injected parameter (refused).
The tool echoes its injected secret in its output, its error, its progress
reports and a retried failure's message.
"""

from __future__ import annotations

import io
import string
from typing import Annotated, Any

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from toolbus import (
    Executor,
    Injected,
    RetryPolicy,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
)
from toolbus.observe import instrument_otel, instrument_prometheus, log_json
from toolbus.policies import circuit_breaker

MODES = ("ok", "echo", "raise", "progress", "retry", "model-sets-injected", "unknown")

# Letters and digits after a prefix: never a piece of a number or timestamp.
secrets = st.builds(
    lambda body: f"sk-{body}",
    st.text(alphabet=string.ascii_letters + string.digits, min_size=8, max_size=24),
)


def make_registry(failures: dict[str, int]) -> ToolRegistry:
    registry = ToolRegistry()

    # A breaker that opens at a failure and lets the next call try again: its
    # events (tool:circuit-*) go to every surface too, and carry no arguments.
    @registry.tool(
        read_only=True,
        retry=RetryPolicy(max_retries=1, backoff_base=0.001),
        policies=[circuit_breaker(failures=1, reset_after=0.001)],
    )
    def act(
        mode: str,
        note: str,
        api_key: Annotated[str, Injected],
        ctx: ToolContext,
        password: str = "",
    ) -> Any:
        """Does something with a secret."""
        if mode == "echo":
            return {"seen": api_key, "password": password, "note": note}
        if mode == "raise":
            raise ToolError(f"bad key {api_key} / {password}")
        if mode == "progress":
            ctx.progress(f"using {api_key}", fraction=0.5, key=api_key, other=password)
            return f"done with {api_key}"
        if mode == "retry":
            failures[ctx.call_id] = failures.get(ctx.call_id, 0) + 1
            if failures[ctx.call_id] == 1:
                raise ConnectionError(f"refused for {api_key}")
            return api_key
        return "ok"

    @registry.tool(read_only=True)
    def whoami(account_ref: Annotated[str, Injected]) -> str:
        """An injected parameter with a plain name."""
        return f"you are {account_ref}"

    return registry


def test_no_secret_reaches_spans_metrics_or_logs() -> None:
    holder = [""]
    failures: dict[str, int] = {}
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    prom = CollectorRegistry()
    lines = io.StringIO()
    ex = Executor(
        make_registry(failures),
        name="secretive",
        inject={"api_key": lambda call: holder[0], "account_ref": lambda call: holder[0]},
    )
    handles = [
        instrument_otel(ex, tracer_provider, meter_provider, capture_content=True),
        instrument_prometheus(ex, prom),
        log_json(ex, lines),
    ]
    counter = iter(range(1_000_000))

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        secret=secrets,
        model_secret=secrets,
        mode=st.sampled_from(MODES),
        note=st.text(max_size=20),
        batch=st.booleans(),
    )
    def check(secret: str, model_secret: str, mode: str, note: str, batch: bool) -> None:
        holder[0] = secret
        exporter.clear()
        lines.seek(0)
        lines.truncate()
        n = next(counter)
        if mode == "model-sets-injected":
            calls = [
                ToolCall(
                    id=f"m{n}",
                    name="act",
                    arguments={"mode": "ok", "note": note, "api_key": model_secret},
                ),
                ToolCall(id=f"w{n}", name="whoami", arguments={"account_ref": model_secret}),
                ToolCall(id=f"v{n}", name="whoami"),
            ]
        elif mode == "unknown":
            calls = [ToolCall(id=f"u{n}", name="act_now", arguments={"password": model_secret})]
        else:
            args = {"mode": mode, "note": note, "password": model_secret}
            calls = [ToolCall(id=f"c{n}", name="act", arguments=args)]
        if batch:
            ex.execute_batch(calls)
        else:
            for call in calls:
                ex.execute(call)
        assert ex.drain_events()
        seen = [lines.getvalue(), generate_latest(prom).decode()]
        for span in exporter.get_finished_spans():
            seen.append(span.name)
            seen.append(repr(dict(span.attributes or {})))
            seen.append(repr(span.status.description))
            seen.extend(f"{e.name} {dict(e.attributes or {})!r}" for e in span.events)
        data = reader.get_metrics_data()
        seen.append(data.to_json() if data is not None else "")
        text = "\n".join(seen)
        assert "execute_tool" in text and "secretive" in text
        if mode != "unknown":  # masked values were seen, as ***
            assert "***" in text
        for value in (secret, model_secret):
            assert value not in text, (mode, batch)

    try:
        check()
    finally:
        for handle in handles:
            handle.close()
        ex.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()
