"""Run an MCP server's tools through toolbus: the real `mcp-server-time`, over stdio.

toolbus starts the server as a subprocess (nothing goes over the network),
lists its tools and registers each one as a toolbus tool. From then on they are
tools like any other: validated against the server's JSON schema, run with a
timeout, retried by policy, scheduled by their `readOnlyHint`, observed on the
bus, and their failures come back as results the model can read.

Needs the `mcp` extra and `pip install mcp-server-time`.
"""

from __future__ import annotations

import sys

from toolbus import Executor, ToolCall, ToolRegistry, bus, format_result_for_context
from toolbus.mcp import connect_stdio

registry = ToolRegistry()


@registry.tool
def add_note(text: str) -> str:
    """Save a note (a local, mutating tool beside the MCP ones)."""
    return f"Saved note: {text}"


def on_finished(sender: Executor, *, event: bus.CallFinished) -> None:
    print(f"  [bus] {event.tool} -> {event.result.status}")


with connect_stdio(sys.executable, ["-m", "mcp_server_time", "--local-timezone", "UTC"]) as server:
    tools = server.register(registry, prefix="time_", timeout=5)
    print(f"Connected to MCP server {server.name!r}; it offers:")
    for t in tools:
        kind = "read-only" if t.read_only else "mutating"
        required = ", ".join(t.schema.get("required", []))
        print(f"  {t.name} ({kind}; requires {required})")
    print("Tools offered to the model:", ", ".join(registry.names()))

    with Executor(registry, max_parallel=4) as executor:
        bus.signal("tool:finished").connect(on_finished, sender=executor, weak=False)
        batch = executor.execute_batch(
            [
                # Raw JSON text, as a model emits it.
                ToolCall(id="1", name="time_get_current_time", arguments='{"timezone": "UTC"}'),
                ToolCall(
                    id="2",
                    name="time_convert_time",
                    arguments={
                        "source_timezone": "UTC",
                        "time": "12:00",
                        "target_timezone": "Asia/Tokyo",
                    },
                ),
                # The server reports an error: a result, not an exception.
                ToolCall(
                    id="3", name="time_get_current_time", arguments={"timezone": "Mars/Olympus"}
                ),
                # toolbus checks the server's schema before the server sees the call.
                ToolCall(id="4", name="time_convert_time", arguments={"time": "12:00"}),
                ToolCall(id="5", name="add_note", arguments={"text": "call Tokyo at 21:00"}),
            ]
        )
        executor.drain_events()

    print()
    now, converted, bad_zone, bad_args, note = batch
    print(f"UTC now is a {now.output['day_of_week']} (timezone {now.output['timezone']})")
    target = converted.output["target"]
    print(
        f"12:00 UTC is {target['datetime'][11:16]} in {target['timezone']} "
        f"({converted.output['time_difference']})"
    )
    print(format_result_for_context(bad_zone, include_metadata=False))
    print(format_result_for_context(bad_args, include_metadata=False))
    print(note.output)
    s = batch.summary
    print(
        f"summary: {s.succeeded}/{s.total} ok, {s.failed} failed, "
        f"{s.read_only} read-only, {s.mutating} mutating"
    )

print("server connection closed:", server.closed)
