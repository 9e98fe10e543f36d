"""Regressions from the review of toolbus.providers and toolbus.mcp: each test
states the promised behaviour and once showed a bug."""

from __future__ import annotations

import asyncio
import atexit
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.models import ToolResult
from toolbus.providers import anthropic as tba
from toolbus.providers import arun_agent
from toolbus.providers import openai as tbo
from toolbus.providers._common import result_text

ROOT = Path(__file__).resolve().parent.parent
FLAKY = str(ROOT / "tests" / "mcp_servers" / "flaky_server.py")

# One handle for the servers' stderr, closed when the module's tests are done.
DEVNULL = open(os.devnull, "w")  # noqa: SIM115
atexit.register(DEVNULL.close)


# -- MCP ------------------------------------------------------------------------------


def test_backoff_stays_bounded_after_many_failed_attempts() -> None:
    from mcp import StdioServerParameters, stdio_client

    from toolbus.mcp import connect

    attempts = [0]

    def make_transport() -> Any:
        attempts[0] += 1
        if attempts[0] == 1:
            params = StdioServerParameters(command=sys.executable, args=[FLAKY])
            return stdio_client(params, errlog=DEVNULL)
        raise OSError("the server's binary is gone")

    # backoff_base=0 only makes the 1025 attempts fast; with the defaults the same
    # happens after ~1025 attempts >= 30 s apart (about 8.5 h of a server being down).
    conn = connect(make_transport, backoff_base=0.0, max_backoff=0.0)
    registry = ToolRegistry()
    conn.register(registry)
    try:
        with Executor(registry, timeout=2) as executor:
            assert executor.execute(ToolCall(name="die")).status == "error"
            for _ in range(1100):
                result = executor.execute(ToolCall(name="echo", arguments={"text": "x"}))
                assert result.status == "error", (attempts[0], result)
                assert "unavailable" in (result.error or "")
    finally:
        conn.close()


def _children_running(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and marker in cmdline:
            found.append(int(pid))
    return found


def test_cancelled_aconnect_leaves_no_server_behind() -> None:
    from toolbus.mcp import aconnect_stdio

    marker = "toolbus-review-aconnect-marker"
    script = (
        # tool under test: a server that is slow to start (so connect is still going)
        f"import time, runpy, sys; time.sleep(1.5); sys.argv = ['{marker}'];"  # tool under test
        f" runpy.run_path({FLAKY!r}, run_name='__main__')"
    )
    threads_before = {t.ident for t in threading.enumerate()}

    async def main() -> None:
        task = asyncio.create_task(aconnect_stdio(sys.executable, ["-c", script], errlog=DEVNULL))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())

    def leaked_threads() -> list[str]:
        return [
            t.name
            for t in threading.enumerate()
            if t.ident not in threads_before and t.name.startswith(("SessionActor", "toolbus-mcp"))
        ]

    # The abandoned connect() finishes in its thread (the server starts after
    # 1.5 s), then its connection is closed: wait for both to be gone.
    try:
        wait_until(lambda: not _children_running(marker) and not leaked_threads(), timeout=20)
    finally:
        for pid in _children_running(marker):  # end what a bug would leave behind
            os.kill(pid, 15)


def test_mcp_serve_custom_tool_requires_its_input() -> None:
    import anyio
    from mcp import Client

    from toolbus.mcp import build_server

    registry = ToolRegistry()

    @registry.tool(type="custom", read_only=True)
    def shout(text: str) -> str:
        """Upper-case the raw input."""
        return f"ran with {text!r}"

    async def main() -> list[Any]:
        with Executor(registry, timeout=5) as executor:
            server = build_server(registry, executor)
            async with Client(server) as client:
                return [
                    await client.call_tool("shout", {}),
                    await client.call_tool("shout", {"input": None}),
                ]

    for result in anyio.run(main):
        assert result.is_error, result


# -- providers --------------------------------------------------------------------------


def test_max_length_bounds_error_texts_too() -> None:
    result = ToolResult(
        call_id="c1", name="t", status="error", error="X" * 100_000, error_code="TOOL_ERROR"
    )
    assert len(result_text(result, max_length=100)) < 1_000


def test_chat_call_without_id_is_answered_under_the_same_id() -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "get", "arguments": '{"city": "Oslo"}'}}
        ],
    }
    (call,) = tbo.chat_tool_calls(message)
    echoed = tbo.chat_assistant_message(message)
    assert echoed["tool_calls"][0]["id"] == call.id  # type: ignore[typeddict-item]


def test_non_object_arguments_are_rejected_not_dropped() -> None:
    registry = ToolRegistry()

    @registry.tool
    def reset_everything() -> str:
        """A mutating tool without parameters."""
        return "reset"

    anthropic_calls = tba.tool_calls(
        {"content": [{"type": "tool_use", "id": "t1", "name": "reset_everything", "input": [1]}]}
    )
    chat_calls = tbo.chat_tool_calls(
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "reset_everything", "arguments": [1]},
                }
            ],
        }
    )
    with Executor(registry, timeout=5) as executor:
        for call in [*anthropic_calls, *chat_calls]:
            result = executor.execute(call)
            assert result.status == "rejected", result


def test_arun_agent_with_a_sync_client_sends_nothing() -> None:
    sent: list[dict[str, Any]] = []

    class Completions:
        def create(self, **request: Any) -> dict[str, Any]:
            sent.append(request)
            return {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}

    class Client:
        class chat:
            completions = Completions()

    registry = ToolRegistry()
    with Executor(registry) as executor:
        with pytest.raises(TypeError):
            asyncio.run(
                arun_agent(Client(), model="m", messages="hi", executor=executor, api="chat")
            )
    assert sent == []
