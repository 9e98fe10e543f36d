"""No secret put into a call reaches the status server's surfaces, or the dashboard.

A property test: hypothesis makes up secrets and puts them into calls under
secret-looking keys (at any depth, as a dict or as the model's raw JSON), and
an injected parameter gets another one from `Executor(inject=...)`. The tool
echoes both into its progress messages, its errors and its output. Whatever
the outcome, neither secret appears in the SSE stream (`/events`), the JSON
the page reads (`/status`), the page itself (`/`), the metrics, or the text
of the terminal dashboard.
"""

from __future__ import annotations

import contextvars
import io
import time
from collections.abc import Iterator
from typing import Annotated, Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette", reason="the web extra is not installed")

import httpx
from rich.console import Console

from tests.secret_strategies import nest as _nest
from tests.secret_strategies import secrets
from toolbus import Executor, Injected, RetryPolicy, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.observe import StatusServer, serve_status
from toolbus.observe._config import describe_executor
from toolbus.observe._view import Board
from toolbus.policies import circuit_breaker

SECRET_KEYS = ["token", "api_key", "password", "Authorization", "client_secret", "X-Api-Key"]

session: contextvars.ContextVar[str] = contextvars.ContextVar("session", default="")
received: list[Any] = []


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    # A breaker that opens at a failure and lets the next call try again: its
    # events (tool:circuit-*) go to every surface too, and carry no arguments.
    @registry.tool(
        read_only=True,
        retry=RetryPolicy(max_retries=1, backoff_base=0.001),
        policies=[circuit_breaker(failures=1, reset_after=0.001)],
    )
    def leaky(
        ctx: ToolContext, mode: str, login: Annotated[str, Injected], payload: Any = None
    ) -> Any:
        """Echoes what it got everywhere it can."""
        raw = {"payload": payload, "login": login}
        received.append(raw)
        ctx.progress(f"working on {raw}", 0.5, seen=raw)
        if mode == "raise":
            raise ValueError(f"could not use {raw}")
        if mode == "flaky" and ctx.attempt == 1:
            raise ConnectionError(f"transient while sending {raw}")
        return {"echo": raw, "text": f"done with {raw}"}

    return registry


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Executor, StatusServer, httpx.Client]]:
    with (
        Executor(make_registry(), timeout=5, inject={"login": lambda call: session.get()}) as ex,
        serve_status(ex) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        yield ex, server, http


def events_after(http: httpx.Client, since: int, call_id: str, timeout: float = 10.0) -> str:
    """The raw SSE text after `since`, up to the call's tool:finished."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    with http.stream("GET", f"/events?since={since}") as r:
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data:"):
                record = orjson.loads(line[5:])
                if record.get("signal") == bus.FINISHED and record.get("call_id") == call_id:
                    return "\n".join(lines)
            assert time.monotonic() < deadline, "the call's events did not arrive"
    raise AssertionError("the stream ended early")


def dashboard_text(executor: Executor, state: dict[str, Any]) -> str:
    console = Console(record=True, width=160, file=io.StringIO())
    console.print(
        Board(
            config=describe_executor(executor),
            state=state,
            stats=executor.stats().model_dump(),
            now=time.time(),
        )
    )
    return console.export_text()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=secrets,
    injected=secrets,
    key=st.sampled_from(SECRET_KEYS),
    shape=st.lists(st.sampled_from(["dict", "list"]), max_size=3),
    mode=st.sampled_from(["ok", "raise", "flaky"]),
    raw_json=st.booleans(),
)
def test_no_secret_in_sse_status_page_metrics_or_dashboard(
    served: tuple[Executor, StatusServer, httpx.Client],
    secret: str,
    injected: str,
    key: str,
    shape: list[str],
    mode: str,
    raw_json: bool,
) -> None:
    executor, _, http = served
    received.clear()
    payload = _nest({key: secret, "note": "x"}, shape)
    arguments: dict[str, Any] | str = {"mode": mode, "payload": payload}
    if raw_json:
        arguments = orjson.dumps(arguments).decode()
    since = http.get("/status").json()["state"]["seq"]
    call = ToolCall(name="leaky", arguments=arguments)
    token = session.set(injected)
    try:
        result = executor.execute(call)
    finally:
        session.reset(token)
    assert secret in repr(received) and injected in repr(received)  # the tool got them

    sse = events_after(http, since, call.id)
    status = http.get("/status")
    state = status.json()["state"]
    published = {
        "/events": sse,
        "/status": status.text,
        "/": http.get("/").text,
        "/metrics": http.get("/metrics").text,
        "dashboard": dashboard_text(executor, state),
    }
    for where, text in published.items():
        assert secret not in text, where
        assert injected not in text, where
    assert "tool:progress" in sse and "***" in sse  # the masked values are there, as ***
    assert state["recent"][0]["call_id"] == call.id
    assert state["recent"][0]["status"] == result.status
    if mode == "raise":
        assert result.status == "error" and state["errors"][0]["call_id"] == call.id
