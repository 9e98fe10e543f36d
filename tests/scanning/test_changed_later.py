"""What a tool hands toolbus and changes or says afterwards, with the content
scanner on: nothing reaches a surface unscanned.

- Arguments the tool fills in place, and progress data it changes after
  reporting it: the events (built and delivered later, on other threads) show
  them as they were when toolbus took them, scanned then.
- `ctx.log` from a thread the tool started, and from a tool in a worker
  process: written by the agent, with the call's own scrubber and scanner.
- `ctx.elicit`'s question to the MCP client: scanned like a log message.

Each of these once went out raw (issue 29's final review).
"""

from __future__ import annotations

import asyncio
import io
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from tests import process_tools
from tests.conftest import MakeExecutor
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.mcp import build_server
from toolbus.observe import log_json
from toolbus.scanning import ContentScanner

MAIL = "jane.doe@example.org"


def test_arguments_the_tool_fills_in_are_published_as_given(make_executor: MakeExecutor) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def enrich(records: list[Any]) -> str:
        """Adds each customer's e-mail address to the records, in place."""
        for record in records:
            record["email"] = MAIL
        return f"enriched {len(records)}"

    ex = make_executor(registry, scanner=ContentScanner())
    lines = io.StringIO()
    with log_json(ex, lines), bus.Recorder(sender=ex) as rec:
        result = ex.execute(ToolCall(name="enrich", arguments={"records": [{"id": 1}]}))
        assert ex.drain_events()
    assert result.ok
    (executing,) = rec.of(bus.EXECUTING)
    assert executing.arguments == {"records": [{"id": 1}]}
    assert MAIL not in repr([e for name in rec.names() for e in rec.of(name)])
    assert MAIL not in lines.getvalue()


def test_progress_data_changed_after_the_report_is_published_as_reported(
    make_executor: MakeExecutor,
) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def sync(ctx: ToolContext) -> str:
        """Reports what it synced so far, then goes on filling the same list."""
        done: list[str] = []
        ctx.progress("syncing", 0.0, synced=done)
        done.append(MAIL)
        return "synced"

    ex = make_executor(registry, scanner=ContentScanner())
    lines = io.StringIO()
    with log_json(ex, lines), bus.Recorder(sender=ex) as rec:
        assert ex.execute(ToolCall(name="sync", arguments={})).ok
        assert ex.drain_events()
    (progress,) = rec.of(bus.PROGRESS)
    assert progress.data == {"synced": []}
    assert MAIL not in lines.getvalue()


def test_a_log_message_from_a_thread_the_tool_started_is_scanned(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def lookup(ctx: ToolContext) -> str:
        """Logs from a worker thread of its own."""
        with ThreadPoolExecutor(1) as pool:
            pool.submit(ctx.log, f"found {MAIL}").result()
        return "looked up"

    ex = make_executor(registry, scanner=ContentScanner())
    with caplog.at_level(logging.INFO, logger="toolbus.tool.lookup"):
        assert ex.execute(ToolCall(name="lookup", arguments={})).ok
    (record,) = [r for r in caplog.records if r.name == "toolbus.tool.lookup"]
    assert record.getMessage() == "found [REDACTED:email]"


def test_a_log_message_from_a_worker_process_is_written_by_the_agent(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    registry = ToolRegistry()
    registry.tool(backend="process", read_only=True)(process_tools.log_mail)
    ex = make_executor(registry, scanner=ContentScanner())
    with caplog.at_level(logging.INFO, logger="toolbus.tool.log_mail"):
        result = ex.execute(ToolCall(name="log_mail", arguments={"mail": MAIL}))
    assert result.ok, result.error
    (record,) = [r for r in caplog.records if r.name == "toolbus.tool.log_mail"]
    assert record.getMessage() == "writing to [REDACTED:email]"
    out, err = capfd.readouterr()
    assert MAIL not in out + err  # the worker wrote nothing of it


async def test_a_question_to_the_mcp_client_is_scanned() -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def confirm(ctx: ToolContext) -> str:
        """Asks the person to confirm an address."""
        return ctx.elicit(f"Send it to {MAIL}?", {"type": "object", "properties": {}}).action

    asked: list[Any] = []

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    executor = Executor(registry, timeout=30, scanner=ContentScanner())
    try:
        async with Client(
            build_server(registry, executor), mode="legacy", elicitation_callback=answer
        ) as client:
            result = await client.call_tool("confirm", {})
    finally:
        await asyncio.to_thread(executor.close)
    assert not result.is_error
    assert asked == ["Send it to [REDACTED:email]?"]


def test_progress_data_that_holds_itself_is_copied_once(make_executor: MakeExecutor) -> None:
    """A tree whose nodes point back at their parent made `ctx.progress` copy
    every path around its cycles (found by review of the fix): each
    container is copied once, and the call goes on."""
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def sync_tree(ctx: ToolContext) -> str:
        """Reports a tree whose children know their parent."""
        root: dict[str, Any] = {"name": "root", "children": []}
        for i in range(3):
            root["children"].append({"name": f"c{i}", "parent": root})
        ctx.progress("synced the tree", 1.0, tree=root)
        return "synced"

    ex = make_executor(registry, scanner=ContentScanner(), timeout=30)
    lines = io.StringIO()
    with log_json(ex, lines), bus.Recorder(sender=ex) as rec:
        assert ex.execute(ToolCall(name="sync_tree", arguments={})).ok
        assert ex.drain_events()
    assert len(rec.of(bus.PROGRESS)) == 1


def test_a_log_message_that_is_no_text_is_scanned(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def lookup(ctx: ToolContext) -> str:
        """Logs an exception it caught."""
        ctx.log(LookupError(f"no account for {MAIL}"), "error")  # type: ignore[arg-type]
        return "looked up"

    ex = make_executor(registry, scanner=ContentScanner())
    with caplog.at_level(logging.INFO, logger="toolbus.tool.lookup"):
        assert ex.execute(ToolCall(name="lookup", arguments={})).ok
    (record,) = [r for r in caplog.records if r.name == "toolbus.tool.lookup"]
    assert record.getMessage() == "no account for [REDACTED:email]"


def test_log_data_json_cannot_hold_never_fails_a_worker_call(make_executor: MakeExecutor) -> None:
    """A cycle or a tuple key in `ctx.log`'s data, in a worker process: the
    message goes without its data (the frame could not be encoded)."""
    registry = ToolRegistry()
    registry.tool(backend="process", read_only=True)(process_tools.log_odd_data)
    ex = make_executor(registry)
    result = ex.execute(ToolCall(name="log_odd_data", arguments={}))
    assert (result.status, result.output) == ("ok", "logged"), result.error
