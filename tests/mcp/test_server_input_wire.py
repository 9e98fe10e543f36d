"""A served tool that asks (`ctx.elicit`) and logs (`ctx.log`), over the wire:
`toolbus mcp serve` over stdio and over streamable HTTP, driven by the MCP
SDK's `Client` on both protocols (2025-11-25's `elicitation/create` inside the
call; 2026-07-28's call suspended under its `request_state` and sent again).
In-process, the same tools are test_server_input.py's.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.mcp.test_server_http import start, stop

# The slow tier (tests/README.md): MCP servers as subprocesses.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "tests.mcp.test_server_input:registry"
SERVE = ["-m", "toolbus", "mcp", "serve", REGISTRY]


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    proc, url = start([*SERVE, "--http", "--port", "0"])
    yield url
    assert stop(proc) == 0


@asynccontextmanager
async def client(where: str, url: str, mode: str, **callbacks: Any) -> AsyncIterator[Client]:
    if where == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=SERVE, env={"PYTHONPATH": str(ROOT)}, cwd=str(ROOT)
        )
        async with Client(params, mode=mode, **callbacks) as c:
            yield c
    else:
        async with (
            httpx.AsyncClient(timeout=30) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode, **callbacks) as c,
        ):
            yield c


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


wires = pytest.mark.parametrize("where", ["stdio", "http"])
modes = pytest.mark.parametrize("mode", ["legacy", "auto"])


@wires
@modes
async def test_the_person_answers_and_the_tool_goes_on(
    where: str, mode: str, http_url: str
) -> None:
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"seats": 2})

    async with client(where, http_url, mode, elicitation_callback=answer) as c:
        result = await c.call_tool("book", {"city": "Oslo"})
    assert not result.is_error, text(result)
    assert text(result) == "booked 2 to Oslo"
    assert asked == ["Seats to Oslo?"]


@wires
@modes
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_reach_the_tool(
    where: str, mode: str, action: str, http_url: str
) -> None:
    async def answer(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action=action)

    async with client(where, http_url, mode, elicitation_callback=answer) as c:
        result = await c.call_tool("book", {"city": "Rome"})
    assert text(result) == f"not booked: {action}"


@wires
@modes
async def test_an_answer_off_the_schema_is_an_error_result(
    where: str, mode: str, http_url: str
) -> None:
    async def answer(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"seats": 99})

    async with client(where, http_url, mode, elicitation_callback=answer) as c:
        result = await c.call_tool("book", {"city": "Rome"})
    assert result.is_error
    assert "'seats'" in text(result) and "99" not in text(result)


@wires
@modes
async def test_a_client_that_cannot_answer_gets_a_clear_error(
    where: str, mode: str, http_url: str
) -> None:
    async with client(where, http_url, mode) as c:  # no elicitation capability
        result = await c.call_tool("book", {"city": "Rome"})
    assert result.is_error
    assert "cannot be asked for input (no elicitation)" in text(result)


@wires
@modes
async def test_log_messages_reach_the_client_masked(where: str, mode: str, http_url: str) -> None:
    heard: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params)

    # (On 2026-07-28 a request opts in with its level; earlier, the server's default is info.)
    async with client(where, http_url, mode, logging_callback=on_log, log_level="info") as c:
        result = await c.call_tool("chatty", {"api_key": "sk-live-abcdefgh1234"})
    assert text(result) == "chatted"
    assert [p.level for p in heard] == ["info", "warning", "notice"]
    assert "sk-live-abcdefgh1234" not in repr(heard)
