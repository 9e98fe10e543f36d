"""The MCP client against npm's `@modelcontextprotocol/server-everything`, the
TypeScript SDK's reference server (2025-11-25 protocol: the client falls back
from discovery to the initialize handshake), over stdio.

The test command installs it at a pinned version into .cache/npm; elsewhere set
MCP_EVERYTHING_SERVER to its dist/index.js, or these tests skip and say why.
Covered: annotations, structured content with its outputSchema, progress
(its long-running operation), a timeout and the call after it, images,
resource links, embedded text and blobs, and how each reaches the providers.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.mcp_servers.peers import everything_server
from tests.provider_tools import wire
from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.mcp import MCPConnection, connect_stdio
from toolbus.providers import anthropic as tb_anthropic
from toolbus.providers import openai as tb_openai

# The slow tier (tests/README.md): npm's reference MCP server started.
pytestmark = pytest.mark.slow


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


@pytest.fixture(scope="module")
def everything() -> Iterator[MCPConnection]:
    with connect_stdio("node", [everything_server(), "stdio"], idempotent_hints=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def executor(everything: MCPConnection) -> Iterator[Executor]:
    registry = ToolRegistry()
    everything.register(registry, prefix="ev_")
    with Executor(registry, timeout=10) as executor:
        yield executor


def test_server_and_annotations(everything: MCPConnection) -> None:
    assert everything.server_name == "mcp-servers/everything"
    tools = {t.remote_name: t for t in everything.tools()}
    structured = tools["get-structured-content"]
    assert structured.annotations == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert structured.read_only and not structured.open_world
    gzip = tools["gzip-file-as-resource"]  # mutating, idempotent, open world
    assert not gzip.read_only and gzip.idempotent and gzip.open_world
    assert not everything.tools(idempotent_hints=False)[0].idempotent


def test_structured_content_matches_its_schema(
    everything: MCPConnection, executor: Executor
) -> None:
    spec = next(s for s in everything.specs if s.name == "get-structured-content")
    assert spec.output_schema is not None
    result = executor.execute(call("ev_get-structured-content", location="Chicago"))
    assert result.status == "ok", result.error
    assert result.output == {
        "temperature": 36,
        "conditions": "Light rain / drizzle",
        "humidity": 82,
    }


def test_progress_of_the_long_running_operation(executor: Executor) -> None:
    with bus.Recorder("tool:progress", sender=executor) as recorder:
        result = executor.execute(call("ev_trigger-long-running-operation", duration=0.4, steps=4))
        events = recorder.wait_for("tool:progress", 4, timeout=5)
    assert result.status == "ok", result.error
    assert [e.message for e in events] == ["1/4", "2/4", "3/4", "4/4"]
    assert [e.fraction for e in events] == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_a_timeout_cancels_and_the_next_call_works(
    everything: MCPConnection, executor: Executor
) -> None:
    fast = Executor(executor.registry, timeout=0.5)
    try:
        slow = fast.execute(call("ev_trigger-long-running-operation", duration=10, steps=5))
    finally:
        fast.close()
    assert slow.status == "timeout"
    assert executor.execute(call("ev_echo", message="after")).output == "Echo: after"
    assert everything.status().drops == 0


def test_an_image_goes_to_providers_as_an_image(executor: Executor) -> None:
    image = executor.execute(call("ev_get-tiny-image"))
    assert image.status == "ok", image.error
    (png,) = [a for a in image.attachments if a.type == "image/png"]
    assert base64.b64decode(png.data or "").startswith(b"\x89PNG")
    blocks: Any = tb_anthropic.tool_result_blocks([image])[0]["content"]
    assert [b["type"] for b in blocks] == ["text", "image"]
    assert blocks[1]["source"]["data"] == png.data
    (item,) = wire(tb_openai.responses_tool_outputs([image], []))
    parts = item["output"]
    assert parts[1] == {"type": "input_image", "image_url": f"data:image/png;base64,{png.data}"}
    message = tb_openai.chat_attachment_message([image])
    assert message is not None and len(list(message["content"])) == 2


def test_resource_links_stay_lines_of_text(executor: Executor) -> None:
    links = executor.execute(call("ev_get-resource-links", count=2))
    assert links.status == "ok", links.error
    assert [(a.url, a.data) for a in links.attachments] == [
        ("demo://resource/dynamic/blob/1", None),
        ("demo://resource/dynamic/text/2", None),
    ]
    content = tb_anthropic.tool_result_blocks([links])[0]["content"]
    assert isinstance(content, str)
    assert "[attachment: text/plain Text Resource 2]" in content
    assert tb_openai.chat_attachment_message([links]) is None


def test_embedded_resources(executor: Executor) -> None:
    text = executor.execute(call("ev_get-resource-reference", resourceType="Text", resourceId=1))
    assert text.status == "ok", text.error
    assert "Resource 1: This is a plaintext resource" in text.output  # embedded text: in the text
    blob = executor.execute(call("ev_get-resource-reference", resourceType="Blob", resourceId=1))
    assert blob.status == "ok", blob.error
    (file,) = blob.attachments
    assert (file.type, file.url) == ("text/plain", "demo://resource/dynamic/blob/1")
    blocks: Any = tb_anthropic.tool_result_blocks([blob])[0]["content"]
    assert blocks[1]["type"] == "document"
    assert blocks[1]["source"]["data"].startswith("Resource 1: This is a base64 blob")
    (item,) = wire(tb_openai.responses_tool_outputs([blob], []))
    parts = item["output"]
    assert parts[1]["type"] == "input_file" and parts[1]["filename"] == "1"
    # A gzip file: no provider takes one natively, so it stays a line.
    data = "data:text/plain;base64," + base64.b64encode(b"hello").decode()
    arguments = {"name": "hello.gz", "data": data, "outputType": "resource"}
    gzip = executor.execute(ToolCall(name="ev_gzip-file-as-resource", arguments=arguments))
    assert gzip.status == "ok", gzip.error
    assert [a.type for a in gzip.attachments] == ["application/gzip"]
    assert isinstance(tb_anthropic.tool_result_blocks([gzip])[0]["content"], str)
