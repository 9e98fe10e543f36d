"""MCP servers (the `mcp` SDK's) for the client's spec features: structured
output, annotations, cancellation, per-server limits, tool list changes.

Run over stdio (`python tests/mcp_servers/spec_server.py [lowlevel]`) or
connect to `server` / `lowlevel` in-process (then call `reset()` between tests:
the state below is the module's).

`server` (`MCPServer`):
- `weather` (read-only): structured output with an `outputSchema` (a TypedDict).
- `gate_a`, `gate_b`, `old_tool` (read-only): enter the gate, count who is
  inside (and the peak), and leave once it is open (`open_gate`), once `meet`
  calls are inside together, or once `total` calls have entered; they return
  the peak. Waits are bounded (10 s), never sleeps.
- `open_gate` (read-only): opens the gate.
- `change_tools` (read-only): once `after_entered` calls are inside the gate,
  removes `old_tool`, adds `new_tool` and announces the change (both ways:
  the 2026-07-28 subscription bus, and `notifications/tools/list_changed` on
  an earlier session).
- `hang`: never returns; counts its calls and the times it was cancelled.
  `hangs(at_least)`, `cancels(at_least)` (read-only): those counts, once they
  reach `at_least`.
- `put_once` (mutating, `idempotentHint`): the first call ever hangs, later
  ones return (a timed-out call that a retry completes).
- `wipe` (`readOnlyHint` and `destructiveHint`), `browse` (read-only, closed
  world): annotations only.
- `report` (read-only): text, a PNG image, an embedded PDF and an embedded
  text file (blobs), and a bare resource link.

`lowlevel` (the low-level `Server`, which checks nothing it sends): tools with
an `outputSchema` whose results match it or not, and a tool list with a TTL
that `flip` changes without announcing it.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import threading
from collections.abc import Callable
from typing import Any, TypedDict

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("spec", log_level="WARNING")

READ_ONLY = ToolAnnotations(read_only_hint=True)
WAIT = 10.0


class _State:
    """Shared by every session of this process (the tests read it in-process)."""

    cond = threading.Condition()
    entered = 0
    peak = 0
    total = 0
    opened = False
    cancels = 0
    hangs = 0
    put_calls = 0


def reset() -> None:
    """Back to the start: gate closed, counters zero, `old_tool` listed, `new_tool` not."""
    with _State.cond:
        _State.entered = _State.peak = _State.total = 0
        _State.cancels = _State.hangs = _State.put_calls = 0
        _State.opened = False
    with contextlib.suppress(Exception):
        server.remove_tool("new_tool")
    if "old_tool" not in {t.name for t in server._tool_manager.list_tools()}:
        server.add_tool(old_tool, name="old_tool", annotations=READ_ONLY)


def wait_until(check: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Block until `check()` (read under the state's lock) is true; False after `timeout`."""
    with _State.cond:
        return _State.cond.wait_for(check, timeout)


def inside() -> int:
    return _State.entered


def peak() -> int:
    return _State.peak


async def _wait(check: Callable[[], bool]) -> bool:
    return await anyio.to_thread.run_sync(wait_until, check, abandon_on_cancel=True)


async def _through_gate(meet: int, total: int) -> int:
    with _State.cond:
        _State.entered += 1
        _State.total += 1
        _State.peak = max(_State.peak, _State.entered)
        _State.cond.notify_all()
    try:
        passed = await _wait(
            lambda: (
                _State.opened
                or (meet > 0 and _State.entered >= meet)
                or (total > 0 and _State.total >= total)
            )
        )
        if not passed:
            raise ToolError("the gate did not open")
    finally:
        with _State.cond:
            _State.entered -= 1
            _State.cond.notify_all()
    return _State.peak


class Weather(TypedDict):
    temperature: float
    conditions: str


@server.tool(annotations=READ_ONLY)
def weather(city: str) -> Weather:
    """The weather in a city (structured)."""
    return Weather(temperature=21.5 if city == "Oslo" else 30.0, conditions="sunny")


@server.tool(annotations=READ_ONLY)
async def gate_a(meet: int = 0, total: int = 0) -> int:
    """Wait at the gate; the peak number of calls inside at once."""
    return await _through_gate(meet, total)


@server.tool(annotations=READ_ONLY)
async def gate_b(meet: int = 0, total: int = 0) -> int:
    """Wait at the gate; the peak number of calls inside at once."""
    return await _through_gate(meet, total)


async def old_tool(meet: int = 0, total: int = 0) -> int:
    """Wait at the gate (removed by `change_tools`)."""
    return await _through_gate(meet, total)


server.add_tool(old_tool, name="old_tool", annotations=READ_ONLY)


def new_tool() -> str:
    """Added by `change_tools`."""
    return "brand new"


@server.tool(annotations=READ_ONLY)
def open_gate() -> str:
    """Let every call at the gate through."""
    with _State.cond:
        _State.opened = True
        _State.cond.notify_all()
    return "open"


@server.tool(annotations=READ_ONLY)
async def change_tools(ctx: Context, after_entered: int = 0) -> str:
    """Replace `old_tool` by `new_tool` (once `after_entered` calls are at the gate)."""
    if not await _wait(lambda: _State.entered >= after_entered):
        raise ToolError("nobody came to the gate")
    server.remove_tool("old_tool")
    server.add_tool(new_tool, name="new_tool", annotations=READ_ONLY)
    await ctx.notify_tools_changed()  # 2026-07-28: to subscriptions/listen streams
    with contextlib.suppress(Exception):  # earlier versions: on the session
        await ctx.request_context.session.send_tool_list_changed()
    return "changed"


@server.tool()
async def hang() -> str:
    """Never returns; counts its calls and their cancellations."""
    with _State.cond:
        _State.hangs += 1
        _State.cond.notify_all()
    try:
        await anyio.sleep_forever()
    except anyio.get_cancelled_exc_class():
        with _State.cond:
            _State.cancels += 1
            _State.cond.notify_all()
        raise
    return "unreachable"


@server.tool(annotations=READ_ONLY)
async def cancels(at_least: int) -> int:
    """How many `hang` calls were cancelled, once that is `at_least` (or after 10 s)."""
    await _wait(lambda: _State.cancels >= at_least)
    return _State.cancels


@server.tool(annotations=READ_ONLY)
async def hangs(at_least: int) -> int:
    """How many `hang` calls arrived, once that is `at_least` (or after 10 s)."""
    await _wait(lambda: _State.hangs >= at_least)
    return _State.hangs


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
async def put_once(key: str) -> str:
    """Store `key`; the first call ever hangs."""
    with _State.cond:
        _State.put_calls += 1
        first = _State.put_calls == 1
    if first:
        await anyio.sleep_forever()
    return f"stored {key}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=True))
def wipe() -> str:
    """Says read-only and destructive: destructive wins."""
    return "wiped"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def browse() -> str:
    """Read-only, closed world."""
    return "browsed"


# A 1x1 PNG, and the smallest thing a PDF reader would look at.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgAAACAAAB4iG8MwAAAABJRU5ErkJggg=="
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n").decode()
NOTES = base64.b64encode(b"Notes: the fjord is 204 km long.\n").decode()


@server.tool(annotations=READ_ONLY, structured_output=False)
def report() -> list[types.ContentBlock]:
    """A report: text, an image, a PDF and a text file, and a link to more."""
    return [
        types.TextContent(text="the report"),
        types.ImageContent(data=PNG, mime_type="image/png"),
        types.EmbeddedResource(
            resource=types.BlobResourceContents(
                uri="file:///reports/report.pdf", mime_type="application/pdf", blob=PDF
            )
        ),
        types.EmbeddedResource(
            resource=types.BlobResourceContents(
                uri="file:///reports/notes.txt", mime_type="text/plain", blob=NOTES
            )
        ),
        types.ResourceLink(uri="file:///reports/big.csv", name="big.csv", mime_type="text/csv"),
    ]


# -- the low-level server: results off their outputSchema, a tool list with a TTL -----------

SHAPE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "temperature": {"type": "number"},
        "conditions": {"type": "string"},
        "hourly": {"type": "array", "items": {"type": "number"}},
    },
    "required": ["temperature", "conditions"],
    "additionalProperties": False,
}
RESULTS: dict[str, dict[str, Any] | None] = {
    "good_shape": {"temperature": 21.5, "conditions": "sunny"},
    "wrong_type": {"temperature": "warm", "conditions": "sunny"},
    "missing_field": {"temperature": 21.5},
    "nested_wrong": {"temperature": 1, "conditions": "x", "hourly": [1, "two"]},
    "extra_field": {"temperature": 1, "conditions": "x", "secret": "hunter2"},
    "no_structure": None,
}
TTL_MS = 300


class _Listing:
    flipped = False


def _lowlevel_tools() -> list[types.Tool]:
    tools = [
        types.Tool(name=name, input_schema={"type": "object"}, output_schema=SHAPE)
        for name in RESULTS
    ]
    # Its outputSchema is no JSON Schema: the client leaves the tool out.
    tools.append(
        types.Tool(
            name="bad_schema",
            input_schema={"type": "object"},
            output_schema={"type": "object", "properties": {"x": {"type": 42}}},
        )
    )
    flip = "Flipped already." if _Listing.flipped else "Add a tool, telling no one."
    tools.append(types.Tool(name="flip", description=flip, input_schema={"type": "object"}))
    if _Listing.flipped:
        tools.append(types.Tool(name="flipped", input_schema={"type": "object"}))
    return tools


async def _list(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_lowlevel_tools(), ttl_ms=TTL_MS)


async def _call(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name == "flip":
        _Listing.flipped = True  # no announcement: only the TTL tells the client
        return types.CallToolResult(content=[types.TextContent(text="flipped")])
    if params.name == "flipped":
        return types.CallToolResult(content=[types.TextContent(text="here")])
    structured = RESULTS[params.name]
    return types.CallToolResult(
        content=[types.TextContent(text=str(structured))], structured_content=structured
    )


lowlevel: Server[Any] = Server("spec-lowlevel", on_list_tools=_list, on_call_tool=_call)


def reset_lowlevel() -> None:
    _Listing.flipped = False


async def _serve_lowlevel() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())


if __name__ == "__main__":
    if sys.argv[1:] == ["lowlevel"]:
        anyio.run(_serve_lowlevel)
    else:
        server.run()
