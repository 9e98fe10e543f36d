"""What `run_agent` refuses, it refuses before its first request; what a model
sends at a turn never raises out of it.

A bad `max_length`, or a tool the provider refuses (its name; with `strict`,
its schema) offered only from turn 2, used to raise after turn 1's request
was sent and its calls had run: the AgentResult, and the record of what ran,
were lost. So did arguments nesting past Python's stack with `strict=True`
(`drop_strict_nulls` read them with orjson's 1,024 levels, then recursed).
Driven through the real `openai` and `anthropic` clients on a mock transport.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from tests.conftest import MakeExecutor
from toolbus import FunctionTool, Tool, ToolRegistry
from toolbus.providers import StrictSchemaError, run_agent
from toolbus.tools import StepContext


def _chat(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


def _calls(*calls: tuple[str, str]) -> dict[str, Any]:
    return _chat(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(calls)
            ],
        }
    )


DONE = _chat({"role": "assistant", "content": "done"})


class Server:
    """Serves `bodies` in order; records each request's body."""

    def __init__(self, *bodies: dict[str, Any]) -> None:
        self.bodies = list(bodies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.bodies.pop(0))


@pytest.fixture
def chat() -> Iterator[Callable[..., tuple[Server, openai.OpenAI]]]:
    made: list[openai.OpenAI] = []

    def make(*bodies: dict[str, Any]) -> tuple[Server, openai.OpenAI]:
        server = Server(*bodies)
        client = openai.OpenAI(
            api_key="sk-test",
            base_url="http://toolbus.test/v1",
            http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
            max_retries=0,
        )
        made.append(client)
        return server, client

    yield make
    for client in made:
        client.close()


def _booking(done: list[str]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(name="book")
    def book(what: str) -> str:
        """Book something (mutating)."""
        done.append(what)
        return f"booked {what}"

    return registry


BOOK = ("book", '{"what": "flight"}')


@pytest.mark.parametrize(
    ("bad", "error"),
    [(None, TypeError), ("4000", TypeError), (1.5, TypeError), (0, ValueError), (-1, ValueError)],
)
def test_a_bad_max_length_is_refused_before_anything_runs(
    chat: Any, make_executor: MakeExecutor, bad: Any, error: type[Exception]
) -> None:
    done: list[str] = []
    registry = _booking(done)
    server, client = chat(_calls(BOOK), DONE)
    with pytest.raises(error, match="run_agent: max_length must be"):
        run_agent(
            client, model="m", messages="go", executor=make_executor(registry), max_length=bad
        )
    assert server.requests == [] and done == []


def _from_turn_2(step: StepContext) -> bool:
    return step.step >= 2


def test_a_tool_the_provider_refuses_offered_from_turn_2_is_refused_before_turn_1(
    chat: Any, make_executor: MakeExecutor
) -> None:
    done: list[str] = []
    registry = _booking(done)
    # Never enabled: never offered, and not checked.
    registry.register(FunctionTool(lambda: "x", name="hidden.panel", is_enabled=False))
    server, client = chat(_calls(BOOK), DONE)
    run = run_agent(client, model="m", messages="go", executor=make_executor(registry))
    assert run.stop_reason == "done" and done == ["flight"]
    done.clear()
    registry.register(FunctionTool(lambda: "x", name="admin.panel", is_enabled=_from_turn_2))
    server, client = chat(_calls(BOOK), DONE)
    with pytest.raises(ValueError) as caught:
        run_agent(client, model="m", messages="go", executor=make_executor(registry))
    text = str(caught.value)
    assert text.startswith("tool 'admin.panel': OpenAI takes tool names of")
    assert "run_agent checks every tool a turn could offer, enabled now or not" in text
    assert server.requests == [] and done == []


def test_the_check_before_turn_1_is_anthropic_s_for_an_anthropic_client(
    make_executor: MakeExecutor,
) -> None:
    registry = _booking([])
    registry.register(FunctionTool(lambda: "x", name="x" * 65, is_enabled=_from_turn_2))
    server = Server()
    client = anthropic.Anthropic(
        api_key="sk-ant-test",
        base_url="http://toolbus.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(server)),
        max_retries=0,
    )
    with client, pytest.raises(ValueError, match=r"Anthropic takes tool names of .* 65 characters"):
        run_agent(client, model="m", messages="go", executor=make_executor(registry))
    assert server.requests == []


class _FreeForm(Tool):
    """A schema OpenAI's strict mode cannot express (free-form keys)."""

    name = "tags"
    parameters = {"type": "object", "additionalProperties": {"type": "string"}}  # noqa: RUF012

    def run(self, params: Any) -> str:
        return "tagged"


@pytest.mark.parametrize("strict", [False, True])
def test_a_tool_registered_mid_run_that_the_provider_refuses_is_left_out_and_the_run_goes_on(
    chat: Any, make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, strict: bool
) -> None:
    done: list[str] = []
    registry = _booking(done)
    late = _FreeForm() if strict else FunctionTool(lambda: "x", name="admin.panel")

    @registry.tool(name="unlock")
    def unlock() -> str:
        """Registers a tool (as an MCP server's changed list would)."""
        registry.register(late)
        return "unlocked"

    server, client = chat(_calls(BOOK, ("unlock", "{}")), _calls((late.name, "{}")), DONE)
    with caplog.at_level(logging.WARNING, logger="toolbus.providers"):
        run = run_agent(
            client, model="m", messages="go", executor=make_executor(registry), strict=strict
        )
    assert run.stop_reason == "done" and run.turns == 3
    assert done == ["flight"]
    assert [r.status for r in run.batches[0].results] == ["ok", "ok"]
    # Left out of turn 2's tools, and its call refused as one not offered.
    offered = [t["function"]["name"] for t in server.requests[1]["tools"]]
    assert offered == ["book", "unlock"]
    (refused,) = run.batches[1].results
    assert refused.error_code is not None and refused.error_code.value == "TOOL_NOT_OFFERED"
    assert f"tool {late.name!r} is left out of turn 2" in caplog.text


def test_with_strict_a_schema_strict_mode_cannot_express_is_refused_before_turn_1(
    chat: Any, make_executor: MakeExecutor
) -> None:
    done: list[str] = []
    registry = _booking(done)
    tags = _FreeForm()
    tags.is_enabled = _from_turn_2
    registry.register(tags)
    server, client = chat(_calls(BOOK), DONE)
    with pytest.raises(StrictSchemaError, match=r"tool 'tags': .*free-form keys"):
        run_agent(client, model="m", messages="go", executor=make_executor(registry), strict=True)
    assert server.requests == [] and done == []


class _Tree(Tool):
    name = "tree"
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/N"}},
        "$defs": {
            "N": {
                "type": "object",
                "properties": {"c": {"$ref": "#/$defs/N"}, "v": {"type": "integer"}},
            }
        },
    }

    def run(self, params: Any) -> str:
        return "ran"


def test_strict_arguments_nested_past_python_s_stack_are_refused_as_a_result(
    chat: Any, make_executor: MakeExecutor
) -> None:
    done: list[str] = []
    registry = _booking(done)
    registry.register(_Tree())
    levels = 1000  # orjson reads it; its nulls, walked by recursion, ran out of the stack
    deep = '{"node":' + '{"c":' * (levels - 2) + '{"v":null}' + "}" * (levels - 2) + "}"
    server, client = chat(_calls(BOOK, ("tree", deep)), DONE)
    run = run_agent(client, model="m", messages="go", executor=make_executor(registry), strict=True)
    assert run.stop_reason == "done" and done == ["flight"]
    book, tree = run.batches[0].results
    assert book.status == "ok"
    assert tree.status == "rejected"
    assert tree.error == (
        "Invalid arguments for 'tree': Arguments nest too deeply "
        "(more than 254 levels of objects and arrays)"
    )
    # The model read why.
    answers = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert "Arguments nest too deeply" in answers[1]["content"]
