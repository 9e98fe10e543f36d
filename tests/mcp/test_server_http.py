"""`toolbus mcp serve --http`: streamable HTTP, driven by the MCP SDK's client
and by raw requests (the guard: Origin, Host, token), plus the command line's
refusals and the guard on its own.

One server process (the command line, with a token and an extra allowed
origin) serves the module's tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("mcp")

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from tests.conftest import wait_until_async
from toolbus.cli import app
from toolbus.mcp._serve_http import Guard, check_exposure

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789"
TOKEN_VAR = "TOOLBUS_MCP_TEST_TOKEN"
REGISTRY = "tests.mcp_servers.registry_module:served"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def start(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start a server process; return it and the URL it announces on stderr."""
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    seen = []
    while True:
        try:
            line = lines.get(timeout=30)
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"the server announced no URL: {seen}") from None
        seen.append(line)
        found = re.search(r"(http://\S+/mcp)", line)
        if found:
            return proc, found.group(1)


def stop(proc: subprocess.Popen[str]) -> int:
    proc.terminate()
    try:
        return proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    cli = ["-c", "from toolbus.cli import main; main()", "mcp", "serve", REGISTRY, "--http"]
    options = ["--port", "0", "--token-env", TOKEN_VAR, "--allow-origin", "https://app.example"]
    proc, address = start([*cli, *options], {TOKEN_VAR: TOKEN})
    yield address
    # SIGTERM: a graceful shutdown (the executor closed), exit 0.
    assert stop(proc) == 0


@asynccontextmanager
async def client(url: str, mode: str = "auto") -> AsyncIterator[Client]:
    async with (
        httpx.AsyncClient(headers=AUTH, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as mcp,
    ):
        yield mcp


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_over_http(url: str, mode: str) -> None:
    async with client(url, mode) as mcp:
        listed = {t.name: t for t in (await mcp.list_tools()).tools}
        hints = listed["set_mode"].annotations
        assert hints is not None
        assert (hints.read_only_hint, hints.destructive_hint) == (False, True)
        assert (hints.idempotent_hint, hints.open_world_hint) == (True, False)
        assert listed["add"].output_schema is not None
        result = await mcp.call_tool("forecast", {"city": "Oslo"})
        assert result.structured_content == {"city": "Oslo", "celsius": 21.5, "summary": "sunny"}
        assert (await mcp.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}


async def test_progress_over_http(url: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with client(url) as mcp:
        result = await mcp.call_tool("count_up", {"steps": 2}, progress_callback=on_progress)
    assert result.structured_content == {"result": 2}
    assert seen == [(0.5, 1.0, "step 1 of 2"), (1.0, 1.0, "step 2 of 2")]


async def test_cancellation_over_http(url: str) -> None:
    state: dict[str, Any] = {}
    async with client(url) as mcp:

        async def served(until: Callable[[dict[str, Any]], bool]) -> bool:
            reply = (await mcp.call_tool("finished", {"tool": "wait"})).structured_content
            assert reply is not None
            state.update(reply)
            return until(state)

        call = asyncio.create_task(mcp.call_tool("wait", {"seconds": 15}))
        await wait_until_async(lambda: served(lambda s: s["started"] == 1), 30, "the wait running")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_until_async(
            lambda: served(lambda s: bool(s["ends"]) and s["interrupted"] > 0), 30, "the wait's end"
        )  # (its result can be out before its task sees the cancellation)
    assert state["ends"] == [["cancelled", "CANCELLED"]]
    assert state["interrupted"] == 1


# -- the guard: refused requests run nothing ----------------------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def rpc(id_: int | None, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return message


def answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a response: JSON, or the SSE stream's data lines."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    for line in response.text.splitlines():
        if line.startswith("data:") and '"id"' in line:
            return dict(json.loads(line[5:]))
    raise AssertionError(f"no answer in {response.text!r}")


def test_refused_requests_run_nothing(url: str) -> None:
    """A session opened properly; then calls of `bump` with no token, a wrong
    one, a foreign Origin, a foreign Host: each refused, and the counter shows
    that none ran. Allowed origins (loopback, --allow-origin) get through."""
    with httpx.Client(timeout=30) as http:
        init = http.post(
            url,
            headers={**ACCEPT, **AUTH},
            json=rpc(
                1,
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            ),
        )
        assert init.status_code == 200, init.text
        session = {
            "mcp-session-id": init.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        good = {**ACCEPT, **AUTH, **session}
        assert (
            http.post(url, headers=good, json=rpc(None, "notifications/initialized")).status_code
            == 202
        )
        call = rpc(2, "tools/call", {"name": "bump", "arguments": {}})

        no_token = http.post(url, headers={**ACCEPT, **session}, json=call)
        assert no_token.status_code == 401
        assert no_token.headers["www-authenticate"].startswith("Bearer")
        wrong = http.post(url, headers={**good, "Authorization": f"Bearer {TOKEN}x"}, json=call)
        assert wrong.status_code == 401
        foreign = http.post(url, headers={**good, "Origin": "http://evil.example"}, json=call)
        assert foreign.status_code == 403
        rebound = http.post(url, headers={**good, "Host": "evil.example:8765"}, json=call)
        assert rebound.status_code == 403

        state = rpc(3, "tools/call", {"name": "finished", "arguments": {"tool": "bump"}})
        before = answer(http.post(url, headers=good, json=state))["result"]["structuredContent"]
        assert before["ends"] == [] and before["bumps"] == 0  # none of them ran
        for origin in ("http://localhost:5173", "http://[::1]:3000", "https://app.example"):
            ok = http.post(url, headers={**good, "Origin": origin}, json=call)
            assert ok.status_code == 200, (origin, ok.text)
        after = answer(http.post(url, headers=good, json=state))["result"]["structuredContent"]
        assert after["bumps"] == 3


# -- the command line's refusals, and the guard alone ------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--http", "--host", "0.0.0.0"], {}, "binding to '0.0.0.0', which is not a loopback"),
        (["--http", "--host", "192.0.2.1"], {}, "needs a token"),
        (["--http", "--token-env", "TOOLBUS_NO_SUCH_VAR"], {}, "TOOLBUS_NO_SUCH_VAR is not set"),
        (["--http", "--token-env", "TOOLBUS_EMPTY"], {"TOOLBUS_EMPTY": ""}, "is not set"),
        (["--port", "9"], {}, "--port needs --http"),
        (["--token-env", "X"], {}, "--token-env needs --http"),
        (["--poll-after", "1"], {}, "--poll-after needs --http"),
        (["--reconnect-after", "1"], {}, "--reconnect-after needs --http"),
        (["--http", "--poll-after", "inf"], {}, "--poll-after must be >= 0 and finite"),
        (["--http", "--reconnect-after", "inf"], {}, "--reconnect-after must be >= 0"),
    ],
)
def test_cli_refuses(args: list[str], env: dict[str, str], message: str) -> None:
    result = CliRunner().invoke(app, ["mcp", "serve", REGISTRY, *args], env=env)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.startswith("toolbus mcp serve: ")


def test_cli_reports_a_port_in_use() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["mcp", "serve", REGISTRY, "--http", "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output


def test_exposure_rules() -> None:
    assert check_exposure("127.0.0.1", None) is True
    assert check_exposure("::1", None) is True
    assert check_exposure("localhost", None) is True
    assert check_exposure("0.0.0.0", "t") is False
    for host in ("0.0.0.0", "::", "example.com", "10.0.0.1"):
        with pytest.raises(ValueError, match="needs a token"):
            check_exposure(host, None)
    with pytest.raises(ValueError, match="non-empty"):
        check_exposure("127.0.0.1", " ")


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ran"})


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 200),  # no Origin: a non-browser client
        ({"origin": "http://127.0.0.1:9999"}, 200),
        ({"origin": "https://localhost"}, 200),
        ({"origin": "http://[::1]:80"}, 200),
        ({"origin": "https://app.example/"}, 200),  # given; case and a trailing slash aside
        ({"origin": "HTTPS://APP.EXAMPLE"}, 200),
        ({"origin": "null"}, 403),  # a sandboxed page, a file
        ({"origin": "http://localhost.evil.example"}, 403),
        ({"origin": "http://127.0.0.1.evil.example"}, 403),
        ({"origin": "ftp://localhost"}, 403),
        ({"host": "evil.example"}, 403),
        ({"host": "[::1]:8765"}, 200),
        ({"host": "localhost"}, 200),
    ],
)
async def test_guard(headers: dict[str, str], status: int) -> None:
    guard = Guard(_ok, token=None, loopback=True, allowed_origins=["https://app.example"])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guard), base_url="http://127.0.0.1:8765"
    ) as http:
        response = await http.get("/mcp", headers=headers)
    assert response.status_code == status
    assert (response.text == "ran") == (status == 200)


async def test_guard_token_and_exposed_hosts() -> None:
    guard = Guard(_ok, token="s3cret", loopback=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=guard), base_url="http://tools.internal:8765"
    ) as http:
        assert (await http.get("/mcp")).status_code == 401
        assert (
            await http.get("/mcp", headers={"Authorization": "Bearer s3cre"})
        ).status_code == 401
        assert (
            await http.get("/mcp", headers={"Authorization": "bearer s3cret"})
        ).status_code != 401  # the scheme is case-insensitive (RFC 9110 11.1)
        ok = await http.get("/mcp", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200  # any Host: bound beyond loopback, the token guards
        # A web page's request still needs an allowed Origin, token or not.
        foreign = await http.get(
            "/mcp", headers={"Authorization": "Bearer s3cret", "Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403


# -- trace context over HTTP --------------------------------------------------------------------


async def test_traceparent_travels_over_http() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider

    proc, address = start(["-m", "tests.mcp_servers.traced_server", "http"])
    try:
        tracer = TracerProvider().get_tracer("test")
        async with httpx.AsyncClient(timeout=30) as http:
            async with Client(streamable_http_client(address, http_client=http)) as mcp:
                with tracer.start_as_current_span("client call") as span:
                    assert not (await mcp.call_tool("add", {"a": 1, "b": 2})).is_error
                listed = (await mcp.call_tool("spans", {})).structured_content
    finally:
        stop(proc)
    assert listed is not None
    [served] = [s for s in listed["result"] if s["name"] == "execute_tool add"]
    assert served["trace_id"] == format(span.get_span_context().trace_id, "032x")


async def _status(guard: Guard, headers: list[tuple[bytes, bytes]]) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    await guard(scope, receive, send)
    return int(sent[0]["status"])


async def _ok_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def test_the_bearer_scheme_is_case_insensitive() -> None:
    """The HTTP guard read the Bearer scheme case-sensitively (RFC 9110: it is not) (review 12)."""
    # RFC 9110 11.1: the auth scheme is case-insensitive (toolbus's status server agrees).
    guard = Guard(_ok_app, token="s3cret", loopback=True)
    headers = [(b"host", b"127.0.0.1:8765"), (b"authorization", b"bearer s3cret")]
    assert await _status(guard, headers) == 200


def test_a_token_with_outer_whitespace_is_refused_or_usable() -> None:
    """A token with outer whitespace was accepted, then no request matched it: every one got 401
    (review 12)."""
    # HTTP servers strip a header value's outer whitespace (h11 does), so a token
    # read from an env file with a trailing space or CR is never matched: every
    # request gets 401. It should be refused at start (or stripped).
    with pytest.raises(ValueError):
        check_exposure("127.0.0.1", "s3cret\r")


@pytest.mark.parametrize("token", ["s3cret token", "s3cret\ttoken", "s3cret-\u20ac-token"])
def test_a_token_no_request_could_send_is_refused(token: str) -> None:
    """A token no header can carry (whitespace, control, beyond Latin-1) was accepted (review 12)."""
    # The status server's rule (toolbus._tokens): whitespace, a control
    # character or a character beyond Latin-1 cannot go in a header.
    with pytest.raises(ValueError, match="no request could send this token") as refused:
        check_exposure("127.0.0.1", token)
    assert token not in str(refused.value)


async def test_a_latin1_token_matches_the_header_bytes_a_client_sends() -> None:
    """A Latin-1 token did not match the header bytes a client sends (review 12)."""
    guard = Guard(_ok_app, token="t\xf6k", loopback=True)
    sent = [(b"host", b"127.0.0.1:8765"), (b"authorization", "Bearer t\xf6k".encode("latin-1"))]
    assert await _status(guard, sent) == 200


def test_a_refused_connection_names_the_http_status_and_what_to_check(url: str) -> None:
    """A wrong token read `could not connect: Server returned an error
    response`, with no word of 401 or the token (issue 22)."""
    from toolbus.mcp import MCPConnectError, connect_http

    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with pytest.raises(MCPConnectError) as none:
        connect_http(url, connect_timeout=10)
    assert "HTTP 401 Unauthorized" in str(none.value)
    assert "no token was sent" in str(none.value) and "headers=" in str(none.value)
    with pytest.raises(MCPConnectError) as wrong:
        connect_http(url, headers={"Authorization": "Bearer not-it-5c1d"}, connect_timeout=10)
    assert "HTTP 401 Unauthorized" in str(wrong.value) and "token sent was refused" in str(
        wrong.value
    )
    assert "not-it-5c1d" not in str(wrong.value)
    with pytest.raises(MCPConnectError) as foreign:
        connect_http(url, headers={**bearer, "Origin": "http://evil.example"}, connect_timeout=10)
    assert "HTTP 403 Forbidden" in str(foreign.value) and "Origin" in str(foreign.value)
    # A wrong path read "could not connect: Not Found", without the status.
    wrong_path = url.rsplit("/", 1)[0] + "/not-mcp?token=in-the-url-7f3e"
    with pytest.raises(MCPConnectError) as missing:
        connect_http(wrong_path, headers=bearer, connect_timeout=10)
    assert "HTTP 404 Not Found: no MCP endpoint at that URL" in str(missing.value)
    assert "in-the-url-7f3e" not in str(missing.value)  # (a URL may carry a secret)
    with connect_http(url, headers=bearer, connect_timeout=10) as conn:
        assert "add" in {t.name for t in conn.tools()}
    with pytest.raises(TypeError, match="headers"):
        connect_http(url, headers={"Authorization": 1})  # type: ignore[dict-item]


def test_a_token_refused_after_connecting_names_the_status_on_each_call() -> None:
    """A token revoked while connected: every call read `refused the call:
    Server returned an error response`, the text issue 22 set out to end."""
    from tests.mcp_servers.serving import served_in_thread
    from toolbus import Executor, ToolCall, ToolRegistry
    from toolbus.mcp import connect_http
    from toolbus.mcp._serve_http import http_app

    served = ToolRegistry()

    @served.tool(read_only=True)
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    with Executor(served) as server_side:
        app = http_app(served, server_side, token=TOKEN)
        with served_in_thread(app) as url:
            local = ToolRegistry()
            with connect_http(url, headers={"Authorization": f"Bearer {TOKEN}"}) as conn:
                conn.register(local)
                with Executor(local) as executor:
                    call = ToolCall(name="add", arguments={"a": 1, "b": 2})
                    assert executor.execute(call).output == 3
                    app._token = b"a-new-token-0123456789"  # (the server's token changed)
                    refused = executor.execute(call)
    assert refused.status == "error" and refused.error is not None
    assert "HTTP 401 Unauthorized" in refused.error and "token sent was refused" in refused.error
    assert TOKEN not in refused.error
