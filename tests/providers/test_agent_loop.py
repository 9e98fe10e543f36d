"""The agent loop, driven through the real `openai` and `anthropic` clients.

Each client talks to an `httpx2.MockTransport` that serves recorded responses
(tests/fixtures/providers) in order and records every request body the SDK
sends, so the tests check what the model would receive: the tool results, in
the provider's shape and in the calls' order.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx2
import openai
import pytest

from tests.conftest import MakeExecutor
from tests.provider_tools import FIXTURES, SECRET, load, make_registry
from toolbus import (
    Attachment,
    Executor,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    bus,
)
from toolbus.providers import AgentResult, arun_agent, run_agent
from toolbus.providers import anthropic as tba
from toolbus.providers import openai as tbo

ROOT = Path(__file__).resolve().parents[2]
MODEL = "toolbus-test-model"
QUESTION = "Weather in Oslo and Bergen, and book Maaemo for two"


@pytest.fixture
def registry() -> ToolRegistry:
    return make_registry()


@pytest.fixture
def executor(make_executor: MakeExecutor, registry: ToolRegistry) -> Executor:
    return make_executor(registry)


class Server:
    """Serves recorded responses in order; records the path and body of each request."""

    def __init__(self, *names: str) -> None:
        self.bodies = [load(n) for n in names]
        self.paths: list[str] = []
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.bodies.pop(0))


Kind = Literal["openai", "anthropic"]


@pytest.fixture
def clients() -> Iterator[Any]:
    """make(kind, *fixtures, asynchronous=False) -> (server, client); clients closed at teardown."""
    made: list[Any] = []

    def make(kind: Kind, *names: str, asynchronous: bool = False) -> tuple[Server, Any]:
        server = Server(*names)
        transport = httpx2.MockTransport(server)
        http: Any = (
            httpx2.AsyncClient(transport=transport)
            if asynchronous
            else httpx2.Client(transport=transport)
        )
        if kind == "openai":
            cls: Any = openai.AsyncOpenAI if asynchronous else openai.OpenAI
            client = cls(
                api_key="sk-test",
                base_url="http://toolbus.test/v1",
                http_client=http,
                max_retries=0,
            )
        else:
            cls = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
            client = cls(
                api_key="sk-ant-test",
                base_url="http://toolbus.test",
                http_client=http,
                max_retries=0,
            )
        made.append((client, asynchronous))
        return server, client

    yield make
    for client, asynchronous in made:
        if asynchronous:
            asyncio.run(client.close())
        else:
            client.close()


# -- one scenario per API, checked the same way sync and async ----------------------------

CHAT = ("openai_chat_parallel", "openai_chat_malformed", "openai_chat_final")
RESPONSES = ("openai_responses_calls", "openai_responses_malformed", "openai_responses_final")
MESSAGES = ("anthropic_parallel", "anthropic_invalid_input", "anthropic_final")


def check_chat(run: AgentResult, server: Server, registry: ToolRegistry) -> None:
    assert (run.stop_reason, run.turns, len(run.batches)) == ("done", 3, 2)
    assert [r.status for r in run.batches[0]] == ["ok", "ok", "ok"]
    assert [r.status for r in run.batches[1]] == ["rejected", "rejected"]
    assert run.text == load("openai_chat_final")["choices"][0]["message"]["content"]
    assert server.paths == ["/v1/chat/completions"] * 3
    assert all(r["tools"] == tbo.chat_tool_definitions(registry) for r in server.requests)
    assert all(r["model"] == MODEL for r in server.requests)
    last = server.requests[2]["messages"]
    assert [m["role"] for m in last] == [
        "user",
        "assistant",
        *["tool"] * 3,
        "assistant",
        *["tool"] * 2,
    ]
    for turn, (assistant, tools) in enumerate([(1, slice(2, 5)), (5, slice(6, 8))]):
        recorded = load(CHAT[turn])["choices"][0]["message"]["tool_calls"]
        assert last[assistant]["tool_calls"] == recorded  # the calls as the model made them
        assert [m["tool_call_id"] for m in last[tools]] == [c["id"] for c in recorded]
    assert last[4]["content"] == "Booked Maaemo for 2"
    assert last[6]["content"].startswith("Error: Invalid arguments for 'get_weather'")
    assert last[7]["content"].endswith("(INVALID_ARGUMENTS)")
    assert run.messages == [*last, {"role": "assistant", "content": run.text}]


def test_chat_loop(clients: Any, executor: Executor, registry: ToolRegistry) -> None:
    server, client = clients("openai", *CHAT)
    messages = [{"role": "user", "content": QUESTION}]
    run = run_agent(client, model=MODEL, messages=messages, executor=executor)
    check_chat(run, server, registry)
    assert messages == [{"role": "user", "content": QUESTION}]  # the caller's list is not changed
    assert isinstance(run.response, openai.types.chat.ChatCompletion)


async def test_chat_loop_async(clients: Any, executor: Executor, registry: ToolRegistry) -> None:
    server, client = clients("openai", *CHAT, asynchronous=True)
    run = await arun_agent(client, model=MODEL, messages=QUESTION, executor=executor)
    check_chat(run, server, registry)


def check_responses(run: AgentResult, server: Server) -> None:
    assert (run.stop_reason, run.turns, len(run.batches)) == ("done", 3, 2)
    assert [r.status for r in run.batches[0]] == ["ok", "ok", "ok"]
    assert [r.error_code for r in run.batches[1]] == ["INVALID_ARGUMENTS", "TOOL_NOT_FOUND"]
    assert run.text.startswith("Oslo is at 4°C")
    assert server.paths == ["/v1/responses"] * 3
    assert all(r["instructions"] == "Be brief." for r in server.requests)
    sent = server.requests[2]["input"]
    assert sent[0] == {"role": "user", "content": QUESTION}
    assert sent[1:5] == load(RESPONSES[0])["output"]  # the reasoning item goes back too
    assert [(i["type"], i["call_id"]) for i in sent[5:8]] == [
        ("function_call_output", "call_rK4mZ8pQ2vX6bN0cT5yW9eJ3"),
        ("function_call_output", "call_hT7gF1dS5aQ9wE3rY7uI1oP5"),
        ("custom_tool_call_output", "call_Lm3nB5vC7xZ9aS1dF3gH5jK7"),
    ]
    assert sent[7]["output"].startswith("2 rows for: SELECT name")
    assert sent[8:10] == load(RESPONSES[1])["output"]
    assert [(i["type"], i["call_id"]) for i in sent[10:]] == [
        ("function_call_output", "call_Qa1sW3eD5rF7tG9yH1uJ3iK5"),
        ("function_call_output", "call_Zm9xN7bV5cX3zL1kJ9hG7fD5"),
    ]
    assert sent[11]["output"].endswith("(TOOL_NOT_FOUND)")
    assert run.messages == [*sent, *load(RESPONSES[2])["output"]]


def test_responses_loop(clients: Any, executor: Executor) -> None:
    server, client = clients("openai", *RESPONSES)
    run = run_agent(
        client,
        model=MODEL,
        messages=QUESTION,
        executor=executor,
        api="responses",
        instructions="Be brief.",
    )
    check_responses(run, server)


async def test_responses_loop_async(clients: Any, executor: Executor) -> None:
    server, client = clients("openai", *RESPONSES, asynchronous=True)
    run = await arun_agent(
        client,
        model=MODEL,
        messages=QUESTION,
        executor=executor,
        api="responses",
        instructions="Be brief.",
    )
    check_responses(run, server)


def check_messages(run: AgentResult, server: Server, registry: ToolRegistry) -> None:
    assert (run.stop_reason, run.turns, len(run.batches)) == ("done", 3, 2)
    assert [r.status for r in run.batches[1]] == ["rejected", "rejected"]
    assert run.text == load("anthropic_final")["content"][0]["text"]
    assert all(r["max_tokens"] == 4096 and r["system"] == "Be brief." for r in server.requests)
    assert all(r["tools"] == tba.tool_definitions(registry) for r in server.requests)
    sent = server.requests[2]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    for assistant, results in ((sent[1], sent[2]), (sent[3], sent[4])):
        uses = [b["id"] for b in assistant["content"] if b["type"] == "tool_use"]
        assert [b["tool_use_id"] for b in results["content"]] == uses  # all of them, in order
        assert {b["type"] for b in results["content"]} == {"tool_result"}
    assert sent[1]["content"] == load(MESSAGES[0])["content"]
    assert [b["is_error"] for b in sent[2]["content"]] == [False, False, False]
    assert [b["is_error"] for b in sent[4]["content"]] == [True, True]
    assert sent[4]["content"][1]["content"].endswith("city: Field required (INVALID_ARGUMENTS)")
    assert run.messages == [
        *sent,
        {"role": "assistant", "content": load("anthropic_final")["content"]},
    ]


def test_messages_loop(clients: Any, executor: Executor, registry: ToolRegistry) -> None:
    server, client = clients("anthropic", *MESSAGES)
    run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, system="Be brief.")
    check_messages(run, server, registry)
    assert isinstance(run.response, anthropic.types.Message)


async def test_messages_loop_async(
    clients: Any, executor: Executor, registry: ToolRegistry
) -> None:
    server, client = clients("anthropic", *MESSAGES, asynchronous=True)
    run = await arun_agent(
        client, model=MODEL, messages=QUESTION, executor=executor, system="Be brief."
    )
    check_messages(run, server, registry)


# -- limits, options and guarantees -------------------------------------------------------------


def test_turn_limit_answers_the_last_calls_and_stops(clients: Any, executor: Executor) -> None:
    server, client = clients("anthropic", "anthropic_single", "anthropic_single", "anthropic_final")
    run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, max_turns=2)
    assert (run.stop_reason, run.turns, len(run.batches)) == ("max_turns", 2, 2)
    assert len(server.requests) == 2
    assert run.messages[-1]["content"][0]["type"] == "tool_result"  # resumable as it is
    assert run.text == "I'll check the current weather in Oslo."


def test_deeply_nested_input_is_answered_not_raised(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """A tool_use input nested ~500 deep made run_agent raise RecursionError
    while echoing the model's turn (bug hunt)."""
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def store(data: object = None) -> str:
        """Store anything."""
        return "stored"

    nested: Any = 1
    for _ in range(600):
        nested = {"a": nested}
    server, client = clients("anthropic", "anthropic_single", "anthropic_final")
    for block in server.bodies[0]["content"]:
        if block["type"] == "tool_use":
            block.update(name="store", input={"data": nested})
    run = run_agent(client, model=MODEL, messages=QUESTION, executor=make_executor(registry))
    assert run.stop_reason == "done"
    (result,) = run.batches[0]
    assert result.error_code == "INVALID_ARGUMENTS"
    assert result.error is not None and "nest too deeply" in result.error
    answer = server.requests[1]["messages"][-1]["content"][0]
    assert answer["is_error"] and "nest too deeply" in answer["content"]


def test_failures_reach_the_model_once_each_and_without_secrets(
    clients: Any, executor: Executor
) -> None:
    server, client = clients("openai", "openai_chat_failures", "openai_chat_final")
    with bus.Recorder(bus.FINISHED, sender=executor) as recorder:
        run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor)
        assert executor.drain_events()
        finished = recorder.of(bus.FINISHED)
    assert sorted(e.call_id for e in finished) == sorted(r.call_id for r in run.batches[0])
    results = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == [
        "Error: Tool 'slow_report' timed out after 0.1s (EXECUTION_TIMEOUT)",
        "Error: account acme refused key *** (TOOL_ERROR)",
    ]
    assert SECRET not in json.dumps(results)


def test_secrets_in_attachments_never_reach_the_model(
    clients: Any, make_executor: MakeExecutor
) -> None:
    registry = ToolRegistry()

    @registry.tool
    def fetch_account(account: str, api_key: str) -> ToolOutput:
        """Export an account; returns a signed link."""
        link = Attachment(type="file", url=f"https://files.example/{account}?key={api_key}")
        return ToolOutput(content=f"exported {account} with {api_key}", attachments=(link,))

    server, client = clients("openai", "openai_chat_failures", "openai_chat_final")
    server.bodies[0]["choices"][0]["message"]["tool_calls"].pop(0)  # only fetch_account
    run_agent(client, model=MODEL, messages=QUESTION, executor=make_executor(registry))
    (result,) = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert result["content"].startswith("exported acme with ***")  # the output is scrubbed
    assert SECRET not in result["content"]  # the attachment's URL is not


def test_a_secret_in_a_text_attachments_data_or_type_reaches_neither_model_nor_event(
    make_executor: MakeExecutor,
) -> None:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def fetch_report(report_id: str, api_key: str) -> ToolOutput:
        """Fetch a report (the upstream echoes the request in its text)."""
        log = f"GET /reports/{report_id}?api_key={api_key}\n200 OK"
        return ToolOutput(
            content=f"report {report_id}",
            attachments=(
                Attachment(type="text/plain", data=base64.b64encode(log.encode()).decode()),
                Attachment(type=f"text/x-{api_key}", title="oddly typed"),
            ),
        )

    executor = make_executor(registry)
    call = ToolCall(id="t1", name="fetch_report", arguments={"report_id": "r9", "api_key": SECRET})
    with bus.Recorder(sender=executor) as rec:
        result = executor.execute(call)
        executor.drain_events()
    (finished,) = [event for name, event in rec.events if name == bus.FINISHED]
    anthropic_blocks = tba.tool_results_message([result])["content"][0]["content"]
    assert anthropic_blocks[1]["source"]["data"] == "GET /reports/r9?api_key=***\n200 OK"
    file_data = tbo.responses_tool_outputs([result], [])[0]["output"][1]["file_data"]
    sent = [
        json.dumps(anthropic_blocks),
        base64.b64decode(file_data.split(",", 1)[1]).decode(),
        json.dumps(tbo.chat_tool_messages([result])),
        repr(finished),
        *(base64.b64decode(a.data).decode() for a in finished.result.attachments if a.data),
    ]
    assert "[attachment: text/x-*** oddly typed]" in sent[2]
    assert not [text for text in sent if SECRET in text]


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_lone_surrogates_in_outputs_and_errors_reach_the_model_as_replacement_characters(
    clients: Any, make_executor: MakeExecutor, kind: Kind, fails: bool
) -> None:
    """A tool whose output or error held a lone surrogate (a file name as
    os.listdir decodes a Latin-1 one) made run_agent raise UnicodeEncodeError
    sending the next request (bug hunt)."""
    registry = ToolRegistry()
    name = b"report-\xe9.txt".decode("utf-8", "surrogateescape")

    @registry.tool(read_only=True)
    def get_weather(city: str) -> str:
        """Lists a directory, in truth."""
        if fails:
            raise FileNotFoundError(f"cannot open {name}")
        return f"{name}\nnotes.txt"

    names = ("openai_chat_single", "openai_chat_final")
    if kind == "anthropic":
        names = ("anthropic_single", "anthropic_final")
    server, client = clients(kind, *names)
    run = run_agent(client, model=MODEL, messages=QUESTION, executor=make_executor(registry))
    assert run.stop_reason == "done" and len(server.requests) == 2
    assert "report-\ufffd.txt" in json.dumps(server.requests[1]["messages"][-1], ensure_ascii=False)


def test_strict_mode_exports_strict_tools_and_drops_the_nulls(
    clients: Any, executor: Executor
) -> None:
    with_nulls = load("openai_chat_single")
    with_nulls["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = (
        '{"city":"Oslo","unit":null}'
    )
    for strict, status in ((True, "ok"), (False, "rejected")):
        server, client = clients("openai")
        server.bodies = [with_nulls, load("openai_chat_final")]
        run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, strict=strict)
        assert run.batches[0][0].status == status
        weather = next(t for t in server.requests[0]["tools"] if t["type"] == "function")
        assert weather["function"].get("strict", False) is strict
        echoed = server.requests[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]
        assert echoed == '{"city":"Oslo","unit":null}'  # the model's own turn is echoed as it was


def test_tools_are_sent_as_given_or_left_out(clients: Any, make_executor: MakeExecutor) -> None:
    empty = make_executor(ToolRegistry())
    server, client = clients("openai", "openai_chat_final", "openai_chat_final")
    run_agent(client, model=MODEL, messages=QUESTION, executor=empty)
    mine = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    run_agent(client, model=MODEL, messages=QUESTION, executor=empty, tools=mine)
    assert "tools" not in server.requests[0]
    assert server.requests[1]["tools"] == mine


def test_wrong_clients_and_options_are_refused(clients: Any, executor: Executor) -> None:
    _, sync_client = clients("openai")
    _, async_client = clients("anthropic", "anthropic_final", asynchronous=True)
    with pytest.raises(TypeError, match="sync client; use arun_agent"):
        run_agent(async_client, model=MODEL, messages=QUESTION, executor=executor)
    with pytest.raises(TypeError, match="cannot tell which API a object speaks"):
        run_agent(object(), model=MODEL, messages=QUESTION, executor=executor)
    with pytest.raises(ValueError, match="unknown api"):
        run_agent(sync_client, model=MODEL, messages=QUESTION, executor=executor, api="bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not stream"):
        run_agent(sync_client, model=MODEL, messages=QUESTION, executor=executor, stream=True)
    with pytest.raises(ValueError, match="max_turns"):
        run_agent(sync_client, model=MODEL, messages=QUESTION, executor=executor, max_turns=0)
    # '<' not supported between instances of 'str' and 'int'; "Value after * must be an iterable".
    for turns in ("3", None, 2.5):
        with pytest.raises(TypeError, match=r"^run_agent: max_turns must be an integer, got "):
            run_agent(
                sync_client, model=MODEL, messages=QUESTION, executor=executor, max_turns=turns
            )  # type: ignore[arg-type]
    for messages in (None, 5):
        with pytest.raises(
            TypeError,
            match=r"^run_agent: messages must be the conversation \(a list of messages\) or the "
            r"user's first message \(a string\), got ",
        ):
            run_agent(sync_client, model=MODEL, messages=messages, executor=executor)  # type: ignore[arg-type]


async def test_a_sync_client_is_refused_by_the_async_loop(clients: Any, executor: Executor) -> None:
    _, client = clients("openai", "openai_chat_final")
    with pytest.raises(TypeError, match="async client; use run_agent"):
        await arun_agent(client, model=MODEL, messages=QUESTION, executor=executor)


async def test_cancelling_the_async_loop_cancels_the_batch(
    clients: Any, make_executor: MakeExecutor
) -> None:
    registry = ToolRegistry()
    started, stopped = threading.Event(), threading.Event()

    @registry.tool(read_only=True)
    def get_weather(city: str, ctx: ToolContext) -> str:
        """Hangs until its call is cancelled."""
        started.set()
        ctx.wait_cancelled(30)
        stopped.set()
        return "never read"

    executor = make_executor(registry, timeout=None)
    _, client = clients("anthropic", "anthropic_single", asynchronous=True)
    task = asyncio.create_task(
        arun_agent(client, model=MODEL, messages=QUESTION, executor=executor)
    )
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 10)  # the tool saw the cancellation
    assert executor.stats().cancelled == 1


def test_providers_work_without_the_sdks() -> None:
    script = f"""
import json, sys
sys.modules["openai"] = None
sys.modules["anthropic"] = None
import toolbus
from toolbus.providers import anthropic, openai, run_agent
fixtures = {str(FIXTURES)!r}
chat = json.load(open(fixtures + "/openai_chat_parallel.json"))
message = json.load(open(fixtures + "/anthropic_parallel.json"))
print(len(openai.chat_tool_calls(chat)), len(anthropic.tool_calls(message)))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3 3"


def test_arun_agent_with_a_sync_client_sends_nothing() -> None:
    """arun_agent given a sync client sent the request before failing (providers and MCP review)."""
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
