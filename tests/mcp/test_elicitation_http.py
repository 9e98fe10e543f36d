"""The client's input handlers over streamable HTTP: the SDK's `MCPServer`
(tests/mcp_servers/asking_server.py) served by uvicorn on the test's loop,
on both protocols: a handler's answer, a sample, and, without a handler, a
question that waits for later on 2026-07-28 and is declined on 2025-11-25.
In-process and over stdio, the same is test_elicitation.py's,
test_sampling.py's and test_input_later.py's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.mcp_servers import asking_server
from tests.mcp_servers.peers import use_peer
from tests.mcp_servers.serving import served
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry
from toolbus.approvals import InputRequest
from toolbus.mcp import (
    Elicitation,
    ElicitationAnswer,
    SamplingAnswer,
    SamplingRequest,
    aconnect_http,
)

# The slow tier (tests/README.md): an HTTP server.
pytestmark = pytest.mark.slow


@pytest.fixture
async def url() -> AsyncIterator[str]:
    async with served(asking_server.server.streamable_http_app()) as endpoint:
        yield endpoint


modes = pytest.mark.parametrize("peer", ["http", "http-legacy"])

BOOK = ToolCall(id="b1", name="book", arguments={"name": "Oslo"})


def seats(request: Elicitation) -> ElicitationAnswer:
    return request.accept({"seats": 3, "ok": True})


def sample(request: SamplingRequest) -> SamplingAnswer:
    return request.reply("a short summary", model="toy")


async def run(url: str, call: ToolCall, **options: Any) -> Any:
    async with await aconnect_http(url, **options) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        async with Executor(registry, timeout=30) as executor:
            first = await executor.aexecute(call)
            if isinstance(first.approval_request, InputRequest):
                answer = first.approval_request.accept({"seats": 2, "ok": True})
                return first, await executor.aexecute(call, approval=answer)
            return first, None


@modes
async def test_a_handler_answers_over_http(
    url: str, peer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_peer(peer, monkeypatch)
    asking_server.runs.clear()
    result, _ = await run(url, BOOK, elicitation=seats)
    assert result.output == {"result": "booked Oslo x3"}, result
    assert asking_server.runs == ["Oslo"]


@modes
async def test_a_sample_over_http(url: str, peer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    use_peer(peer, monkeypatch)
    call = ToolCall(name="summarize", arguments={"text": "retries"})
    result, _ = await run(url, call, sampling=sample)
    assert result.status == "ok", result.error
    assert "a short summary" in str(result.output)


@modes
async def test_without_a_handler_over_http(
    url: str, peer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2026-07-28: deferred, then answered; 2025-11-25: declined."""
    use_peer(peer, monkeypatch)
    asking_server.runs.clear()
    first, resumed = await run(url, BOOK)
    if peer == "http":
        assert (first.status, first.error_code) == ("deferred", ErrorCode.INPUT_REQUIRED)
        assert resumed is not None and resumed.output == {"result": "booked Oslo x2"}, resumed
    else:
        assert first.output == {"result": "not booked: decline"}
    assert asking_server.runs == ["Oslo"]
