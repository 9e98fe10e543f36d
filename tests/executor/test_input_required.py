"""A tool that stops to ask a person (`InputRequired`): its call ends
`deferred` (`INPUT_REQUIRED`) with an `InputRequest`, and the answer, passed
back as a decision is, reaches the tool as `ToolContext.answer` only when it
answers that question of that call (`toolbus/pipeline/_input.py`)."""

from __future__ import annotations

from typing import Any

import pytest

from tests import process_tools
from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, bus
from toolbus.approvals import ApprovalRequest, InputAnswer, InputRequest
from toolbus.models import ToolResult
from toolbus.retry import RetryPolicy
from toolbus.tools import InputRequired, ToolContext

SEAT = {"type": "object", "properties": {"seat": {"type": "string"}}}


def asking_registry(seen: list[Any]) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool
    def book(flight: str, ctx: ToolContext) -> str:
        """Books a seat once the person says which (mutating)."""
        seen.append(ctx.answer)
        if ctx.answer is None:
            raise InputRequired(
                f"Which seat on {flight}?", source="the airline", schema=SEAT, state="step-2"
            )
        return f"{flight}: {ctx.answer.action} {ctx.answer.data}"

    @registry.tool(read_only=True)
    async def abook(flight: str, ctx: ToolContext) -> str:
        """`book`, from a coroutine."""
        if ctx.answer is None:
            raise InputRequired("Which seat?", source="the airline", state="s")
        return ctx.answer.action

    @registry.tool
    def pay(amount: int) -> str:
        """Pays (mutating: it waits for `book` in a batch)."""
        seen.append(f"paid {amount}")
        return "paid"

    @registry.tool(read_only=True)
    def odd(ctx: ToolContext) -> str:
        """Asks with a schema that is not a dict."""
        raise InputRequired("What?", source="x", schema="not a schema")  # type: ignore[arg-type]

    return registry


BOOK = ToolCall(id="c1", name="book", arguments={"flight": "SK1"})


def request_of(result: ToolResult) -> InputRequest:
    assert (result.status, result.error_code) == ("deferred", ErrorCode.INPUT_REQUIRED), result
    assert isinstance(result.approval_request, InputRequest)
    return result.approval_request


def test_the_call_is_deferred_with_what_it_asks(make_executor: MakeExecutor) -> None:
    seen: list[Any] = []
    ex = make_executor(asking_registry(seen))
    result = ex.execute(BOOK)
    request = request_of(result)
    assert result.error == (
        "Tool 'book' needs input before it can finish: the airline asks: Which seat on SK1?"
    )
    assert result.attempts == 1
    assert (request.call_id, request.tool, request.arguments_masked) == (
        "c1",
        "book",
        BOOK.arguments,
    )
    assert (request.source, request.message, request.requested_schema) == (
        "the airline",
        "Which seat on SK1?",
        SEAT,
    )
    assert request.state == "step-2"
    assert isinstance(request, ApprovalRequest)  # read wherever approvals are
    assert ex.stats().deferred == 1


def test_the_answer_reaches_the_tool(make_executor: MakeExecutor) -> None:
    seen: list[Any] = []
    ex = make_executor(asking_registry(seen))
    request = request_of(ex.execute(BOOK))
    answer = request.accept({"seat": "12A"})
    result = ex.execute(BOOK, approval=answer)
    assert result.output == "SK1: accept {'seat': '12A'}"
    assert seen == [None, answer]
    assert ex.execute(BOOK, approval=request.decline()).output == "SK1: decline None"
    assert ex.execute(BOOK, approval=request.cancel()).output == "SK1: cancel None"
    # In a batch, by call id; and under another call id with the same arguments.
    again = ToolCall(id="c2", name="book", arguments={"flight": "SK1"})
    (batched,) = ex.execute_batch([again], approvals={"c2": answer})
    assert batched.output == "SK1: accept {'seat': '12A'}"


@pytest.mark.parametrize("how", ["other arguments", "altered state", "made up", "other secret"])
def test_an_answer_to_another_question_is_not_handed_over(
    make_executor: MakeExecutor, how: str
) -> None:
    seen: list[Any] = []
    registry = asking_registry(seen)
    ex = make_executor(registry)
    answer = request_of(ex.execute(BOOK)).accept({"seat": "1A"})
    call = BOOK
    if how == "other arguments":
        call = ToolCall(id="c1", name="book", arguments={"flight": "SK2"})
    elif how == "altered state":
        answer = answer.model_copy(update={"state": "step-3"})
    elif how == "made up":
        answer = InputAnswer(digest="0" * 64, approved=True, action="accept", state="step-2")
    else:
        ex = make_executor(registry)  # its own secret
    request_of(ex.execute(call, approval=answer))
    assert all(s is None for s in seen)


def test_never_retried(make_executor: MakeExecutor) -> None:
    seen: list[Any] = []
    ex = make_executor(
        asking_registry(seen),
        retry=RetryPolicy(max_retries=3, backoff_base=0, retry_on=(Exception,)),
    )
    assert request_of(ex.execute(BOOK)).tool == "book"
    assert seen == [None]


async def test_an_async_tool_asks_too(make_executor: MakeExecutor) -> None:
    ex = make_executor(asking_registry([]))
    call = ToolCall(id="a1", name="abook", arguments={"flight": "SK1"})
    request = request_of(await ex.aexecute(call))
    assert (await ex.aexecute(call, approval=request.decline())).output == "decline"


def test_a_mutating_call_after_it_waits_and_runs_with_it(make_executor: MakeExecutor) -> None:
    seen: list[Any] = []
    ex = make_executor(asking_registry(seen))
    pay = ToolCall(id="p1", name="pay", arguments={"amount": 5})
    first, second = ex.execute_batch([BOOK, pay])
    request = request_of(first)
    assert (second.status, second.error_code) == ("cancelled", ErrorCode.ABORTED)
    done = ex.execute_batch([BOOK, pay], approvals={"c1": request.accept({"seat": "2B"})})
    assert [r.status for r in done] == ["ok", "ok"]
    assert seen[-1] == "paid 5"


def test_a_question_that_cannot_be_put_is_an_error(make_executor: MakeExecutor) -> None:
    ex = make_executor(asking_registry([]))
    result = ex.execute(ToolCall(name="odd", arguments={}))
    assert (result.status, result.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert (
        result.error == "Tool 'odd' asked for input that cannot be put to a person: ValidationError"
    )


def test_the_question_is_scrubbed_and_the_request_published(make_executor: MakeExecutor) -> None:
    registry = ToolRegistry()

    @registry.tool
    def sign_in(api_key: str) -> str:
        """Asks about the key it was given."""
        raise InputRequired(f"Is {api_key} yours?", source="the vault")

    ex = make_executor(registry)
    key = "sk-live-" + "k3y" * 8
    with bus.Recorder(sender=ex) as rec:
        result = ex.execute(ToolCall(id="s1", name="sign_in", arguments={"api_key": key}))
        assert ex.drain_events()
    request = request_of(result)
    assert request.message == "Is *** yours?"
    assert request.arguments_masked == {"api_key": "***"}
    (finished,) = rec.of(bus.FINISHED)
    assert finished.result.approval_request == request
    assert key not in repr([e for name in rec.names() for e in rec.of(name)])


def test_a_request_survives_json(make_executor: MakeExecutor) -> None:
    ex = make_executor(asking_registry([]))
    result = ex.execute(BOOK)
    back = ToolResult.model_validate_json(result.model_dump_json())
    assert back.approval_request == result.approval_request
    request = request_of(back)
    # Answered from what was stored: the call goes on.
    assert (
        ex.execute(BOOK, approval=request.accept({"seat": "3C"})).output
        == "SK1: accept {'seat': '3C'}"
    )


def test_bad_values_are_refused_where_they_are_made() -> None:
    with pytest.raises(TypeError, match="state must be a str"):
        InputRequired("?", source="x", state=3)  # type: ignore[arg-type]
    request = InputRequest(call_id="c", tool="t", digest="d", source="s", message="m", state="")
    with pytest.raises(TypeError, match="an accept's data must be a dict"):
        request.accept(["12A"])  # type: ignore[arg-type]
    with Executor(ToolRegistry()) as ex:
        with pytest.raises(TypeError, match="must be an ApprovalDecision"):
            ex.execute(BOOK, approval=request)  # type: ignore[arg-type]


def test_from_another_process_it_is_an_error(make_executor: MakeExecutor) -> None:
    """The answer could not reach a tool in another process: there it is the
    tool's error, with its message (documented on `InputRequired`)."""
    registry = ToolRegistry()
    registry.tool(backend="process")(process_tools.ask)
    result = make_executor(registry).execute(ToolCall(name="ask", arguments={"flight": "SK1"}))
    assert (result.status, result.error_code, result.error) == (
        "error",
        ErrorCode.TOOL_ERROR,
        "Which seat on SK1?",
    )
