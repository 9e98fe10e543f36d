"""The agent loop and calls that need an approval (`requires_approval`).

Driven through the real SDK clients of tests/providers/test_agent_loop.py, whose fake
server records every request body: so the tests check what the model reads,
and that it never reads a `deferred` result. Each model turn here calls a
read, then a guarded `delete_file`, then a mutating `book_table` that has to
wait for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Literal

import pytest

from tests.conftest import MakeExecutor
from tests.provider_tools import load, wire
from tests.providers import test_agent_loop as loop
from toolbus import ErrorCode, Executor, ToolRegistry
from toolbus.policies import ApprovalDecision, ApprovalRequest, arguments_digest, requires_approval
from toolbus.providers import AgentResult, arun_agent, run_agent

clients = loop.clients  # the SDK clients on a fake server (recorded responses, recorded requests)
MODEL = loop.MODEL
QUESTION = "Weather in Oslo, delete /tmp/old.txt and book Maaemo for two"

Api = Literal["chat", "responses", "messages"]
APIS: tuple[Api, ...] = ("chat", "responses", "messages")
FINAL = {"chat": "openai_chat_final", "responses": "openai_responses_final"}
FINAL["messages"] = "anthropic_final"

READ = ("call_read", "get_weather", {"city": "Oslo"})
DELETE = ("call_delete", "delete_file", {"path": "/tmp/old.txt"})
BOOK = ("call_book", "book_table", {"restaurant": "Maaemo", "people": 2})
TURN = (READ, DELETE, BOOK)


@pytest.fixture
def ran() -> list[str]:
    return []


@pytest.fixture
def executor(make_executor: MakeExecutor, ran: list[str]) -> Executor:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(f"get_weather:{city}")
        return f"4°C in {city}"

    @registry.tool(policies=[requires_approval(reason="it deletes a file")])
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(f"delete_file:{path}")
        return f"Deleted {path}"

    @registry.tool(policies=[requires_approval(lambda call: call.arguments == {"path": "/etc"})])
    def delete_dir(path: str) -> str:
        """Delete a directory (only /etc needs an approval)."""
        ran.append(f"delete_dir:{path}")
        return f"Deleted {path}/"

    @registry.tool
    def book_table(restaurant: str, people: int) -> str:
        """Book a table."""
        ran.append(f"book_table:{restaurant}")
        return f"Booked {restaurant} for {people}"

    return make_executor(registry)


def model_turn(api: Api, calls: tuple[tuple[str, str, dict[str, Any]], ...]) -> dict[str, Any]:
    """A recorded response of `api`, its calls replaced by `calls` (id, name, arguments)."""
    if api == "chat":
        body = load("openai_chat_parallel")
        body["choices"][0]["message"]["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    elif api == "responses":
        body = load("openai_responses_calls")
        body["output"] = body["output"][:1] + [
            {
                "id": f"fc_{i}",
                "type": "function_call",
                "status": "completed",
                "arguments": json.dumps(a),
                "call_id": i,
                "name": n,
            }
            for i, n, a in calls
        ]
    else:
        body = load("anthropic_parallel")
        body["content"] = body["content"][:2] + [
            {"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls
        ]
    return body


def serve(clients: Any, api: Api, *bodies: dict[str, Any], asynchronous: bool = False) -> Any:
    """(server, client) for `api`, serving `bodies` then the recorded final answer."""
    server, client = clients(
        "anthropic" if api == "messages" else "openai", asynchronous=asynchronous
    )
    server.bodies = [*bodies, load(FINAL[api])]
    return server, client


def answers(api: Api, request: dict[str, Any]) -> dict[str, str]:
    """Every tool result a request carries: the text the model reads, by call id."""
    if api == "chat":
        return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}
    if api == "responses":
        return {i["call_id"]: i["output"] for i in request["input"] if "output" in i}
    return {
        b["tool_use_id"]: b["content"]
        for m in request["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }


def no_deferral_sent(server: Any) -> None:
    sent = json.dumps(server.requests)
    assert "APPROVAL_REQUIRED" not in sent and "needs approval" not in sent


# -- with approve= ------------------------------------------------------------------------


def test_approved_calls_run_and_the_model_reads_their_results(
    clients: Any, executor: Executor, ran: list[str]
) -> None:
    server, client = serve(clients, "chat", model_turn("chat", TURN))
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approve=approve)
    assert (run.stop_reason, run.turns, run.pending) == ("done", 2, ())
    assert [(r.call_id, r.tool, r.arguments_masked) for r in asked] == [
        ("call_delete", "delete_file", {"path": "/tmp/old.txt"})
    ]
    # The read ran once; only the deferred call and the one held back behind it re-ran.
    assert ran == ["get_weather:Oslo", "delete_file:/tmp/old.txt", "book_table:Maaemo"]
    assert answers("chat", server.requests[1]) == {
        "call_read": "4°C in Oslo",
        "call_delete": "Deleted /tmp/old.txt",
        "call_book": "Booked Maaemo for 2",
    }
    assert [m["role"] for m in server.requests[1]["messages"]] == [
        "user",
        "assistant",
        *["tool"] * 3,
    ]
    no_deferral_sent(server)
    (batch,) = run.batches
    assert [r.call_id for r in batch] == ["call_read", "call_delete", "call_book"]
    assert [r.status for r in batch] == ["ok"] * 3
    s = batch.summary
    assert (s.total, s.executed, s.succeeded, s.failed, s.deferred) == (3, 3, 3, 0, 0)
    assert (s.read_only, s.mutating) == (1, 2)


def test_two_calls_sharing_an_id_are_each_asked_about_and_run(
    clients: Any, executor: Executor, ran: list[str]
) -> None:
    """Some servers reuse ids within a turn: decisions were keyed by id alone,
    so the second call was never asked about and the run stopped for approval."""
    first = ("call_0", "delete_file", {"path": "/tmp/a"})
    second = ("call_0", "delete_file", {"path": "/tmp/b"})
    then = ("call_1", "book_table", {"restaurant": "Maaemo", "people": 2})
    server, client = serve(clients, "chat", model_turn("chat", (first, second, then)))
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approve=approve)
    assert (run.stop_reason, run.turns, run.pending) == ("done", 2, ())
    assert [r.arguments_masked for r in asked] == [{"path": "/tmp/a"}, {"path": "/tmp/b"}]
    assert ran == ["delete_file:/tmp/a", "delete_file:/tmp/b", "book_table:Maaemo"]
    (batch,) = run.batches
    assert [(r.call_id, r.status, r.output) for r in batch] == [
        ("call_0", "ok", "Deleted /tmp/a"),
        ("call_0", "ok", "Deleted /tmp/b"),
        ("call_1", "ok", "Booked Maaemo for 2"),
    ]
    no_deferral_sent(server)


def test_of_two_calls_sharing_an_id_each_gets_its_own_decision(
    clients: Any, executor: Executor, ran: list[str]
) -> None:
    first = ("call_0", "delete_file", {"path": "/tmp/a"})
    second = ("call_0", "delete_file", {"path": "/tmp/b"})
    server, client = serve(clients, "chat", model_turn("chat", (first, second)))
    run = run_agent(
        client,
        model=MODEL,
        messages=QUESTION,
        executor=executor,
        approve=lambda r: r.arguments_masked == {"path": "/tmp/b"},
    )
    assert run.stop_reason == "done"
    assert ran == ["delete_file:/tmp/b"]
    (batch,) = run.batches
    assert [(r.status, r.error_code) for r in batch] == [
        ("rejected", ErrorCode.TOOL_NOT_ALLOWED),
        ("ok", None),
    ]


def test_a_declined_call_is_answered_as_not_approved(
    clients: Any, executor: Executor, ran: list[str]
) -> None:
    server, client = serve(clients, "messages", model_turn("messages", TURN))
    run = run_agent(
        client, model=MODEL, messages=QUESTION, executor=executor, approve=lambda r: False
    )
    assert run.stop_reason == "done"
    assert [r.status for r in run.batches[0]] == ["ok", "rejected", "ok"]
    assert run.batches[0][1].error_code == ErrorCode.TOOL_NOT_ALLOWED
    # Declined is an answer: the call held back behind it runs, as after any rejection.
    assert ran == ["get_weather:Oslo", "book_table:Maaemo"]
    got = answers("messages", server.requests[1])
    assert got["call_delete"] == (
        "Error: Tool 'delete_file' was not approved: declined (TOOL_NOT_ALLOWED)"
    )
    assert got["call_book"] == "Booked Maaemo for 2"
    no_deferral_sent(server)


def test_a_decision_is_used_as_given_and_an_unclear_answer_denies(
    clients: Any, executor: Executor, ran: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    server, client = serve(clients, "chat", model_turn("chat", TURN))
    run = run_agent(
        client,
        model=MODEL,
        messages=QUESTION,
        executor=executor,
        approve=lambda r: r.deny("not on a Friday"),
    )
    assert answers("chat", server.requests[1])["call_delete"].endswith(
        "was not approved: not on a Friday (TOOL_NOT_ALLOWED)"
    )
    server, client = serve(clients, "chat", model_turn("chat", TURN))
    with caplog.at_level(logging.WARNING, logger="toolbus.providers"):
        run = run_agent(
            client, model=MODEL, messages=QUESTION, executor=executor, approve=lambda r: "yes"
        )
    assert run.batches[0][1].status == "rejected"  # never run on an unclear answer
    why = "approve returned str, not a bool or an ApprovalDecision"
    assert why in answers("chat", server.requests[1])["call_delete"]
    assert why in caplog.text
    assert "delete_file:/tmp/old.txt" not in ran


def test_a_decision_for_other_arguments_stops_the_run(clients: Any, executor: Executor) -> None:
    server, client = serve(clients, "chat", model_turn("chat", TURN))
    # A digest the executor would make, of other arguments.
    secret = executor._services.key_secret
    other = ApprovalDecision(
        digest=arguments_digest("delete_file", {"path": "/"}, secret=secret), approved=True
    )
    run = run_agent(
        client, model=MODEL, messages=QUESTION, executor=executor, approve=lambda r: other
    )
    assert run.stop_reason == "approval"
    assert [r.call_id for r in run.pending] == ["call_delete"]
    assert len(server.requests) == 1  # the model was not asked again
    no_deferral_sent(server)


async def test_async_approve(clients: Any, executor: Executor, ran: list[str]) -> None:
    server, client = serve(clients, "messages", model_turn("messages", TURN), asynchronous=True)
    asked: list[str] = []

    async def approve(request: ApprovalRequest) -> bool:
        await asyncio.sleep(0)
        asked.append(request.call_id)
        return True

    run = await arun_agent(
        client, model=MODEL, messages=QUESTION, executor=executor, approve=approve
    )
    assert (run.stop_reason, asked) == ("done", ["call_delete"])
    assert answers("messages", server.requests[1])["call_delete"] == "Deleted /tmp/old.txt"
    # A sync approve works with arun_agent too.
    server, client = serve(clients, "messages", model_turn("messages", TURN), asynchronous=True)
    run = await arun_agent(
        client, model=MODEL, messages=QUESTION, executor=executor, approve=lambda r: False
    )
    assert run.batches[0][1].status == "rejected"


def test_a_call_held_back_that_needs_approval_too_is_asked_about_in_turn(
    clients: Any, executor: Executor, ran: list[str]
) -> None:
    # delete_dir waits for delete_file; only once that ran is it asked, and deferred.
    etc = ("call_etc", "delete_dir", {"path": "/etc"})
    server, client = serve(clients, "chat", model_turn("chat", (DELETE, etc)))
    asked: list[str] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request.call_id)
        return True

    run = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approve=approve)
    assert (run.stop_reason, asked) == ("done", ["call_delete", "call_etc"])
    assert ran == ["delete_file:/tmp/old.txt", "delete_dir:/etc"]
    assert answers("chat", server.requests[1]) == {
        "call_delete": "Deleted /tmp/old.txt",
        "call_etc": "Deleted /etc/",
    }


# -- without approve=: stop, then resume ------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_without_approve_the_run_stops_and_resumes(
    clients: Any, executor: Executor, ran: list[str], api: Api
) -> None:
    server, client = serve(clients, api, model_turn(api, TURN))
    first = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, api=api)
    assert (first.stop_reason, first.turns, len(server.requests)) == ("approval", 1, 1)
    (request,) = first.pending
    assert (request.call_id, request.tool) == ("call_delete", "delete_file")
    assert ran == ["get_weather:Oslo"]
    (batch,) = first.batches
    assert [r.status for r in batch] == ["ok", "deferred", "cancelled"]
    assert batch[2].error_code == ErrorCode.ABORTED
    # The conversation ends with the model's turn, unanswered.
    assert len(first.messages) == (5 if api == "responses" else 2)
    assert answers(api, {"messages": first.messages, "input": first.messages}) == {}

    run = run_agent(
        client,
        model=MODEL,
        messages=first.messages,
        executor=executor,
        api=api,
        resume=first,
        approvals={request.call_id: request.approve()},
    )
    assert (run.stop_reason, run.turns, run.pending) == ("done", 2, ())
    assert ran == ["get_weather:Oslo", "delete_file:/tmp/old.txt", "book_table:Maaemo"]
    assert answers(api, server.requests[1]) == {
        "call_read": "4°C in Oslo",
        "call_delete": "Deleted /tmp/old.txt",
        "call_book": "Booked Maaemo for 2",
    }
    assert len(first.messages) == (5 if api == "responses" else 2)  # not changed by resuming
    history = server.requests[1]["input" if api == "responses" else "messages"]
    assert history[: len(first.messages)] == wire(first.messages)
    no_deferral_sent(server)
    (batch,) = run.batches  # the pending turn's batch, finished
    assert [r.status for r in batch] == ["ok"] * 3
    assert batch.summary.deferred == 0 and batch.summary.executed == 3


async def test_resume_with_approve_and_async(clients: Any, executor: Executor) -> None:
    server, client = serve(clients, "chat", model_turn("chat", TURN), asynchronous=True)
    first = await arun_agent(client, model=MODEL, messages=QUESTION, executor=executor)
    assert first.stop_reason == "approval"

    async def approve(request: ApprovalRequest) -> bool:
        return True

    run = await arun_agent(
        client,
        model=MODEL,
        messages=first.messages,
        executor=executor,
        resume=first,
        approve=approve,
    )
    assert run.stop_reason == "done"
    assert answers("chat", server.requests[1])["call_book"] == "Booked Maaemo for 2"


def test_a_resumed_run_stops_again_for_calls_still_waiting(
    clients: Any, executor: Executor, ran: list[str]
) -> None:
    etc = ("call_etc", "delete_dir", {"path": "/etc"})
    server, client = serve(clients, "chat", model_turn("chat", (READ, DELETE, etc)))
    first = run_agent(client, model=MODEL, messages=QUESTION, executor=executor, max_turns=1)
    assert [r.call_id for r in first.pending] == ["call_delete"]
    (request,) = first.pending
    second = run_agent(
        client,
        model=MODEL,
        messages=first.messages,
        executor=executor,
        max_turns=1,
        resume=first,
        approvals={"call_delete": request.approve()},
    )
    # delete_dir had waited for delete_file: now it asks for its own approval.
    assert (second.stop_reason, [r.call_id for r in second.pending]) == ("approval", ["call_etc"])
    assert [r.status for r in second.batches[0]] == ["ok", "ok", "deferred"]
    assert second.messages == first.messages and len(server.requests) == 1
    (request,) = second.pending
    third = run_agent(
        client,
        model=MODEL,
        messages=second.messages,
        executor=executor,
        max_turns=1,
        resume=second,
        approvals={"call_etc": request.deny("not /etc")},
    )
    # The turn limit was reached by the stopped run: its calls are answered, then it stops.
    assert (third.stop_reason, third.turns, len(server.requests)) == ("max_turns", 1, 1)
    assert [r.status for r in third.batches[0]] == ["ok", "ok", "rejected"]
    assert third.messages[-1]["tool_call_id"] == "call_etc"
    assert ran == ["get_weather:Oslo", "delete_file:/tmp/old.txt"]


def test_resume_is_checked(clients: Any, executor: Executor) -> None:
    server, client = serve(clients, "chat", model_turn("chat", TURN))
    first = run_agent(client, model=MODEL, messages=QUESTION, executor=executor)
    (request,) = first.pending
    ok = {"call_delete": request.approve()}

    def resume(**kwargs: Any) -> AgentResult:
        options: dict[str, Any] = {"messages": first.messages, "resume": first, **kwargs}
        return run_agent(client, model=MODEL, executor=executor, **options)

    with pytest.raises(ValueError, match="pass messages=result"):
        resume(messages=first.messages[:1], approvals=ok)
    with pytest.raises(ValueError, match="pass messages=result"):
        resume(messages=QUESTION, approvals=ok)
    with pytest.raises(ValueError, match="stopped in the 'chat' API, not 'responses'"):
        resume(api="responses", approvals=ok)
    with pytest.raises(ValueError, match="names call 'call_nope'"):
        resume(approvals={"call_nope": request.approve()})
    with pytest.raises(TypeError, match="must be an ApprovalDecision"):
        resume(approvals={"call_delete": True})
    with pytest.raises(ValueError, match="pass it with resume="):
        run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approvals=ok)
    done = AgentResult([], None, (), 1, "done", "")
    with pytest.raises(ValueError, match="stopped for approval"):
        resume(resume=done)
    assert len(server.requests) == 1  # nothing was sent
    assert resume(approvals=ok).stop_reason == "done"


def test_a_sync_loop_refuses_an_async_approve(clients: Any, executor: Executor) -> None:
    server, client = serve(clients, "chat", model_turn("chat", TURN))

    async def approve(request: ApprovalRequest) -> bool:
        return True

    class Approver:
        async def __call__(self, request: ApprovalRequest) -> bool:
            return True

    for wrong in (approve, Approver()):
        with pytest.raises(TypeError, match="sync approve; use arun_agent"):
            run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approve=wrong)
    assert server.requests == []  # refused up front
    with pytest.raises(TypeError, match="approve must be callable"):
        run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approve=True)  # type: ignore[arg-type]

    # A sync callable that returns a coroutine is caught when it does.
    def later(request: ApprovalRequest) -> Any:
        return approve(request)

    with pytest.raises(TypeError, match="sync approve; use arun_agent"):
        run_agent(client, model=MODEL, messages=QUESTION, executor=executor, approve=later)
