"""`run_agent`: halted runs and the tools each turn offers, through the real SDK clients of test_agent_loop.py
(a fake server serving recorded responses, recording what the SDK sends).

A run limit that halts mid-run, a guardrail that trips, and `Executor.halt`
from a tool between two turns: the loop stops with `stop_reason="halted"` and
asks the model nothing more.
"""

from __future__ import annotations

from typing import Any

from tests.conftest import MakeExecutor
from tests.provider_tools import make_registry
from tests.providers import test_agent_loop as loop
from toolbus import ErrorCode, ToolCall, ToolResult, current_agent_run, tool
from toolbus.policies import Trip, guardrail, run_limit
from toolbus.providers import arun_agent, run_agent
from toolbus.tools import StepContext, Tool

clients = loop.clients  # the SDK clients on a fake server (recorded responses, recorded requests)


def test_a_run_limit_halts_the_loop_mid_run(clients: Any, make_executor: MakeExecutor) -> None:
    """The model's first turn makes three calls; the run may make two, and halts."""
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(make_registry(), policies=[run_limit(2, on_limit="halt")])
    run = run_agent(client, model=loop.MODEL, messages=loop.QUESTION, executor=ex)
    assert (run.stop_reason, run.turns, len(server.requests)) == ("halted", 1, 1)
    assert run.halted == "run_limit: at most 2 tool calls per run"
    assert run.agent_run.startswith("run_")
    assert ex.halted(run.agent_run) == run.halted
    assert [r.error_code for r in run.batches[0]] == [ErrorCode.HALTED] * 3
    # Each call is answered (the conversation stays well formed), none ran.
    tool_messages = [m for m in run.messages if m.get("role") == "tool"]
    assert len(tool_messages) == 3
    assert all("Halted: the agent run was stopped" in m["content"] for m in tool_messages)


async def test_a_halt_between_turns_stops_the_async_loop(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """A tool halts its own run (as a stop button would): its batch ends as
    usual, and the loop stops before asking the model again."""
    registry = make_registry()
    halted_by: list[str | None] = []

    @tool(read_only=True)
    def get_weather(city: str, unit: str = "celsius") -> str:
        run = current_agent_run()
        halted_by.append(run)
        if run is not None and city == "Bergen":
            ex.halt(run, "the user pressed stop")
        return f"{city}: fine"

    old = registry.get("get_weather")
    assert old is not None and registry.replace(old, get_weather)

    server, client = clients("anthropic", *loop.MESSAGES, asynchronous=True)
    ex = make_executor(registry)
    run = await arun_agent(
        client, model=loop.MODEL, messages=loop.QUESTION, executor=ex, agent_run="ticket-7"
    )
    assert (run.stop_reason, run.halted, run.agent_run) == (
        "halted",
        "the user pressed stop",
        "ticket-7",
    )
    assert len(server.requests) == 1
    assert set(halted_by) == {"ticket-7"}
    # The halting call itself was running (it ends as it does); a call still
    # waiting then (the booking, held back by its barrier) ends HALTED.
    assert [r.error_code for r in run.batches[0]][-1] is ErrorCode.HALTED


def test_a_guardrail_tripping_mid_run_stops_the_loop(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """An output guardrail trips on the booking's result: the run halts with
    its reason, the model is not asked again, and it never reads the booking."""

    @guardrail(stage="output")
    def no_bookings(call: ToolCall, result: ToolResult) -> Any:
        if call.name == "book_table":
            return Trip("bookings need a person")
        return None

    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(make_registry(), policies=[no_bookings])
    run = run_agent(client, model=loop.MODEL, messages=loop.QUESTION, executor=ex)
    assert (run.stop_reason, run.turns, len(server.requests)) == ("halted", 1, 1)
    assert run.halted == "guardrail no_bookings: bookings need a person"
    assert [r.status for r in run.batches[0]] == ["ok", "ok", "cancelled"]
    assert not any("Booked" in str(m.get("content")) for m in run.messages)


def test_each_turn_offers_what_is_enabled_at_it(clients: Any, make_executor: MakeExecutor) -> None:
    """`book_table` is enabled from the second turn on, and `prepare` words
    `get_weather` for the step: the first request lacks the booking, and the
    booking the model makes anyway in turn 1 ends TOOL_NOT_OFFERED (unrun);
    the second request offers it. `context` reaches both decisions."""
    registry = make_registry()
    booked: list[str] = []
    steps: list[StepContext] = []

    @tool(is_enabled=lambda step: steps.append(step) is None and step.step >= 2)
    def book_table(restaurant: str, people: int) -> str:
        booked.append(restaurant)
        return f"Booked {restaurant} for {people}"

    old = registry.get("book_table")
    assert old is not None and registry.replace(old, book_table)

    def prepare(step: StepContext, tools: list[Tool]) -> list[Tool]:
        return [
            t.described(f"{t.description} [{step.context}, turn {step.step}]")
            if t.name == "get_weather"
            else t
            for t in tools
        ]

    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(registry, prepare=prepare)
    run = run_agent(
        client,
        model=loop.MODEL,
        messages=loop.QUESTION,
        executor=ex,
        agent_run="r-1",
        context="tenant-a",
    )
    offered = [
        [(t.get("function") or t["custom"])["name"] for t in r["tools"]] for r in server.requests
    ]
    assert "book_table" not in offered[0] and "book_table" in offered[1]
    weather = [
        t for t in server.requests[0]["tools"] if t.get("function", {}).get("name") == "get_weather"
    ]
    assert weather[0]["function"]["description"].endswith("[tenant-a, turn 1]")
    first = run.batches[0].results
    assert [r.error_code for r in first] == [None, None, ErrorCode.TOOL_NOT_OFFERED]
    assert booked == []
    assert StepContext("r-1", 1, "tenant-a") in steps and StepContext("r-1", 2, "tenant-a") in steps


async def test_a_run_halted_before_it_starts_stops_at_once(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """`run_agent` on a run already halted raised TypeError (review of issue 28)."""
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(make_registry())
    ex.halt("done-before", "the user pressed stop")
    run = run_agent(
        client, model=loop.MODEL, messages=loop.QUESTION, executor=ex, agent_run="done-before"
    )
    assert (run.stop_reason, run.turns, run.text, run.halted) == (
        "halted",
        0,
        "",
        "the user pressed stop",
    )
    aserver, aclient = clients("anthropic", *loop.MESSAGES, asynchronous=True)
    arun = await arun_agent(
        aclient, model=loop.MODEL, messages=loop.QUESTION, executor=ex, agent_run="done-before"
    )
    assert (arun.stop_reason, arun.turns) == ("halted", 0)
    assert server.requests == [] and aserver.requests == []


def test_a_halted_turn_answers_every_call_and_asks_nobody(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """A turn with a call deferred for approval and one tripping a guardrail left
    the conversation with unanswered calls, after asking the approver (review)."""
    from toolbus.policies import requires_approval

    registry = make_registry()

    @tool(
        read_only=True, policies=[requires_approval(when=lambda c: c.arguments["city"] == "Oslo")]
    )
    def get_weather(city: str, unit: str = "celsius") -> str:
        return f"{city}: fine"

    old = registry.get("get_weather")
    assert old is not None and registry.replace(old, get_weather)

    @guardrail
    def no_bergen(call: ToolCall) -> Any:
        return Trip("no Bergen") if call.arguments.get("city") == "Bergen" else None

    asked: list[Any] = []
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(registry, policies=[no_bergen], max_parallel=1)  # Oslo, then Bergen
    run = run_agent(
        client,
        model=loop.MODEL,
        messages=loop.QUESTION,
        executor=ex,
        approve=lambda r: asked.append(r) or True,
    )
    assert run.stop_reason == "halted" and asked == []
    first = [(r.status, r.error_code) for r in run.batches[0]]
    # The call left waiting for approval is halted too: nobody will be asked.
    assert first[:2] == [("cancelled", ErrorCode.HALTED)] * 2  # (the booking waited: ABORTED)
    calls = [
        c["id"]
        for m in run.messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or ()
    ]
    answered = [m["tool_call_id"] for m in run.messages if m.get("role") == "tool"]
    assert answered == calls and len(calls) == 3


def test_a_resumed_turn_is_held_to_what_that_turn_offers(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """The resumed turn's calls were judged at step 0 with no context, so an
    approved call of a tool enabled by the run's context ended TOOL_NOT_OFFERED;
    so did every call with `tools=` given (second review of issue 28)."""
    from toolbus.policies import requires_approval

    registry = make_registry()

    @tool(policies=[requires_approval()], is_enabled=lambda s: s.context == "staff")
    def book_table(restaurant: str, people: int) -> str:
        return f"Booked {restaurant} for {people}"

    old = registry.get("book_table")
    assert old is not None and registry.replace(old, book_table)
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(registry)
    stopped = run_agent(
        client, model=loop.MODEL, messages=loop.QUESTION, executor=ex, context="staff"
    )
    assert stopped.stop_reason == "approval"
    [request] = stopped.pending
    run = run_agent(
        client,
        model=loop.MODEL,
        messages=stopped.messages,
        executor=ex,
        resume=stopped,
        approvals={request.call_id: request.approve()},
        context="staff",
    )
    assert run.batches[0].results[2].output == "Booked Maaemo for 2"
    # tools= given: sent as given, each call still held to is_enabled at its turn.
    server2, client2 = clients("openai", *loop.CHAT)
    given = run_agent(
        client2,
        model=loop.MODEL,
        messages=loop.QUESTION,
        executor=ex,
        tools=server.requests[0]["tools"],
        context="staff",
        approve=lambda r: True,
    )
    assert given.batches[0].results[2].output == "Booked Maaemo for 2"


def test_a_turn_resumed_after_its_run_was_halted_answers_halted(
    clients: Any, make_executor: MakeExecutor
) -> None:
    """Resumed with its approvals after the run was halted: the model was sent
    the stale `deferred` results as the calls' answers (third review)."""
    from toolbus.policies import requires_approval

    registry = make_registry()
    booked: list[str] = []

    @tool(policies=[requires_approval()])
    def book_table(restaurant: str, people: int) -> str:
        booked.append(restaurant)
        return f"Booked {restaurant} for {people}"

    old = registry.get("book_table")
    assert old is not None and registry.replace(old, book_table)
    server, client = clients("openai", *loop.CHAT)
    ex = make_executor(registry)
    stopped = run_agent(client, model=loop.MODEL, messages=loop.QUESTION, executor=ex)
    assert stopped.stop_reason == "approval"
    [request] = stopped.pending
    ex.halt(stopped.agent_run, "ops stopped it")
    run = run_agent(
        client,
        model=loop.MODEL,
        messages=stopped.messages,
        executor=ex,
        resume=stopped,
        approvals={request.call_id: request.approve()},
    )
    assert (run.stop_reason, run.halted, booked) == ("halted", "ops stopped it", [])
    assert len(server.requests) == 1  # the model is asked nothing more
    last = run.batches[-1].results[2]
    assert (last.status, last.error_code, last.approval_request) == (
        "cancelled",
        ErrorCode.HALTED,
        None,
    )
    answers = [m["content"] for m in run.messages if m.get("role") == "tool"]
    assert len(answers) == 3 and "Halted: the agent run was stopped (ops stopped it)" in answers[2]
