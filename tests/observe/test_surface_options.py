"""The observability surfaces' options and `close(timeout=)`: a bad value is a
clear error naming it, raised before anything changes, whether or not events
are pending; a short valid timeout leaves the status server's thread to end
cleanly. The status server is a real uvicorn on loopback, spoken to with httpx.
"""

from __future__ import annotations

import io
import math
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")
pytest.importorskip("prometheus_client", reason="the web extra is not installed")
pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.observe import (
    instrument_otel,
    instrument_prometheus,
    live,
    log_json,
    serve_status,
)
from toolbus.observe._feed import Feed

BAD_TIMEOUTS = [("1", TypeError), (math.nan, ValueError), (True, TypeError)]


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def echo(x: int) -> int:
        """Echo."""
        return x

    return registry


@pytest.fixture
def executor() -> Iterator[Executor]:
    with Executor(make_registry(), timeout=10) as ex:
        yield ex


def receivers() -> int:
    return len(bus.signal(bus.FINISHED).receivers)


@pytest.mark.parametrize(("bad", "error"), BAD_TIMEOUTS)
def test_a_bad_close_timeout_leaves_the_status_server_serving(
    executor: Executor, bad: object, error: type[Exception]
) -> None:
    """It raised after the server had marked itself closed: its subscriptions
    stayed connected, and a second close() did nothing."""
    before = receivers()
    server = serve_status(executor)
    with pytest.raises(error, match=r"StatusServer\.close: timeout must be a number"):
        server.close(timeout=bad)  # type: ignore[arg-type]
    assert not server.closed
    executor.execute(ToolCall(id="after", name="echo", arguments={"x": 1}))
    assert executor.drain_events()
    status = httpx.get(server.url + "status", timeout=10).json()
    assert [r["call_id"] for r in status["state"]["recent"]] == ["after"]
    server.close()
    assert server.closed and receivers() == before


def test_a_short_close_timeout_leaves_the_socket_to_the_server_thread(
    executor: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The socket was closed right after the join timed out, under uvicorn
    still shutting down: its thread died with "Invalid file descriptor: -1"."""
    failures: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    server = serve_status(executor)
    server.close(timeout=0)
    server._thread.join(30)
    assert not server._thread.is_alive()
    assert [(f.thread.name if f.thread else "", repr(f.exc_value)) for f in failures] == []
    assert server._socket.fileno() == -1  # closed by the thread, once done with it


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"port": 70000}, ValueError, "port must be an integer 0..65535"),
        ({"port": 65536 + 8765}, ValueError, "port must be an integer 0..65535"),
        ({"port": -1}, ValueError, "port must be an integer 0..65535"),
        ({"port": "http"}, TypeError, "port must be an integer 0..65535"),
        ({"port": "8080"}, TypeError, "port must be an integer 0..65535"),
        ({"port": 8080.5}, TypeError, "port must be an integer 0..65535"),
        ({"port": True}, TypeError, "port must be an integer 0..65535"),
        ({"port": math.nan}, TypeError, "port must be an integer 0..65535"),
        ({"port": None}, TypeError, "port must be an integer 0..65535"),
        ({"host": None}, TypeError, "host must be a string"),
        ({"host": 5}, TypeError, "host must be a string"),
        ({"host": ""}, ValueError, "host must not be empty"),
    ],
)
def test_a_bad_address_is_refused_naming_the_option(
    executor: Executor, options: dict[str, Any], error: type[Exception], words: str
) -> None:
    """The socket library took 70000 for 4464 and "http" for 80; others failed
    with errors that named nothing (gaierror, OSError, AttributeError)."""
    with pytest.raises(error, match=f"serve_status: {words}"):
        serve_status(executor, **options)


def test_serve_http_checks_its_port_too() -> None:
    pytest.importorskip("mcp")
    from toolbus.mcp import serve_http

    with pytest.raises(ValueError, match=r"serve_http: port must be an integer 0\.\.65535"):
        serve_http(make_registry(), port=-1)


def test_not_an_executor_is_refused_naming_the_function() -> None:
    with pytest.raises(TypeError, match="serve_status: executor must be a toolbus Executor"):
        serve_status(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="live: executor must be a toolbus Executor"):
        with live(object()):  # type: ignore[arg-type]
            pass
    with pytest.raises(TypeError, match="instrument_otel: executor must be a toolbus Executor"):
        instrument_otel(object(), tracer_provider=TracerProvider())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-1, ValueError), (math.nan, ValueError), ("4", TypeError)],
)
def test_live_refuses_a_bad_refresh_rate(
    executor: Executor, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="live: refresh_per_second must be"):
        with live(executor, refresh_per_second=value):  # type: ignore[arg-type]
            pass


def test_providers_and_registries_of_another_kind_are_refused(executor: Executor) -> None:
    with pytest.raises(TypeError, match="instrument_otel: tracer_provider must be an Open"):
        instrument_otel(executor, tracer_provider="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="instrument_otel: meter_provider must be an Open"):
        instrument_otel(executor, TracerProvider(), meter_provider=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="instrument_prometheus: registry must be a prometheus"):
        instrument_prometheus(executor, registry="r")  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "error"), BAD_TIMEOUTS)
def test_a_bad_close_timeout_leaves_a_handle_attached(
    executor: Executor, bad: object, error: type[Exception]
) -> None:
    """With events pending, the otel handle raised after marking itself
    closed: the executor stayed instrumented, and instrument_otel refused it
    for good."""
    provider = TracerProvider()
    stream = io.StringIO()
    handles = [
        instrument_otel(executor, tracer_provider=provider),
        instrument_prometheus(executor, registry=CollectorRegistry()),
        log_json(executor, stream),
    ]
    executor.execute(ToolCall(id="before", name="echo", arguments={"x": 1}))
    for handle in handles:
        with pytest.raises(error, match=r"\.close: timeout must be a number"):
            handle.close(timeout=bad)  # type: ignore[arg-type]
        assert not handle.closed
    executor.execute(ToolCall(id="after", name="echo", arguments={"x": 2}))
    for handle in handles:
        handle.close()
    assert '"call_id":"after"' in stream.getvalue().replace(" ", "")
    instrument_otel(executor, tracer_provider=provider).close()  # instrumented no more


@pytest.mark.parametrize(("bad", "error"), BAD_TIMEOUTS)
def test_drain_events_checks_its_timeout_with_nothing_pending(
    executor: Executor, bad: object, error: type[Exception]
) -> None:
    """It raised only when something was pending."""
    assert executor.drain_events()
    with pytest.raises(error, match="drain_events: timeout must be a number"):
        executor.drain_events(bad)  # type: ignore[arg-type]


def test_a_wait_without_bound_is_none() -> None:
    """`math.inf` (or any wait longer than a lock takes) reached the lock's
    wait, which raises OverflowError: with events pending, `drain_events(inf)`
    and a handle's `close(timeout=inf)` failed."""
    from toolbus._options import wait_seconds

    assert wait_seconds(math.inf, "timeout") is None
    assert wait_seconds(threading.TIMEOUT_MAX * 2, "timeout") is None
    assert wait_seconds(-1, "timeout") == 0  # a deadline already past: no wait
    assert wait_seconds(2.5, "timeout") == 2.5


def test_the_feeds_history_keeps_no_spare_buffer_per_event(executor: Executor) -> None:
    """orjson's text keeps about 4 KB allocated however short it is: the
    history held each one as it came, 4 KB an event."""
    feed = Feed(executor, history=10_000)
    try:
        executor.execute_batch([ToolCall(name="echo", arguments={"x": i}) for i in range(20)])
        assert executor.drain_events()
        tracemalloc.start()
        try:
            kept = len(feed._ring)
            executor.execute_batch([ToolCall(name="echo", arguments={"x": i}) for i in range(200)])
            assert executor.drain_events()
            snapshot = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        added = len(feed._ring) - kept
        held = sum(
            s.size
            for s in snapshot.statistics("filename")
            if s.traceback[0].filename.endswith(("_feed.py", "_json.py"))
        )
        assert added >= 600 and held / added < 1024, (added, held)
    finally:
        feed.close()
