"""A server's resources and prompts, read through an `MCPConnection`
(`toolbus/mcp/_resources.py`).

Peer: tests/mcp_servers/library_server.py (the SDK's `MCPServer`), in-process
and over stdio, each with the 2026-07-28 protocol and with the initialize
handshake of 2025-11-25.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import threading
from pathlib import Path

import mcp_types as types
import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from tests.mcp_servers import library_server
from toolbus import ErrorCode, ToolCall, ToolRegistry
from toolbus.mcp import MCPConnectError, MCPConnection, connect, connect_stdio
from toolbus.tools import DuplicateToolError

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow

LIBRARY = str(Path(__file__).parents[1] / "mcp_servers" / "library_server.py")


def connect_library(peer: str) -> MCPConnection:
    if peer.startswith("in-process"):
        return connect(library_server.server)
    return connect_stdio(sys.executable, [LIBRARY])


def test_resources_are_listed_and_read(peer: str) -> None:
    with connect_library(peer) as conn:
        listed = {r.name: (str(r.uri), r.mime_type) for r in conn.resources()}
        assert listed == {
            "guide": ("docs://guide", "text/plain"),
            "logo": ("docs://logo", "image/png"),
            "slow": ("docs://slow", "text/plain"),
        }
        (template,) = conn.resource_templates()
        assert template.uri_template == "docs://chapters/{number}"
        (text,) = conn.read_resource("docs://guide")
        assert isinstance(text, types.TextResourceContents)
        assert text.text == library_server.GUIDE
        (blob,) = conn.read_resource("docs://logo")
        assert isinstance(blob, types.BlobResourceContents)
        assert base64.b64decode(blob.blob) == library_server.LOGO
        (chapter,) = conn.read_resource("docs://chapters/7")
        assert isinstance(chapter, types.TextResourceContents)
        assert chapter.text == "Chapter 7: it goes on."


def test_prompts_are_listed_and_filled(peer: str) -> None:
    with connect_library(peer) as conn:
        (prompt,) = conn.prompts()
        assert prompt.name == "summarize"
        assert [(a.name, a.required) for a in prompt.arguments or ()] == [
            ("topic", True),
            ("style", False),
        ]
        got = conn.get_prompt("summarize", {"topic": "retries"})
        (message,) = got.messages
        assert message.role == "user"
        assert isinstance(message.content, types.TextContent)
        assert message.content.text == "Write a short summary of retries."


def test_what_the_server_refuses_is_an_error_naming_it(peer: str) -> None:
    with connect_library(peer) as conn:
        with pytest.raises(MCPConnectError, match="could not read the resource 'docs://nowhere'"):
            conn.read_resource("docs://nowhere")
        with pytest.raises(MCPConnectError, match="could not give the prompt 'summarize'"):
            conn.get_prompt("summarize", {})  # its topic is required
        with pytest.raises(TypeError, match="arguments must map strings to strings"):
            conn.get_prompt("summarize", {"topic": 3})  # type: ignore[dict-item]
        # The connection goes on.
        assert [r.name for r in conn.resources()] == ["guide", "logo", "slow"]
        with pytest.raises(TypeError, match="got str"):
            conn.get_prompt("summarize", "abc")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            conn.resources(timeout=float("nan"))
    with pytest.raises(MCPConnectError, match="is closed"):
        conn.resources()


def test_the_async_twins(peer: str) -> None:
    async def main() -> None:
        with connect_library(peer) as conn:
            names = [r.name for r in await conn.aresources()]
            (text,) = await conn.aread_resource("docs://guide")
            prompt = await conn.aget_prompt("summarize", {"topic": "x", "style": "long"})
            assert names == ["guide", "logo", "slow"]
            assert isinstance(text, types.TextResourceContents)
            assert [p.name for p in await conn.aprompts()] == ["summarize"]
            assert len(await conn.aresource_templates()) == 1
            content = prompt.messages[0].content
            assert isinstance(content, types.TextContent) and "long summary" in content.text

    asyncio.run(main())


def test_resources_offered_to_the_model_as_two_read_only_tools(
    peer: str, make_executor: MakeExecutor
) -> None:
    with connect_library(peer) as conn:
        registry = ToolRegistry()
        made = conn.register(registry, prefix="lib_", resources_as_tools=True)
        assert made == []  # the server has no tools of its own
        assert sorted(registry.names()) == ["lib_list_resources", "lib_read_resource"]
        assert all(registry.get(n).read_only for n in registry.names())  # type: ignore[union-attr]
        ex = make_executor(registry)
        listed, guide, logo, missing, bad = ex.execute_batch(
            [
                ToolCall(name="lib_list_resources"),
                ToolCall(name="lib_read_resource", arguments={"uri": "docs://guide"}),
                ToolCall(name="lib_read_resource", arguments={"uri": "docs://logo"}),
                ToolCall(name="lib_read_resource", arguments={"uri": "docs://nowhere"}),
                ToolCall(name="lib_read_resource", arguments={"url": "docs://guide"}),
            ]
        )
    assert [(r["uri"], r["name"], r["mimeType"]) for r in listed.output] == [
        ("docs://guide", "guide", "text/plain"),
        ("docs://logo", "logo", "image/png"),
        ("docs://slow", "slow", "text/plain"),
    ]
    assert guide.output == library_server.GUIDE
    (image,) = logo.attachments
    assert image.type == "image/png" and base64.b64decode(image.data or "") == library_server.LOGO
    assert missing.status == "error"
    assert (missing.error or "").startswith("MCP server 'library' could not read 'docs://nowhere'")
    assert bad.error_code == ErrorCode.INVALID_ARGUMENTS


def test_reads_run_side_by_side_and_leave_the_connection_free(peer: str) -> None:
    """They went through the connection's mailbox one at a time: reads of a
    slow resource took 1, 2, 3 s ... and failed past their timeout, and
    `close()` returned with the connection still open (found by review)."""
    with connect_library(peer) as conn:
        results: list[object] = []

        def read() -> None:
            results.append(conn.read_resource("docs://slow", timeout=30))

        threads = [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(results) == 2
        if peer.startswith("in-process"):
            assert library_server.readers["peak"] == 2  # the two met: side by side
        # The lifecycle is not queued behind a read: close() ends one under way.
        stuck = threading.Thread(target=lambda: results.append(_failed(conn)), daemon=True)
        stuck.start()
        conn.close()
        assert conn.closed
        stuck.join(30)
        assert not stuck.is_alive()


def _failed(conn: MCPConnection) -> object:
    try:
        return conn.read_resource("docs://slow", timeout=30)
    except MCPConnectError as e:
        return e


def test_resource_tools_take_the_tools_limits_and_refuse_a_name_taken(
    make_executor: MakeExecutor,
) -> None:
    """They had none of `register()`'s limits nor the server's group; a server
    tool named like one of them got registered before the error (found by review)."""
    from mcp.server.mcpserver import MCPServer

    clashing = MCPServer("clash")

    @clashing.tool()
    def read_resource(uri: str) -> str:
        return "the server's own"

    with connect(clashing, server_max_concurrency=1) as conn:
        registry = ToolRegistry()
        with pytest.raises(DuplicateToolError, match="read_resource"):
            conn.register(registry, resources_as_tools=True)
        assert len(registry) == 0  # nothing registered
        listing, reading = conn.resource_tools(prefix="x_", timeout=7)
        assert (reading.name, reading.timeout, reading.groups) == (
            "x_read_resource",
            7,
            ("mcp:clash",),
        )
        assert listing.read_only and reading.read_only


def test_a_refused_uri_is_scrubbed_before_it_is_cut(make_executor: MakeExecutor) -> None:
    """The URI quoted in a refusal was cut at 200 characters before the
    executor scrubbed it: a URI holding a secret showed its first part."""
    token = "docs://nowhere/" + "T0k3nQ9z" * 30
    with connect(library_server.server) as conn:
        registry = ToolRegistry()
        conn.register(registry, prefix="lib_", resources_as_tools=True)
        ex = make_executor(registry, secret_keys=["uri"])
        r = ex.execute(ToolCall(name="lib_read_resource", arguments={"uri": token}))
    assert (r.error or "").startswith("MCP server 'library' could not read '***'"), r.error
    assert token[15:23] not in (r.error or "")
