"""Anthropic's Messages format: tool_use blocks in, tool_result blocks out.

Responses are recorded JSON (tests/fixtures/providers) turned into the SDK's own
objects by `model_validate`, or served to the real `anthropic` client through
an `httpx2.MockTransport` that also records the request bodies the SDK sends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from tests.conftest import MakeExecutor
from tests.provider_tools import SECRET, chat_call_lists, load, make_registry, wire
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.models import ErrorCode
from toolbus.providers import anthropic as tb

SQL = "SELECT name, population FROM cities WHERE country = 'NO' ORDER BY population DESC LIMIT 2"


def message(name: str) -> Message:
    return Message.model_validate(load(name))


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry()


@pytest.fixture
def executor(make_executor: MakeExecutor, registry: ToolRegistry) -> Executor:
    return make_executor(registry)


class Server:
    """Serves recorded responses in order and records what the SDK sent."""

    def __init__(self, *bodies: dict[str, Any] | bytes) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        body = self.bodies.pop(0)
        if isinstance(body, bytes):
            return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=body)


@pytest.fixture
def serve() -> Iterator[Any]:
    clients: list[anthropic.Anthropic] = []

    def make(*bodies: dict[str, Any] | bytes) -> tuple[Server, anthropic.Anthropic]:
        server = Server(*bodies)
        clients.append(
            anthropic.Anthropic(
                api_key="sk-ant-test",
                base_url="http://toolbus.test",
                http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
                max_retries=0,
            )
        )
        return server, clients[-1]

    yield make
    for client in clients:
        client.close()


# -- reading calls -----------------------------------------------------------------------


def test_single_call_from_the_sdk_object() -> None:
    assert tb.tool_calls(message("anthropic_single")) == [
        ToolCall(
            id="toolu_01T1x1fJ34qAmWqU8A5TKQ6v", name="get_weather", arguments={"city": "Oslo"}
        )
    ]


def test_reads_message_dict_and_content_list_alike() -> None:
    expected = tb.tool_calls(message("anthropic_parallel"))
    assert [c.id for c in expected] == [
        "toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8o",
        "toolu_01Pq9Rs8Tu7Vw6Xy5Za4Bc3d",
        "toolu_01Ef2Gh3Ij4Kl5Mn6Op7Qr8s",
    ]
    raw = load("anthropic_parallel")
    assert tb.tool_calls(raw) == expected
    assert tb.tool_calls(raw["content"]) == expected
    assert tb.tool_calls(message("anthropic_parallel").content) == expected
    assert tb.tool_calls(message("anthropic_final")) == []
    assert tb.tool_calls({"role": "user", "content": "just text"}) == []


def test_rejects_what_is_not_a_message() -> None:
    with pytest.raises(TypeError, match="message"):
        tb.tool_calls({"id": "msg_1"})


def test_refuses_chat_tool_calls_and_other_formats_naming_their_reader() -> None:
    wrong: Any
    completion = ChatCompletion.model_validate(load("openai_chat_parallel"))
    for wrong in chat_call_lists():
        with pytest.raises(
            TypeError, match=r"got a list holding a Chat Completions tool call: .*chat_tool_calls"
        ):
            tb.tool_calls(wrong)
    for wrong in (
        completion.choices[0].message,
        load("openai_chat_parallel")["choices"][0]["message"],
    ):
        with pytest.raises(TypeError, match=r"got a Chat Completions message: .*chat_tool_calls"):
            tb.tool_calls(wrong)
    with pytest.raises(TypeError, match=r"got a Chat Completions message: .*openai\.chat_text"):
        tb.message_text({"role": "assistant", "content": "x", "tool_calls": None})
    with pytest.raises(TypeError, match="got a Chat Completions tool call"):
        tb.tool_calls(chat_call_lists()[1][0])
    with pytest.raises(TypeError, match="a list holding a Chat Completions choice"):
        tb.tool_calls(load("openai_chat_parallel")["choices"])
    responses = Response.model_validate(load("openai_responses_calls"))
    for wrong in (responses.output, load("openai_responses_calls")["output"]):
        with pytest.raises(
            TypeError, match=r"a list holding a Responses API output item: .*responses_tool_calls"
        ):
            tb.tool_calls(wrong)
    with pytest.raises(TypeError, match="got a Responses API output item"):
        tb.tool_calls(load("openai_responses_calls")["output"][1])
    # A list of messages, not of blocks (and every block has a type).
    with pytest.raises(TypeError, match="a list holding an Anthropic Messages message"):
        tb.tool_calls([load("anthropic_single")])
    with pytest.raises(
        TypeError, match=r"content blocks; got a list holding \['content', 'role'\]"
    ):
        tb.tool_calls([{"role": "user", "content": "hi"}])


def test_refuses_one_block_outside_its_list() -> None:
    block = load("anthropic_single")["content"][1]
    assert block["type"] == "tool_use"
    with pytest.raises(TypeError, match=r"got one tool_use block, not a list: pass \[block\]"):
        tb.tool_calls(block)
    assert [c.id for c in tb.tool_calls([block])] == [block["id"]]


def test_messages_without_calls_still_give_no_calls() -> None:
    empty: Any
    final = message("anthropic_final")
    for empty in (
        final,
        final.content,
        load("anthropic_final"),
        load("anthropic_final")["content"],
        {"role": "assistant", "content": [{"type": "text", "text": "It is 4 C."}]},
        {"role": "assistant", "content": "It is 4 C."},
        {"role": "assistant", "content": []},
        [],
    ):
        assert tb.tool_calls(empty) == []


def test_custom_tool_input_is_unwrapped_with_the_registry(
    executor: Executor, registry: ToolRegistry
) -> None:
    (wrapped,) = tb.tool_calls(message("anthropic_custom"))
    assert wrapped.arguments == {"input": SQL}
    (call,) = tb.tool_calls(message("anthropic_custom"), registry=registry)
    assert call.arguments == SQL
    (result,) = executor.execute_batch([call])
    assert result.output == f"2 rows for: {SQL}"


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        (None, "'input' is null, not text"),
        ({"input": 5}, "'input' is int, not text"),
        ({"input": SQL, "extra": "DROP TABLE cities"}, "unexpected keys 'extra'"),
        ({"query": SQL}, "'input' is missing"),
    ],
)
def test_custom_tool_input_off_its_schema_is_refused_not_run_as_json(
    executor: Executor, registry: ToolRegistry, given: object, problem: str
) -> None:
    """The tool ran on "null", '{"input":5}' or the whole object as JSON text."""
    block = {"type": "tool_use", "id": "toolu_1", "name": "run_sql", "input": given}
    (result,) = executor.execute_batch(tb.tool_calls([block], registry=registry))
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        "Invalid arguments for 'run_sql': a free-text tool takes its input as text, "
        f'or as {{"input": <text>}} alone ({problem})'
    )


# -- writing results ----------------------------------------------------------------------


def test_parallel_results_go_in_one_user_message_in_order(
    executor: Executor, registry: ToolRegistry
) -> None:
    batch = executor.execute_batch(tb.tool_calls(message("anthropic_parallel"), registry=registry))
    reply = wire(tb.tool_results_message(batch))
    assert reply["role"] == "user"
    blocks = reply["content"]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in blocks] == [
        ("tool_result", "toolu_01Ab2Cd3Ef4Gh5Ij6Kl7Mn8o", False),
        ("tool_result", "toolu_01Pq9Rs8Tu7Vw6Xy5Za4Bc3d", False),
        ("tool_result", "toolu_01Ef2Gh3Ij4Kl5Mn6Op7Qr8s", False),
    ]
    assert json.loads(blocks[1]["content"]) == {
        "city": "Bergen",
        "temperature": 59,
        "unit": "fahrenheit",
    }
    assert blocks[2]["content"] == "Booked Maaemo for 2"


def test_invalid_input_becomes_an_error_result(executor: Executor) -> None:
    batch = executor.execute_batch(tb.tool_calls(message("anthropic_invalid_input")))
    wrong_type, missing = tb.tool_result_blocks(batch)
    assert wrong_type["is_error"] is True
    assert wrong_type["content"] == (
        "Error: Invalid arguments for 'book_table': people: Input should be a valid integer,"
        " unable to parse string as an integer (INVALID_ARGUMENTS)"
    )
    assert "two" not in wrong_type["content"]  # values are never echoed
    assert missing["is_error"] is True
    assert missing["content"] == (
        "Error: Invalid arguments for 'get_weather': city: Field required (INVALID_ARGUMENTS)"
    )


def test_null_input_is_rejected_not_dropped(executor: Executor) -> None:
    """A tool_use block whose input was null read as a call without arguments:
    a tool ran with its defaults (bug hunt)."""
    blocks = [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": None}]
    (call,) = tb.tool_calls(blocks)
    result = executor.execute(call)
    assert (result.status, result.error_code) == ("rejected", "INVALID_ARGUMENTS")
    assert "must be a JSON object" in (result.error or "")


def test_deeply_nested_input_is_rejected_not_raised() -> None:
    """Input nested past Python's recursion limit made the readers raise
    RecursionError (two frames a level), with or without the block's id; the
    executor is what rejects it (bug hunt)."""
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def store(data: object = None) -> str:
        """Store anything."""
        return "stored"

    nested: Any = 1
    for _ in range(3000):
        nested = {"a": nested}
    with_id = {"type": "tool_use", "id": "t1", "name": "store", "input": {"data": nested}}
    without_id = {"type": "tool_use", "name": "store", "input": {"data": [nested]}}
    sdk = Message.model_validate(
        {
            "id": "m1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [with_id, {**without_id, "id": ""}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
    )
    for given in ([with_id, without_id], sdk):
        calls = tb.tool_calls(given)
        echoed = tb.assistant_message(given)["content"]
        assert [c.id for c in calls] == [b["id"] for b in echoed]  # type: ignore[index]
        assert calls[1].id.startswith("call_toolbus_")
        with Executor(registry, timeout=5) as executor:
            batch = executor.execute_batch(calls)
        assert [r.error for r in batch] == [
            "Invalid arguments for 'store': Arguments nest too deeply"
            " (more than 254 levels of objects and arrays)"
        ] * 2
    cyclic: dict[str, Any] = {}
    cyclic["a"] = [cyclic]
    with pytest.raises(ValueError, match="circular"):  # (not a walk without end)
        tb.tool_calls([{**with_id, "input": cyclic}])


def test_unknown_tool_is_an_error_result(executor: Executor) -> None:
    batch = executor.execute_batch(tb.tool_calls(message("anthropic_unknown_tool")))
    assert tb.tool_result_blocks(batch) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01Gh2Jk3Lz4Xc5Vb6Nm7Qw8E",
            "content": "Error: Unknown tool 'get_wether'. Did you mean 'get_weather'? "
            "Available tools: get_weather, book_table, run_sql, slow_report, fetch_account (TOOL_NOT_FOUND)",
            "is_error": True,
        }
    ]


def test_timeouts_and_errors_never_carry_the_secret(executor: Executor) -> None:
    batch = executor.execute_batch(tb.tool_calls(message("anthropic_failures")))
    timeout, error = tb.tool_result_blocks(batch)
    assert (
        timeout["content"] == "Error: Tool 'slow_report' timed out after 0.1s (EXECUTION_TIMEOUT)"
    )
    assert error["content"] == "Error: account acme refused key *** (TOOL_ERROR)"
    assert timeout["is_error"] is error["is_error"] is True
    assert SECRET not in json.dumps(tb.tool_results_message(batch))


def test_assistant_message_keeps_every_block_as_sent() -> None:
    turn = wire(tb.assistant_message(message("anthropic_parallel")))
    assert turn == {"role": "assistant", "content": load("anthropic_parallel")["content"]}
    assert turn["content"][0]["signature"].startswith("EqQB")


# -- exporting tools ------------------------------------------------------------------------


def test_tool_definitions(registry: ToolRegistry) -> None:
    tools = {t["name"]: t for t in tb.tool_definitions(registry)}
    weather = registry.get("get_weather")
    assert weather is not None
    assert tools["get_weather"] == {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": weather.schema,
    }
    assert tools["run_sql"]["input_schema"] == {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The input, as free text."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    assert all(t["input_schema"]["type"] == "object" for t in tools.values())


# -- through the real client ------------------------------------------------------------------


def test_round_trip_through_the_sdk(serve: Any, executor: Executor, registry: ToolRegistry) -> None:
    server, client = serve(load("anthropic_parallel"), load("anthropic_final"))
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Oslo and Bergen, and book Maaemo"}
    ]
    tools = tb.tool_definitions(registry)
    reply = client.messages.create(
        model="toolbus-test-model", max_tokens=1024, messages=messages, tools=tools
    )
    batch = executor.execute_batch(tb.tool_calls(reply, registry=registry))
    messages += [tb.assistant_message(reply), tb.tool_results_message(batch)]
    final = client.messages.create(
        model="toolbus-test-model", max_tokens=1024, messages=messages, tools=tools
    )

    first, second = server.requests
    assert first["tools"] == tools
    sent = second["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == load("anthropic_parallel")["content"]  # thinking signature kept
    tool_uses = [b["id"] for b in sent[1]["content"] if b["type"] == "tool_use"]
    assert [b["tool_use_id"] for b in sent[2]["content"]] == tool_uses
    assert all(b["type"] == "tool_result" and b["is_error"] is False for b in sent[2]["content"])
    assert tb.tool_calls(final) == []


def _sse(events: list[dict[str, Any]]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _stream_events(recorded: dict[str, Any]) -> list[dict[str, Any]]:
    """The events the API streams for `recorded`, each block's content in two deltas."""
    start = {**recorded, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for i, block in enumerate(recorded["content"]):
        if block["type"] == "tool_use":
            text = json.dumps(block["input"])
            first: dict[str, Any] = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (text[:5], text[5:])]
        elif block["type"] == "thinking":
            first = {**block, "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:
            first = {**block, "text": ""}
            deltas = [
                {"type": "text_delta", "text": p} for p in (block["text"][:4], block["text"][4:])
            ]
        events.append({"type": "content_block_start", "index": i, "content_block": first})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    stop = {"stop_reason": recorded["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "delta": stop, "usage": {"output_tokens": 214}})
    events.append({"type": "message_stop"})
    return events


def test_reads_the_message_a_stream_reassembles(
    serve: Any, executor: Executor, registry: ToolRegistry
) -> None:
    recorded = load("anthropic_parallel")
    _, client = serve(_sse(_stream_events(recorded)))
    with client.messages.stream(
        model="toolbus-test-model", max_tokens=1024, messages=[{"role": "user", "content": "Go"}]
    ) as stream:
        final = stream.get_final_message()
    calls = tb.tool_calls(final, registry=registry)
    assert calls == tb.tool_calls(recorded)
    assert tb.assistant_message(final)["content"] == recorded["content"]
    assert [r.status for r in executor.execute_batch(calls)] == ["ok", "ok", "ok"]
