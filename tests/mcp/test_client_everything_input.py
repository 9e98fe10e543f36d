"""The MCP client's input handlers against npm's `@modelcontextprotocol/server-everything`
(the TypeScript SDK's reference server, 2025-11-25), over stdio: its
`trigger-elicitation-request` (a form of every field kind: strings with
formats, bounded numbers, titled and untitled enums, multi-select arrays,
defaults), `trigger-sampling-request` and `get-roots-list`.

The server offers each tool only to a client that declares the capability;
it prints what it got back, so each test reads the server's own account.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.mcp_servers.peers import everything_server
from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.mcp import (
    Elicitation,
    ElicitationAnswer,
    MCPConnection,
    SamplingAnswer,
    SamplingRequest,
    connect_stdio,
)

# The slow tier (tests/README.md): npm's reference MCP server started.
pytestmark = pytest.mark.slow

ELICIT = "trigger-elicitation-request"


class Person:
    """A stand-in for the person who answers: each test sets the next answer."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.asked: list[Elicitation] = []

    def __call__(self, request: Elicitation) -> ElicitationAnswer:
        self.asked.append(request)
        answer: ElicitationAnswer = self.answer(request)
        return answer


def sample(request: SamplingRequest) -> SamplingAnswer:
    (block,) = request.messages[-1]["content"]
    return request.reply(f"a haiku about {block['text']}", model="toy-model")


@pytest.fixture(scope="module")
def person() -> Person:
    return Person()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("project")


@pytest.fixture(scope="module")
def everything(person: Person, project: Path) -> Iterator[MCPConnection]:
    with connect_stdio(
        "node",
        [everything_server(), "stdio"],
        elicitation=person,
        sampling=sample,
        roots=[(project, "project")],
    ) as conn:
        yield conn


@pytest.fixture(scope="module")
def executor(everything: MCPConnection) -> Iterator[Executor]:
    registry = ToolRegistry()
    everything.register(registry)
    with Executor(registry, timeout=20) as executor:
        yield executor


def raw_result(output: Any) -> dict[str, Any]:
    """The elicitation result the server says it got (its 'Raw result:' text)."""
    text = output if isinstance(output, str) else json.dumps(output)
    raw = text.split("Raw result: ", 1)[1]
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


def test_an_accepted_form_is_filled_from_its_defaults(executor: Executor, person: Person) -> None:
    person.answer = lambda r: r.accept({"name": "Ada Lovelace", "email": "ada@example.com"})
    r = executor.execute(ToolCall(name=ELICIT, arguments={}))
    assert r.status == "ok", r.error
    sent = raw_result(r.output)
    assert sent["action"] == "accept"
    # What the person gave, and every default the form offered (SEP-1034),
    # multi-select arrays (SEP-1330) included.
    assert sent["content"]["name"] == "Ada Lovelace"
    assert sent["content"]["integer"] == 42
    assert sent["content"]["untitledMultipleSelectEnum"] == ["Guitar"]
    assert sent["content"]["titledSingleSelectEnum"] == "hero-1"
    request = person.asked[-1]
    assert request.mode == "form" and request.requested_schema is not None
    assert request.requested_schema["required"] == ["name"]


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_reach_the_server(
    executor: Executor, person: Person, action: str
) -> None:
    person.answer = lambda r: getattr(r, action)()
    r = executor.execute(ToolCall(name=ELICIT, arguments={}))
    assert r.status == "ok", r.error
    assert raw_result(r.output) == {"action": action}


def test_an_answer_off_the_schema_is_not_sent(executor: Executor, person: Person) -> None:
    # `integer` is bounded to 1..100; a multi-select takes at most three.
    person.answer = lambda r: r.accept({"name": "Ada", "integer": 500})
    r = executor.execute(ToolCall(name=ELICIT, arguments={}))
    assert r.status == "error"
    assert "field 'integer' does not satisfy 'maximum': 100" in (r.error or "")
    assert "500" not in (r.error or "")
    person.answer = lambda r: r.accept(
        {"name": "Ada", "untitledMultipleSelectEnum": ["Guitar", "Piano", "Violin", "Drums"]}
    )
    r = executor.execute(ToolCall(name=ELICIT, arguments={}))
    assert r.status == "error"
    assert "field 'untitledMultipleSelectEnum' does not satisfy 'maxItems'" in (r.error or "")


def test_the_request_and_the_answer_sent_are_published(executor: Executor, person: Person) -> None:
    person.answer = lambda r: r.accept({"name": "Ada"})
    with bus.Recorder(sender=executor) as rec:
        r = executor.execute(ToolCall(id="ev-ask", name=ELICIT, arguments={}))
        assert executor.drain_events()
    assert r.status == "ok", r.error
    asked, answered = rec.of(bus.PROGRESS)
    assert asked.call_id == answered.call_id == "ev-ask"
    assert asked.data["input_requested"]["schema"]["required"] == ["name"]
    # The answer as sent: the defaults filled in are part of it.
    sent = raw_result(r.output)["content"]
    assert answered.data == {"input_answered": {"action": "accept", "data": sent}}
    assert sent["firstLine"] == "It was a dark and stormy night."


def test_the_server_samples_the_clients_model(executor: Executor) -> None:
    call = ToolCall(
        name="trigger-sampling-request", arguments={"prompt": "retries", "maxTokens": 40}
    )
    with bus.Recorder(sender=executor) as rec:
        r = executor.execute(call)
        assert executor.drain_events()
    assert r.status == "ok", r.error
    text = r.output if isinstance(r.output, str) else json.dumps(r.output)
    assert "a haiku about Resource trigger-sampling-request context: retries" in text
    assert "toy-model" in text
    asked, answered = rec.of(bus.PROGRESS)
    assert asked.data["sampling_requested"]["max_tokens"] == 40
    assert answered.data["sampling_answered"]["model"] == "toy-model"


def test_the_server_lists_the_clients_roots(executor: Executor, project: Path) -> None:
    r = executor.execute(ToolCall(name="get-roots-list", arguments={}))
    assert r.status == "ok", r.error
    text = r.output if isinstance(r.output, str) else json.dumps(r.output)
    assert project.as_uri() in text and "project" in text
