"""Rich content from MCP results reaches the providers as their own blocks:
Anthropic `image`/`document` blocks in a `tool_result`, OpenAI Responses
`input_image`/`input_file` parts; Chat Completions tool messages carry text
only (a line per attachment) and `chat_attachment_message` the images and PDFs.
A bare resource link (a URI, no data) stays a line of text everywhere.

Peer: the `mcp` SDK's `MCPServer` (spec_server.report), in-process and over
stdio; then the messages go through the real `anthropic` and `openai` clients
(over a mock transport that records what they send).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import httpx2
import openai
import pytest

pytest.importorskip("mcp")

import mcp_types as types

from tests.conftest import MakeExecutor
from tests.mcp_servers import spec_server
from tests.mcp_servers.peers import connect_spec, use_peer
from tests.mcp_servers.scripted import Peer
from tests.provider_tools import load, wire
from toolbus import Executor, ToolCall, ToolOutput, ToolRegistry, ToolResult
from toolbus.mcp import connect
from toolbus.models import Attachment
from toolbus.providers import anthropic as anthropic_format
from toolbus.providers import anthropic as tb_anthropic
from toolbus.providers import openai as tb_openai

PNG, PDF = spec_server.PNG, spec_server.PDF
NOTES_TEXT = "Notes: the fjord is 204 km long.\n"
LINK_LINE = "[attachment: text/csv big.csv]"


@pytest.fixture(scope="module", params=["in-process", "stdio"])
def report(request: pytest.FixtureRequest) -> ToolResult:
    """The result of `report`, as toolbus made it from the server's answer."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_peer(request.param, monkeypatch)
        with connect_spec(request.param) as conn:
            registry = ToolRegistry()
            conn.register(registry, only=["report"])
            with Executor(registry, timeout=10) as executor:
                result = executor.execute(ToolCall(id="call_report", name="report"))
    assert result.status == "ok", result.error
    return result


def test_the_attachments_as_toolbus_keeps_them(report: ToolResult) -> None:
    assert report.output == "the report"
    assert [(a.type, a.url, a.data is not None) for a in report.attachments] == [
        ("image/png", None, True),
        ("application/pdf", "file:///reports/report.pdf", True),
        ("text/plain", "file:///reports/notes.txt", True),
        ("text/csv", "file:///reports/big.csv", False),  # a link: no data
    ]


def test_anthropic_tool_result_blocks(report: ToolResult) -> None:
    (block,) = wire(tb_anthropic.tool_result_blocks([report]))
    assert block["is_error"] is False
    assert block["content"] == [
        {"type": "text", "text": f"the report\n{LINK_LINE}"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": NOTES_TEXT},
        },
    ]
    (as_text,) = tb_anthropic.tool_result_blocks([report], attachments="text")
    assert isinstance(as_text["content"], str)
    assert as_text["content"].count("[attachment: ") == 4


def test_openai_responses_output_parts(report: ToolResult) -> None:
    (item,) = wire(tb_openai.responses_tool_outputs([report], []))
    assert item["type"] == "function_call_output"
    assert item["output"] == [
        {"type": "input_text", "text": f"the report\n{LINK_LINE}"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
        {
            "type": "input_file",
            "file_data": f"data:application/pdf;base64,{PDF}",
            "filename": "report.pdf",
        },
        {
            "type": "input_file",
            "file_data": f"data:text/plain;base64,{spec_server.NOTES}",
            "filename": "notes.txt",
        },
    ]


def test_openai_chat_text_and_a_follow_up_message(report: ToolResult) -> None:
    (tool_message,) = tb_openai.chat_tool_messages([report])
    assert tool_message["content"] == (
        "the report\n[attachment: image/png]\n[attachment: application/pdf "
        f"file:///reports/report.pdf]\n[attachment: text/plain file:///reports/notes.txt]\n{LINK_LINE}"
    )
    follow_up = tb_openai.chat_attachment_message([report])
    assert follow_up is not None
    assert wire(follow_up) == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Attachments of tool call call_report (report):"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {
                "type": "file",
                "file": {
                    "file_data": f"data:application/pdf;base64,{PDF}",
                    "filename": "report.pdf",
                },
            },
        ],
    }


def test_a_bare_link_stays_a_line_of_text() -> None:
    link = Attachment(type="text/csv", url="file:///big.csv", title="big.csv")
    audio = Attachment(type="audio/wav", data=base64.b64encode(b"RIFF").decode())
    result = ToolResult(
        call_id="c", name="t", status="ok", output="rows", attachments=(link, audio)
    )
    text = "rows\n[attachment: text/csv big.csv]\n[attachment: audio/wav]"
    assert tb_anthropic.tool_result_blocks([result])[0]["content"] == text
    assert tb_openai.responses_tool_outputs([result], [])[0]["output"] == text  # type: ignore[typeddict-item]
    assert tb_openai.chat_attachment_message([result]) is None
    # An image alone, without text: no "(no output)" block beside it.
    image = ToolResult(
        call_id="c", name="t", status="ok", attachments=(Attachment(type="image/png", data=PNG),)
    )
    content = tb_anthropic.tool_result_blocks([image])[0]["content"]
    assert [b["type"] for b in content] == ["image"]  # type: ignore[index]


# -- through the real clients --------------------------------------------------------------


class Recorder:
    """Answers with a recorded response and keeps the JSON body the SDK sent."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(json.loads(request.content))
        return httpx2.Response(200, json=self.body)


def test_the_sdks_send_the_blocks_as_built(report: ToolResult) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Make the report"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_report", "name": "report", "input": {}}],
        },
        tb_anthropic.tool_results_message([report]),
    ]
    claude = Recorder(load("anthropic_final"))
    with anthropic.Anthropic(
        api_key="sk-ant-test",
        base_url="http://toolbus.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(claude)),
        max_retries=0,
    ) as client:
        client.messages.create(model="m", max_tokens=64, messages=messages)
    assert claude.sent[0]["messages"][2] == wire(messages[2])

    outputs = tb_openai.responses_tool_outputs([report], [])
    gpt = Recorder(load("openai_responses_final"))
    with openai.OpenAI(
        api_key="sk-test",
        base_url="http://toolbus.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(gpt)),
        max_retries=0,
    ) as client:
        client.responses.create(model="m", input=[*outputs])
    assert gpt.sent[0]["input"] == wire(outputs)


def test_provider_blocks_through_an_executor(make_executor: MakeExecutor) -> None:
    # The same path without MCP: a tool's own attachments are carried alike.
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def chart() -> Any:
        return ToolOutput(content="a chart", attachments=(Attachment(type="image/png", data=PNG),))

    result = make_executor(registry).execute(ToolCall(name="chart"))
    content = tb_anthropic.tool_result_blocks([result])[0]["content"]
    assert [b["type"] for b in content] == ["text", "image"]  # type: ignore[index]


def test_a_bad_base64_image_does_not_become_a_provider_image_block() -> None:
    """An image with bad base64 became a provider image block (the API refuses the request)
    (review 12)."""
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


def test_only_sound_base64_within_the_providers_limits_goes_as_a_block() -> None:
    """Base64 with a line break, or over the providers' size limit, went as an image block
    (review 12)."""
    import base64

    from toolbus.models import Attachment
    from toolbus.providers._media import MAX_IMAGE_BYTES, kind_of

    png = base64.b64encode(b"\x89PNG" + b"\0" * 100).decode()
    assert kind_of(Attachment(type="image/png", data=png)) == "image"
    assert kind_of(Attachment(type="image/png", data=png[:40] + "\n" + png[40:])) is None
    big = base64.b64encode(b"\0" * (MAX_IMAGE_BYTES + 1)).decode()
    assert kind_of(Attachment(type="image/png", data=big)) is None
    assert kind_of(Attachment(type="application/pdf", data="%%% not base64")) is None
