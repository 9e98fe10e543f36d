"""Quickstart: register tools, run one call and a batch, format results for the model.

Shows:
- `@registry.tool` on plain functions (schema from type hints, description from the
  docstring), with `read_only=True` on tools that may run in parallel;
- `Executor.execute` for one call, with the model's raw JSON arguments;
- `Executor.execute_batch` for several calls: read-only calls run together, a
  mutating call waits for the calls before it and holds back the calls after it;
- how a bad call comes back as a result the model can read, not as an exception;
- `format_result_for_context`, the text to append to the conversation.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import time

from toolbus import (
    Attachment,
    Executor,
    ToolCall,
    ToolOutput,
    ToolRegistry,
    format_result_for_context,
)

registry = ToolRegistry()

# Shared by the tools below; a real agent would talk to a service instead.
NOTES: list[str] = []


@registry.tool(read_only=True, timeout=5)
def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """Current weather for a city."""
    time.sleep(0.2)  # stands in for a network round trip
    temperature = {"Oslo": 4, "Lisbon": 19, "Nairobi": 24}.get(city, 15)
    if unit == "fahrenheit":
        temperature = round(temperature * 9 / 5 + 32)
    return {"city": city, "temperature": temperature, "unit": unit}


@registry.tool(read_only=True)
def get_map(city: str) -> ToolOutput:
    """A map of a city, as a link the client can render."""
    time.sleep(0.2)
    return ToolOutput(
        content=f"Map of {city} attached.",
        attachments=(Attachment(type="image", url=f"https://maps.example/{city}.png", title=city),),
    )


@registry.tool
def add_note(text: str) -> str:
    """Save a note for later."""
    NOTES.append(text)
    return f"Saved note #{len(NOTES)}"


def show(title: str, text: str) -> None:
    print(f"== {title}")
    print(text)
    print()


def main() -> None:
    print("Tools offered to the model:", ", ".join(registry.names()))
    print()

    with Executor(registry, max_parallel=4, timeout=10) as executor:
        # One call, with arguments as the model wrote them (raw JSON text).
        result = executor.execute(
            ToolCall(name="get_weather", arguments='{"city": "Oslo", "unit": "fahrenheit"}')
        )
        show("one call", format_result_for_context(result))

        # A batch as one model turn might emit it; plain dicts work as calls too.
        batch = executor.execute_batch(
            [
                ToolCall(name="get_weather", arguments={"city": "Lisbon"}),
                ToolCall(name="get_map", arguments={"city": "Lisbon"}),
                ToolCall(name="add_note", arguments={"text": "Pack sunglasses"}),
                {"name": "get_weather", "arguments": '{"city": "Nairobi"'},  # torn JSON
                {"name": "book_flight", "arguments": {"to": "Lisbon"}},  # no such tool
            ]
        )
        for r in batch:
            show(f"batch: {r.name} ({r.call_id})", format_result_for_context(r))

        s = batch.summary
        # The two read-only calls ran together, so the batch took about one 0.2 s
        # sleep rather than two.
        print(
            f"summary: {s.succeeded}/{s.total} ok, {s.failed} failed, "
            f"{s.read_only} read-only, {s.mutating} mutating, {s.duration:.2f}s"
        )
        stats = executor.stats()
        print(
            f"stats: ok={stats.ok} rejected={stats.rejected} peak_in_flight={stats.peak_in_flight}"
        )


if __name__ == "__main__":
    main()
