"""A registry served with OpenTelemetry on: the served calls' spans are kept in
memory, and the `spans` tool lists them (a client in another process cannot
see them otherwise).

    python -m tests.mcp_servers.traced_server stdio
    python -m tests.mcp_servers.traced_server http    # any free port; the URL on stderr
"""

from __future__ import annotations

import sys
from functools import partial

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from toolbus import Executor, ToolRegistry
from toolbus.mcp import aserve_http, aserve_stdio
from toolbus.observe import instrument_otel

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))

registry = ToolRegistry()
executor = Executor(registry, timeout=10)


@registry.tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@registry.tool(read_only=True)
def spans() -> list[dict[str, str | None]]:
    """The spans finished so far: name, trace id and parent span id (hex)."""
    executor.drain_events(5)  # a call's span is made when its tool:finished is delivered
    return [
        {
            "name": s.name,
            "trace_id": format(s.context.trace_id, "032x") if s.context else None,
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
        }
        for s in exporter.get_finished_spans()
    ]


def _announce(url: str) -> None:
    print(url, file=sys.stderr, flush=True)


def main() -> None:
    instrument_otel(executor, tracer_provider=provider)
    if sys.argv[1:] == ["http"]:
        serve = partial(aserve_http, registry, port=0, executor=executor, on_ready=_announce)
    else:
        serve = partial(aserve_stdio, registry, executor=executor)
    try:
        anyio.run(serve)
    finally:
        executor.close()


if __name__ == "__main__":
    main()
