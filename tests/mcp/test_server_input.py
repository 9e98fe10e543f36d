"""A served tool that asks its client for input (`ctx.elicit`) and logs to it
(`ctx.log`, Python's logging), with the SDK's client in-process on both
protocols: 2025-11-25 ("legacy": `elicitation/create` inside the call) and
2026-07-28 ("auto": the call suspended under a `request_state` and sent
again; `toolbus/mcp/_server_calls.py`). Over HTTP, with the TypeScript
SDK's client: the conformance suite (test_conformance.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning

from tests.conftest import HANG_TIMEOUT, MakeExecutor
from tests.mcp_servers.peers import use_peer
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.mcp import Elicitation, ElicitationAnswer, build_server, call_result, connect
from toolbus.tools import InputUnavailable

SEATS = {
    "type": "object",
    "properties": {"seats": {"type": "integer", "minimum": 1, "maximum": 9}},
    "required": ["seats"],
}

registry = ToolRegistry()
runs: list[str] = []
tool_log = logging.getLogger("tests.served_tool")


@registry.tool
def book(city: str, ctx: ToolContext) -> str:
    """Books seats to `city`, once the person says how many (mutating)."""
    runs.append(city)
    answer = ctx.elicit(f"Seats to {city}?", SEATS)
    if answer.action != "accept" or answer.data is None:
        return f"not booked: {answer.action}"
    return f"booked {answer.data['seats']} to {city}"


@registry.tool(read_only=True)
async def abook(city: str, ctx: ToolContext) -> str:
    """`book`, from a coroutine."""
    answer = await ctx.aelicit(f"Seats to {city}?", SEATS)
    return f"{answer.action}: {answer.data}"


@registry.tool(read_only=True)
def visit(ctx: ToolContext) -> str:
    """Sends the person to a page."""
    return ctx.elicit("Open the payment page", url="https://pay.example.com/p/1").action


@registry.tool(read_only=True)
def chatty(api_key: str, ctx: ToolContext) -> str:
    """Logs at four levels, through its context and through Python's logging."""
    ctx.log(f"started with {api_key}", step=1, api_key=api_key)
    ctx.log("a detail", level="debug")
    tool_log.warning("the key %s is old", api_key)
    ctx.log("done", level="notice", logger="chatty.end")
    return "chatted"


@registry.tool(read_only=True)
def bad_schema(ctx: ToolContext) -> str:
    """Asks with a schema that is no form."""
    return ctx.elicit("What?", {"type": "string"}).action


Callback = Callable[[Any, Any], Awaitable[Any]]


@contextlib.asynccontextmanager
async def client(
    mode: str = "legacy",
    *,
    elicit: Callback | None = None,
    logs: list[types.LoggingMessageNotificationParams] | None = None,
    timeout: float = 30,
) -> AsyncIterator[Client]:
    """The SDK's client on `build_server`, in this task (anyio's cancel scopes
    must be left by the task that entered them: not a fixture). `mode`
    "legacy": 2025-11-25's handshake; "auto": 2026-07-28."""
    executor = Executor(registry, timeout=timeout)
    options: dict[str, Any] = {}
    if elicit is not None:
        options["elicitation_callback"] = elicit
    if logs is not None:

        async def heard(params: types.LoggingMessageNotificationParams) -> None:
            logs.append(params)

        options["logging_callback"] = heard
    try:
        async with Client(build_server(registry, executor), mode=mode, **options) as c:
            yield c
    finally:
        await asyncio.to_thread(executor.close)


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def answering(reply: types.ElicitResult, asked: list[Any] | None = None) -> Callback:
    async def callback(context: Any, params: Any) -> types.ElicitResult:
        if asked is not None:
            asked.append(params)
        return reply

    return callback


@pytest.fixture(autouse=True)
def _fresh() -> None:
    runs.clear()


# Both protocols: 2025-11-25's handshake ("legacy") and 2026-07-28 ("auto").
modes = pytest.mark.parametrize("mode", ["legacy", "auto"])


# -- elicitation ------------------------------------------------------------------------------


@modes
@pytest.mark.parametrize("name", ["book", "abook"])
async def test_a_served_tool_asks_its_client_and_goes_on_with_the_answer(
    name: str, mode: str
) -> None:
    asked: list[Any] = []
    reply = types.ElicitResult(action="accept", content={"seats": 2})
    async with client(mode, elicit=answering(reply, asked)) as c:
        result = await c.call_tool(name, {"city": "Oslo"})
    assert not result.is_error, text(result)
    expected = "booked 2 to Oslo" if name == "book" else "accept: {'seats': 2}"
    assert text(result) == expected
    (params,) = asked
    assert isinstance(params, types.ElicitRequestFormParams)
    assert (params.message, params.requested_schema) == ("Seats to Oslo?", SEATS)
    if name == "book":
        # A mutating tool asked mid-call (on 2026-07-28: suspended, then sent
        # again): it ran once, never started over.
        assert runs == ["Oslo"]


@modes
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_decline_or_a_cancel_reaches_the_tool(action: Any, mode: str) -> None:
    async with client(mode, elicit=answering(types.ElicitResult(action=action))) as c:
        result = await c.call_tool("book", {"city": "Oslo"})
    assert text(result) == f"not booked: {action}"


@modes
async def test_an_answer_off_the_schema_fails_the_call_naming_the_rule_not_the_value(
    mode: str,
) -> None:
    reply = types.ElicitResult(action="accept", content={"seats": 12})
    async with client(mode, elicit=answering(reply)) as c:
        result = await c.call_tool("book", {"city": "Oslo"})
    assert result.is_error
    assert "answer does not match the schema" in text(result)
    assert "maximum" in text(result) and "12" not in text(result)


@modes
async def test_a_url_request_reaches_a_client_that_takes_them(mode: str) -> None:
    asked: list[Any] = []
    reply = types.ElicitResult(action="accept")
    async with client(mode, elicit=answering(reply, asked)) as c:
        result = await c.call_tool("visit", {})
    assert text(result) == "accept"
    (params,) = asked
    assert isinstance(params, types.ElicitRequestURLParams)
    assert params.url == "https://pay.example.com/p/1"
    # (An id to complete it by, on 2025-11-25; 2026-07-28 drops it.)
    assert bool(params.elicitation_id) == (mode == "legacy")


@modes
async def test_a_client_that_cannot_be_asked_gets_an_error_result_not_a_hang(mode: str) -> None:
    async with client(mode) as c:  # no elicitation callback: no capability declared
        result = await c.call_tool("book", {"city": "Oslo"})
    assert result.is_error
    assert "InputUnavailable" in text(result)
    assert "cannot be asked for input (no elicitation)" in text(result)


async def test_on_2026_07_28_the_call_waits_suspended_and_its_state_is_good_once() -> None:
    async with client("auto", elicit=answering(types.ElicitResult(action="cancel"))) as c:
        first = await c.session.call_tool("book", {"city": "Oslo"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is not None and first.request_state is not None
        ((key, request),) = first.input_requests.items()
        assert isinstance(request, types.ElicitRequest)
        assert request.params.message == "Seats to Oslo?"
        state = first.request_state
        # Another tool's call cannot take it over, nor the same tool's with
        # other arguments (it would get Oslo's result: found by review).
        other = await c.call_tool("abook", {"city": "Oslo"}, request_state=state)
        assert other.is_error and "not waiting here" in text(other)
        answers: types.InputResponses = {
            key: types.ElicitResult(action="accept", content={"seats": 4})
        }
        paris = await c.call_tool(
            "book", {"city": "Paris"}, input_responses=answers, request_state=state
        )
        assert paris.is_error and "not waiting here" in text(paris)
        done = await c.call_tool(
            "book", {"city": "Oslo"}, input_responses=answers, request_state=state
        )
        assert text(done) == "booked 4 to Oslo"
        again = await c.call_tool(
            "book", {"city": "Oslo"}, input_responses=answers, request_state=state
        )
        assert again.is_error and "not waiting here" in text(again)
        assert "(INVALID_ARGUMENTS)" in text(again)
    assert runs == ["Oslo"]


async def test_on_2026_07_28_a_call_that_ended_while_suspended_gives_its_result_on_return(
    recorder: bus.Recorder,
) -> None:
    async with client(
        "auto", elicit=answering(types.ElicitResult(action="cancel")), timeout=HANG_TIMEOUT
    ) as c:
        first = await c.session.call_tool("abook", {"city": "Oslo"}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult) and first.request_state
        # Its deadline passes while the client is away: the call ends (the
        # tool's question answered cancel, or the call timed out).
        [finished] = await asyncio.to_thread(recorder.wait_for, bus.FINISHED, timeout=30)
        back = await c.call_tool(
            "abook", {"city": "Oslo"}, input_responses={}, request_state=first.request_state
        )
    assert (back.is_error, text(back)) == (
        bool(call_result(finished.result).is_error),
        text(call_result(finished.result)),
    )


async def test_a_schema_that_is_no_form_is_refused_before_it_is_sent() -> None:
    asked: list[Any] = []
    async with client(elicit=answering(types.ElicitResult(action="cancel"), asked)) as c:
        result = await c.call_tool("bad_schema", {})
    assert result.is_error and "must be an object with 'properties'" in text(result)
    assert asked == []


async def test_a_client_that_never_answers_is_held_to_the_calls_deadline() -> None:
    withdrawn = asyncio.Event()

    async def never(context: Any, params: Any) -> types.ElicitResult:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            withdrawn.set()
            raise
        raise AssertionError("unreachable")

    async with client(elicit=never, timeout=HANG_TIMEOUT) as c:
        result = await c.call_tool("abook", {"city": "Oslo"})
        assert result.is_error and "EXECUTION_TIMEOUT" in text(result)
        # The question still open is withdrawn (the client's request cancelled).
        await asyncio.wait_for(withdrawn.wait(), 30)


def test_a_call_that_was_not_served_cannot_ask(make_executor: MakeExecutor) -> None:
    result = make_executor(registry).execute(ToolCall(name="book", arguments={"city": "Oslo"}))
    assert result.status == "error"
    assert result.error is not None and "was not served to an MCP client" in result.error
    assert issubclass(InputUnavailable, RuntimeError)


@pytest.mark.parametrize("peer", ["in-process", "in-process-legacy"])
def test_a_toolbus_client_answers_a_toolbus_server(
    make_executor: MakeExecutor,
    recorder: bus.Recorder,
    peer: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_peer(peer, monkeypatch)
    served = make_executor(registry, timeout=30)

    def handler(request: Elicitation) -> ElicitationAnswer:
        return request.accept({"seats": 3})

    with connect(build_server(registry, served), elicitation=handler) as conn:
        mine = ToolRegistry()
        conn.register(mine)
        executor = make_executor(mine)
        result = executor.execute(ToolCall(id="c1", name="book", arguments={"city": "Rome"}))
        assert executor.drain_events()  # (delivered on other threads)
    assert (result.status, result.output) == ("ok", "booked 3 to Rome"), result.error
    asked = [e for e in recorder.of(bus.PROGRESS) if "input_requested" in e.data]
    assert [e.call_id for e in asked] == ["c1"]


# -- logging ----------------------------------------------------------------------------------


async def test_log_messages_reach_the_client_in_order_masked_before_the_result() -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    async with client(logs=logs) as c:
        result = await c.call_tool("chatty", {"api_key": "sk-live-abcdefgh1234"})
        assert text(result) == "chatted"
        # Already here: every message was sent before the response.
        heard = [(p.level, p.logger, p.data) for p in logs]
    # At the default level (info): the debug message is left out.
    assert heard == [
        ("info", "chatty", {"message": "started with ***", "step": 1, "api_key": "***"}),
        ("warning", "tests.served_tool", "the key *** is old"),
        ("notice", "chatty.end", "done"),
    ]


async def test_the_level_the_client_sets_is_honoured() -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    async with client(logs=logs) as c:
        with pytest.warns(MCPDeprecationWarning, match="logging"):  # (2026-07-28, SEP-2577)
            await c.set_logging_level("debug")
        await c.call_tool("chatty", {"api_key": "sk-live-abcdefgh1234"})
        assert [p.level for p in logs] == ["info", "debug", "warning", "notice"]
        logs.clear()
        with pytest.warns(MCPDeprecationWarning, match="logging"):
            await c.set_logging_level("warning")
        await c.call_tool("chatty", {"api_key": "sk-live-abcdefgh1234"})
        assert [p.level for p in logs] == ["warning"]  # notice is below warning


async def test_records_made_outside_a_served_tool_stay_local() -> None:
    logs: list[types.LoggingMessageNotificationParams] = []
    async with client(logs=logs) as c:
        tool_log.warning("not in a tool")
        await c.call_tool("book", {"city": "Oslo"})  # (fails: no elicitation; logs nothing)
        assert logs == []
