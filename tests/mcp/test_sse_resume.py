"""Streams that resume (SEP-1699, `toolbus/mcp/_sse_resume.py`): over HTTP,
every SSE event has an id, each stream opens with a priming event and a
`retry`, and a client that lost a call's stream, or whose stream the server
closed (`poll_after`), comes back with `Last-Event-ID` for what it missed.

Driven on the wire (httpx, the events read as they come), then by the SDK's
client and toolbus's, which reconnect on their own. The tool waits for an
event the test sets, so "the call is still running" is a fact, not a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx
import mcp_types as types
import orjson
from mcp import Client

from tests.mcp_servers.serving import served_in_thread
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry
from toolbus.mcp._serve_http import http_app
from toolbus.mcp._sse_resume import SessionEvents

VERSION = "2025-11-25"

registry = ToolRegistry()
gates: dict[str, threading.Event] = {}
started: dict[str, threading.Event] = {}


@registry.tool(read_only=True)
def slow(gate: str, ctx: ToolContext) -> str:
    """Reports half way, then waits for its gate."""
    ctx.progress("half way", 0.5)
    started[gate].set()
    if not gates[gate].wait(60):
        return "the test never opened the gate"
    return f"done {gate}"


def gate(name: str) -> str:
    gates[name], started[name] = threading.Event(), threading.Event()
    return name


resumed: list[str] = []
"""The event ids clients came back with (Last-Event-ID), as the server saw them."""


@contextlib.asynccontextmanager
async def served(**options: Any) -> AsyncIterator[str]:
    executor = Executor(registry, timeout=60)
    inner = http_app(registry, executor, **options)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (last := dict(scope["headers"]).get(b"last-event-id")):
            resumed.append(last.decode())
        await inner(scope, receive, send)

    serving = served_in_thread(app)
    try:
        yield await asyncio.to_thread(serving.__enter__)
    finally:
        for opened in gates.values():
            opened.set()
        await asyncio.to_thread(serving.__exit__, None, None, None)
        await asyncio.to_thread(executor.close)


class Session:
    """One MCP session on the wire."""

    def __init__(self, http: httpx.AsyncClient, url: str, version: str = VERSION) -> None:
        self.http, self.url, self.version, self.id = http, url, version, ""

    def headers(self, **more: str) -> dict[str, str]:
        return {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": self.version,
            **({"mcp-session-id": self.id} if self.id else {}),
            **more,
        }

    async def open(self) -> Session:
        init = {
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": self.version, "capabilities": {},
                       "clientInfo": {"name": "wire", "version": "1"}},
        }  # fmt: skip
        async with self.http.stream("POST", self.url, json=init, headers=self.headers()) as got:
            self.id = got.headers["mcp-session-id"]
            await got.aread()
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        answer = await self.http.post(self.url, json=note, headers=self.headers())
        assert answer.status_code == 202
        return self

    def call(self, name: str, arguments: dict[str, Any], request_id: int = 1) -> Any:
        body = {
            "jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": "p"}},
        }  # fmt: skip
        return self.http.stream("POST", self.url, json=body, headers=self.headers())

    def resume(self, last_event_id: str) -> Any:
        headers = self.headers(**{"last-event-id": last_event_id})
        headers["accept"] = "text/event-stream"
        return self.http.stream("GET", self.url, headers=headers)


async def events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE events of `response` as they come (fields by name)."""
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = event.get(name, "") + value.removeprefix(" ")


def result_of(event: dict[str, str], request_id: int = 1) -> Any:
    data = orjson.loads(event["data"]) if event.get("data") else {}
    return data.get("result") if data.get("id") == request_id else None


async def test_a_stream_the_server_closes_is_polled_to_its_progress_and_result() -> None:
    """poll_after=0: each stream of the call is closed once primed; the client
    comes back with the last id it saw, again and again, and between the
    streams it misses nothing and is sent nothing twice."""
    name = gate("polled")
    async with served(poll_after=0, reconnect_after=0.25) as url, httpx.AsyncClient() as http:
        session = await Session(http, url).open()
        seen: list[dict[str, str]] = []
        async with session.call("slow", {"gate": name}) as first:
            assert first.headers["content-type"].startswith("text/event-stream")
            seen += [e async for e in events(first)]
        assert seen[0]["data"] == "" and seen[0]["id"] and seen[0]["retry"] == "250"
        assert not any(result_of(e) for e in seen), "the stream was closed mid-call"
        await asyncio.to_thread(started[name].wait, 30)
        gates[name].set()
        result = None
        for _ in range(1000):  # a hang guard: each round is one reconnection
            last = [e["id"] for e in seen if e.get("id")][-1]
            async with session.resume(last) as again:
                assert again.status_code == 200
                async for event in events(again):
                    seen.append(event)
                    if (result := result_of(event)) is not None:
                        break
            if result is not None:
                break
        assert result is not None and result["content"][0]["text"] == f"done {name}"
    data = [orjson.loads(e["data"]) for e in seen if e.get("data")]
    progress = [d for d in data if d.get("method") == "notifications/progress"]
    assert [p["params"]["message"] for p in progress] == ["half way"]
    ids = [e["id"] for e in seen if e.get("id")]
    assert len(ids) == len(set(ids)), "every event has an id of its own"
    assert sum(1 for d in data if d.get("id") == 1) == 1, "the result is sent once"


async def test_a_connection_the_client_drops_is_resumed_without_polling() -> None:
    """No `poll_after`: the client leaves after the priming event; what the
    call sent meanwhile (its progress, its result) is replayed when it comes back."""
    name = gate("dropped")
    async with served() as url, httpx.AsyncClient() as http:
        session = await Session(http, url).open()
        async with session.call("slow", {"gate": name}) as first:
            priming = await anext(aiter(events(first)))
        assert priming["data"] == "" and priming["retry"] == "1000"
        await asyncio.to_thread(started[name].wait, 30)
        gates[name].set()
        seen = []
        async with session.resume(priming["id"]) as again:
            async for event in events(again):
                seen.append(event)
                if result_of(event) is not None:
                    break
        data = [orjson.loads(e["data"]) for e in seen if e.get("data")]
        assert [d.get("method") for d in data] == ["notifications/progress", None]
        assert data[-1]["result"]["content"][0]["text"] == f"done {name}"


async def test_another_session_is_sent_nothing_for_an_event_id() -> None:
    """Each session replays its own events only: stream ids repeat across
    sessions (request ids), event ids are no keys to another's."""
    name = gate("mine")
    async with served() as url, httpx.AsyncClient() as http:
        mine = await Session(http, url).open()
        theirs = await Session(http, url).open()
        async with mine.call("slow", {"gate": name}) as first:
            priming = await anext(aiter(events(first)))
        gates[name].set()
        async with theirs.resume(priming["id"]) as stolen:
            assert stolen.status_code == 400  # (a stream it does not keep)
            got = [e async for e in events(stolen)]
        assert not [e for e in got if e.get("data")], got
        async with mine.resume(priming["id"]) as again:
            async for event in events(again):
                if (result := result_of(event)) is not None:
                    assert result["content"][0]["text"] == f"done {name}"
                    break


async def test_a_replay_ends_with_its_session() -> None:
    """A session ended (DELETE) while a replay waits for the call's answer:
    the replayed stream ends too."""
    name = gate("deleted")
    async with served() as url, httpx.AsyncClient(timeout=60) as http:
        session = await Session(http, url).open()
        async with session.call("slow", {"gate": name}) as first:
            priming = await anext(aiter(events(first)))
        await asyncio.to_thread(started[name].wait, 30)
        async with session.resume(priming["id"]) as again:
            seen = aiter(events(again))
            progress = await anext(seen)  # what was missed: the replay is under way
            assert "half way" in progress["data"]
            ended = await http.delete(url, headers=session.headers())
            assert ended.status_code == 200
            assert [e async for e in seen] == []


async def test_a_client_before_2025_11_25_keeps_its_stream() -> None:
    """It would not understand a priming event, so it gets none, and its
    stream is never closed mid-call: the result comes on it."""
    name = gate("old")
    async with served(poll_after=0) as url, httpx.AsyncClient() as http:
        session = await Session(http, url, version="2025-06-18").open()
        async with session.call("slow", {"gate": name}) as first:
            got = []
            async for event in events(first):
                got.append(event)
                if event.get("data") and orjson.loads(event["data"]).get("method"):
                    gates[name].set()  # the progress came: the call is under way
        assert all(e.get("data") for e in got), "no priming event"
        assert result_of(got[-1])["content"][0]["text"] == f"done {name}"


async def test_the_sdks_client_and_toolbuss_reconnect_through_polling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The official client, and toolbus's `connect_http`, on 2025-11-25 (the
    2026-07-28 transport has no event ids: its long calls are tasks), follow
    the closed streams of a long call to its result and its progress."""
    from tests.mcp_servers.peers import use_peer
    from toolbus.mcp import aconnect_http

    use_peer("http-legacy", monkeypatch)

    async with served(poll_after=0, reconnect_after=0.05) as url:
        name = gate("sdk")
        told: list[str | None] = []

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            told.append(message)
            gates[name].set()

        resumed.clear()
        async with Client(url, mode="legacy") as client:
            result = await client.call_tool(
                "slow", {"gate": name}, progress_callback=progress, read_timeout_seconds=60
            )
        assert resumed, "the client came back for the rest"
        assert isinstance(result.content[0], types.TextContent)
        assert result.content[0].text == f"done {name}" and told == ["half way"]

        name = gate("toolbus")
        resumed.clear()
        async with await aconnect_http(url) as server:
            remote = ToolRegistry()
            server.register(remote)
            async with Executor(remote, timeout=60) as executor:
                waiting = asyncio.ensure_future(
                    executor.aexecute(ToolCall(name="slow", arguments={"gate": name}))
                )
                await asyncio.to_thread(started[name].wait, 30)
                gates[name].set()
                outcome = await waiting
        assert resumed, "the client came back for the rest"
        assert outcome.ok and outcome.output == f"done {name}", outcome


async def test_the_command_line_serves_polled_streams(tmp_path: Path) -> None:
    """`toolbus mcp serve --http --poll-after 0 --reconnect-after 0.2`."""
    from tests.mcp.test_server_http import start, stop
    from tests.mcp_servers.task_tools import open_gate

    proc, url = start(
        ["-m", "toolbus", "mcp", "serve", "tests.mcp_servers.task_tools:registry", "--http",
         "--port", "0", "--poll-after", "0", "--reconnect-after", "0.2"]
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            session = await Session(http, url).open()
            gate = tmp_path / "gate"
            async with session.call("build", {"gate": str(gate)}) as first:
                seen = [e async for e in events(first)]
            assert seen[0]["data"] == "" and seen[0]["retry"] == "200"
            assert not any(result_of(e) for e in seen), "closed mid-call"
            open_gate(gate, "it")
            async with session.resume(seen[-1]["id"]) as again:
                async for event in events(again):
                    if (result := result_of(event)) is not None:
                        break
            assert result["content"][0]["text"] == "built it"
    finally:
        assert stop(proc) == 0


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"poll_after": -1}, ValueError),
        ({"poll_after": "soon"}, TypeError),
        ({"reconnect_after": float("inf")}, ValueError),
    ],
)
def test_the_options_are_checked(options: dict[str, Any], error: type[Exception]) -> None:
    with Executor(registry) as executor, pytest.raises(error, match=next(iter(options))):
        http_app(registry, executor, **options)


# -- the store ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def message(n: int) -> types.JSONRPCMessage:
    return types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": n})


async def replayed(store: SessionEvents, after: str) -> list[Any]:
    """What a replay after `after` sends of what is kept. (It goes on live
    after that; its sends here never suspend, so one turn of the loop takes
    it to the wait for more, where it is stopped.) An id not kept ends it:
    None, as always (the SDK must not follow it with a live stream of its own)."""
    sent: list[Any] = []

    async def send(event: Any) -> None:
        sent.append((event.event_id, event.message.params["n"]))

    replay = asyncio.ensure_future(store.replay_events_after(after, send))
    await asyncio.sleep(0)
    if replay.done():
        assert replay.result() is None
    replay.cancel()
    return sent


async def test_the_store_replays_a_streams_later_events_in_order() -> None:
    store = SessionEvents()
    primed = await store.store_event("1", None)
    one = await store.store_event("1", message(1))
    await store.store_event("2", message(99))
    two = await store.store_event("1", message(2))
    assert len({primed, one, two}) == 3 and all(len(i) >= 20 for i in (primed, one, two))
    assert await replayed(store, primed) == [(one, 1), (two, 2)]
    assert await replayed(store, one) == [(two, 2)]
    assert await replayed(store, two) == []
    assert await replayed(store, "made-up") == []


async def test_the_store_is_bounded_and_an_id_outlives_its_event() -> None:
    """Beyond `max_events` the oldest go; an id whose event went still
    resumes its stream, from what is kept after it."""
    store = SessionEvents(max_events=3)
    ids = [await store.store_event("1", message(n)) for n in range(5)]
    other = await store.store_event("2", message(99))
    assert store.kept == 3
    assert await replayed(store, ids[0]) == [(ids[3], 3), (ids[4], 4)]
    assert await replayed(store, other) == []


async def test_a_stream_whose_answer_was_let_go_is_forgotten_whole() -> None:
    """Evicting a stream's answer drops the stream: a replay would send a
    client what it cannot use and never the answer (it would come back forever)."""
    store = SessionEvents(max_events=2)
    first = await store.store_event("1", message(1))
    await store.store_event("1", types.JSONRPCResponse(jsonrpc="2.0", id=1, result={}))
    assert store.knows(first)
    await store.store_event("2", message(2))
    await store.store_event("2", message(3))  # the answer of "1" goes: "1" goes whole
    assert not store.knows(first) and store.kept == 2
    assert not store.knows("made-up.1") and not store.knows("nodot")


async def test_many_answered_streams_hold_no_memory_beyond_the_bound() -> None:
    store = SessionEvents(max_events=10)
    for n in range(1000):
        await store.store_event(str(n), types.JSONRPCResponse(jsonrpc="2.0", id=n, result={}))
    assert store.kept == 10
    assert len(store._tokens) == 10 and len(store._answered) <= 2 * 10 + 64


async def test_a_quiet_stream_keeps_its_id_and_an_answered_one_goes_after_keep() -> None:
    clock = Clock()
    store = SessionEvents(keep=10, clock=clock)
    quiet = await store.store_event("1", None)  # a priming event, then nothing for long
    answered = await store.store_event("2", message(1))
    await store.store_event("2", types.JSONRPCResponse(jsonrpc="2.0", id=2, result={}))
    clock.now = 60.0
    late = await store.store_event("1", message(2))
    assert await replayed(store, quiet) == [(late, 2)], "unanswered: never aged out"
    assert await replayed(store, answered) == [], "answered 60 s ago, keep 10: gone"
    assert store.kept == 2


async def test_a_replay_goes_on_live_to_the_answer() -> None:
    """A replay sends what comes after what was kept, and ends with the
    stream's answer (the SDK's own live stream would miss
    what came while it opened)."""
    store = SessionEvents()
    primed = await store.store_event("1", None)
    sent: list[Any] = []
    two_sent = asyncio.Event()

    async def send(event: Any) -> None:
        sent.append(event.message)
        if len(sent) == 2:
            two_sent.set()

    replay = asyncio.ensure_future(store.replay_events_after(primed, send))
    await store.store_event("1", message(1))
    await store.store_event("2", message(99))  # another stream's
    await store.store_event("1", message(2))
    await two_sent.wait()
    assert not replay.done()
    answer = types.JSONRPCResponse(jsonrpc="2.0", id=1, result={})
    await store.store_event("1", answer)
    assert await replay is None
    assert [getattr(m, "params", None) for m in sent] == [{"n": 1}, {"n": 2}, None]
