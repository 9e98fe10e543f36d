"""Watching executors: OpenTelemetry traces and metrics, Prometheus metrics, JSON logs;
a live terminal dashboard and a status server with a live page.

Each surface is a subscriber to one executor's events (its own queue on the
delivery pool: it never slows the tools) and returns a handle with `close()`:

    from toolbus.observe import instrument_otel, instrument_prometheus, log_json

    otel = instrument_otel(executor)                  # pip install 'toolbus[otel]'
    metrics = instrument_prometheus(executor)         # pip install 'toolbus[prometheus]'
    audit = log_json(executor, "audit.jsonl", signals=("tool:finished",))

    from toolbus.observe import live, serve_status

    with live(executor):                              # the dashboard in this terminal
        ...
    with serve_status(executor) as server:            # pip install 'toolbus[web]'
        print(server.url)                             # /, /status, /events, /metrics

Importing this package imports neither OpenTelemetry nor prometheus_client,
nor rich's live display, Starlette or uvicorn: each is imported by the function
that needs it. Every surface names the executor (`Executor(name=...)`) and
shows a tool the registry does not know as `<unknown>`. See docs/observe.md.
"""

from ._live import LiveView, live
from ._logs import ALL, JsonLog, log_json
from ._names import UNKNOWN_TOOL
from ._otel import OtelInstrumentation, instrument_otel
from ._prometheus import PrometheusInstrumentation, instrument_prometheus
from ._server import StatusServer, serve_status
from ._subscription import Handle

__all__ = [
    "ALL",
    "UNKNOWN_TOOL",
    "Handle",
    "JsonLog",
    "LiveView",
    "OtelInstrumentation",
    "PrometheusInstrumentation",
    "StatusServer",
    "instrument_otel",
    "instrument_prometheus",
    "live",
    "log_json",
    "serve_status",
]
