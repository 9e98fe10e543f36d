"""A server that asks the client's model for a sample while a call is open,
answered by the connection's `sampling` handler (`toolbus/mcp/_sampling.py`).

Peer: tests/mcp_servers/asking_server.py (the SDK's `MCPServer`, a resolver
that returns `Sample`), in-process and over stdio, each with the 2026-07-28
protocol and with the initialize handshake of 2025-11-25.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from tests.mcp_servers import asking_server
from tests.mcp_servers.peers import connect_asking
from toolbus import ErrorCode, ToolCall, ToolRegistry, bus
from toolbus.mcp import SamplingAnswer, SamplingRequest, connect

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow

SUMMARIZE = ToolCall(id="s1", name="summarize", arguments={"text": "a long story"})


def run(peer: str, make_executor: MakeExecutor, call: ToolCall, **options: Any) -> Any:
    executor_options = options.pop("executor", {})
    with connect_asking(peer, **options) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry, **executor_options)
        with bus.Recorder(bus.PROGRESS, sender=ex) as rec:
            result = ex.execute(call)
            assert ex.drain_events()
        return result, rec


def test_the_handler_samples_for_the_server(peer: str, make_executor: MakeExecutor) -> None:
    asked: list[SamplingRequest] = []

    def sample(request: SamplingRequest) -> SamplingAnswer:
        asked.append(request)
        return request.reply("A story, briefly told.", model="toy-model")

    r, rec = run(peer, make_executor, SUMMARIZE, sampling=sample)
    assert (r.status, r.output) == ("ok", {"result": "toy-model: A story, briefly told."})
    (request,) = asked
    assert request.messages == [
        {"role": "user", "content": [{"type": "text", "text": "Summarize: a long story"}]}
    ]
    assert (request.system_prompt, request.max_tokens) == ("Answer in five words.", 40)
    assert request.model_hints == ["claude-haiku"]
    assert (request.call_id, request.tool) == ("s1", "summarize")
    asked_event, answered = rec.of(bus.PROGRESS)
    assert asked_event.data["sampling_requested"]["max_tokens"] == 40
    assert answered.data["sampling_answered"] == {
        "model": "toy-model",
        "stop_reason": "endTurn",
        "text": "A story, briefly told.",
    }


def test_an_async_handler_and_its_failures(peer: str, make_executor: MakeExecutor) -> None:
    async def sample(request: SamplingRequest) -> SamplingAnswer:
        await asyncio.sleep(0)
        return request.reply("ok", model="m")

    r, _ = run(peer, make_executor, SUMMARIZE, sampling=sample)
    assert r.output == {"result": "m: ok"}

    def broken(request: SamplingRequest) -> SamplingAnswer:
        raise RuntimeError("the prompt said: SECRET-PROMPT-7")

    r, rec = run(peer, make_executor, SUMMARIZE, sampling=broken)
    assert r.status == "error"
    assert r.error.endswith("the sampling handler failed (RuntimeError)")
    assert "SECRET-PROMPT-7" not in r.error

    r, _ = run(peer, make_executor, SUMMARIZE, sampling=lambda request: "just text")
    assert r.status == "error" and "returned str, not a SamplingAnswer" in r.error


def test_a_handler_past_the_calls_deadline(peer: str, make_executor: MakeExecutor) -> None:
    async def sample(request: SamplingRequest) -> SamplingAnswer:
        await asyncio.Event().wait()  # a model that never answers
        raise AssertionError("unreachable")

    r, _ = run(peer, make_executor, SUMMARIZE, sampling=sample, executor={"call_timeout": 3})
    assert (r.status, r.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)


def test_without_a_handler_sampling_is_not_offered(peer: str, make_executor: MakeExecutor) -> None:
    r, _ = run(peer, make_executor, SUMMARIZE)
    assert r.status == "error" and "sampling" in (r.error or "")


def test_a_handler_that_is_not_a_function_is_refused_at_connect() -> None:
    with pytest.raises(TypeError, match="connect: sampling must be a function"):
        connect(asking_server.server, sampling="gpt")  # type: ignore[arg-type]
