"""OpenAI formats: Chat Completions and the Responses API.

Responses are recorded JSON (tests/fixtures/providers) turned into the SDK's own
objects by `model_validate`, or served to the real `openai` client through an
`httpx2.MockTransport` that also records the request bodies the SDK sends.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx2
import jsonschema
import openai
import pytest
from anthropic.types import Message
from openai.lib._pydantic import to_strict_json_schema
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response
from pydantic import BaseModel, Field

from tests.conftest import MakeExecutor
from tests.provider_tools import SECRET, chat_call_lists, load, make_registry, wire
from toolbus import Attachment, Executor, Tool, ToolCall, ToolRegistry, ToolResult
from toolbus.models import ErrorCode
from toolbus.providers import NO_OUTPUT, StrictSchemaError, result_text, strict_schema
from toolbus.providers import anthropic as tba
from toolbus.providers import openai as tb


def chat(name: str) -> ChatCompletion:
    return ChatCompletion.model_validate(load(name))


def response(name: str) -> Response:
    return Response.model_validate(load(name))


def tba_message(name: str) -> Message:
    return Message.model_validate(load(name))


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry(sql_rows=True)


@pytest.fixture
def executor(make_executor: MakeExecutor, registry: ToolRegistry) -> Executor:
    return make_executor(registry)


class Server:
    """Serves recorded responses in order and records what the SDK sent."""

    def __init__(self, *bodies: dict[str, Any] | bytes) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.clients: list[openai.OpenAI] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        self.requests.append(json.loads(request.content))
        body = self.bodies.pop(0)
        if isinstance(body, bytes):
            return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=body)

    def client(self) -> openai.OpenAI:
        client = openai.OpenAI(
            api_key="sk-test",
            base_url="http://toolbus.test/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(self)),
            max_retries=0,
        )
        self.clients.append(client)
        return client


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def make(*bodies: dict[str, Any] | bytes) -> Server:
        servers.append(Server(*bodies))
        return servers[-1]

    yield make
    for server in servers:
        for client in server.clients:
            client.close()


def sse(events: list[dict[str, Any]], *, named: bool) -> bytes:
    out = "".join(
        (f"event: {e['type']}\n" if named else "") + f"data: {json.dumps(e)}\n\n" for e in events
    )
    return (out if named else out + "data: [DONE]\n\n").encode()


# -- Chat Completions: reading calls ----------------------------------------------------


def test_chat_single_call_from_the_sdk_object() -> None:
    assert tb.chat_tool_calls(chat("openai_chat_single")) == [
        ToolCall(
            id="call_3m0XQ9fZpL2rVb7sKd1hNy4T", name="get_weather", arguments='{"city":"Oslo"}'
        )
    ]


def test_chat_reads_completion_choice_message_and_dicts_alike() -> None:
    completion = chat("openai_chat_parallel")
    expected = tb.chat_tool_calls(completion)
    assert len(expected) == 3
    raw = load("openai_chat_parallel")
    for source in (
        raw,
        completion.choices[0],
        completion.choices[0].message,
        raw["choices"][0],
        raw["choices"][0]["message"],
        completion.choices[0].message.tool_calls,  # the bare list, as most code has it
        raw["choices"][0]["message"]["tool_calls"],
        tuple(raw["choices"][0]["message"]["tool_calls"]),
    ):
        assert tb.chat_tool_calls(source) == expected
    assert tb.chat_tool_calls([]) == []
    whole = tb.chat_assistant_message(completion)["tool_calls"]
    sdk_list = completion.choices[0].message.tool_calls
    for bare in (raw["choices"][0]["message"]["tool_calls"], sdk_list):
        assert tb.chat_assistant_message(bare)["tool_calls"] == whole  # dicts or SDK objects
    # A list of something else is refused, not read as calls without a name.
    for wrong in (completion.choices, raw["choices"], [{"role": "user", "content": "hi"}]):
        with pytest.raises(TypeError, match="tool_calls list"):
            tb.chat_tool_calls(wrong)


def test_chat_without_tool_calls_gives_no_calls() -> None:
    assert tb.chat_tool_calls(chat("openai_chat_final")) == []
    assert tb.chat_tool_calls({"choices": []}) == []


def test_chat_rejects_what_is_not_a_completion() -> None:
    with pytest.raises(TypeError, match="chat completion"):
        tb.chat_tool_calls(42)  # type: ignore[arg-type]


def test_chat_refuses_one_call_outside_its_list() -> None:
    wrong: Any
    # One call is not a message without calls: reading it as one would end an
    # agent loop as if the model had answered.
    sdk_call = chat("openai_chat_single").choices[0].message.tool_calls
    assert sdk_call is not None
    one = load("openai_chat_single")["choices"][0]["message"]["tool_calls"][0]
    custom = load("openai_chat_custom")["choices"][0]["message"]["tool_calls"][0]
    for wrong in (one, sdk_call[0], custom, {k: v for k, v in one.items() if k != "type"}):
        with pytest.raises(TypeError, match=r"got one tool call, not a list: pass \[call\]"):
            tb.chat_tool_calls(wrong)
    assert tb.chat_tool_calls([one]) == tb.chat_tool_calls(sdk_call)  # in its list, read


def test_chat_refuses_other_formats_naming_their_reader() -> None:
    wrong: Any
    anthropic_message = load("anthropic_single")
    for wrong in (response("openai_responses_calls"), load("openai_responses_calls")):
        with pytest.raises(
            TypeError, match=r"got a Responses API response: .*responses_tool_calls"
        ):
            tb.chat_tool_calls(wrong)
    with pytest.raises(TypeError, match=r"got a Responses API response: .*openai\.responses_text"):
        tb.chat_text(load("openai_responses_final"))
    for wrong in (
        tba_message("anthropic_single"),
        anthropic_message,
        {"role": "assistant", "content": anthropic_message["content"]},  # as sent back
        tba_message("anthropic_final"),  # text only, yet still not a chat message
    ):
        with pytest.raises(
            TypeError, match=r"an Anthropic Messages message: .*anthropic\.tool_calls"
        ):
            tb.chat_tool_calls(wrong)
    with pytest.raises(TypeError, match=r"anthropic\.assistant_message"):
        tb.chat_assistant_message(anthropic_message)
    # One item or block of another format, and a dict that is nothing known.
    with pytest.raises(TypeError, match="a Responses API output item"):
        tb.chat_tool_calls(load("openai_responses_calls")["output"][1])
    with pytest.raises(TypeError, match="an Anthropic tool_use block"):
        tb.chat_tool_calls(anthropic_message["content"][1])
    one = load("openai_chat_single")["choices"][0]["message"]["tool_calls"][0]
    for wrong in ({"call_1": one}, {}):
        with pytest.raises(TypeError, match="tool_calls list; got a dict with keys"):
            tb.chat_tool_calls(wrong)


def test_chat_refuses_a_stream_chunk() -> None:
    wrong: Any
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
    for wrong in (ChatCompletionChunk.model_validate(chunk), chunk, chunk["choices"][0]):
        with pytest.raises(TypeError, match=r"stream chunk or event.*get_final_completion"):
            tb.chat_tool_calls(wrong)


def test_chat_messages_without_calls_still_give_no_calls() -> None:
    empty: Any
    final = chat("openai_chat_final")
    for empty in (
        final,
        final.choices[0],
        final.choices[0].message,
        load("openai_chat_final")["choices"][0]["message"],
        {"role": "assistant", "content": "It is 4 C."},
        {"role": "assistant", "content": "It is 4 C.", "tool_calls": None},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None, "refusal": "I can't."},
        [],
        (),
    ):
        assert tb.chat_tool_calls(empty) == []


def test_chat_custom_tool_call_carries_the_raw_input(executor: Executor) -> None:
    (call,) = tb.chat_tool_calls(chat("openai_chat_custom"))
    assert call.name == "run_sql"
    assert call.arguments == (
        "SELECT name, population FROM cities WHERE country = 'NO' ORDER BY population DESC LIMIT 2"
    )
    (result,) = executor.execute_batch([call])
    assert result.status == "ok"
    assert result.output[0]["query"] == call.arguments


@pytest.mark.parametrize(
    ("custom", "problem"),
    [
        ({"name": "run_sql", "input": None}, "'input' is null, not text"),
        ({"name": "run_sql"}, "'input' is missing"),
        ({"name": "run_sql", "input": {"q": 1}}, "'input' is dict, not text"),
    ],
)
def test_chat_custom_call_without_text_input_is_refused_not_run(
    executor: Executor, custom: dict[str, Any], problem: str
) -> None:
    """The tool ran on "null", or on "{}" for a call without input."""
    (call,) = tb.chat_tool_calls([{"id": "call_1", "type": "custom", "custom": custom}])
    (result,) = executor.execute_batch([call])
    assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    assert result.error == (
        "Invalid arguments for 'run_sql': a free-text tool takes its input as text, "
        f'or as {{"input": <text>}} alone ({problem})'
    )
    (item,) = tb.responses_tool_calls(
        [{"type": "custom_tool_call", "call_id": "c", "name": "run_sql", **custom}]
    )
    assert executor.execute(item).error == result.error


# -- Chat Completions: writing results ---------------------------------------------------


def test_chat_parallel_calls_answered_one_message_per_id_in_order(executor: Executor) -> None:
    completion = chat("openai_chat_parallel")
    batch = executor.execute_batch(tb.chat_tool_calls(completion))
    messages = wire(tb.chat_tool_messages(batch))
    assert [m["tool_call_id"] for m in messages] == [
        c.id for c in completion.choices[0].message.tool_calls or []
    ]
    assert all(m["role"] == "tool" for m in messages)
    assert json.loads(messages[0]["content"]) == {
        "city": "Oslo",
        "temperature": 4,
        "unit": "celsius",
    }
    assert json.loads(messages[1]["content"])["temperature"] == 59
    assert messages[2]["content"] == "Booked Maaemo for 2"


def test_chat_malformed_arguments_become_errors_the_model_can_fix(executor: Executor) -> None:
    batch = executor.execute_batch(tb.chat_tool_calls(chat("openai_chat_malformed")))
    assert [r.status for r in batch] == ["rejected", "rejected"]
    torn, wrong_type = (m["content"] for m in wire(tb.chat_tool_messages(batch)))
    assert torn == (
        "Error: Invalid arguments for 'get_weather': Arguments are not valid JSON"
        " (unexpected end of data at position 31) (INVALID_ARGUMENTS)"
    )
    assert wrong_type.startswith("Error: Invalid arguments for 'book_table': people:")
    assert wrong_type.endswith("(INVALID_ARGUMENTS)")


def test_chat_unknown_tool_is_answered_with_a_hint(executor: Executor) -> None:
    batch = executor.execute_batch(tb.chat_tool_calls(chat("openai_chat_unknown_tool")))
    (message,) = tb.chat_tool_messages(batch)
    assert message == {
        "role": "tool",
        "tool_call_id": "call_Pq7wE9rT1yU3iO5pA7sD9fG1",
        "content": "Error: Unknown tool 'get_wether'. Did you mean 'get_weather'? "
        "Available tools: get_weather, book_table, run_sql, slow_report, fetch_account (TOOL_NOT_FOUND)",
    }


def test_chat_timeouts_and_errors_are_readable_and_never_carry_the_secret(
    executor: Executor,
) -> None:
    batch = executor.execute_batch(tb.chat_tool_calls(chat("openai_chat_failures")))
    assert [r.status for r in batch] == ["timeout", "error"]
    timeout, error = (m["content"] for m in wire(tb.chat_tool_messages(batch)))
    assert timeout == "Error: Tool 'slow_report' timed out after 0.1s (EXECUTION_TIMEOUT)"
    assert error == "Error: account acme refused key *** (TOOL_ERROR)"
    assert SECRET not in timeout + error


def test_chat_assistant_message_echoes_arguments_json_cannot_hold(executor: Executor) -> None:
    """A dict of arguments with a lone surrogate, or nested past orjson's
    limit, raised a raw TypeError here, where the readers and the executor
    take them (and reject them)."""
    deep: Any = "x"
    for _ in range(600):
        deep = {"a": deep}
    for arguments in ({"city": "\ud800"}, deep):
        calls = [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": arguments},
            }
        ]
        (echoed,) = tb.chat_assistant_message(calls)["tool_calls"]
        text = echoed["function"]["arguments"]  # type: ignore[typeddict-item]
        assert text.isascii()
        json.loads(text)  # JSON any reader takes
        (result,) = executor.execute_batch(tb.chat_tool_calls(calls))
        assert result.error_code == ErrorCode.INVALID_ARGUMENTS
    custom = [{"id": "c2", "type": "custom", "custom": {"name": "run_sql", "input": None}}]
    (echoed,) = tb.chat_assistant_message(custom)["tool_calls"]
    assert echoed["custom"]["input"] == "null"  # type: ignore[typeddict-item]


def test_chat_assistant_message_echoes_the_calls_as_the_model_made_them() -> None:
    message = tb.chat_assistant_message(chat("openai_chat_custom"))
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_Kd2fG4hJ6kL8zX0cV2bN4mQ6",
                "type": "custom",
                "custom": {
                    "name": "run_sql",
                    "input": "SELECT name, population FROM cities WHERE country = 'NO' "
                    "ORDER BY population DESC LIMIT 2",
                },
            }
        ],
    }
    final = tb.chat_assistant_message(load("openai_chat_final"))
    assert final == {
        "role": "assistant",
        "content": load("openai_chat_final")["choices"][0]["message"]["content"],
    }


def test_chat_round_trip_through_the_sdk(
    serve: Callable[..., Server], executor: Executor, registry: ToolRegistry
) -> None:
    server = serve(load("openai_chat_parallel"), load("openai_chat_final"))
    client = server.client()
    messages: list[Any] = [
        {"role": "user", "content": "Weather in Oslo and Bergen, and book Maaemo"}
    ]
    tools = tb.chat_tool_definitions(registry)
    completion = client.chat.completions.create(
        model="toolbus-test-model", messages=messages, tools=tools
    )
    batch = executor.execute_batch(tb.chat_tool_calls(completion))
    messages += [tb.chat_assistant_message(completion), *tb.chat_tool_messages(batch)]
    client.chat.completions.create(model="toolbus-test-model", messages=messages, tools=tools)

    first, second = server.requests
    assert first["tools"] == tools
    sent = second["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "tool"]
    assert (
        sent[1]["tool_calls"] == load("openai_chat_parallel")["choices"][0]["message"]["tool_calls"]
    )
    assert [m["tool_call_id"] for m in sent[2:]] == [c["id"] for c in sent[1]["tool_calls"]]
    assert sent[4]["content"] == "Booked Maaemo for 2"


def test_chat_reads_the_completion_a_stream_reassembles(
    serve: Callable[..., Server], executor: Executor
) -> None:
    base = {"id": "chatcmpl-stream1", "object": "chat.completion.chunk", "created": 1763812345}
    base["model"] = "toolbus-test-model"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def call_delta(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    events = [
        chunk({"role": "assistant", "content": None, "refusal": None}),
        chunk(
            call_delta(
                0, id="call_s1", type="function", function={"name": "get_weather", "arguments": ""}
            )
        ),
        chunk(call_delta(0, function={"arguments": '{"ci'})),
        chunk(call_delta(0, function={"arguments": 'ty": "Oslo"}'})),
        chunk(
            call_delta(
                1, id="call_s2", type="function", function={"name": "get_weather", "arguments": ""}
            )
        ),
        chunk(call_delta(1, function={"arguments": '{"city": "Berg'})),
        chunk(call_delta(1, function={"arguments": 'en"}'})),
        chunk({}, "tool_calls"),
    ]
    server = serve(sse(events, named=False))
    with server.client().chat.completions.stream(
        model="toolbus-test-model", messages=[{"role": "user", "content": "Oslo and Bergen?"}]
    ) as stream:
        final = stream.get_final_completion()
    calls = tb.chat_tool_calls(final)
    assert calls == [
        ToolCall(id="call_s1", name="get_weather", arguments='{"city": "Oslo"}'),
        ToolCall(id="call_s2", name="get_weather", arguments='{"city": "Bergen"}'),
    ]
    assert [r.status for r in executor.execute_batch(calls)] == ["ok", "ok"]
    assert "parsed_arguments" not in json.dumps(tb.chat_assistant_message(final))


# -- Responses API ------------------------------------------------------------------------


def test_responses_calls_skip_reasoning_and_keep_custom_input() -> None:
    calls = tb.responses_tool_calls(response("openai_responses_calls"))
    assert [(c.id, c.name) for c in calls] == [
        ("call_rK4mZ8pQ2vX6bN0cT5yW9eJ3", "get_weather"),
        ("call_hT7gF1dS5aQ9wE3rY7uI1oP5", "get_weather"),
        ("call_Lm3nB5vC7xZ9aS1dF3gH5jK7", "run_sql"),
    ]
    assert calls[0].arguments == '{"city":"Oslo"}'
    assert isinstance(calls[2].arguments, str)
    assert calls[2].arguments.startswith("SELECT name")
    raw = load("openai_responses_calls")
    assert tb.responses_tool_calls(raw) == calls
    assert tb.responses_tool_calls(raw["output"]) == calls
    assert tb.responses_tool_calls(response("openai_responses_calls").output) == calls


def test_responses_refuses_chat_calls_and_anthropic_messages() -> None:
    wrong: Any
    completion = chat("openai_chat_parallel")
    for wrong in chat_call_lists():
        with pytest.raises(
            TypeError, match=r"got a list holding a Chat Completions tool call: .*chat_tool_calls"
        ):
            tb.responses_tool_calls(wrong)
    for wrong in (completion, load("openai_chat_parallel")):
        with pytest.raises(
            TypeError, match=r"got a Chat Completions completion: .*chat_tool_calls"
        ):
            tb.responses_tool_calls(wrong)
    for wrong in (
        completion.choices[0].message,
        load("openai_chat_parallel")["choices"][0]["message"],
    ):
        with pytest.raises(TypeError, match="got a Chat Completions message"):
            tb.responses_tool_calls(wrong)
    with pytest.raises(TypeError, match="got a Chat Completions tool call"):
        tb.responses_tool_calls(chat_call_lists()[1][0])
    with pytest.raises(TypeError, match="a Chat Completions choice"):
        tb.responses_tool_calls(load("openai_chat_parallel")["choices"])
    anthropic_message = load("anthropic_parallel")
    for wrong in (
        tba_message("anthropic_parallel"),
        anthropic_message,
        tba_message("anthropic_final"),
    ):
        with pytest.raises(
            TypeError, match=r"an Anthropic Messages message: .*anthropic\.tool_calls"
        ):
            tb.responses_tool_calls(wrong)
    with pytest.raises(TypeError, match=r"anthropic\.message_text"):
        tb.responses_text(anthropic_message)
    for wrong in (anthropic_message["content"], tba_message("anthropic_parallel").content):
        with pytest.raises(TypeError, match="a list holding an Anthropic tool_use block"):
            tb.responses_tool_calls(wrong)


def test_responses_refuses_a_stream_event() -> None:
    wrong: Any
    event = {
        "type": "response.completed",
        "sequence_number": 9,
        "response": load("openai_responses_calls"),
    }
    for wrong in (event, [event]):
        with pytest.raises(TypeError, match=r"stream chunks? or events?.*get_final_response"):
            tb.responses_tool_calls(wrong)


def test_responses_without_calls_still_give_no_calls() -> None:
    empty: Any
    final = response("openai_responses_final")
    raw = load("openai_responses_final")
    for empty in (final, final.output, raw, raw["output"], raw["output"][-1], {"output": []}, []):
        assert tb.responses_tool_calls(empty) == []
    # Input items (a message by role alone, a reference by id) are items too.
    assert tb.responses_tool_calls([{"role": "user", "content": "hi"}, {"id": "msg_1"}]) == []


def test_responses_outputs_answer_each_call_with_its_kind(executor: Executor) -> None:
    resp = response("openai_responses_calls")
    batch = executor.execute_batch(tb.responses_tool_calls(resp))
    outputs = wire(tb.responses_tool_outputs(batch, resp))
    assert [(o["type"], o["call_id"]) for o in outputs] == [
        ("function_call_output", "call_rK4mZ8pQ2vX6bN0cT5yW9eJ3"),
        ("function_call_output", "call_hT7gF1dS5aQ9wE3rY7uI1oP5"),
        ("custom_tool_call_output", "call_Lm3nB5vC7xZ9aS1dF3gH5jK7"),
    ]
    assert json.loads(outputs[1]["output"])["unit"] == "fahrenheit"


def test_responses_malformed_and_unknown_calls_become_errors(executor: Executor) -> None:
    resp = response("openai_responses_malformed")
    batch = executor.execute_batch(tb.responses_tool_calls(resp))
    torn, unknown = (o["output"] for o in wire(tb.responses_tool_outputs(batch, resp)))
    assert torn.startswith(
        "Error: Invalid arguments for 'book_table': Arguments are not valid JSON"
    )
    assert torn.endswith("(INVALID_ARGUMENTS)")
    assert unknown == (
        "Error: Unknown tool 'get_wether'. Did you mean 'get_weather'? Available tools: "
        "get_weather, book_table, run_sql, slow_report, fetch_account (TOOL_NOT_FOUND)"
    )


def test_responses_round_trip_through_the_sdk(
    serve: Callable[..., Server], executor: Executor, registry: ToolRegistry
) -> None:
    server = serve(load("openai_responses_calls"), load("openai_responses_final"))
    client = server.client()
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo and Bergen; biggest cities?"}]
    tools = tb.responses_tool_definitions(registry)
    resp = client.responses.create(
        model="toolbus-test-model", input=items, tools=tools, store=False
    )
    batch = executor.execute_batch(tb.responses_tool_calls(resp))
    items += [*tb.responses_output_items(resp), *tb.responses_tool_outputs(batch, resp)]
    final = client.responses.create(
        model="toolbus-test-model", input=items, tools=tools, store=False
    )

    assert server.paths == ["/v1/responses", "/v1/responses"]
    assert server.requests[0]["tools"] == tools
    sent = server.requests[1]["input"]
    assert sent[1:5] == load("openai_responses_calls")["output"]  # reasoning item included, as sent
    assert [(i["type"], i["call_id"]) for i in sent[5:]] == [
        ("function_call_output", "call_rK4mZ8pQ2vX6bN0cT5yW9eJ3"),
        ("function_call_output", "call_hT7gF1dS5aQ9wE3rY7uI1oP5"),
        ("custom_tool_call_output", "call_Lm3nB5vC7xZ9aS1dF3gH5jK7"),
    ]
    assert tb.responses_tool_calls(final) == []


def test_responses_reads_the_response_a_stream_reassembles(
    serve: Callable[..., Server], executor: Executor
) -> None:
    recorded = load("openai_responses_calls")
    started = {**recorded, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}]
    for index, item in enumerate(recorded["output"]):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "function_call":
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": index,
                    "item_id": item["id"],
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": recorded})
    for n, event in enumerate(events):
        event["sequence_number"] = n
    server = serve(sse(events, named=True))
    with server.client().responses.stream(model="toolbus-test-model", input="Oslo?") as stream:
        final = stream.get_final_response()
    assert tb.responses_tool_calls(final) == tb.responses_tool_calls(recorded)
    items = tb.responses_output_items(final)
    assert items == recorded["output"]  # no SDK-only fields such as parsed_arguments
    assert len(executor.execute_batch(tb.responses_tool_calls(final))) == 3


# -- exporting tools ------------------------------------------------------------------------


def test_chat_tool_definitions(registry: ToolRegistry) -> None:
    tools = {
        t.get("function", t.get("custom"))["name"]: t
        for t in wire(tb.chat_tool_definitions(registry))
    }
    assert tools["get_weather"] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": registry.get("get_weather").schema,  # type: ignore[union-attr]
        },
    }
    assert tools["run_sql"] == {
        "type": "custom",
        "custom": {"name": "run_sql", "description": "Run a read-only SQL query."},
    }


def test_responses_tool_definitions_always_say_whether_strict(registry: ToolRegistry) -> None:
    tools = {t["name"]: t for t in wire(tb.responses_tool_definitions(registry))}
    assert tools["get_weather"]["type"] == "function"
    assert tools["get_weather"]["strict"] is False
    assert tools["run_sql"] == {
        "type": "custom",
        "name": "run_sql",
        "description": "Run a read-only SQL query.",
    }
    strict = {t["name"]: t for t in wire(tb.responses_tool_definitions(registry, strict=True))}
    assert strict["get_weather"]["strict"] is True
    assert strict["get_weather"]["parameters"]["required"] == ["city", "unit"]


def test_strict_definitions_from_a_list_of_tools(registry: ToolRegistry) -> None:
    weather = registry.get("get_weather")
    assert weather is not None
    (tool,) = wire(tb.chat_tool_definitions([weather], strict=True))
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"] == strict_schema(weather.schema)


class Address(BaseModel):
    street: str
    postcode: str | None = None


class Stop(BaseModel):
    address: Address
    minutes: int = 30
    tags: list[str] = Field(default_factory=list)


class Trip(BaseModel):
    name: str
    stops: list[Stop]
    home: Address | None = None
    mode: Literal["car", "train"] = "train"


def _objects(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


def test_strict_schema_closes_every_object_and_makes_optional_fields_nullable() -> None:
    original = Trip.model_json_schema()
    before = copy.deepcopy(original)
    strict = strict_schema(original)
    assert original == before  # the input is not changed
    objects = list(_objects(strict))
    assert len(objects) == 3  # Trip, and Address and Stop under $defs
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert obj["required"] == list(obj["properties"])
    assert '"default":' not in json.dumps(strict)
    props = strict["properties"]
    assert props["home"]["anyOf"] == [{"$ref": "#/$defs/Address"}, {"type": "null"}]  # was nullable
    assert {"type": "null"} in props["mode"]["anyOf"]  # an optional enum
    assert props["mode"]["description"] == '(default: "train")'
    stop = strict["$defs"]["Stop"]["properties"]
    assert stop["minutes"]["type"] == ["integer", "null"]
    assert stop["tags"]["type"] == ["array", "null"]
    assert stop["address"] == {"$ref": "#/$defs/Address"}  # required: unchanged


def test_strict_schema_agrees_with_the_sdk_where_every_field_is_required() -> None:
    class Leg(BaseModel):
        origin: str
        legs: list[Address]

    ours = strict_schema(Leg.model_json_schema())
    sdk = to_strict_json_schema(Leg)
    # The SDK keeps Address.postcode optional-with-null as is; so do we, since it accepts null.
    assert ours == sdk


def test_strict_schema_rewrites_what_strict_mode_refuses() -> None:
    schema = {
        "type": "object",
        "properties": {
            "shape": {
                "oneOf": [
                    {"type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"]},
                    {"type": "object", "properties": {"w": {"type": "number"}}, "required": ["w"]},
                ],
                "discriminator": {"propertyName": "kind"},
            },
            "owner": {"$ref": "#/$defs/Person", "description": "Who owns it"},
            "wrapped": {"allOf": [{"$ref": "#/$defs/Person"}]},
        },
        "required": ["shape", "owner", "wrapped"],
        "$defs": {"Person": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }
    strict = strict_schema(schema)
    shape = strict["properties"]["shape"]
    assert "oneOf" not in shape
    assert "discriminator" not in shape
    assert [b["additionalProperties"] for b in shape["anyOf"]] == [False, False]
    owner = strict["properties"]["owner"]
    assert owner["description"] == "Who owns it"
    assert owner["required"] == ["name"]  # inlined, and closed
    assert strict["properties"]["wrapped"] == {"$ref": "#/$defs/Person"}
    assert strict["$defs"]["Person"]["additionalProperties"] is False


def test_strict_schema_of_a_self_reference_with_a_sibling_ends() -> None:
    """A $ref to the schema it is in, beside a description, was inlined
    without end: RecursionError from strict_schema, the definitions, run_agent."""
    node = {
        "type": "object",
        "properties": {
            "value": {"type": "string"},
            "next": {"$ref": "#/$defs/Node", "description": "the next node"},
        },
        "required": ["value"],
    }
    schema = {
        "type": "object",
        "$defs": {"Node": node},
        "properties": {"head": {"$ref": "#/$defs/Node", "title": "Head"}},
        "required": ["head"],
    }
    strict = strict_schema(schema)
    assert strict["$defs"]["Node"]["properties"]["next"] == {
        "anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}],
        "description": "the next node",
    }
    head = strict["properties"]["head"]  # inlined once, then a reference again
    assert head["title"] == "Head" and head["required"] == ["value", "next"]
    assert head["properties"]["next"] == strict["$defs"]["Node"]["properties"]["next"]
    validator = jsonschema.Draft202012Validator(strict)
    validator.check_schema(strict)
    assert validator.is_valid({"head": {"value": "a", "next": {"value": "b", "next": None}}})
    assert not validator.is_valid({"head": {"value": "a", "next": {"value": "b"}}})

    class Walk(Tool):
        name = "walk"
        description = "Walk a linked list."
        parameters = schema

        def run(self, params: Any) -> str:
            return "ok"

    (walk,) = tb.chat_tool_definitions([Walk()], strict=True)
    assert walk["function"]["parameters"] == strict


def test_strict_schema_refuses_free_form_objects(registry: ToolRegistry) -> None:
    @registry.tool
    def tag_items(tags: dict[str, int]) -> str:
        """Tag items."""
        return "ok"

    with pytest.raises(StrictSchemaError, match=r"tool 'tag_items': /properties/tags: .*free-form"):
        tb.chat_tool_definitions(registry, strict=True)
    with pytest.raises(StrictSchemaError, match="local"):
        strict_schema(
            {"type": "object", "properties": {"a": {"$ref": "http://x/s.json", "title": "A"}}}
        )
    assert tb.chat_tool_definitions(registry)  # non-strict export still works


def test_drop_strict_nulls_removes_only_the_nulls_that_mean_not_given(
    registry: ToolRegistry,
) -> None:
    @registry.tool
    def plan_trip(trip: Trip) -> str:
        """Plan a trip."""
        return "planned"

    strict_args = {
        "trip": {
            "name": "Coast",
            "stops": [
                {
                    "address": {"street": "Bryggen 1", "postcode": None},
                    "minutes": None,
                    "tags": None,
                }
            ],
            "home": None,
            "mode": None,
        }
    }
    calls = [
        ToolCall(id="a", name="plan_trip", arguments=json.dumps(strict_args)),
        ToolCall(id="b", name="get_weather", arguments='{"city": "Oslo", "unit": null}'),
        ToolCall(id="c", name="get_weather", arguments='{"city": "Oslo"'),  # torn: left as is
        ToolCall(id="d", name="nope", arguments='{"x": null}'),
        ToolCall(id="e", name="run_sql", arguments="SELECT null"),
        ToolCall(id="f", name="get_weather", arguments='{"city": "Oslo"}'),
    ]
    a, b, c, d, e, f = tb.drop_strict_nulls(calls, registry)
    assert a.arguments == {
        "trip": {
            "name": "Coast",
            "stops": [
                {"address": {"street": "Bryggen 1", "postcode": None}}
            ],  # postcode accepts null
            "home": None,  # accepts null: kept
        }
    }
    assert b.arguments == {"city": "Oslo"}
    assert (c, d, e, f) == tuple(calls[2:])


def test_strict_nulls_dropped_calls_execute(executor: Executor, registry: ToolRegistry) -> None:
    calls = [ToolCall(id="1", name="get_weather", arguments='{"city": "Oslo", "unit": null}')]
    assert executor.execute_batch(calls)[0].status == "rejected"
    assert executor.execute_batch(tb.drop_strict_nulls(calls, registry))[0].status == "ok"


# -- result text ---------------------------------------------------------------------------


def test_result_text() -> None:
    def result(**fields: Any) -> ToolResult:
        return ToolResult(call_id="1", name="t", **fields)

    assert result_text(result(status="ok", output=None)) == NO_OUTPUT
    assert result_text(result(status="ok", output="")) == NO_OUTPUT
    assert result_text(result(status="ok", output={"a": 1})) == '{\n  "a": 1\n}'
    long = result_text(result(status="ok", output="x" * 50), max_length=10)
    assert long == "x" * 10 + "\n... (truncated, 40 characters omitted)"
    assert result_text(result(status="cancelled", error="stopped")) == "Error: stopped"


def test_every_format_writes_lone_surrogates_as_replacement_characters() -> None:
    """A lone surrogate in a result's text, an attachment's title or file name
    reached the model's request, which UTF-8 cannot encode (bug hunt)."""
    name = b"report-\xe9".decode("utf-8", "surrogateescape")
    pdf = Attachment(type="application/pdf", data="JVBERi0=", title=f"{name}.pdf")
    page = Attachment(type="text/plain", data="aGk=", url=f"https://files.example/{name}.txt")
    ok = ToolResult(call_id="c1", name="ls", status="ok", output=name, attachments=(pdf, page))
    failed = ToolResult(
        call_id="c2", name="ls", status="error", error=f"no {name}", error_code="TOOL_ERROR"
    )
    written = [
        tb.chat_tool_messages([ok, failed]),
        tb.chat_attachment_message([ok]),
        tb.responses_tool_outputs([ok, failed], {"output": []}),
        tba.tool_result_blocks([ok, failed]),
    ]
    for value in written:
        text = json.dumps(value, ensure_ascii=False)
        text.encode()  # (raised before)
        assert "report-\ufffd" in text


def test_max_length_bounds_error_texts_too() -> None:
    """result_text's max_length bounded outputs but not error texts (providers and MCP review)."""
    result = ToolResult(
        call_id="c1", name="t", status="error", error="X" * 100_000, error_code="TOOL_ERROR"
    )
    assert len(result_text(result, max_length=100)) < 1_000


def test_chat_call_without_id_is_answered_under_the_same_id() -> None:
    """A Chat call without an id was echoed under another id than the call's
    (providers and MCP review)."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "get", "arguments": '{"city": "Oslo"}'}}
        ],
    }
    (call,) = tb.chat_tool_calls(message)
    echoed = tb.chat_assistant_message(message)
    assert echoed["tool_calls"][0]["id"] == call.id  # type: ignore[typeddict-item]


def test_responses_calls_without_call_id_are_echoed_and_answered_under_one_id(
    executor: Executor,
) -> None:
    """A Responses call without `call_id` was answered under a made-up id its
    echoed item did not carry, and a custom one with a function_call_output
    (bug hunt)."""
    given = {
        "output": [
            {"type": "function_call", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
            {"type": "custom_tool_call", "name": "run_sql", "input": "SELECT 1"},
        ]
    }
    calls = tb.responses_tool_calls(given)
    echoed = tb.responses_output_items(given)
    outputs = tb.responses_tool_outputs(executor.execute_batch(calls), given)
    ids = [c.id for c in calls]
    assert all(i.startswith("call_toolbus_") for i in ids) and len(set(ids)) == 2
    assert [(i["type"], i.get("call_id")) for i in echoed] == [
        ("function_call", ids[0]),
        ("custom_tool_call", ids[1]),
    ]
    assert [(o["type"], o.get("call_id")) for o in outputs] == [
        ("function_call_output", ids[0]),
        ("custom_tool_call_output", ids[1]),
    ]
    assert "call_id" not in given["output"][0]  # (the response itself is not changed)


def test_call_without_id_whose_arguments_json_cannot_write_is_still_read() -> None:
    """The id made up for a call without one hashed its arguments as JSON, so
    text with a lone surrogate (or nesting past orjson's limit) made the reader
    raise instead of the executor rejecting the call (bug hunt)."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "get", "arguments": '{"city": "\udce9"}'}}
        ],
    }
    (call,) = tb.chat_tool_calls(message)
    assert call.id.startswith("call_toolbus_") and call.arguments == '{"city": "\udce9"}'
    echoed = tb.chat_assistant_message(message)
    assert echoed["tool_calls"][0]["id"] == call.id  # type: ignore[typeddict-item]


def test_non_object_arguments_are_rejected_not_dropped() -> None:
    """Non-object arguments (a list) were dropped: a mutating tool ran with none
    (providers and MCP review)."""
    registry = ToolRegistry()

    @registry.tool
    def reset_everything() -> str:
        """A mutating tool without parameters."""
        return "reset"

    anthropic_calls = tba.tool_calls(
        {"content": [{"type": "tool_use", "id": "t1", "name": "reset_everything", "input": [1]}]}
    )
    chat_calls = tb.chat_tool_calls(
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


def test_null_arguments_are_rejected_not_dropped() -> None:
    """Chat and Responses calls whose arguments were null read as calls without
    arguments: a mutating tool ran with its defaults (bug hunt)."""
    registry = ToolRegistry()
    deleted: list[int] = []

    @registry.tool
    def delete_records(older_than_days: int = 0) -> str:
        """A mutating tool whose every parameter has a default."""
        deleted.append(older_than_days)
        return "deleted"

    chat_calls = tb.chat_tool_calls(
        [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "delete_records", "arguments": None},
            }
        ]
    )
    responses_calls = tb.responses_tool_calls(
        {
            "output": [
                {
                    "type": "function_call",
                    "call_id": "r1",
                    "name": "delete_records",
                    "arguments": None,
                }
            ]
        }
    )
    with Executor(registry, timeout=5) as executor:
        batch = executor.execute_batch([*chat_calls, *responses_calls])
    assert [(r.call_id, r.error_code) for r in batch] == [
        ("c1", "INVALID_ARGUMENTS"),
        ("r1", "INVALID_ARGUMENTS"),
    ]
    assert all("must be a JSON object" in (r.error or "") for r in batch)
    assert deleted == []
    # A call without the field at all has no arguments, as before.
    (bare,) = tb.chat_tool_calls([{"id": "c2", "function": {"name": "delete_records"}}])
    assert bare.arguments == {}


def test_chat_refuses_a_legacy_function_call_and_reads_text_parts() -> None:
    """A message of the deprecated `functions` API read as no calls (an agent
    loop would stop); a content given as parts read as their Python repr."""
    legacy = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    completion = ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "function_call", "message": legacy}],
        }
    )
    for given in (legacy, completion):
        with pytest.raises(TypeError, match=r"legacy function_call .* tools="):
            tb.chat_tool_calls(given)
        with pytest.raises(TypeError, match="legacy function_call"):
            tb.chat_assistant_message(given)
    assert tb.chat_text(legacy) == ""  # (the text alone is still readable)
    parts = {
        "role": "assistant",
        "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}],
    }
    assert tb.chat_text(parts) == "hello"
    assert tb.chat_tool_calls(parts) == []
