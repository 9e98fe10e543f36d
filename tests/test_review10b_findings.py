"""Review 10b: repros of bugs found in toolbus.observe and the CLI (adversarial review).

Each test states what should happen. The bugs of escape sequences reaching
the terminal, `/events` resuming across a server restart, the private `_run`
in `toolbus call`, default executor names, tokens no request can send, an
OTel span processor raising and a log's close() waiting for other subscribers
are fixed: these tests are regression tests now (more next to what they test:
test_cli_commands.py, test_observe_server.py, test_observe_executor.py,
test_observe_live.py).
"""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from toolbus import Executor, ToolCall, ToolError, ToolRegistry
from toolbus.observe import live, log_json

# Terminal control sequences a model or a tool's error text may carry: OSC 52
# writes the user's clipboard, CSI 2J clears the screen, CSI 31m recolours.
OSC52 = "\x1b]52;c;cHduZWQ=\x1b\\"
CLEAR = "\x1b[2J"
RED = "\x1b[31m"


def _fetch_registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def fetch(url: str) -> str:
        """Fetches a page; its error quotes what the page said."""
        raise ToolError(f"page said: {OSC52} {CLEAR}")

    return reg


registry = _fetch_registry()  # for `toolbus call tests.test_review10b_findings:registry`


# -- escape sequences reach the terminal raw ------------------------------------------


def test_live_dashboard_does_not_pass_terminal_escapes_through() -> None:
    """A call id (the model's) and an error text (a tool's, quoting a web page)
    are drawn on the user's terminal: their ESC sequences must not reach it raw."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with Executor(_fetch_registry()) as ex, live(ex, console=console):
        ex.execute(ToolCall(id=f"call_{RED}x", name="fetch", arguments={"url": "u"}))
        ex.drain_events()
    screen = out.getvalue()
    assert OSC52 not in screen
    assert CLEAR not in screen
    assert f"call_{RED}x" not in screen


def test_toolbus_call_does_not_pass_terminal_escapes_through() -> None:
    from toolbus.cli import app

    result = CliRunner(env={"NO_COLOR": "1"}).invoke(
        app, ["call", "tests.test_review10b_findings:registry", "fetch", "--args", '{"url":"u"}']
    )
    assert result.exit_code == 1, result.output
    assert OSC52 not in result.output
    assert CLEAR not in result.output


# -- toolbus call shows toolbus's private _run token ---------------------------------


def test_toolbus_call_does_not_print_the_private_run_token() -> None:
    """Every other surface leaves out CallEvent._run ("toolbus's own, not the
    event's data (no surface publishes it)"); `toolbus call` prints it, in
    text and in --json."""
    from toolbus.cli import app

    spec = "tests.cli_registries.tools:registry"
    runner = CliRunner(env={"NO_COLOR": "1"})
    text = runner.invoke(app, ["call", spec, "add", "--args", '{"a": 1}'])
    assert text.exit_code == 0, text.output
    assert "_run=" not in text.output
    as_json = runner.invoke(app, ["call", spec, "add", "--args", '{"a": 1}', "--json"])
    assert as_json.exit_code == 0, as_json.output
    events = json.loads(as_json.output)["events"]
    assert all("_run" not in e for e in events), events[0]


# -- default executor names collide with given ones ---------------------------------


def test_default_executor_name_never_repeats_a_name_in_use() -> None:
    """`executor-N` by default so two executors stay apart; a name given
    explicitly that matches the next default makes two executors share it
    (and the second is refused on a shared Prometheus registry)."""
    first = Executor(ToolRegistry())
    n = int(first.name.rsplit("-", 1)[1])
    named = Executor(ToolRegistry(), name=f"executor-{n + 1}")
    default = Executor(ToolRegistry())
    try:
        assert default.name != named.name
    finally:
        for ex in (first, named, default):
            ex.close()


# -- /events: a resume across a server restart skips events silently ----------------


def test_events_resume_on_a_new_server_reports_the_gap() -> None:
    """A client (the page's EventSource, `toolbus top`) reconnects with
    Last-Event-ID to a status server that started after that id: the events in
    between were never kept, so it must get `reset`, not the next ones."""
    pytest.importorskip("starlette", reason="the web extra is not installed")
    import httpx

    from toolbus.observe import serve_status

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def work() -> str:
        """Works."""
        return "ok"

    with Executor(reg) as ex, log_json(ex, io.StringIO()):  # another subscriber: seqs go on
        first = serve_status(ex)
        ex.execute(ToolCall(id="seen", name="work", arguments={}))
        ex.drain_events()
        last = httpx.get(first.url + "status").json()["server"]["latest"]
        first.close()
        ex.execute(ToolCall(id="missed", name="work", arguments={}))  # nobody keeps these
        ex.drain_events()
        with serve_status(ex) as second:
            ex.execute(ToolCall(id="later", name="work", arguments={}))
            ex.drain_events()
            headers = {"Last-Event-ID": str(last)}
            with httpx.stream("GET", second.url + "events", headers=headers, timeout=10) as r:
                first_event: dict[str, str] = {}
                for line in r.iter_lines():
                    if not line:
                        if "data" in first_event:
                            break
                        continue
                    if line.startswith(":"):
                        continue
                    key, _, value = line.partition(":")
                    first_event[key] = value.strip()
    # Expected: a reset (what the client missed is gone); got: the event after
    # the gap, as if nothing had been missed.
    assert first_event.get("event") == "reset", first_event


# -- a slow, unrelated subscriber makes every handle's close() take its whole timeout --


def test_log_json_close_does_not_wait_for_other_subscribers() -> None:
    """close() waits for "those announced before" (the handle's own events);
    it waits for every subscription's instead (`executor.drain_events`), so an
    unrelated slow subscriber makes it take the whole timeout (5 s), though
    every line of its own was written long before."""
    import threading
    import time

    from toolbus import bus

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def work() -> str:
        """Works."""
        return "ok"

    release = threading.Event()
    out = io.StringIO()
    with Executor(reg) as ex:
        slow = bus.subscribe(lambda sender, **kw: release.wait(30), sender=ex)
        try:
            with bus.Recorder(bus.FINISHED, sender=ex) as rec:
                handle = log_json(ex, out, signals=("tool:finished",))
                for i in range(3):
                    assert ex.execute(ToolCall(id=f"c{i}", name="work", arguments={})).ok
                rec.wait_for(bus.FINISHED, 3, timeout=5)
            started = time.monotonic()
            handle.close()
            took = time.monotonic() - started
        finally:
            release.set()
            slow.close()
    assert len(out.getvalue().splitlines()) == 3
    assert took < 1.0, f"close() took {took:.1f} s"


# -- serve_status takes a token no request can ever send -----------------------------


def _raw_get(port: int, path: str, authorization: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: " + authorization + b"\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("token", ["s3cret-token ", "s3cret-€-token"])
def test_serve_status_refuses_a_token_that_cannot_authenticate(token: str) -> None:
    """A token with trailing whitespace (HTTP strips it from the header) or a
    character beyond Latin-1 (a header cannot carry it) is accepted, and then
    no request can ever pass: /metrics (header only) is locked for good.
    Expected: a ValueError at serve_status, as for an empty token (or the
    token working)."""
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from toolbus.observe import serve_status

    with Executor(ToolRegistry()) as ex:
        try:
            server = serve_status(ex, token=token)
        except ValueError:
            return  # refused up front: fine
        with server:
            for encoding in ("utf-8", "latin-1"):
                try:
                    header = ("Bearer " + token).encode(encoding)
                except UnicodeEncodeError:
                    continue
                if b" 200 " in _raw_get(server.port, "/metrics", header):
                    return
    pytest.fail(f"serve_status accepted token {token!r}, which no request can send")


# -- OpenTelemetry: a span processor that raises loses the duration metric too -------


def test_otel_histogram_survives_a_failing_span_processor() -> None:
    """The span and the histogram point are independent signals; a span
    processor (a vendor exporter's) raising in on_end makes `_finished` stop
    before `histogram.record`, so no call is measured at all."""
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
