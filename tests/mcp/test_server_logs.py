"""A server's log messages, as events of the call they came during
(`toolbus/mcp/_server_logs.py`), and passed on by a toolbus server that
serves the calling tool (`_server_progress.py`).

Peer: the `mcp` SDK's `MCPServer` (tests/mcp_servers/asking_server.py,
`chatter`), in-process and over stdio, on both protocols.
"""

from __future__ import annotations

import asyncio
import logging
import warnings

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

from tests.conftest import MakeExecutor
from tests.mcp_servers import asking_server
from tests.mcp_servers.peers import connect_asking
from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.mcp import build_server, connect
from toolbus.mcp._server_logs import logging_callback

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow

KEY = "sk-live-abcdefgh1234"

logger_server = MCPServer("logger")


@logger_server.tool()
async def login(password: str, pad: int, ctx: Context) -> str:
    """Logs what it tried, after `pad` characters."""
    with warnings.catch_warnings():  # (logging is deprecated as of 2026-07-28)
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.warning("x" * pad + f" tried password={password}", logger_name="auth")
    return "in"


def chatter_events(peer: str, make_executor: MakeExecutor, **options: object) -> list[bus.Progress]:
    with connect_asking(peer, **options) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry)
        with bus.Recorder(sender=ex) as rec:
            r = ex.execute(ToolCall(id="c1", name="chatter"))
            assert ex.drain_events()
    assert r.output == {"result": "chatted"}, r.error
    return [e for e in rec.of(bus.PROGRESS) if "server_log" in e.data]


def test_a_servers_log_messages_are_events_of_the_call_masked(
    peer: str, make_executor: MakeExecutor
) -> None:
    logged = chatter_events(peer, make_executor, log_level="debug")
    assert [e.call_id for e in logged] == ["c1"] * 3
    assert [(e.data["server_log"]["level"], e.data["server_log"]["data"]) for e in logged] == [
        ("info", "working"),
        ("warning", {"api_key": "***", "step": 2}),
        ("debug", "detail"),
    ]
    assert {e.data["server_log"]["logger"] for e in logged} == {"chatter"}
    assert logged[0].message == "MCP server 'asking' logged: working"
    assert KEY not in repr(logged)


def test_the_level_asked_for_is_the_least_sent(peer: str, make_executor: MakeExecutor) -> None:
    logged = chatter_events(peer, make_executor, log_level="warning")
    assert [e.data["server_log"]["level"] for e in logged] == ["warning"]


def test_a_bad_log_level_is_refused_at_connect() -> None:
    with pytest.raises(ValueError, match="log_level must be one of debug, info"):
        connect(asking_server.server, log_level="verbose")  # type: ignore[arg-type]


async def test_a_message_outside_any_call_is_a_python_log_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    callback = logging_callback(lambda: "asking", [])
    params = types.LoggingMessageNotificationParams(
        level="error", data={"token": KEY, "disk": "full"}, logger="store"
    )
    with caplog.at_level(logging.DEBUG, logger="toolbus.mcp.server"):
        await callback(params)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage() == ("MCP server 'asking' (store): {'token': '***', 'disk': 'full'}")


async def test_a_toolbus_server_passes_on_the_logs_of_the_server_its_tool_called(
    make_executor: MakeExecutor,
) -> None:
    """An `MCPTool` served in turn: the inner server's messages reach the outer
    client as log messages of its call (not as progress)."""
    heard: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params)

    conn = await asyncio.to_thread(connect, asking_server.server, log_level="info")
    try:
        registry = ToolRegistry()
        conn.register(registry)
        executor = Executor(registry, timeout=30)
        try:
            async with Client(
                build_server(registry, executor), mode="legacy", logging_callback=on_log
            ) as client:
                result = await client.call_tool("chatter", {})
        finally:
            await asyncio.to_thread(executor.close)
    finally:
        await asyncio.to_thread(conn.close)
    assert not result.is_error
    assert [(p.level, p.data, p.logger) for p in heard] == [
        ("info", "working", "chatter"),
        ("warning", {"api_key": "***", "step": 2}, "chatter"),
    ]


async def test_a_served_tool_in_a_worker_process_logs_to_the_client_masked() -> None:
    """`ctx.log` in a `ProcessBackend` worker travels back to the agent, which
    writes it and sends it to the client, the call's secrets scrubbed."""
    from tests import process_tools
    from toolbus.scanning import ContentScanner

    registry = ToolRegistry()
    registry.tool(backend="process", read_only=True)(process_tools.log_mail)
    heard: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        heard.append(params)

    executor = Executor(registry, timeout=30, scanner=ContentScanner())
    try:
        async with Client(
            build_server(registry, executor), mode="legacy", logging_callback=on_log
        ) as client:
            result = await client.call_tool("log_mail", {"mail": "jane.doe@example.org"})
    finally:
        await asyncio.to_thread(executor.close)
    assert not result.is_error
    assert [(p.level, p.logger, p.data) for p in heard] == [
        ("info", "log_mail", "writing to [REDACTED:email]")
    ]


def test_a_long_log_line_is_scrubbed_before_it_is_cut(make_executor: MakeExecutor) -> None:
    """The line of a message published as progress was cut at 500 characters
    and scrubbed after: the part of a secret before the cut showed."""
    secret = "Pw-" + "Zq9xVv7K" * 12
    registry = ToolRegistry()
    with connect(logger_server, log_level="info") as conn:
        conn.register(registry)
        ex = make_executor(registry)
        with bus.Recorder(bus.PROGRESS, sender=ex) as rec:
            r = ex.execute(ToolCall(name="login", arguments={"password": secret, "pad": 470}))
            assert ex.drain_events()
    assert r.status == "ok", r.error
    (logged,) = [e for e in rec.of(bus.PROGRESS) if "server_log" in e.data]
    # The secret began before the cut (character 497 of the line) and ended
    # after it; masked, it fits.
    assert logged.message.endswith(" tried password=***")
    assert secret[:4] not in repr(logged)
