"""A server's question with no handler to answer it, on 2026-07-28: the call
ends `deferred` (`INPUT_REQUIRED`) with an `InputRequest`, and goes on where
it stopped when sent again with the answer (`toolbus/mcp/_input_later.py`);
through `execute(approval=...)` and through `run_agent`'s approvals.

Peers: the SDK's `MCPServer` (tests/mcp_servers/asking_server.py) in-process
and over stdio, and a toolbus server whose tool asks with `ctx.elicit`.
On 2025-11-25 (the answer must come inside the open request) a question is
declined, as test_elicitation.py shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from tests.mcp_servers import asking_server, quiz_server
from tests.mcp_servers.peers import connect_asking, use_peer
from tests.providers import test_agent_approvals as agent
from tests.providers import test_agent_loop as agent_loop
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.approvals import InputAnswer, InputRequest
from toolbus.mcp import MCPConnection, build_server, connect
from toolbus.models import ErrorCode, ToolResult
from toolbus.policies import requires_approval
from toolbus.providers import run_agent
from toolbus.scanning import ContentScanner

# Over stdio the server is another process: its count of runs is not ours.
MODERN = ["in-process", "stdio"]


@pytest.fixture
def asking(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MCPConnection]:
    peer = getattr(request, "param", "in-process")
    use_peer(peer, monkeypatch)
    asking_server.runs.clear()
    with connect_asking(peer) as conn:
        yield conn


def registered(conn: MCPConnection) -> ToolRegistry:
    registry = ToolRegistry()
    conn.register(registry)
    return registry


BOOK = ToolCall(id="b1", name="book", arguments={"name": "Oslo"})


def deferred(result: ToolResult) -> InputRequest:
    assert (result.status, result.error_code) == ("deferred", ErrorCode.INPUT_REQUIRED), result
    request = result.approval_request
    assert isinstance(request, InputRequest)
    return request


@pytest.mark.parametrize("asking", MODERN, indirect=True)
def test_a_question_defers_the_call_and_the_answer_resumes_it(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    ex = make_executor(registered(asking))
    request = deferred(ex.execute(BOOK))
    assert request.call_id == "b1" and request.tool == "book"
    assert request.source == "MCP server 'asking'"
    assert request.message == "Book Oslo?"
    assert request.arguments_masked == {"name": "Oslo"}
    assert request.requested_schema is not None
    assert request.requested_schema["required"] == ["seats", "ok"]
    result = ex.execute(BOOK, approval=request.accept({"seats": 2, "ok": True}))
    assert (result.status, result.output) == ("ok", {"result": "booked Oslo x2"}), result.error


def test_the_mutating_tool_ran_once(asking: MCPConnection, make_executor: MakeExecutor) -> None:
    ex = make_executor(registered(asking))
    request = deferred(ex.execute(BOOK))
    assert ex.execute(BOOK, approval=request.accept({"seats": 1, "ok": True})).ok
    assert asking_server.runs == ["Oslo"]


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_reach_the_tool(
    asking: MCPConnection, make_executor: MakeExecutor, action: str
) -> None:
    ex = make_executor(registered(asking))
    request = deferred(ex.execute(BOOK))
    answer = getattr(request, action)()
    result = ex.execute(BOOK, approval=answer)
    assert (result.status, result.output) == ("ok", {"result": f"not booked: {action}"})
    # approve() and deny() are accept (the form as offered) and decline.
    assert request.deny("no").action == "decline"
    assert request.approve() == request.accept()


def test_defaults_fill_an_accept_and_an_answer_off_the_schema_is_not_sent(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    ex = make_executor(registered(asking))
    order = ToolCall(id="o1", name="order", arguments={"item": "tea"})
    request = deferred(ex.execute(order))
    # The form's defaults (size M, count 1) fill an accept without data.
    result = ex.execute(order, approval=request.accept())
    assert result.output == {"result": "1 x tea in M"}, result

    request = deferred(ex.execute(BOOK))
    bad = ex.execute(BOOK, approval=request.accept({"seats": 200, "ok": True}))
    assert (bad.status, bad.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert bad.error == (
        "An answer to MCP server 'asking' was not sent: the answer does not match the "
        "requested schema: field 'seats' does not satisfy 'maximum': 9"
    )


def test_an_answer_binds_to_its_call_its_arguments_and_its_state(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    ex = make_executor(registered(asking))
    request = deferred(ex.execute(BOOK))
    answer = request.accept({"seats": 2, "ok": True})
    # Other arguments: the answer is not handed over, the server asks again.
    other = ToolCall(id="b1", name="book", arguments={"name": "Rome"})
    assert deferred(ex.execute(other, approval=answer)).message == "Book Rome?"
    # A state altered in transit, or a digest made up: not handed over either.
    forged = answer.model_copy(update={"state": answer.state.replace("seats", "seat")})
    assert deferred(ex.execute(BOOK, approval=forged)).message == "Book Oslo?"
    made_up = InputAnswer(digest="0" * 64, approved=True, action="accept", state=answer.state)
    deferred(ex.execute(BOOK, approval=made_up))
    # Another executor (another secret) does not take it.
    with Executor(registered(asking)) as stranger:
        deferred(stranger.execute(BOOK, approval=answer))
    assert asking_server.runs == []  # the tool's body never ran


def test_the_request_and_the_answer_are_published(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    ex = make_executor(registered(asking))
    with bus.Recorder(sender=ex) as rec:
        request = deferred(ex.execute(BOOK))
        ex.execute(BOOK, approval=request.accept({"seats": 2, "ok": True}))
        assert ex.drain_events()
    first, second = rec.of(bus.FINISHED)
    assert first.result.approval_request == request
    assert second.result.status == "ok"
    (answered,) = [e for e in rec.of(bus.PROGRESS) if "input_answered" in e.data]
    assert answered.call_id == "b1"
    assert answered.data["input_answered"] == {"action": "accept", "data": {"seats": 2, "ok": True}}


def test_a_secret_answer_is_published_masked(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    key = "sk-live-" + "k3y" * 8
    ex = make_executor(registered(asking))
    sign_in = ToolCall(id="s1", name="sign_in", arguments={"user": "bob"})
    with bus.Recorder(sender=ex) as rec:
        request = deferred(ex.execute(sign_in))
        result = ex.execute(sign_in, approval=request.accept({"api_key": key}))
        assert ex.drain_events()
    assert result.output == {"result": f"signed in bob with a key of {len(key)} characters"}
    assert key not in repr([e for name in rec.names() for e in rec.of(name)])


def test_with_a_handler_nothing_is_deferred(
    monkeypatch: pytest.MonkeyPatch, make_executor: MakeExecutor
) -> None:
    use_peer("in-process", monkeypatch)
    with connect_asking(
        "in-process", elicitation=lambda r: r.accept({"seats": 4, "ok": True})
    ) as c:
        result = make_executor(registered(c)).execute(BOOK)
    assert result.output == {"result": "booked Oslo x4"}


def test_a_request_for_a_sample_is_answered_at_once_not_deferred(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    """Only a question waits for later: a round that asks for a sample goes
    to the connection's handlers now (here none: sampling is not offered, and
    the server's call fails as it would without toolbus)."""
    ex = make_executor(registered(asking))
    result = ex.execute(ToolCall(name="summarize", arguments={"text": "hi"}))
    assert result.status == "error" and result.error_code == ErrorCode.TOOL_ERROR


# -- a toolbus server whose tool asks ----------------------------------------------------

served_runs: list[str] = []
served = ToolRegistry()
SEATS = {
    "type": "object",
    "properties": {"seats": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["seats"],
}


@served.tool
def reserve(city: str, ctx: ToolContext) -> str:
    """Reserves seats to `city` once the person says how many (mutating)."""
    served_runs.append(city)
    answer = ctx.elicit(f"Seats to {city}?", SEATS)
    return f"{answer.action}: {answer.data}"


def test_a_toolbus_server_keeps_the_call_until_the_answer_comes(
    make_executor: MakeExecutor,
) -> None:
    served_runs.clear()
    server_side = make_executor(served, timeout=60)
    with connect(build_server(served, server_side)) as conn:
        ex = make_executor(registered(conn), timeout=30)
        call = ToolCall(id="r1", name="reserve", arguments={"city": "Rome"})
        request = deferred(ex.execute(call))
        assert request.message == "Seats to Rome?"
        assert request.requested_schema == SEATS
        result = ex.execute(call, approval=request.accept({"seats": 3}))
    assert (result.status, result.output) == ("ok", "accept: {'seats': 3}"), result.error
    assert served_runs == ["Rome"]  # it waited for the answer; it did not start over


# -- in the agent loop ---------------------------------------------------------------------

clients = agent_loop.clients  # the SDK clients on a fake server (tests/providers)


def test_run_agent_stops_for_the_question_and_resumes_with_the_answer(
    clients: Any, asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    ex = make_executor(registered(asking))
    turn = agent.model_turn("chat", (("call_book", "book", {"name": "Oslo"}),))
    server, client = agent.serve(clients, "chat", turn)
    run = run_agent(client, model=agent.MODEL, messages="Book Oslo", executor=ex)
    assert run.stop_reason == "approval"
    (request,) = run.pending
    assert isinstance(request, InputRequest) and request.message == "Book Oslo?"
    done = run_agent(
        client,
        model=agent.MODEL,
        messages=run.messages,
        executor=ex,
        resume=run,
        approvals={"call_book": request.accept({"seats": 2, "ok": True})},
    )
    assert done.stop_reason == "done"
    # The model reads the tool's answer, never the deferral.
    assert "booked Oslo x2" in agent.answers("chat", server.requests[-1])["call_book"]
    assert "INPUT_REQUIRED" not in str(server.requests)
    assert asking_server.runs == ["Oslo"]


def test_run_agent_asks_approve_for_the_answer(
    clients: Any, asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    ex = make_executor(registered(asking))
    turn = agent.model_turn("chat", (("call_book", "book", {"name": "Oslo"}),))
    server, client = agent.serve(clients, "chat", turn)
    asked: list[Any] = []

    def approve(request: Any) -> Any:
        asked.append(request)
        return request.accept({"seats": 3, "ok": True})

    run = run_agent(client, model=agent.MODEL, messages="Book Oslo", executor=ex, approve=approve)
    assert run.stop_reason == "done"
    assert [type(r).__name__ for r in asked] == ["InputRequest"]
    assert "booked Oslo x3" in agent.answers("chat", server.requests[-1])["call_book"]


# -- found by review ----------------------------------------------------------------------


def test_an_approved_tool_that_asks_goes_on_with_the_answer(
    asking: MCPConnection, make_executor: MakeExecutor
) -> None:
    """The answer carries the approval on: not asked for again (once, each
    asked for the other without end)."""
    ex = make_executor(registered(asking), policies=[requires_approval()])
    first = ex.execute(BOOK)
    assert first.error_code == ErrorCode.APPROVAL_REQUIRED and first.approval_request is not None
    request = deferred(ex.execute(BOOK, approval=first.approval_request.approve()))
    assert request.covers_approval
    done = ex.execute(BOOK, approval=request.accept({"seats": 2, "ok": True}))
    assert done.output == {"result": "booked Oslo x2"}, done
    assert asking_server.runs == ["Oslo"]
    # An answer that claims an approval it was not given is no answer.
    forged = request.accept({"seats": 2, "ok": True}).model_copy(update={"covers_approval": False})
    assert ex.execute(BOOK, approval=forged).error_code == ErrorCode.APPROVAL_REQUIRED


def test_run_agent_asks_each_question_a_call_asks(
    clients: Any, make_executor: MakeExecutor
) -> None:
    quiz_server.bodies.clear()
    with connect(quiz_server.server) as quiz:
        ex = make_executor(registered(quiz))
        turn = agent.model_turn("chat", (("call_t", "twice", {}),))
        server, client = agent.serve(clients, "chat", turn)
        asked: list[str] = []

        def approve(request: Any) -> Any:
            asked.append(request.message)
            return request.accept({"v": str(len(asked))})

        run = run_agent(client, model=agent.MODEL, messages="Go", executor=ex, approve=approve)
    assert (run.stop_reason, asked) == ("done", ["First?", "Second?"])
    assert agent.answers("chat", server.requests[-1])["call_t"] == ('{"v": "1"} then {"v": "2"}')
    assert quiz_server.bodies == ["twice"]


def test_the_published_question_is_scrubbed_and_scanned(make_executor: MakeExecutor) -> None:
    """The server copied the caller's token into its question, its schema and
    its plain-text state: none of it is published; the caller's own copy
    keeps the state, so the call can still be answered."""
    token = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    with connect(quiz_server.server) as quiz:
        ex = make_executor(registered(quiz), scanner=ContentScanner())
        call = ToolCall(id="l1", name="leak", arguments={"token": token})
        with bus.Recorder(sender=ex) as rec:
            request = deferred(ex.execute(call))
            assert ex.drain_events()
        (finished,) = rec.of(bus.FINISHED)
        assert token not in repr(finished.result)
        assert token in request.state  # the caller's copy
        done = ex.execute(call, approval=request.decline())
    assert done.output == "confirmed: decline", done
