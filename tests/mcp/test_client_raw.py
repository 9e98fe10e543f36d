"""A server that says what the SDK reads its own way (tests/mcp_servers/raw_server.py,
hand-written JSON-RPC over stdio): a refusal with code -32000, replies no
`CallToolResult` parses from, a listing with one unusable tool."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry
from toolbus.mcp import MCPConnection, connect_stdio
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

