"""The MCP client follows the server's tool list: announced changes
(`notifications/tools/list_changed` before 2026-07-28, `subscriptions/listen`
since), a listing's `ttlMs`, and `refresh()` update the registered tools
without dropping calls.

Peers: the `mcp` SDK's `MCPServer` and low-level `Server`
(tests/mcp_servers/spec_server.py), in-process and over stdio, each with the
2026-07-28 protocol and with the initialize handshake of earlier versions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp.server import Server

from tests.conftest import MakeExecutor, wait_until
from tests.mcp_servers import spec_server
from tests.mcp_servers.peers import PEERS, connect_spec, use_peer
from toolbus import ToolCall, ToolRegistry
from toolbus.mcp import MCPConnection, connect
from toolbus.models import ErrorCode

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


@pytest.fixture(autouse=True)
def _unflipped() -> Iterator[None]:
    """The low-level server's listing is module state that a test's `flip` call
    changes: each test starts and ends with it unflipped (in random order a test
    after one that flipped it saw `flipped` listed from the start)."""
    spec_server.reset_lowlevel()
    yield
    spec_server.reset_lowlevel()


@pytest.fixture(params=PEERS)
def peer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    use_peer(request.param, monkeypatch)
    spec_server.reset()
    yield request.param
    spec_server.reset()


def listed(conn: MCPConnection, registry: ToolRegistry, name: str, present: bool) -> None:
    wait_until(lambda: (name in registry) is present, 10.0, f"{name} listed: {present}")


def test_a_list_change_mid_batch_loses_no_call(peer: str, make_executor: MakeExecutor) -> None:
    with connect_spec(peer) as conn:
        registry = ToolRegistry()
        # One call per tool at a time: the second and third old_tool wait in toolbus.
        conn.register(registry, max_concurrency=1, timeout=20)
        executor = make_executor(registry, max_parallel=16)
        calls = [
            call("old_tool"),  # in flight when the server drops old_tool: it finishes
            call("old_tool"),  # waiting in toolbus: rejected, TOOL_NOT_FOUND
            call("old_tool"),
            call("change_tools", after_entered=1),  # the server changes its list
            call("weather", city="Oslo"),
            call("new_tool"),  # unknown when the batch came
        ]
        before = conn.status().listings
        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(executor.execute_batch, calls)
            listed(conn, registry, "new_tool", True)
            assert "old_tool" not in registry
            assert executor.execute(call("open_gate")).status == "ok"
            results = batch.result(20)
        assert conn.status().listings > before
        added = executor.execute(call("new_tool"))
    assert len(results) == len(calls)
    outcomes = [(r.status, r.error_code) for r in results]
    assert outcomes == [
        ("ok", None),
        ("rejected", ErrorCode.TOOL_NOT_FOUND),
        ("rejected", ErrorCode.TOOL_NOT_FOUND),
        ("ok", None),
        ("ok", None),
        ("rejected", ErrorCode.TOOL_NOT_FOUND),
    ], [r.error for r in results]
    assert results[1].error == "Unknown tool 'old_tool': MCP server 'spec' no longer offers it"
    assert results[1].attempts == 0
    assert added.output == {"result": "brand new"}


def test_a_new_name_that_is_taken_is_skipped_and_logged(
    peer: str, make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    registry = ToolRegistry()

    @registry.tool
    def new_tool() -> str:
        """Ours, not the server's."""
        return "local"

    with caplog.at_level(logging.INFO, logger="toolbus.mcp"), connect_spec(peer) as conn:
        made = conn.tools()  # not registered: marked when the server drops one
        conn.register(registry)
        narrow = ToolRegistry()
        conn.register(narrow, only=["weather"], prefix="n_")
        executor = make_executor(registry, timeout=10)
        assert executor.execute(call("change_tools")).status == "ok"
        listed(conn, registry, "old_tool", False)
    assert executor.execute(call("new_tool")).output == "local"
    assert "MCP server 'spec' added 'new_tool', but a tool named 'new_tool' is already " \
        "registered: skipped" in caplog.text  # fmt: skip
    assert "MCP server 'spec' removed 'old_tool': 'old_tool' unregistered" in caplog.text
    assert narrow.names() == ["n_weather"]  # `only` keeps new tools out
    assert [t.removed for t in made if t.remote_name == "old_tool"] == [True]
    assert not any(t.removed for t in made if t.remote_name != "old_tool")


def test_refresh_applies_a_change_nobody_announced(make_executor: MakeExecutor) -> None:
    with connect_spec("in-process", lowlevel=True) as conn:
        registry = ToolRegistry()
        conn.register(registry, prefix="ll_")
        flip = registry.get("ll_flip")
        spec_server._Listing.flipped = True  # the low-level server announces nothing
        assert "ll_flipped" not in registry
        assert "flipped" in [s.name for s in conn.refresh()]
        assert make_executor(registry).execute(call("ll_flipped")).output == "here"
        # A changed definition: a new tool in its place; the old one still works.
        changed = registry.get("ll_flip")
        assert changed is not flip and changed is not None and flip is not None
        assert (flip.description, changed.description) == (
            "Add a tool, telling no one.",
            "Flipped already.",
        )
        assert not flip.removed  # type: ignore[attr-defined]


@pytest.mark.parametrize("where", ["in-process", "stdio"])
def test_the_listings_ttl_makes_a_later_call_list_again(
    where: str, make_executor: MakeExecutor
) -> None:
    # ttlMs is a 2026-07-28 field; this server sets 300 ms and announces nothing.
    with connect_spec(where, lowlevel=True) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        executor = make_executor(registry, timeout=10)
        assert executor.execute(call("flip")).status == "ok"
        # Time passing is the claim: the listing's TTL runs out (a slow machine only waits longer).
        time.sleep(spec_server.TTL_MS / 1000 + 0.1)
        assert executor.execute(call("good_shape")).status == "ok"  # lists again, behind
        listed(conn, registry, "flipped", True)
        assert executor.execute(call("flipped")).output == "here"


def test_a_name_listed_twice_does_not_half_register() -> None:
    """A tool name listed twice by the server left the registry half registered (review 12)."""

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
