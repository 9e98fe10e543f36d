"""A server that asks for input while a call is open, answered by the
connection's `elicitation` handler (`toolbus/mcp/_elicitation.py`).

Peer: the `mcp` SDK's `MCPServer` (tests/mcp_servers/asking_server.py), whose
resolvers ask on both protocols: in-process and over stdio, each with the
2026-07-28 protocol (an `InputRequiredResult`, the call sent again) and with
the initialize handshake of 2025-11-25 (`elicitation/create` mid-call).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from tests.mcp_servers import asking_server
from tests.mcp_servers.peers import connect_asking, use_peer
from toolbus import ErrorCode, ToolCall, ToolRegistry, bus
from toolbus.mcp import (
    Elicitation,
    ElicitationAnswer,
    ElicitationHandler,
    connect,
)

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow


def run(
    peer: str,
    handler: ElicitationHandler | None,
    make_executor: MakeExecutor,
    call: ToolCall,
    **options: Any,
) -> Any:
    with connect_asking(peer, elicitation=handler) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        executor = make_executor(registry, **options)
        result = executor.execute(call)
        # Its events are delivered on other threads: all of them, before a
        # test reads them (stress run 19 read one still on its way).
        assert executor.drain_events()
        return result


def sure(peer: str) -> bool:
    """Whether toolbus knows which call a request is about, rather than guess
    (2025-11-25 over stdio: the connection's only call in flight; a guess is
    never failed by toolbus, and gets the server's reply to the refusal)."""
    return peer != "stdio-legacy"


def not_sent(peer: str, why: str) -> str:
    """The error text of a call whose answer was not sent, for `why`."""
    if sure(peer):
        return f"An answer to MCP server 'asking' was not sent: {why}"
    return f"MCP server 'asking' refused the call: toolbus: {why}"


def book(name: str = "Oslo") -> ToolCall:
    return ToolCall(id="b1", name="book", arguments={"name": name})


def test_the_handler_answers_and_the_call_goes_on(peer: str, make_executor: MakeExecutor) -> None:
    asked: list[Elicitation] = []

    def handler(request: Elicitation) -> ElicitationAnswer:
        asked.append(request)
        return request.accept({"seats": 2, "ok": True})

    r = run(peer, handler, make_executor, book())
    assert (r.status, r.output) == ("ok", {"result": "booked Oslo x2"})
    (request,) = asked
    assert (request.server, request.message, request.mode) == ("asking", "Book Oslo?", "form")
    assert request.requested_schema is not None
    assert request.requested_schema["required"] == ["seats", "ok"]
    # The call it is about: on 2026-07-28 inside the call's own request; on
    # 2025-11-25 the connection's only call in flight.
    assert (request.call_id, request.tool) == ("b1", "book")
    if peer.startswith("in-process"):
        assert asking_server.runs == ["Oslo"]  # the body ran once, with the answer


@pytest.mark.parametrize(
    ("data", "ordered"), [(None, "1 x tea in M"), ({"count": 3}, "3 x tea in M")]
)
def test_the_schemas_defaults_fill_in_what_an_accept_leaves_out(
    peer: str, make_executor: MakeExecutor, data: dict[str, Any] | None, ordered: str
) -> None:
    """SEP-1034: accepting a form as offered accepts its defaults (the server
    requires both fields: without them filled in, it would refuse the answer)."""

    def handler(request: Elicitation) -> ElicitationAnswer:
        return request.accept(data)

    call = ToolCall(id="o1", name="order", arguments={"item": "tea"})
    with bus.Recorder() as rec:
        r = run(peer, handler, make_executor, call)
    assert (r.status, r.output) == ("ok", {"result": ordered}), r.error
    (answered,) = [e for e in rec.of(bus.PROGRESS) if "input_answered" in e.data]
    sent = {"size": "M", "count": 1, **(data or {})}
    assert answered.data["input_answered"] == {"action": "accept", "data": sent}


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_decline_or_a_cancel_reaches_the_tool(
    peer: str, make_executor: MakeExecutor, action: str
) -> None:
    async def handler(request: Elicitation) -> ElicitationAnswer:
        return request.decline() if action == "decline" else request.cancel()

    r = run(peer, handler, make_executor, book())
    assert (r.status, r.output) == ("ok", {"result": f"not booked: {action}"})


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            {"seats": 12, "ok": True},
            "the answer does not match the requested schema: field 'seats' does not "
            "satisfy 'maximum': 9",
        ),
        ({"ok": True}, "field 'seats' is missing (required)"),
        ({"seats": 2, "ok": True, "note": {"a": 1}}, "the answer's data must be flat"),
    ],
)
def test_an_answer_off_the_schema_is_never_sent(
    peer: str, make_executor: MakeExecutor, answer: dict[str, Any], why: str
) -> None:
    r = run(peer, lambda request: request.accept(answer), make_executor, book())
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert r.error.startswith(not_sent(peer, "")) and why in r.error
    assert "12" not in r.error.replace("'maximum': 9", "")  # the rule, never the value
    if peer.startswith("in-process"):
        assert asking_server.runs == []  # the tool's body never ran


def test_a_handler_that_fails_ends_the_call_with_why_not_with_its_message(
    peer: str, make_executor: MakeExecutor
) -> None:
    def handler(request: Elicitation) -> ElicitationAnswer:
        raise RuntimeError("the vault said PW-4412 is locked")

    r = run(peer, handler, make_executor, book())
    assert r.status == "error"
    assert r.error == not_sent(peer, "the elicitation handler failed (RuntimeError)")
    assert "PW-4412" not in r.error

    wrong = run(peer, lambda request: {"seats": 2}, make_executor, book())  # type: ignore[arg-type,return-value]
    assert wrong.status == "error" and "returned dict, not an ElicitationAnswer" in wrong.error


def test_without_a_handler_a_request_is_declined_and_the_result_says_so(
    peer: str, make_executor: MakeExecutor
) -> None:
    """On 2025-11-25 (the answer must come inside the open request): the tool
    hears `decline` and goes on as it would; its result names what was asked
    (an error's text says it, for the model to read). On 2026-07-28 the call
    waits for the answer instead (test_input_later.py)."""
    if not peer.endswith("-legacy"):
        deferred = run(peer, None, make_executor, book())
        assert (deferred.status, deferred.error_code) == ("deferred", "INPUT_REQUIRED")
        return
    r = run(peer, None, make_executor, book())
    assert (r.status, r.output) == ("ok", {"result": "not booked: decline"})
    assert r.metadata["mcp_input_declined"] == ["Book Oslo?"]

    strict = run(peer, None, make_executor, ToolCall(name="sign_in", arguments={"user": "bob"}))
    assert strict.status == "error"
    assert strict.error.endswith(
        "(MCP server 'asking' asked for input: 'The API key of bob?'; the connection has "
        "no elicitation handler, so it was declined)"
    )


def test_requests_and_answers_are_published_masked(peer: str, make_executor: MakeExecutor) -> None:
    key = "sk-live-" + "k3y" * 8

    def handler(request: Elicitation) -> ElicitationAnswer:
        return request.accept({"api_key": key})

    with connect_asking(peer, elicitation=handler) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry)
        with bus.Recorder(sender=ex) as rec:
            r = ex.execute(ToolCall(id="s1", name="sign_in", arguments={"user": "bob"}))
            assert ex.drain_events()
    assert r.output == {"result": f"signed in bob with a key of {len(key)} characters"}
    asked, answered = rec.of(bus.PROGRESS)
    assert asked.call_id == answered.call_id == "s1"
    assert asked.message == "MCP server 'asking' asks for input: The API key of bob?"
    assert asked.data["input_requested"]["schema"]["required"] == ["api_key"]
    assert answered.data == {"input_answered": {"action": "accept", "data": {"api_key": "***"}}}
    assert key not in repr([e for name in rec.names() for e in rec.of(name)])


def test_a_url_request_shows_its_address_to_the_handler_and_redacted_to_the_bus(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """URL mode: the SDK's server sends it on 2025-11-25 sessions only."""
    use_peer("in-process-legacy", monkeypatch)
    urls: list[str | None] = []

    def handler(request: Elicitation) -> ElicitationAnswer:
        urls.append(request.url)
        assert request.mode == "url" and request.requested_schema is None
        return request.accept()

    with connect_asking("in-process-legacy", elicitation=handler) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry)
        with bus.Recorder(bus.PROGRESS, sender=ex) as rec:
            r = ex.execute(ToolCall(name="visit"))
            assert ex.drain_events()
    assert r.output == {"result": "visit: accept"}
    assert urls == ["https://pay.example.com/p?token=SECRET-TOKEN"]
    asked = rec.of(bus.PROGRESS)[0]
    assert asked.data["input_requested"]["url"] == "https://pay.example.com/p?token=***"
    assert "SECRET-TOKEN" not in repr(rec.events)

    data = run(
        "in-process-legacy", lambda q: q.accept({"x": "1"}), make_executor, ToolCall(name="visit")
    )
    assert data.status == "error" and "carries no data" in data.error


def test_a_sync_handler_runs_off_the_connections_loop(
    peer: str, make_executor: MakeExecutor
) -> None:
    """A person may take minutes: the connection's other calls go on meanwhile."""
    waiting, go = threading.Event(), threading.Event()
    threads: list[str] = []

    def handler(request: Elicitation) -> ElicitationAnswer:
        threads.append(threading.current_thread().name)
        waiting.set()
        assert go.wait(20)
        return request.accept({"seats": 1, "ok": True})

    with connect_asking(peer, elicitation=handler) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry)
        pending = ex.submit(book())
        assert waiting.wait(20)
        # While the handler waits, the connection serves another call: a
        # handler on its loop would hold it until this one's timeout.
        other = ex.execute(ToolCall(name="ping"), timeout=20)
        go.set()
        assert pending.result(20).output == {"result": "booked Oslo x1"}
    assert other.output == {"result": "pong"}
    assert threads == ["toolbus-mcp-elicitation"]


def test_a_handler_that_never_answers_is_held_to_the_calls_deadline(
    peer: str, make_executor: MakeExecutor
) -> None:
    async def handler(request: Elicitation) -> ElicitationAnswer:
        await asyncio.Event().wait()  # a person who walked away
        raise AssertionError("unreachable")

    r = run(peer, handler, make_executor, book(), call_timeout=3)
    assert (r.status, r.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)


def test_a_handler_that_is_not_a_function_is_refused_at_connect() -> None:
    with pytest.raises(TypeError, match="connect: elicitation must be a function"):
        connect(asking_server.server, elicitation=42)  # type: ignore[arg-type]


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt, TimeoutError])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_whatever_a_handler_raises_fails_its_call_and_only_its_call(
    peer: str, make_executor: MakeExecutor, raised: type[BaseException], kind: str
) -> None:
    """A `SystemExit` stopped the connection's loop for good; a `TimeoutError`
    of the handler's own was taken for the call's deadline, an answer of
    `cancel` (found by review)."""

    def sync_handler(request: Elicitation) -> ElicitationAnswer:
        raise raised("the person typed PW-991")

    async def async_handler(request: Elicitation) -> ElicitationAnswer:
        raise raised("the person typed PW-991")

    with connect_asking(
        peer, elicitation=sync_handler if kind == "sync" else async_handler
    ) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry, timeout=30)
        r = ex.execute(book())
        assert r.error == not_sent(peer, f"the elicitation handler failed ({raised.__name__})")
        assert ex.execute(ToolCall(name="ping")).output == {"result": "pong"}  # still connected
        assert conn.status().drops == 0


def test_an_async_handler_cancelled_on_its_own_fails_its_call(
    peer: str, make_executor: MakeExecutor
) -> None:
    """A handler awaiting a dismissed UI's future: on 2026-07-28 the SDK asked
    it ten times, on 2025-11-25 the session was dropped (found by review)."""

    async def handler(request: Elicitation) -> ElicitationAnswer:
        raise asyncio.CancelledError

    with connect_asking(peer, elicitation=handler) as conn:
        registry = ToolRegistry()
        conn.register(registry)
        ex = make_executor(registry, timeout=30)
        r = ex.execute(book())
        assert r.error == not_sent(peer, "the elicitation handler failed (CancelledError)")
        assert ex.execute(ToolCall(name="ping")).output == {"result": "pong"}
        assert conn.status().drops == 0


def test_a_format_in_the_schema_is_checked(peer: str, make_executor: MakeExecutor) -> None:
    """`"format": "email"` went out unchecked (found by review)."""
    call = ToolCall(name="contact", arguments={"who": "ann"})
    bad = run(peer, lambda q: q.accept({"email": "SECRET-not-an-address"}), make_executor, call)
    assert bad.error.startswith(not_sent(peer, "the answer does not match the requested schema"))
    assert "field 'email' does not satisfy 'format': 'email'" in bad.error
    assert "SECRET" not in bad.error
    good = run(peer, lambda q: q.accept({"email": "ann@example.com"}), make_executor, call)
    assert good.output == {"result": "ann: ann@example.com"}
