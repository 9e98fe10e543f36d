"""The MCP server offers what is enabled: `tools/list` and `tools/call` through
the SDK's own client, in process, with `is_enabled` and the executor's `prepare`
deciding from the request (`StepContext.context` is the SDK's request context)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client

from toolbus import Executor, ToolRegistry
from toolbus.mcp import build_server
from toolbus.tools import StepContext, Tool

contexts: list[Any] = []


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def search(query: str) -> str:
        """Search the shop."""
        return f"results for {query}"

    def has_session(step: StepContext) -> bool:
        contexts.append(step.context)
        return step.context is not None and getattr(step.context, "session", None) is not None

    @reg.tool(is_enabled=has_session)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    @reg.tool(read_only=True, is_enabled=False)
    def internal() -> str:
        """Never offered."""
        return "internal"

    @reg.tool(read_only=True)
    def dropped() -> str:
        """Dropped by prepare."""
        return "dropped"

    return reg


def prepare(step: StepContext, tools: list[Tool]) -> list[Tool]:
    return [t.described(t.description + " (served)") for t in tools if t.name != "dropped"]


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Client]:
    reg = registry()
    executor = Executor(reg, timeout=10, prepare=prepare)
    try:
        async with Client(build_server(reg, executor)) as client:
            yield client
    finally:
        await asyncio.to_thread(executor.close)


async def test_tools_list_and_calls_follow_is_enabled_and_prepare() -> None:
    contexts.clear()
    async with serving() as client:
        listed = {t.name: t.description for t in (await client.list_tools()).tools}
        assert listed == {
            "search": "Search the shop. (served)",
            "refund": "Refund an order. (served)",
        }
        assert contexts and getattr(contexts[0], "session", None) is not None
        ok = await client.call_tool("refund", {"order": "7"})
        assert not ok.is_error and ok.content[0].text == "refunded 7"  # type: ignore[union-attr]
        for name in ("internal", "dropped"):
            refused = await client.call_tool(name, {})
            assert refused.is_error
            text = refused.content[0].text  # type: ignore[union-attr]
            assert text.startswith(f"Tool '{name}' is not offered at this step")
            assert text.endswith("(TOOL_NOT_OFFERED)")
