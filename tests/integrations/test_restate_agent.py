"""The durable agent loop (`toolbus.integrations.restate.arun_agent`) in a
Restate handler, against the real Restate server, with a scripted model (the
real `openai` client over a mock transport). A handler that fails its first
attempt after the turn stands for a crash: Restate retries the invocation,
and the turn must be read back from the journal, not done again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("restate", reason="the restate extra is not installed")

import httpx2
import openai
import restate

from tests.integrations import dbos_support
from tests.integrations.restate_support import Served, Server, server
from toolbus import Executor, ToolRegistry
from toolbus.integrations.restate import ModelCallFailed, arun_agent, durable
from toolbus.policies import requires_approval

pytestmark = pytest.mark.timeout(120)

TURNS = [[("lookup", {"city": "Oslo"}), ("refund", {"amount": 3})], [("lookup", {"city": "Bodø"})]]


class World:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: list[str] = []
        self.asked_model = 0
        self.asked_person: list[str] = []
        self.attempts: dict[str, int] = {}
        self.model_fails = False
        self.over_limit = True
        self.turns = TURNS
        self.failed: list[ModelCallFailed] = []


world = World()
registry = ToolRegistry()


@registry.tool(read_only=True)
def lookup(city: str) -> str:
    """The weather."""
    with world.lock:
        world.ran.append(f"lookup {city}")
    return f"{city}: 4 degrees"


@registry.tool(policies=[requires_approval(when=lambda call: world.over_limit)])
def transfer(amount: int) -> str:
    """Move money: approved first while the day's limit is reached."""
    with world.lock:
        world.ran.append(f"transfer {amount}")
    return f"transferred {amount}"


@registry.tool(policies=[requires_approval()])
def refund(amount: int) -> str:
    """Refund (a person approves it first)."""
    with world.lock:
        world.ran.append(f"refund {amount}")
    return f"refunded {amount}"


async def model(request: httpx2.Request) -> httpx2.Response:
    world.asked_model += 1
    if world.model_fails:
        return httpx2.Response(500, json={"error": {"message": "the model is down"}})
    return dbos_support.model_reply(world.turns, request)


def approve(request: Any) -> bool:
    world.asked_person.append(request.call_id)
    return True


executor = Executor(registry)
service = restate.Service("AgentTests")


@service.handler()
async def turn(ctx: restate.Context, question: str) -> dict[str, Any]:
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(model))
    async with openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://m.test/v1", http_client=http, max_retries=0
    ) as client:
        run = await arun_agent(
            client, model="m", messages=question, executor=executor, approve=approve
        )
    if world.attempts[invocation] == 1:
        world.over_limit = False  # (the day's limit is reset meanwhile)
        raise RuntimeError("the first attempt fails after the turn")
    return {"text": run.text, "stop": run.stop_reason, "messages": len(run.messages)}


@service.handler()
async def failing_model(ctx: restate.Context) -> str:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(model))
    async with openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://m.test/v1", http_client=http, max_retries=0
    ) as client:
        try:
            await arun_agent(client, model="m", messages="hi", executor=durable(executor))
        except ModelCallFailed as e:
            world.failed.append(e)
            raise  # (terminal: the invocation ends failed, not retried)
    return "no error"


@service.handler()
async def failing_approver(ctx: restate.Context) -> str:
    def approve_or_fail(request: Any) -> bool:
        world.asked_person.append(request.call_id)
        raise ConnectionError("https://approvals.example/?token=sk-live-123 unreachable")

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(model))
    async with openai.AsyncOpenAI(
        api_key="sk-test", base_url="http://m.test/v1", http_client=http, max_retries=0
    ) as client:
        await arun_agent(
            client, model="m", messages="refund", executor=executor, approve=approve_or_fail
        )
    return "no error"


@pytest.fixture(scope="module")
def restate_server() -> Iterator[Server]:
    with server() as running, Served(service) as served:
        running.register(served.uri)
        yield running


@pytest.fixture(autouse=True)
def _fresh_world() -> None:
    world.__init__()  # type: ignore[misc]


def test_a_retried_turn_is_read_back_not_done_again(restate_server: Server) -> None:
    invocation = restate_server.send("AgentTests/turn", "weather and a refund")
    answer = restate_server.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == "done"
    assert world.attempts[invocation] == 2
    assert world.asked_model == 3  # three turns, each asked once
    assert world.asked_person == ["call_0_1"]  # the person was not asked again
    assert sorted(world.ran) == ["lookup Bodø", "lookup Oslo", "refund 3"]
    names = [e.get("name") for e in restate_server.journal(invocation)]
    assert names.count("toolbus-model:chat") == 3
    assert names.count("toolbus-approve") == 1


def test_a_model_that_fails_ends_the_invocation_without_a_retry(restate_server: Server) -> None:
    world.model_fails = True
    invocation = restate_server.send("AgentTests/failing_model")
    answer = restate_server.attach(invocation)
    assert answer.status_code == 502, answer.text
    assert "the model is down" in answer.text
    assert world.asked_model == 1
    (failed,) = world.failed
    assert "APIStatusError" in str(failed) or "InternalServerError" in str(failed)
    assert isinstance(failed.__cause__, openai.APIError)  # (in the attempt it happened in)


def test_an_approver_that_raises_ends_the_invocation_without_its_message(
    restate_server: Server,
) -> None:
    invocation = restate_server.send("AgentTests/failing_approver")
    answer = restate_server.attach(invocation)
    assert answer.status_code == 500, answer.text
    assert "the approver raised ConnectionError" in answer.text
    assert "sk-live-123" not in answer.text
    assert world.asked_person == ["call_0_1"]  # asked once: not retried


def test_a_retried_turn_takes_the_path_it_took_whatever_the_policies_say_now(
    restate_server: Server,
) -> None:
    # Deferred, approved and run on the first attempt; on the retry its policy
    # would let it through at once: the turn is read back as it was.
    world.turns = [[("transfer", {"amount": 5})]]
    invocation = restate_server.send("AgentTests/turn", "a transfer")
    answer = restate_server.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert world.attempts[invocation] == 2
    assert world.ran == ["transfer 5"]  # once
    assert world.asked_person == ["call_0_0"]
