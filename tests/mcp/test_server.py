"""`toolbus mcp serve`: a registry served over stdio, driven by the real MCP client.

The server is the command line itself, started as a subprocess; the client is
the MCP SDK's, once with the 2026 protocol (discovery) and once with the
initialize handshake of earlier versions. The same features in-process and
over HTTP: test_server_features.py, test_server_http.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters
from mcp.types import (
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from typer.testing import CliRunner

from tests.conftest import wait_until, wait_until_async
from tests.mcp_servers.registry_module import registry as served_registry
from toolbus import Executor, ToolCall, ToolRegistry, format_result_for_context
from toolbus.cli import app
from toolbus.mcp import call_result, connect_stdio, load_registry, mcp_tool
from toolbus.mcp._server_output import unwrapped_schema

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "tests.mcp_servers.registry_module:served"
SERVE = [
    "-c",
    "from toolbus.cli import main; main()",
    "mcp",
    "serve",
    REGISTRY,
    "--timeout",
    "10",
    "--name",
    "toolbus-test",
]
PARAMS = StdioServerParameters(
    command=sys.executable, args=SERVE, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)}
)

# The async tests share the module's event loop, and so the fixture's client.
on_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["auto", "legacy"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """One server process per protocol mode, shared by this module's tests.

    The client is entered and exited by one task (anyio's cancel scopes need
    that); the tests call it from their own tasks.
    """
    ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
    done = asyncio.Event()

    async def own() -> None:
        try:
            async with Client(PARAMS, mode=request.param) as c:
                ready.set_result(c)
                await done.wait()
        except BaseException as e:
            if not ready.done():
                ready.set_exception(e)
            raise

    owner = asyncio.create_task(own())
    yield await asyncio.wait_for(ready, 20)
    done.set()
    await asyncio.wait_for(owner, 20)


@on_module_loop
async def test_lists_every_tool_with_schema_and_hints(client: Client) -> None:
    assert client.server_info is not None
    assert client.server_info.name == "toolbus-test"
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == set(served_registry.names())
    add = listed["add"]
    assert add.description == "Add two numbers."
    assert add.input_schema["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert add.input_schema["required"] == ["a", "b"]
    hints = {name: t.annotations.read_only_hint for name, t in listed.items() if t.annotations}
    assert hints == {t.name: t.read_only for t in served_registry.list()}
    assert hints["add"] is True
    assert hints["save_note"] is False
    # All four hints, always given: readOnly, destructive (not read_only unless
    # said), idempotent, openWorld.
    four = {
        name: (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint)
        for name, t in listed.items()
        if (a := t.annotations) is not None
    }
    assert four["add"] == (True, False, False, True)
    assert four["save_note"] == (False, False, False, True)  # destructive=False
    assert four["login"] == (False, True, False, True)
    assert four["set_mode"] == (False, True, True, False)  # idempotent, closed world
    assert four["reading"] == (True, False, False, False)
    # Output schemas: typed returns have one, wrapped unless an object's.
    assert add.output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "x-toolbus-wrapped": True,  # a toolbus client unwraps its outputs
    }
    forecast = listed["forecast"].output_schema
    assert forecast is not None
    assert forecast["type"] == "object"
    assert forecast["required"] == ["city", "celsius", "summary"]
    reading = listed["reading"].output_schema
    assert reading is not None
    assert reading["properties"]["value"] == {"title": "Value", "type": "number"}
    assert listed["chart"].output_schema is None  # returns a ToolOutput: untyped


@on_module_loop
async def test_a_call_works(client: Client) -> None:
    result = await client.call_tool("add", {"a": 2, "b": 40})
    assert not result.is_error
    assert result.content == [TextContent(text="42")]
    assert result.structured_content == {"result": 42}
    city = await client.call_tool("city", {"name": "Oslo"})
    assert city.structured_content == {"name": "Oslo", "country": "Norway", "population": 709037}
    # The SDK's client checks structured content against the listed schema.
    weather = await client.call_tool("forecast", {"city": "Oslo"})
    assert weather.structured_content == {"city": "Oslo", "celsius": 21.5, "summary": "sunny"}
    reading = await client.call_tool("reading", {"sensor": "t1"})
    assert reading.structured_content == {"sensor": "t1", "value": 0.5}


@on_module_loop
async def test_an_erroring_tool_gives_is_error(client: Client) -> None:
    result = await client.call_tool("fail", {"reason": "no disk"})
    assert result.is_error
    assert result.content == [TextContent(text="cannot: no disk (TOOL_ERROR)")]
    assert result.meta is not None
    assert result.meta["toolbus/error_code"] == "TOOL_ERROR"


@on_module_loop
async def test_a_hung_tool_times_out_with_is_error(client: Client) -> None:
    result = await client.call_tool("hang", {})
    assert result.is_error
    assert result.content == [
        TextContent(text="Tool 'hang' timed out after 0.5s (EXECUTION_TIMEOUT)")
    ]
    assert result.meta is not None
    assert result.meta["toolbus/status"] == "timeout"
    # The server is fine afterwards.
    assert not (await client.call_tool("add", {"a": 1, "b": 1})).is_error


@on_module_loop
async def test_bad_arguments_and_unknown_tools_are_is_error(client: Client) -> None:
    bad = await client.call_tool("add", {"a": "two"})
    assert bad.is_error
    text = bad.content[0]
    assert isinstance(text, TextContent)
    assert text.text.startswith("Invalid arguments for 'add'")
    assert text.text.endswith("(INVALID_ARGUMENTS)")
    unknown = await client.call_tool("ad", {})
    assert unknown.is_error
    [text] = unknown.content
    assert isinstance(text, TextContent)
    assert text.text.startswith("Unknown tool 'ad'. Did you mean 'add'? Available tools: add, ")
    assert text.text.endswith(" (TOOL_NOT_FOUND)")


@on_module_loop
async def test_secrets_are_masked(client: Client) -> None:
    result = await client.call_tool("login", {"user": "ada", "password": "correct-horse-42"})
    assert result.is_error
    assert result.content == [TextContent(text="wrong password *** for ada (TOOL_ERROR)")]


@on_module_loop
async def test_custom_tools_and_images(client: Client) -> None:
    shout = await client.call_tool("shout", {"input": "hello"})
    assert shout.content == [TextContent(text="HELLO")]
    chart = await client.call_tool("chart", {})
    caption, image = chart.content
    assert caption == TextContent(text="a red dot")
    assert isinstance(image, ImageContent)
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data).startswith(b"\x89PNG")


@on_module_loop
async def test_text_attachments_travel_as_text_resources(client: Client) -> None:
    """An attachment whose type is text and whose data is UTF-8 is served as an
    embedded *text* resource (what clients show), marked as a toolbus attachment;
    other data stays a base64 blob."""
    report = await client.call_tool("report", {})
    caption, csv, data, raw = report.content
    assert caption == TextContent(text="see the files")
    for block in (data, raw):
        assert isinstance(block, EmbeddedResource) and block.meta == {"toolbus/attachment": True}
    assert isinstance(csv, EmbeddedResource)
    assert csv.meta == {"toolbus/attachment": True, "toolbus/title": "cold"}
    assert isinstance(csv, EmbeddedResource) and isinstance(csv.resource, TextResourceContents)
    assert (str(csv.resource.uri), csv.resource.mime_type, csv.resource.text) == (
        "file:///reports/cold.csv",
        "text/csv",
        "city,°C\nOslo,−3",
    )
    assert isinstance(data, EmbeddedResource) and isinstance(data.resource, TextResourceContents)
    assert (str(data.resource.uri), data.resource.text) == (
        "toolbus://attachment/2",
        '{"ok": true}',
    )
    assert isinstance(raw, EmbeddedResource) and isinstance(raw.resource, BlobResourceContents)
    assert raw.resource.blob == "//79"  # not UTF-8: the bytes as they were


@on_module_loop
async def test_progress_reaches_a_client_that_asks(client: Client) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    result = await client.call_tool("count_up", {"steps": 3}, progress_callback=on_progress)
    assert result.structured_content == {"result": 3}
    # All of it, in order, before the result.
    assert seen == [
        (1 / 3, 1.0, "step 1 of 3"),
        (2 / 3, 1.0, "step 2 of 3"),
        (1.0, 1.0, "step 3 of 3"),
    ]
    # No progress token, no notifications (and the call is the same).
    assert (await client.call_tool("count_up", {"steps": 2})).structured_content == {"result": 2}


@on_module_loop
async def test_a_cancelled_request_cancels_the_call(client: Client) -> None:
    state: dict[str, Any] = {}

    async def served(until: Callable[[dict[str, Any]], bool]) -> bool:
        reply = (await client.call_tool("finished", {"tool": "wait"})).structured_content
        assert reply is not None
        state.update(reply)
        return until(state)

    call = asyncio.create_task(client.call_tool("wait", {"seconds": 15}))
    await wait_until_async(lambda: served(lambda s: s["started"] == 1), 30, "the wait running")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await wait_until_async(
        lambda: served(lambda s: bool(s["ends"]) and s["interrupted"] > 0), 30, "the wait's end"
    )  # (its result can be out before its task sees the cancellation)
    assert state["ends"] == [["cancelled", "CANCELLED"]]
    assert state["interrupted"] == 1  # the tool's task was cancelled, not left running


@on_module_loop
async def test_parallel_calls_are_served_concurrently(client: Client) -> None:
    results = await asyncio.gather(*(client.call_tool("hang", {}) for _ in range(3)))
    assert all(r.is_error for r in results)  # three 0.5 s timeouts, side by side


# -- toolbus on both ends, and the pieces without a process ------------------------------------


def test_toolbus_client_against_toolbus_server() -> None:
    with connect_stdio(sys.executable, SERVE, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}) as conn:
        registry = ToolRegistry()
        conn.register(registry, prefix="remote_")
        assert {t.name for t in registry.list() if t.read_only} == {
            "remote_" + t.name for t in served_registry.list() if t.read_only
        }
        remote_add = registry.get("remote_add")
        assert remote_add is not None
        with Executor(registry, timeout=5) as executor:
            ok = executor.execute(ToolCall(name="remote_add", arguments={"a": 1, "b": 2}))
            hung = executor.execute(ToolCall(name="remote_hang", arguments={}))
            refused = executor.execute(ToolCall(name="remote_fail", arguments={"reason": "no"}))
            report = executor.execute(ToolCall(name="remote_report", arguments={}))
            chart = executor.execute(ToolCall(name="remote_chart", arguments={}))
    # The server wraps an int (`{"result": 3}`, its schema marked x-toolbus-wrapped);
    # this client unwraps both: the round trip keeps the tool's shape (issue 22).
    assert ok.output == 3
    assert remote_add.output_schema == served_registry.get("add").output_schema  # type: ignore[union-attr]
    assert hung.status == "error"
    assert hung.error == "Tool 'hang' timed out after 0.5s (EXECUTION_TIMEOUT)"
    # An error's code is said once, not once by each side.
    assert refused.error == "cannot: no"
    assert format_result_for_context(refused).count("(TOOL_ERROR)") == 1
    # Attachments come back as they went, text ones too (not joined to the text).
    served_report = served_registry.get("report")
    assert served_report is not None
    sent = served_report.execute({})
    assert report.output == "see the files"
    assert report.attachments == sent.attachments  # titles too (in `_meta`)
    served_chart = served_registry.get("chart")
    assert served_chart is not None
    assert chart.attachments == served_chart.execute({}).attachments  # an image's title


def test_mcp_tool_and_call_result_without_a_server() -> None:
    add = served_registry.get("add")
    assert add is not None
    described = mcp_tool(add)
    assert described.annotations == ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=False, open_world_hint=True
    )
    shout = served_registry.get("shout")
    assert shout is not None
    assert mcp_tool(shout).input_schema["required"] == ["input"]
    ok = add.execute({"a": 1, "b": 2})
    assert call_result(ok).content == [TextContent(text="3")]
    assert call_result(ok).structured_content is None  # no tool, no schema: a dict only
    assert call_result(ok, add).structured_content == {"result": 3}
    wrapped = mcp_tool(add).output_schema
    assert wrapped is not None and wrapped["x-toolbus-wrapped"] is True
    assert unwrapped_schema(wrapped, marked_only=True) == add.output_schema
    assert unwrapped_schema({**wrapped, "x-toolbus-wrapped": False}, marked_only=True) is None
    assert unwrapped_schema({**wrapped, "x-toolbus-wrapped": False}, marked_only=False) == (
        add.output_schema
    )


def test_load_registry_errors() -> None:
    assert load_registry(REGISTRY) is served_registry
    assert load_registry("tests.mcp_servers.registry_module:registry") is served_registry
    for spec, message in [
        ("no_colon", "expected module:attribute"),
        ("no.such.module:x", "cannot import"),
        ("tests.mcp_servers.registry_module:nothing", "has no attribute"),
        ("tests.mcp_servers.registry_module:PIXEL", "not a ToolRegistry"),
    ]:
        with pytest.raises(ValueError, match=message):
            load_registry(spec)


def test_cli_reports_a_bad_registry() -> None:
    result = CliRunner().invoke(app, ["mcp", "serve", "tests.mcp_servers.registry_module:PIXEL"])
    assert result.exit_code == 2
    assert "not a ToolRegistry" in result.output


def test_toolbus_works_without_the_mcp_package() -> None:
    script = (
        "import sys\n"
        "sys.modules['mcp'] = None  # as if it were not installed\n"
        "import toolbus, toolbus.cli\n"
        "from typer.testing import CliRunner\n"
        "result = CliRunner().invoke(toolbus.cli.app, ['mcp', 'serve', 'x:y'])\n"
        "print(result.exit_code, result.output)\n"
        "try:\n"
        "    import toolbus.mcp\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("2 toolbus mcp: toolbus.mcp needs the MCP SDK"), proc.stdout
    assert "ImportError: toolbus.mcp needs the MCP SDK: pip install 'toolbus[mcp]'" in proc.stdout


def test_a_lone_surrogate_in_a_served_output_does_not_take_the_stdio_server_down(
    tmp_path: Path,
) -> None:
    """A lone surrogate in a served output took the stdio server down (review 12)."""
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

        # Each call gets its one answer (the first may be an error, or carry
        # U+FFFD). The bound is a hang guard: a cold `python -m toolbus` on an
        # oversubscribed machine takes a while; a server that died fails at once.
        def answered() -> bool:
            assert server.poll() is None, f"the server exited ({server.returncode})"
            return {1, 2} <= {a.get("id") for a in answers}

        wait_until(answered, 120, "both answers")
    finally:
        server.kill()
        server.wait(10)


def test_an_attachment_with_data_travels_as_an_embedded_resource() -> None:
    """A served attachment that carried bytes (a PDF) went out as a bare
    `resource_link`, which drops them: a server relayed through `toolbus mcp
    serve` lost its embedded blobs (issue 22)."""
    from toolbus import Attachment, ToolOutput, ToolResult
    from toolbus.mcp._output import tool_output

    attachments = (
        Attachment(type="application/pdf", url="file:///tmp/report.pdf", data="JVBERi0x"),
        Attachment(type="application/octet-stream", data="AAEC"),  # no URL: one is made
        Attachment(type="image/png", data="iVBORw0K"),
        Attachment(type="text/html", url="https://example.com/page", title="page"),
    )
    result = ToolResult(
        call_id="c", name="t", status="ok", output="see attached", attachments=attachments
    )
    blocks = call_result(result).content
    assert [b.type for b in blocks] == ["text", "resource", "resource", "image", "resource_link"]
    pdf, raw = blocks[1], blocks[2]
    assert isinstance(pdf, EmbeddedResource) and isinstance(pdf.resource, BlobResourceContents)
    assert (str(pdf.resource.uri), pdf.resource.mime_type, pdf.resource.blob) == (
        "file:///tmp/report.pdf",
        "application/pdf",
        "JVBERi0x",
    )
    assert isinstance(raw, EmbeddedResource) and isinstance(raw.resource, BlobResourceContents)
    assert str(raw.resource.uri) == "toolbus://attachment/2" and raw.resource.blob == "AAEC"
    # And back through toolbus's client: the bytes are still there.
    back = tool_output(call_result(result), server="s")
    assert isinstance(back, ToolOutput)
    assert [(a.type, a.url, a.data) for a in back.attachments][:2] == [
        ("application/pdf", "file:///tmp/report.pdf", "JVBERi0x"),
        ("application/octet-stream", None, "AAEC"),  # no URL made up on the way back
    ]
