"""A server that says what the SDK reads its own way (tests/mcp_servers/raw_server.py,
hand-written JSON-RPC over stdio; raw_http.py, over streamable HTTP): a
refusal with code -32000 (in the SDK's own words for a lost HTTP stream too),
replies no `CallToolResult` parses from, a listing with one unusable tool."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import MCPError

from tests.conftest import MakeExecutor
from tests.mcp_servers import raw_http
from tests.mcp_servers.scripted import Peer
from tests.mcp_servers.serving import served_in_thread
from toolbus import ToolCall, ToolRegistry
from toolbus.mcp import MCPConnectError, MCPConnection, connect, connect_http, connect_stdio
from toolbus.models import ErrorCode

RAW = str(Path(__file__).parents[1] / "mcp_servers" / "raw_server.py")


@pytest.fixture
def raw() -> Iterator[MCPConnection]:
    with connect_stdio(sys.executable, [RAW], protocol="2025-11-25") as conn:
        yield conn


def test_a_refusal_with_code_32000_keeps_the_connection_and_the_calls_in_flight(
    raw: MCPConnection, make_executor: MakeExecutor
) -> None:
    """-32000 is JSON-RPC's generic server error, and also the SDK's code for a
    lost connection: a server's refusal with it was taken for one, the session
    dropped, the server restarted, and the other call in flight lost."""
    registry = ToolRegistry()
    raw.register(registry)
    ex = make_executor(registry, timeout=30)
    refused = ToolCall(name="bad", arguments={"how": "error32000", "pair": True, "first": True})
    other = ToolCall(name="bad", arguments={"text": "kept", "pair": True})
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(ex.execute, call) for call in (refused, other)]
        first, second = (f.result(timeout=30) for f in futures)
    assert first.error_code == ErrorCode.TOOL_ERROR
    assert first.error == "MCP server 'raw' refused the call: quota used up"
    assert second.ok and second.output == "echo kept"
    status = raw.status()
    assert (status.connected, status.generation, status.drops) == (True, 1, 0)


def test_a_refusal_worded_as_the_sdks_lost_http_stream_is_a_refusal_over_stdio(
    raw: MCPConnection, make_executor: MakeExecutor
) -> None:
    """The SDK words a lost streamable-HTTP response stream "SSE stream ...",
    code -32000; over stdio it never does, so a server's refusal in those
    words is the server's: it was taken for a lost connection (the session
    dropped, the server restarted, the other call in flight lost)."""
    registry = ToolRegistry()
    raw.register(registry)
    ex = make_executor(registry, timeout=30)
    refused = ToolCall(name="bad", arguments={"how": "error32000sse", "pair": True, "first": True})
    other = ToolCall(name="bad", arguments={"text": "kept", "pair": True})
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(ex.execute, call) for call in (refused, other)]
        first, second = (f.result(timeout=30) for f in futures)
    assert first.error_code == ErrorCode.TOOL_ERROR
    assert first.error == ("MCP server 'raw' refused the call: SSE stream ended without a response")
    assert second.ok and second.output == "echo kept"
    status = raw.status()
    assert (status.connected, status.generation, status.drops) == (True, 1, 0)


def test_an_in_process_servers_refusal_in_those_words_is_a_refusal(
    make_executor: MakeExecutor,
) -> None:
    """An in-process server (no HTTP either) refusing with code -32000 in the
    words of the SDK's lost HTTP stream: a refusal of the call, the session kept."""

    class Refusing(Peer):
        async def _call(self, ctx: Any, params: types.CallToolRequestParams) -> Any:
            raise MCPError(code=-32000, message="SSE stream ended without a response")

    peer = Refusing("inproc")
    peer.tool("bad")
    with connect(peer.server, protocol="2025-11-25") as conn:
        registry = ToolRegistry()
        conn.register(registry)
        r = make_executor(registry, timeout=30).execute(ToolCall(name="bad"))
        assert r.error_code == ErrorCode.TOOL_ERROR
        assert (
            r.error == "MCP server 'inproc' refused the call: SSE stream ended without a response"
        )
        assert conn.status().drops == 0


def test_over_http_the_sdks_lost_stream_is_still_a_lost_connection(
    make_executor: MakeExecutor,
) -> None:
    """Over streamable HTTP the SDK's own "SSE stream ended without a
    response" (a call's response stream that ended unanswered) is a lost
    connection, as it was: the session is dropped and made again."""
    with (
        served_in_thread(raw_http.app) as url,
        connect_http(url, protocol="2025-11-25", name="rawhttp") as conn,
    ):
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry, timeout=30)
        r = ex.execute(ToolCall(name="bad", arguments={"how": "dropstream"}))
        assert r.status == "error", r
        assert "closed the connection during the call (SSE stream ended without a response)" in (
            r.error or ""
        )
        assert conn.status().drops == 1
        assert ex.execute(ToolCall(name="bad", arguments={"text": "again"})).output == "echo again"


SECRET = "sk-live-abcdef0123456789XYZ"


class Lines(logging.Handler):
    """The records of `toolbus.mcp.server`, and an event set when one holds `until`."""

    def __init__(self, until: str) -> None:
        super().__init__()
        self.until = until
        self.lines: list[str] = []
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.until in self.lines[-1]:
            self.seen.set()


@pytest.fixture
def server_log() -> Iterator[Callable[[str], Lines]]:
    logger = logging.getLogger("toolbus.mcp.server")
    added: list[Lines] = []

    def watch(until: str) -> Lines:
        added.append(Lines(until))
        logger.addHandler(added[-1])
        return added[-1]

    yield watch
    for handler in added:
        logger.removeHandler(handler)


def test_a_log_line_beside_another_call_is_scrubbed_of_every_calls_secrets(
    raw: MCPConnection, make_executor: MakeExecutor, server_log: Callable[[str], Lines]
) -> None:
    """On 2025-11-25 a log line names no call: with two in flight it went to
    Python's logging with the other call's `api_key` in clear."""
    lines = server_log("working with")
    registry = ToolRegistry()
    raw.register(registry)
    ex = make_executor(registry, timeout=30)
    secrets = {"api_key": SECRET, "password": "hunter2hunter2"}
    # Answered first: it logs while the other is in flight.
    logging_call = ToolCall(
        name="bad", arguments={"how": "log", "pair": True, "first": True, **secrets}
    )
    other = ToolCall(name="bad", arguments={"text": "x", "pair": True})
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(ex.execute, [logging_call, other], timeout=30))
    assert all(r.ok for r in results), results
    assert lines.seen.wait(10)
    (line,) = [text for text in lines.lines if "working with" in text]
    assert SECRET not in line and "hunter2hunter2" not in line
    assert "working with api key ***" in line and '"password": "***"' in line


def test_a_log_line_after_the_calls_result_is_scrubbed_of_its_secrets(
    raw: MCPConnection, make_executor: MakeExecutor, server_log: Callable[[str], Lines]
) -> None:
    lines = server_log("end of late_log")
    registry = ToolRegistry()
    raw.register(registry)
    ex = make_executor(registry, timeout=30)
    arguments = {"how": "late_log", "api_key": SECRET, "password": "hunter2hunter2"}
    assert ex.execute(ToolCall(name="bad", arguments=arguments)).ok
    assert lines.seen.wait(10)
    (line,) = [text for text in lines.lines if "cleanup" in text]
    assert SECRET not in line and "hunter2hunter2" not in line
    assert "cleanup after api key ***" in line and '"password": "***"' in line


@pytest.mark.parametrize(
    ("how", "why"),
    [
        ("result42", "field 'result' should be an object"),
        ("resultnull", "field 'result' should be an object"),
        (
            "surrogate",
            "it is not JSON the SDK reads (a lone surrogate's escape, or nested too deep)",
        ),
        ("errornomsg", "field 'error.message' is missing (required)"),
    ],
)
def test_a_reply_the_sdk_cannot_read_ends_the_call_without_a_timeout(
    raw: MCPConnection, make_executor: MakeExecutor, how: str, why: str
) -> None:
    """The SDK's reader dropped such a line: the call waited for its timeout,
    forever with none."""
    registry = ToolRegistry()
    raw.register(registry)
    ex = make_executor(registry, timeout=None)
    pool = ThreadPoolExecutor(1)  # (bounded here: a hang fails the test, and closing ends it)
    try:
        result = pool.submit(ex.execute, ToolCall(name="bad", arguments={"how": how})).result(30)
    finally:
        pool.shutdown(wait=False)
    assert result.error_code == ErrorCode.TOOL_ERROR
    assert result.error == f"MCP server 'raw' sent a malformed reply to the call: {why}"
    assert ex.execute(ToolCall(name="echo", arguments={"text": "after"})).output == "echo after"
    assert raw.status().drops == 0


def test_a_listing_the_sdk_refuses_fails_connect_in_one_line() -> None:
    """One tool whose inputSchema is no object's: the SDK refuses the whole
    listing; connect failed with pydantic's multi-line dump."""
    with pytest.raises(MCPConnectError) as caught:
        connect_stdio(sys.executable, [RAW, "notobj"], protocol="2025-11-25", name="raw")
    assert str(caught.value) == (
        "MCP server 'raw' could not connect: ListingRefused: its tool list is one the mcp SDK "
        "refuses as a whole, so none of its tools can be mounted "
        "(tool #2: field 'inputSchema.type' should be 'object')"
    )
