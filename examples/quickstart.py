"""Quickstart: your first agent's tools, run the way a model asks for them.

The tutorial (docs/tutorial.md) walks through this file. It shows:
- three tools from plain functions (`@registry.tool`): schema from type hints,
  description from the docstring, `read_only=True` on those that may run in
  parallel; a timeout, a retry, a rate limit and a cache on them;
- the model's OpenAI-style `tool_calls` (raw JSON arguments) run as one batch,
  and the tool messages to append to the conversation;
- a bad call (torn JSON, an unknown tool) coming back as a result the model
  can read, never as an exception;
- a bus subscription printing each call as it finishes, and OpenTelemetry
  spans printed on the console.

Its snippet sections, in order, are the tutorial's code blocks: copied one
after another from the page, they make this program.

Run: python examples/quickstart.py   (spans need the `otel` extra)
"""

from __future__ import annotations

# --8<-- [start:tools]
import json
from typing import Any

from toolbus import Executor, RetryPolicy, ToolError, ToolRegistry, bus
from toolbus.policies import cache, rate_limit
from toolbus.providers.openai import chat_tool_calls, chat_tool_messages

registry = ToolRegistry()
attempts: dict[str, int] = {}  # (so that one call fails once, then works)


@registry.tool(read_only=True, timeout=5, retry=RetryPolicy(max_retries=2, backoff_base=0.05))
def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """Current weather for a city."""
    attempts[city] = attempts.get(city, 0) + 1
    if city == "Lisbon" and attempts[city] == 1:
        # A transient failure: retried after a short backoff.
        raise ToolError("weather service busy", retryable=True)
    temperature = {"Oslo": 4, "Lisbon": 19, "Nairobi": 24}.get(city, 15)
    if unit == "fahrenheit":
        temperature = round(temperature * 9 / 5 + 32)
    return {"city": city, "temperature": temperature, "unit": unit}


@registry.tool(read_only=True, policies=[rate_limit("5/second"), cache(ttl=60)])
def search_docs(query: str) -> list[str]:
    """Search the travel guides; answers are cached for a minute."""
    return [f"{query}: guide page {n}" for n in (1, 2)]


@registry.tool
def add_note(text: str) -> str:
    """Save a note for later (mutating: runs alone, in order)."""
    return f"Saved: {text}"


# --8<-- [end:tools]

# --8<-- [start:calls]
# What a model's message holds: OpenAI-style tool calls, arguments as raw JSON.
tool_calls = [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
    {"id": "call_2", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Lisbon"}'}},
    {"id": "call_3", "type": "function",
     "function": {"name": "search_docs", "arguments": '{"query": "Lisbon trams"}'}},
    {"id": "call_4", "type": "function",
     "function": {"name": "add_note", "arguments": '{"text": "Pack sunglasses"}'}},
    {"id": "call_5", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Nairobi"'}},  # torn
    {"id": "call_6", "type": "function",
     "function": {"name": "book_flight", "arguments": "{}"}},  # no such tool
]  # fmt: skip
# --8<-- [end:calls]


# --8<-- [start:spans]
def console_spans(executor: Executor) -> Any:
    """One line per call's span on the console (OpenTelemetry's SDK), or None
    without it."""
    try:
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        from toolbus.observe import instrument_otel
    except ImportError:
        print("(spans: the otel extra is not installed)")
        return None

    def one_line(span: ReadableSpan) -> str:
        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        return f"  span {span.name}: {took:.1f} ms, {span.status.status_code.name}\n"

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    return instrument_otel(executor, tracer_provider=provider)


# --8<-- [end:spans]


# --8<-- [start:run]
def finished(sender: Any, *, event: Any, signal: str) -> None:
    result = event.result
    line = f"  {result.call_id} {result.name}: {result.status}, {result.attempts} attempt(s)"
    print(line + "\n", end="")  # one write: spans print from another thread


with Executor(registry, max_parallel=4, timeout=10) as executor:
    spans = console_spans(executor)
    with bus.subscribe(finished, "tool:finished", sender=executor):
        batch = executor.execute_batch(chat_tool_calls(tool_calls))
        executor.drain_events()  # every event delivered before we go on
    messages = chat_tool_messages(batch)  # append these to the conversation
    again = executor.execute_batch(chat_tool_calls(tool_calls[2:3]))
    if spans is not None:
        spans.close()
# --8<-- [end:run]

# --8<-- [start:results]
print()
for message in messages:
    print(json.dumps(message))
s = batch.summary
print()
print(f"summary: {s.succeeded}/{s.total} ok, {s.failed} failed")
print(f"Lisbon's weather took {batch.results[1].attempts} attempts")
print(f"search_docs asked again: {again.results[0].metadata.get('cache')} from the cache")
# --8<-- [end:results]
