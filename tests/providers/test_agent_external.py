"""`run_agent` with an external tool, through the real SDK clients of
test_agent_loop.py: its call waits for a result from outside, which the
approver supplies in the same run, or the caller on the resume path."""

from __future__ import annotations

from typing import Any

from tests.conftest import MakeExecutor
from tests.provider_tools import make_registry
from tests.providers import test_agent_loop as loop
from toolbus import tool
from toolbus.approvals import ApprovalRequest, ExternalRequest
from toolbus.providers import run_agent

clients = loop.clients  # the SDK clients on a fake server (recorded responses, recorded requests)


def with_external_booking() -> Any:
    registry = make_registry()

    @tool(external=True)
    def book_table(restaurant: str, people: int) -> str:
        """Book a table (a person phones the restaurant)."""
        raise AssertionError("never run")

    old = registry.get("book_table")
    assert old is not None and registry.replace(old, book_table)
    return registry


def test_the_approver_supplies_an_external_result(
    clients: Any, make_executor: MakeExecutor
) -> None:
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(with_external_booking())
    asked: list[str] = []

    def approve(request: ApprovalRequest) -> Any:
        asked.append(type(request).__name__)
        return ex.answer(request, "Booked by phone", decided_by="front desk")

    run = run_agent(client, model=loop.MODEL, messages=loop.QUESTION, executor=ex, approve=approve)
    assert run.stop_reason == "done" and asked == ["ExternalRequest"]
    booking = run.batches[0].results[2]
    assert (booking.status, booking.output, booking.attempts) == ("ok", "Booked by phone", 0)
    sent = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert sent[2]["content"] == "Booked by phone"


def test_an_external_result_supplied_on_resume(clients: Any, make_executor: MakeExecutor) -> None:
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(with_external_booking())
    stopped = run_agent(client, model=loop.MODEL, messages=loop.QUESTION, executor=ex)
    assert stopped.stop_reason == "approval"
    [request] = stopped.pending
    assert isinstance(request, ExternalRequest) and ex.pending() == [request]
    run = run_agent(
        client,
        model=loop.MODEL,
        messages=stopped.messages,
        executor=ex,
        resume=stopped,
        approvals={request.call_id: ex.answer(request, "Booked by phone")},
    )
    assert run.stop_reason == "done" and run.agent_run == stopped.agent_run
    assert run.batches[0].results[2].output == "Booked by phone"
    assert ex.pending() == []
