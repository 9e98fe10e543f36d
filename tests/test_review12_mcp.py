"""Review 12: repros of defects found in the MCP work (issue 12).

Each test states what should happen and is marked `xfail(strict=True)` while
the defect stands, so the suite stays green and a fix flips it to XPASS (then
drop the mark). Peers: the `mcp` SDK's low-level `Server` in-process, and
`toolbus mcp serve` over stdio.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.server import Server

from tests.conftest import wait_until
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry
from toolbus.mcp import build_server, connect
from toolbus.mcp._serve_http import Guard, check_exposure
from toolbus.providers import anthropic as anthropic_format

ROOT = Path(__file__).resolve().parent.parent


class Peer:
    """A low-level MCP server whose tool list and results the test sets."""

    def __init__(self, name: str = "peer") -> None:
        self.tools: dict[str, types.Tool] = {}
        self.results: dict[str, Any] = {}
        self.server: Server[Any] = Server(name, on_list_tools=self._list, on_call_tool=self._call)

    def tool(self, name: str, **fields: Any) -> None:
        self.tools[name] = types.Tool(name=name, input_schema={"type": "object"}, **fields)

    async def _list(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.tools.values()))

    async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result = self.results.get(params.name)
        if isinstance(result, types.CallToolResult):
            return result
        return types.CallToolResult(content=[types.TextContent(text="plain")])


# -- served side ---------------------------------------------------------------------


def test_a_lone_surrogate_in_a_served_output_does_not_take_the_stdio_server_down(
    tmp_path: Path,
) -> None:
    # Realistic source: os.listdir()/subprocess output decoded with surrogateescape.
    (tmp_path / "surr_tools.py").write_text(
        textwrap.dedent(
            """
            from toolbus import ToolRegistry
            registry = ToolRegistry()

            @registry.tool(read_only=True)
            def name_of_file() -> str:
                return b"caf\\xe9.txt".decode("utf-8", "surrogateescape")

            @registry.tool(read_only=True)
            def ping() -> str:
                return "pong"
            """
        )
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "toolbus", "mcp", "serve", "surr_tools:registry"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    answers: list[dict[str, Any]] = []

    def read() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            answers.append(json.loads(line))

    threading.Thread(target=read, daemon=True).start()

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps(message) + "\n")
        server.stdin.flush()

    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"jsonrpc": "2.0", "method": "tools/call"}
        send({**call, "id": 1, "params": {"name": "name_of_file", "arguments": {}}})
        send({**call, "id": 2, "params": {"name": "ping", "arguments": {}}})
        # Each call gets its one answer (the first may be an error, or carry U+FFFD).
        wait_until(lambda: {1, 2} <= {a.get("id") for a in answers}, 10, "both answers")
    finally:
        server.kill()
        server.wait(10)


async def test_a_served_output_schema_that_cannot_be_resolved_gives_a_result() -> None:
    from toolbus import Tool

    class Report(Tool):
        name = "report"
        description = "d"
        parameters: dict[str, Any] = {"type": "object"}  # noqa: RUF012
        read_only = True
        # Passes check_output_schema (which does not resolve references).
        output_schema: dict[str, Any] = {  # noqa: RUF012
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/Missing"}},
        }

        def run(self, params: dict[str, Any], ctx: ToolContext) -> Any:
            return {"a": 1}

    # Refused when the tool is made; and set behind the check, the call says why.
    with pytest.raises(ValueError, match=r"\$ref"):
        Report()
    Report.output_schema = None  # type: ignore[assignment]
    report = Report()
    object.__setattr__(
        report,
        "output_schema",
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
    )
    with pytest.raises(TypeError):
        report.output_schema = "x"  # type: ignore[assignment]
    registry = ToolRegistry()
    registry.register(report)
    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            result = await client.call_tool("report", {})
            assert result.is_error


async def test_served_progress_only_increases() -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    async def mixed(ctx: ToolContext) -> str:
        ctx.progress("starting")  # sent as progress=1 (a count)
        ctx.progress("half way", 0.5)  # sent as progress=0.5: down
        ctx.progress("still half way", 0.5)  # 0.5 again
        return "ok"

    got: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        got.append(progress)

    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            await client.call_tool("mixed", {}, progress_callback=on_progress)
    # MCP: "The progress value MUST increase with each notification".
    assert len(got) == 3
    assert all(a < b for a, b in itertools.pairwise(got)), got


async def test_lone_surrogates_in_descriptions_errors_and_outputs_are_sent_as_replacements() -> (
    None
):
    registry = ToolRegistry()

    @registry.tool(read_only=True, description="lists caf\udce9")
    def odd(flag: bool = False) -> Any:
        if flag:
            raise ValueError("bad \udce9")
        return "caf\udce9"

    with Executor(registry, timeout=5) as executor:
        async with Client(build_server(registry, executor)) as client:
            listed = await client.list_tools()
            assert listed.tools[0].description == "lists caf\ufffd"
            result = await client.call_tool("odd", {})
            assert result.content[0].text == "caf\ufffd"  # type: ignore[union-attr]
            failed = await client.call_tool("odd", {"flag": True})
            assert failed.is_error
            assert "\ufffd" in failed.content[0].text  # type: ignore[union-attr]


# -- HTTP guard ----------------------------------------------------------------------


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
    # RFC 9110 11.1: the auth scheme is case-insensitive (toolbus's status server agrees).
    guard = Guard(_ok_app, token="s3cret", loopback=True)
    headers = [(b"host", b"127.0.0.1:8765"), (b"authorization", b"bearer s3cret")]
    assert await _status(guard, headers) == 200


def test_a_token_with_outer_whitespace_is_refused_or_usable() -> None:
    # HTTP servers strip a header value's outer whitespace (h11 does), so a token
    # read from an env file with a trailing space or CR is never matched: every
    # request gets 401. It should be refused at start (or stripped).
    with pytest.raises(ValueError):
        check_exposure("127.0.0.1", "s3cret\r")


@pytest.mark.parametrize("token", ["s3cret token", "s3cret\ttoken", "s3cret-\u20ac-token"])
def test_a_token_no_request_could_send_is_refused(token: str) -> None:
    # The status server's rule (toolbus._tokens): whitespace, a control
    # character or a character beyond Latin-1 cannot go in a header.
    with pytest.raises(ValueError, match="no request could send this token") as refused:
        check_exposure("127.0.0.1", token)
    assert token not in str(refused.value)


async def test_a_latin1_token_matches_the_header_bytes_a_client_sends() -> None:
    guard = Guard(_ok_app, token="t\xf6k", loopback=True)
    sent = [(b"host", b"127.0.0.1:8765"), (b"authorization", "Bearer t\xf6k".encode("latin-1"))]
    assert await _status(guard, sent) == 200


# -- client side ---------------------------------------------------------------------


def test_a_tool_whose_schema_the_server_fixes_is_registered() -> None:
    peer = Peer()
    peer.tool("fixme", output_schema={"type": "object", "properties": {"x": {"type": 42}}})
    registry = ToolRegistry()
    with connect(peer.server) as conn:
        conn.register(registry)
        assert "fixme" not in registry  # left out, with a warning: as documented
        peer.tool("fixme", output_schema={"type": "object"})  # the server fixes it
        conn.refresh()
        assert "fixme" in registry


def test_bad_register_options_raise_instead_of_dropping_every_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    peer = Peer()
    peer.tool("t")
    with connect(peer.server) as conn, caplog.at_level(logging.WARNING, "toolbus.mcp"):
        # Today: [] and a warning "tool 't' left out, its schema is not usable: ...
        # max_concurrency must be >= 1".
        with pytest.raises((TypeError, ValueError)):
            conn.register(ToolRegistry(), max_concurrency=0)


def test_register_checks_idempotent_hints() -> None:
    peer = Peer()
    peer.tool("t")
    with connect(peer.server) as conn:
        with pytest.raises(TypeError):
            conn.tools(idempotent_hints="false")  # type: ignore[arg-type]  # truthy: trusts them


def test_a_name_listed_twice_does_not_half_register() -> None:
    async def listing(ctx: Any, params: Any) -> types.ListToolsResult:
        schema = {"type": "object"}
        return types.ListToolsResult(
            tools=[
                types.Tool(name="a", input_schema=schema),
                types.Tool(name="a", input_schema={**schema, "properties": {}}),
                types.Tool(name="b", input_schema=schema),
            ]
        )

    async def call(ctx: Any, params: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[])

    server: Server[Any] = Server("dup", on_list_tools=listing, on_call_tool=call)
    registry = ToolRegistry()
    with connect(server) as conn:
        try:
            conn.register(registry)
        except Exception:
            # "raises before any tool is registered" (MCPConnection.register)
            assert registry.list() == []
        else:
            assert "b" in registry


def test_a_catastrophic_output_schema_pattern_does_not_stall_other_tools() -> None:
    peer = Peer()
    peer.tool(
        "redos",
        output_schema={
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},
        },
    )
    peer.results["redos"] = types.CallToolResult(
        content=[], structured_content={"a": "a" * 25 + "!"}
    )
    registry = ToolRegistry()

    ticking = threading.Event()

    @registry.tool(read_only=True, timeout=10)  # longer than its 1.5 s of ticks
    async def tick() -> float:
        ticking.set()
        gaps, last = [], time.monotonic()
        for _ in range(30):
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
        return max(gaps)

    with connect(peer.server) as conn:
        conn.register(registry)
        with Executor(registry, timeout=1) as executor:
            ticks: dict[str, Any] = {}
            thread = threading.Thread(
                target=lambda: ticks.setdefault("r", executor.execute(ToolCall(name="tick")))
            )
            thread.start()
            assert ticking.wait(5)  # the loop's ticks are being measured
            started = time.monotonic()
            result = executor.execute(ToolCall(name="redos"))
            took = time.monotonic() - started
            thread.join()
    assert result.status in ("timeout", "error")
    assert took < 1.5, f"a 1 s timeout ended after {took:.1f}s"
    assert ticks["r"].output < 0.5, f"a local async tool stalled {ticks['r'].output:.1f}s"


def test_connect_errors_do_not_quote_credentials() -> None:
    from toolbus.mcp import MCPConnectError, connect_http

    with pytest.raises(MCPConnectError) as caught:
        connect_http("http://user:PASSW0RD@127.0.0.1:9/mcp?token=SECRET456", connect_timeout=1)
    assert "PASSW0RD" not in str(caught.value)
    assert "SECRET456" not in str(caught.value)


def test_a_bad_base64_image_does_not_become_a_provider_image_block() -> None:
    peer = Peer()
    peer.tool("shot")
    peer.results["shot"] = types.CallToolResult(
        content=[
            types.TextContent(text="a picture"),
            types.ImageContent(data="!!! not base64 ***", mime_type="image/png"),
        ]
    )
    registry = ToolRegistry()
    with connect(peer.server) as conn:
        conn.register(registry)
        with Executor(registry, timeout=5) as executor:
            result = executor.execute(ToolCall(name="shot"))
    content = anthropic_format.tool_result_blocks([result])[0]["content"]
    # The API refuses the whole request for one undecodable image: a line of text instead.
    blocks = content if isinstance(content, list) else []
    assert not [b for b in blocks if b.get("type") == "image"]


def test_a_risky_pattern_is_still_checked_out_of_process() -> None:
    from toolbus.mcp._output import OutputCheck, risky_pattern

    assert risky_pattern("^(a+)+$")
    assert not risky_pattern("^[a-z]+$")
    check = OutputCheck(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}},
        server="s",
    )
    check.check(types.CallToolResult(content=[], structured_content={"a": "aaa"}))
    with pytest.raises(Exception, match=r"does not satisfy|does not match"):
        check.check(types.CallToolResult(content=[], structured_content={"a": "b"}))


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": -1},
        {"retry": "x"},
        {"max_concurrency": 0},
        {"read_only_hints": "no"},
        {"prefix": 3},
    ],
)
def test_each_bad_register_option_is_named(options: dict[str, Any]) -> None:
    peer = Peer()
    peer.tool("t")
    with connect(peer.server) as conn:
        with pytest.raises((TypeError, ValueError), match=next(iter(options))):
            conn.register(ToolRegistry(), **options)


@pytest.mark.parametrize(
    ("option", "value"),
    [("connect_timeout", 0), ("probe_timeout", 0), ("backoff_base", -1)],
)
def test_connect_timings_must_be_positive(option: str, value: float) -> None:
    # (A backoff of 0 is allowed: reconnect at once.)
    options: dict[str, Any] = {option: value}
    with pytest.raises(ValueError, match=option):
        connect(Peer().server, **options)


def test_default_names_hide_credentials() -> None:
    from mcp import StdioServerParameters

    from toolbus.mcp._connect import _default_name

    params = StdioServerParameters(
        command="/usr/bin/srv",
        args=["--api-key", "k1", "--token=k2", "sk-abcdefghijk", "API_KEY=k3", "--verbose"],
    )
    name = _default_name(params)
    assert not any(k in name for k in ("k1", "k2", "sk-abc", "k3")), name
    assert "--verbose" in name
    assert _default_name("https://u:pw@h/mcp?key=v#f") == "https://***@h/mcp?key=***#***"


def test_only_sound_base64_within_the_providers_limits_goes_as_a_block() -> None:
    import base64

    from toolbus.models import Attachment
    from toolbus.providers._media import MAX_IMAGE_BYTES, kind_of

    png = base64.b64encode(b"\x89PNG" + b"\0" * 100).decode()
    assert kind_of(Attachment(type="image/png", data=png)) == "image"
    assert kind_of(Attachment(type="image/png", data=png[:40] + "\n" + png[40:])) is None
    big = base64.b64encode(b"\0" * (MAX_IMAGE_BYTES + 1)).decode()
    assert kind_of(Attachment(type="image/png", data=big)) is None
    assert kind_of(Attachment(type="application/pdf", data="%%% not base64")) is None
