"""The status server (`toolbus.observe.serve_status`): a real uvicorn on loopback,
spoken to over HTTP with httpx.

/status, /events (live, resumed with Last-Event-ID or ?since=, reset when the
history no longer reaches back), /metrics, the page, the token (header and the
page's cookie), loopback-only names, refusing a public bind without a token,
closing, and that importing toolbus loads none of the web machinery.
"""

from __future__ import annotations

import enum
import io
import json
import logging
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import pytest
from pydantic import BaseModel, ConfigDict

pytest.importorskip("starlette", reason="the web extra is not installed")
pytest.importorskip("prometheus_client", reason="the web extra is not installed")

from prometheus_client.parser import text_string_to_metric_families

import toolbus.observe
from tests.conftest import wait_until
from toolbus import Executor, RetryPolicy, ToolCall, ToolRegistry, _json, bus
from toolbus.observe import StatusServer, log_json, serve_status
from toolbus.observe._state import LiveState

TOKEN = "tok-9f8e7d6c5b4a"


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True, max_concurrency=4)
    def search(query: str, api_key: str = "") -> dict[str, Any]:
        """Search."""
        return {"query": query, "hits": 3}

    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=0.001))
    def broken(why: str) -> None:
        """Always fails."""
        raise ConnectionError(f"broken: {why}")

    return registry


@pytest.fixture
def executor() -> Iterator[Executor]:
    with Executor(make_registry(), max_parallel=4, timeout=5) as ex:
        yield ex


@pytest.fixture
def server(executor: Executor) -> Iterator[StatusServer]:
    with serve_status(executor) as s:
        yield s


@pytest.fixture
def http(server: StatusServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


def run_calls(executor: Executor, n: int = 3, tool: str = "search") -> list[str]:
    ids = [f"call-{tool}-{i}-{time.monotonic_ns()}" for i in range(n)]
    args = {"query": "q"} if tool == "search" else {"why": "w"}
    executor.execute_batch([ToolCall(id=i, name=tool, arguments=args) for i in ids])
    assert executor.drain_events(5)
    return ids


class SSE:
    """A server-sent event as read off the wire."""

    def __init__(self, name: str, id: str | None, data: str) -> None:
        self.name, self.id, self.data = name, id, data

    def json(self) -> Any:
        return _json.loads(self.data)  # integers of any size exact


def read_events(lines: Iterator[str], until: Any, timeout: float = 10.0) -> list[SSE]:
    """Events until `until(events)` is true; fails after `timeout` (pings come every 5 s)."""
    deadline = time.monotonic() + timeout
    events: list[SSE] = []
    name, eid, data = "message", None, []
    for line in lines:
        if not line:
            if data:
                events.append(SSE(name, eid, "\n".join(data)))
                if until(events):
                    return events
            name, eid, data = "message", None, []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "id":
                eid = value
            elif field == "data":
                data.append(value)
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"the stream ended or stalled after {len(events)} events")


def finished(ids: list[str]) -> Any:
    def check(events: list[SSE]) -> bool:
        done = {e.json().get("call_id") for e in events if e.json().get("signal") == bus.FINISHED}
        return set(ids) <= done

    return check


def wait_for_opening(lines: Iterator[str]) -> None:
    """Read the stream's first comment: from here on every new event reaches the client."""
    for line in lines:
        if line.startswith(": toolbus events"):
            return
    raise AssertionError("the stream closed before its first line")


# -- /status -------------------------------------------------------------------------


def test_status_is_a_snapshot_of_config_counters_and_state(
    executor: Executor, server: StatusServer, http: httpx.Client
) -> None:
    run_calls(executor, 3)
    run_calls(executor, 1, tool="broken")
    r = http.get("/status")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    config = body["executor"]
    assert config["name"] == executor.name
    assert config["max_parallel"] == 4 and config["timeout"] == 5
    assert [t["name"] for t in config["tools"]] == ["broken", "search"]
    search = next(t for t in config["tools"] if t["name"] == "search")
    assert search["read_only"] and search["max_concurrency"] == 4
    assert (
        body["stats"]["ok"] == 3 and body["stats"]["error"] == 1 and body["stats"]["retries"] == 1
    )
    assert body["stats"]["queued"] == 0 and body["stats"]["queues"] == {"max_parallel": 0}
    state = body["state"]
    assert state["totals"]["ok"] == 3 and state["totals"]["error"] == 1
    assert state["in_flight"] == [] and state["queued"] == [] and state["queues"] == {}
    assert state["errors"][0]["tool"] == "broken" and "broken: w" in state["errors"][0]["error"]
    tools = {t["tool"]: t for t in state["tools"]}
    assert tools["search"]["calls"] == 3 and tools["search"]["p50"] is not None
    assert tools["broken"]["retries"] == 1
    assert state["seq"] == body["server"]["latest"] > 0
    assert server.port == int(server.url.rsplit(":", 1)[1].strip("/"))


def test_status_shows_a_call_in_flight(executor: Executor, http: httpx.Client) -> None:
    gate = threading.Event()
    registry = executor.registry

    started = threading.Event()

    @registry.tool(read_only=True)
    def hold(n: int) -> int:
        """Waits for the test."""
        started.set()
        gate.wait(10)
        return n

    worker = threading.Thread(
        target=executor.execute, args=(ToolCall(id="held", name="hold", arguments={"n": 1}),)
    )
    worker.start()
    try:
        assert started.wait(10), "the tool never started"
        # Its tool:executing was announced before the tool ran: once delivered,
        # the server's state has the call in flight.
        assert executor.drain_events(10)
        state = http.get("/status").json()["state"]
        [call] = state["in_flight"]
        assert (call["call_id"], call["tool"], call["attempt"], call["state"]) == (
            "held",
            "hold",
            1,
            "running",
        )
        assert call["elapsed"] >= 0
    finally:
        gate.set()
        worker.join(10)


def test_calls_running_at_once_with_the_same_id_are_two_rows(
    executor: Executor, http: httpx.Client
) -> None:
    """A model may give two calls the same id: /status, and a view fed from
    /status and /events (as `toolbus top` is), show both, and drop each as it ends."""
    gate = threading.Event()

    @executor.registry.tool(read_only=True)
    def hold(n: int) -> int:
        """Waits for the test."""
        gate.wait(10)
        return n

    def call(n: int) -> None:
        executor.execute(ToolCall(id="call_0", name="hold", arguments={"n": n}))

    workers = [threading.Thread(target=call, args=(n,)) for n in (1, 2)]
    try:
        with bus.Recorder(bus.EXECUTING, sender=executor) as rec:
            for w in workers:
                w.start()
            rec.wait_for(bus.EXECUTING, 2, timeout=10)  # both calls are running
        assert executor.drain_events(10)
        rows = http.get("/status").json()["state"]["in_flight"]
        assert [r["call_id"] for r in rows] == ["call_0", "call_0"]
        assert len({r["run"] for r in rows}) == 2 and all(r["run"] > 0 for r in rows)
        with http.stream("GET", "/events?since=0") as r:
            lines = r.iter_lines()
            remote = LiveState()
            executing = read_events(
                lines, lambda evs: sum(e.json()["signal"] == bus.EXECUTING for e in evs) == 2
            )
            remote.apply_all(e.json() for e in executing)
            # Oldest first: the two threads may start their calls in either order.
            assert sorted(c["run"] for c in remote.snapshot(time.time())["in_flight"]) == sorted(
                r["run"] for r in rows
            )
            gate.set()
            done = read_events(
                lines, lambda evs: sum(e.json()["signal"] == bus.FINISHED for e in evs) == 2
            )
            remote.apply_all(e.json() for e in done)
        snap = remote.snapshot(time.time())
        assert snap["in_flight"] == [] and snap["totals"]["ok"] == 2
    finally:
        gate.set()
        for w in workers:
            w.join(10)


# -- /events -------------------------------------------------------------------------


def test_events_stream_live_with_seq_ids(executor: Executor, http: httpx.Client) -> None:
    with http.stream("GET", "/events") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        wait_for_opening(lines)
        ids = run_calls(executor, 3)
        events = read_events(lines, finished(ids))
    records = [e.json() for e in events]
    assert all(e.name == "message" for e in events)
    assert [int(e.id or 0) for e in events] == [rec["seq"] for rec in records]
    seqs = [rec["seq"] for rec in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    signals = {rec["signal"] for rec in records}
    assert {bus.BATCH_START, bus.EXECUTING, bus.EXECUTED, bus.FINISHED} <= signals
    executing = next(rec for rec in records if rec["signal"] == bus.EXECUTING)
    assert executing["arguments"] == {"query": "q"} and executing["tool"] == "search"
    done = next(rec for rec in records if rec["signal"] == bus.FINISHED)
    assert done["result"]["status"] == "ok" and done["result"]["output"] == {
        "query": "q",
        "hits": 3,
    }


def test_events_resume_after_last_event_id(executor: Executor, http: httpx.Client) -> None:
    first = run_calls(executor, 2)
    second = run_calls(executor, 2)
    with http.stream("GET", "/events", headers={"Last-Event-ID": "0"}) as r:
        everything = read_events(r.iter_lines(), finished(first + second))
    middle = next(e for e in everything if e.json().get("call_id") == second[0])
    resume_at = int(middle.id or 0) - 1
    expected = [(e.id, e.data) for e in everything if int(e.id or 0) > resume_at]

    def seen_all(events: list[SSE]) -> bool:
        return len(events) >= len(expected)

    with http.stream("GET", "/events", headers={"Last-Event-ID": str(resume_at)}) as r:
        resumed = read_events(r.iter_lines(), seen_all)
    assert [(e.id, e.data) for e in resumed] == expected
    with http.stream("GET", f"/events?since={resume_at}") as r:  # the page's first connection
        by_query = read_events(r.iter_lines(), seen_all)
    assert [(e.id, e.data) for e in by_query] == expected
    # The header wins over the query (an EventSource reconnecting keeps its URL).
    last = everything[-1].id
    with http.stream("GET", "/events?since=0", headers={"Last-Event-ID": str(last)}) as r:
        lines = r.iter_lines()
        wait_for_opening(lines)
        more = run_calls(executor, 1)
        after = read_events(lines, finished(more))
    assert int(after[0].id or 0) > int(last or 0)


def test_a_client_that_leaves_mid_backlog_is_let_go_and_logged_once(
    executor: Executor, caplog: pytest.LogCaptureFixture
) -> None:
    """A resuming client that read a few events of a long backlog and left:
    the server wrote the rest to the dead connection without giving its loop
    a turn, and asyncio logged `socket.send() raised exception.` once per
    event (4 723 lines, issue 22). Now the stream hears the client leave, stops,
    and says so once."""
    caplog.set_level(logging.INFO)
    with serve_status(executor, history=5000) as server:
        for _ in range(4):
            run_calls(executor, 100)  # 1 600 events
        port = int(server.url.rstrip("/").rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nLast-Event-ID: 0\r\n\r\n")
            got = b""
            while got.count(b"\r\n\r\n") < 12:  # the headers, then events
                chunk = client.recv(4096)
                assert chunk, "the server closed the stream"
                got += chunk
            # Gone at once (a reset, as a closed tab or a killed `top` leaves).
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

        def left() -> list[logging.LogRecord]:
            return [r for r in caplog.records if "an /events client left" in r.getMessage()]

        wait_until(lambda: bool(left()), what="the stream to hear its client leave")
    assert len(left()) == 1
    flood = [r for r in caplog.records if "socket.send() raised" in r.getMessage()]
    assert flood == []


def test_events_reset_when_history_no_longer_reaches_back(executor: Executor) -> None:
    with (
        serve_status(executor, history=10) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        run_calls(executor, 4)  # 16 events: more than 10
        with http.stream("GET", "/events", headers={"Last-Event-ID": "1"}) as r:
            lines = r.iter_lines()
            [reset] = read_events(lines, lambda events: True)
            assert reset.name == "reset" and reset.id is None
            assert reset.json()["seq"] == http.get("/status").json()["state"]["seq"]
            more = run_calls(executor, 1)  # and it goes on from there
            events = read_events(lines, finished(more))
        assert all(e.name == "message" for e in events)
        with http.stream("GET", "/events", headers={"Last-Event-ID": str(10**9)}) as r:
            [reset] = read_events(r.iter_lines(), lambda events: True)  # an id from elsewhere
            assert reset.name == "reset"


def test_a_feed_knows_what_came_before_its_first_event(executor: Executor) -> None:
    """A client resuming on a server started after its last event (a restart)
    gets a gap (then `reset`), not the next events as if nothing was missed;
    a client that has the event just before the feed's first misses nothing
    (review 10b)."""
    from toolbus.observe._feed import Feed

    with bus.Recorder(sender=executor) as rec:  # another subscriber: the seqs go on
        run_calls(executor, 1)  # before the feed: never seen by it
        before = max(event.seq for _, event in rec.events)
        with Feed(executor, history=100) as feed:
            run_calls(executor, 1)
            seqs = sorted(event.seq for _, event in rec.events if event.seq > before)
            first = seqs[0]
            assert first == before + 1 > 2 and feed.latest == seqs[-1]
            records, gap = feed.since(first - 1)  # has all before the first: nothing missed
            assert not gap and [seq for seq, _ in records] == seqs
            assert feed.since(first - 2)[1]  # lacks `first - 1`, never kept
            assert not feed.since(0)[1]  # a new client: misses nothing
            assert not feed.since(seqs[-1])[1] and not feed.since(seqs[-1])[0]
            assert feed.since(seqs[-1] + 1)[1]  # an id from elsewhere


class Mode(enum.Enum):
    SAFE = frozenset({"read"})


_MODE_SET = "test:mode-set"
bus.define_signal(_MODE_SET, "A mode was set (a signal of one's own, for a test).")


@dataclass(frozen=True, slots=True)
class ModeSet(bus.Event):
    mode: Mode
    by: Any = None


def test_progress_data_no_json_or_repr_can_show_is_shown_not_lost() -> None:
    """Progress data whose text and repr fail, or nested past the
    interpreter's recursion limit, is shown as its type's name; the feed
    raised on it (logged as a receiver's failure), and `/events` never had
    the event."""
    from toolbus import ToolContext
    from toolbus.observe._feed import Feed

    class Unshowable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    deep: list[Any] = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]

    class Holder(BaseModel):  # a model pydantic cannot dump as JSON
        model_config = ConfigDict(arbitrary_types_allowed=True)
        held: Unshowable

    details = {"object": Unshowable(), "deep": deep, "model": Holder(held=Unshowable())}
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def report(ctx: ToolContext, which: str) -> str:
        """Reports progress."""
        ctx.progress("step", 0.5, detail=details[which])
        return "done"

    with Executor(registry) as executor, Feed(executor, history=100) as feed:
        for which in details:
            executor.execute(ToolCall(id=which, name="report", arguments={"which": which}))
        # An enum member whose value is no JSON either: its record could not be
        # written, and the whole burst it came in was lost.
        assert executor.emitter.announce(_MODE_SET, ModeSet(Mode.SAFE, Holder(held=Unshowable())))
        assert executor.drain_events(5)
        records = [orjson.loads(data) for _, data in feed.since(0)[0]]
    shown = {r["call_id"]: r["data"] for r in records if r["signal"] == bus.PROGRESS}
    assert shown == {
        "object": {"detail": "<Unshowable>"},
        "deep": "<dict>",
        "model": {"detail": "<Holder>"},
    }
    assert records[-1]["signal"] == _MODE_SET and records[-1]["mode"] == "frozenset({'read'})"
    assert records[-1]["by"] == "<Holder>"


@pytest.mark.parametrize(
    ("headers", "query"),
    [
        ({"Last-Event-ID": "1" * 5000}, ""),  # int() refuses beyond 4300 digits
        ({"Last-Event-ID": "-1"}, ""),
        ({}, "?since=%C2%B2"),  # "²": str.isdigit() takes it, int() does not
        ({}, "?since=1e3"),
        ({}, "?since=%D9%A3"),  # an Arabic-Indic three: a digit, not an ASCII one
    ],
)
def test_a_resume_point_that_is_no_seq_is_ignored(
    executor: Executor, http: httpx.Client, headers: dict[str, str], query: str
) -> None:
    """Not a 500: the stream starts from now on, as if nothing was sent (review 10)."""
    run_calls(executor, 1)  # events before: not sent again
    with http.stream("GET", "/events" + query, headers=headers) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        wait_for_opening(lines)
        more = run_calls(executor, 1)
        events = read_events(lines, finished(more))
    assert {e.json()["call_id"] for e in events if "call_id" in e.json()} == set(more)


def test_a_lone_surrogate_breaks_neither_status_nor_events_nor_metrics() -> None:
    """A model's tool name or call id, or an executor's name, that UTF-8 cannot
    hold is written as U+FFFD everywhere (review 10)."""
    bad = json.loads('"t\\ud800"')  # valid JSON a model or provider may send
    with (
        Executor(make_registry(), name=json.loads('"ex\\udfff"')) as executor,
        serve_status(executor) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
        http.stream("GET", "/events") as r,
    ):
        lines = r.iter_lines()
        wait_for_opening(lines)
        executor.execute(ToolCall(id=bad, name=bad, arguments={}))
        executor.execute(ToolCall(id=bad, name="search", arguments={"query": "q"}))
        assert executor.drain_events(5)
        events = read_events(
            lines, lambda es: sum(e.json()["signal"] == bus.FINISHED for e in es) == 2
        )
        status = http.get("/status")
        metrics = http.get("/metrics")
    assert status.status_code == 200 and metrics.status_code == 200
    assert status.json()["executor"]["name"] == "ex\ufffd"
    assert 'executor="ex\ufffd"' in metrics.text
    done = [e.json() for e in events if e.json()["signal"] == bus.FINISHED]
    assert [(d["call_id"], d["tool"]) for d in done] == [
        ("t\ufffd", "<unknown>"),
        ("t\ufffd", "search"),
    ]
    recent = status.json()["state"]["recent"]
    assert {e["call_id"] for e in recent} == {"t\ufffd"}


_REPORTED = "test:report-made"
bus.define_signal(_REPORTED, "A report was made (a signal of one's own, for a test).")


@dataclass(frozen=True, slots=True)
class Reported(bus.Event):
    result: dict[str, Any]


def test_an_invented_tool_name_is_unknown_in_the_result_of_events_too() -> None:
    """The name a model invented goes nowhere on `/events`: not as the event's
    `tool`, nor as its result's `name`. The result's `name` carried it as the
    model sent it, with a secret the content scanner finds (and cuts out of
    the error text) included."""
    from toolbus.scanning import ContentScanner

    key = "AKIAZ7Q3J2XW5NPLM4RT"  # an AWS access key id, as gitleaks' rule finds it
    with (
        Executor(make_registry(), scanner=ContentScanner()) as executor,
        serve_status(executor) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
        http.stream("GET", "/events") as r,
    ):
        lines = r.iter_lines()
        wait_for_opening(lines)
        executor.execute(ToolCall(id="made-up", name=f"fetch {key}", arguments={}))
        # An event of one's own whose `result` is no tool's result keeps its name.
        assert executor.emitter.announce(_REPORTED, Reported({"name": "weekly"}))
        events = read_events(lines, lambda es: any(e.json()["signal"] == _REPORTED for e in es))
    done = next(e.json() for e in events if e.json()["signal"] == bus.FINISHED)
    assert done["tool"] == "<unknown>"
    assert done["result"]["name"] == "<unknown>"
    assert events[-1].json()["result"] == {"name": "weekly"}
    assert "[REDACTED:secret]" in done["result"]["error"]
    assert all(key not in e.data for e in events)


def test_an_integer_past_a_floats_range_is_shown_not_lost() -> None:
    """A model may send, and a tool return, an integer JSON holds exactly but a
    double cannot (10**400): the call is on `/events` and in `/status` like
    any other, the integer exact. Its events failed the feed ("number is
    infinity"), so the page never saw the call start or end."""
    big = 10**400
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def count(n: int) -> dict[str, int]:
        """Echoes a number."""
        return {"n": n, "next": n + 1}

    with (
        Executor(registry) as executor,
        serve_status(executor) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
        http.stream("GET", "/events") as r,
    ):
        lines = r.iter_lines()
        wait_for_opening(lines)
        result = executor.execute(ToolCall(id="huge", name="count", arguments={"n": big}))
        assert result.status == "ok"
        events = read_events(lines, finished(["huge"]))
        state = http.get("/status").json()["state"]
    records = {e.json()["signal"]: e for e in events if e.json().get("call_id") == "huge"}
    assert records[bus.EXECUTING].json()["arguments"] == {"n": big}
    done = records[bus.FINISHED].json()
    assert done["result"]["status"] == "ok"
    assert done["result"]["output"] == {"n": big, "next": big + 1}
    assert [e["call_id"] for e in state["recent"]] == ["huge"]
    assert state["malformed"] == 0


def test_unknown_tools_are_one_row_whatever_ended_them(executor: Executor) -> None:
    """Whether a tool is known is asked of the registry, not read off the error
    code: on a closed executor an invented name ends `cancelled`, and still
    gets no row of its own (review 10)."""
    with (
        serve_status(executor) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        executor.execute(ToolCall(id="open", name="invented_one", arguments={}))
        executor.close()
        closed = executor.execute(ToolCall(id="closed", name="invented_two", arguments={}))
        assert closed.error_code is not None and closed.error_code.value == "CANCELLED"
        assert executor.drain_events(5)
        state = http.get("/status").json()["state"]
    assert [t["tool"] for t in state["tools"]] == ["<unknown>"]
    rows = {t["tool"]: t for t in state["tools"]}
    assert rows["<unknown>"]["rejected"] == 1 and rows["<unknown>"]["cancelled"] == 1
    assert {e["tool"] for e in state["recent"]} == {"<unknown>"}


# -- /metrics and / ------------------------------------------------------------------------


def test_metrics_are_prometheus_text(executor: Executor, http: httpx.Client) -> None:
    run_calls(executor, 2)
    run_calls(executor, 1, tool="broken")
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    calls = {
        (s.labels["tool"], s.labels["status"], s.labels["error_code"]): s.value
        for s in families["toolbus_calls"].samples
        if s.name == "toolbus_calls_total"
    }
    assert calls[("search", "ok", "")] == 2
    assert calls[("broken", "error", "TOOL_ERROR")] == 1
    assert {s.labels["executor"] for f in families.values() for s in f.samples} == {executor.name}
    retries = [s for s in families["toolbus_retries"].samples if s.name == "toolbus_retries_total"]
    assert retries[0].value == 1
    for gauge in ("toolbus_in_flight", "toolbus_queued", "toolbus_abandoned_workers"):
        assert families[gauge].samples[0].value == 0


def test_metrics_are_the_prometheus_exporters_in_a_registry_of_its_own(
    executor: Executor, http: httpx.Client
) -> None:
    from prometheus_client import REGISTRY

    run_calls(executor, 2)
    families = {f.name: f for f in text_string_to_metric_families(http.get("/metrics").text)}
    durations = [
        s for s in families["toolbus_call_duration_seconds"].samples if s.name.endswith("_count")
    ]
    assert [(s.labels["tool"], s.value) for s in durations] == [("search", 2)]
    # The process's default registry is left alone.
    assert REGISTRY.get_sample_value("toolbus_calls_total", {"executor": executor.name}) is None


def test_an_executor_whose_events_skip_the_bus_is_refused() -> None:
    with Executor(make_registry(), publisher=bus.NullPublisher()) as quiet:
        with pytest.raises(ValueError, match="not to the bus"):
            serve_status(quiet)
        with pytest.raises(ValueError, match="not to the bus"), toolbus.observe.live(quiet):
            pass


def test_refusing_an_executor_leaves_no_listening_socket() -> None:
    """The executor is checked before the socket is bound (review 10)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Executor(make_registry(), publisher=bus.NullPublisher()) as quiet:
        kept: list[BaseException] = []  # a caller that logs or keeps the error
        try:
            serve_status(quiet, port=port)
        except ValueError as e:
            kept.append(e)
        assert kept
        with socket.socket() as client, pytest.raises(OSError):
            client.connect(("127.0.0.1", port))


def test_the_page_is_served_with_a_strict_policy(http: httpx.Client) -> None:
    r = http.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    policy = r.headers["content-security-policy"]
    nonce = re.search(r"'nonce-([^']+)'", policy)
    assert nonce is not None and f'<script nonce="{nonce.group(1)}">' in r.text
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    assert r.headers["referrer-policy"] == "no-referrer"
    assert "new EventSource(" in r.text and "innerHTML" not in r.text
    assert http.get("/").headers["content-security-policy"] != policy  # a nonce per response


# -- security ---------------------------------------------------------------------------


def test_with_a_token_every_request_needs_it(executor: Executor) -> None:
    with (
        serve_status(executor, token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        for path in ("/", "/status", "/events", "/metrics", "/nowhere"):
            r = http.get(path)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert http.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert http.get(path, headers={"Authorization": TOKEN}).status_code == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        for path in ("/", "/status", "/metrics"):
            assert http.get(path, headers=good).status_code == 200, path
        with http.stream("GET", "/events", headers=good) as r:
            assert r.status_code == 200
            wait_for_opening(r.iter_lines())
        assert http.get("/nowhere", headers=good).status_code == 404


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_schemes_name_is_case_insensitive(executor: Executor, scheme: str) -> None:
    """RFC 7235: an auth scheme's name is case-insensitive; the token is not."""
    with serve_status(executor, token=TOKEN) as server:
        good = httpx.get(
            server.url + "status", headers={"Authorization": f"{scheme} {TOKEN}"}, timeout=10
        )
        assert good.status_code == 200
        wrong = httpx.get(
            server.url + "status",
            headers={"Authorization": f"{scheme} {TOKEN.upper()}"},
            timeout=10,
        )
        assert wrong.status_code == 401
        other = httpx.get(
            server.url + "status", headers={"Authorization": f"Basic {TOKEN}"}, timeout=10
        )
        assert other.status_code == 401


def test_a_browser_trades_the_token_for_a_cookie_once(executor: Executor) -> None:
    with (
        serve_status(executor, token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=10) as http,
    ):
        assert http.get("/", params={"token": "wrong"}).status_code == 401
        assert http.get("/status", params={"token": TOKEN}).status_code == 401  # only on /
        r = http.get("/", params={"token": TOKEN})
        assert r.status_code == 303 and r.headers["location"] == "./"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert http.cookies.get("toolbus_status")  # httpx keeps it, as a browser would
        assert http.get("/").status_code == 200
        assert http.get("/status").status_code == 200
        with http.stream("GET", "/events") as events:
            assert events.status_code == 200
        assert http.get("/metrics").status_code == 401  # the cookie is for the page only
        value = http.cookies["toolbus_status"]
        assert (
            httpx.get(
                server.url + "status", headers={"Authorization": f"Bearer {value}"}
            ).status_code
            == 401
        )


def test_a_public_address_without_a_token_is_refused(executor: Executor) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.10", "example.org"):
        with pytest.raises(ValueError, match="needs a token"):
            serve_status(executor, host=host)
    with serve_status(executor, host="0.0.0.0", token=TOKEN) as server:
        assert server.url.startswith("http://127.0.0.1:")
        r = httpx.get(
            server.url + "status",
            headers={"Authorization": f"Bearer {TOKEN}", "Host": "agent.example:80"},
            timeout=10,
        )
        assert r.status_code == 200  # a real host name is fine once a token guards it


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_loopback_answers_only_to_loopback_names(executor: Executor, host: str) -> None:
    with serve_status(executor, host=host) as server:
        assert httpx.get(server.url + "status", timeout=10).status_code == 200
        for name in ("localhost", f"localhost:{server.port}", "127.0.0.1", "[::1]:80"):
            assert (
                httpx.get(server.url + "status", headers={"Host": name}, timeout=10).status_code
                == 200
            )
        rebound = httpx.get(server.url + "status", headers={"Host": "attacker.example"}, timeout=10)
        assert rebound.status_code == 403  # a page whose name was rebound to 127.0.0.1


def test_bad_options_are_refused(executor: Executor) -> None:
    with pytest.raises(ValueError, match="token"):
        serve_status(executor, token="")
    # Tokens no request can send (review 10b): HTTP strips a header's outer
    # whitespace, refuses control characters, carries only Latin-1.
    for bad in (" {}", "{} ", "{}\t{}", "{} {}", "{}\x00", "{}\x7f", "{}\x85", "{}€"):
        token = bad.format("zq9x", "zq9y")
        with pytest.raises(ValueError, match="no request could send this token") as refused:
            serve_status(executor, token=token)
        assert "zq9" not in str(refused.value)  # an error never quotes a token
    with serve_status(executor, token="t\xf6k") as server:  # Latin-1 is what a header carries
        auth = {"Authorization": b"Bearer t\xf6k"}
        assert httpx.get(server.url + "metrics", headers=auth, timeout=10).status_code == 200
    with pytest.raises(ValueError, match="history"):
        serve_status(executor, history=0)
    with serve_status(executor) as server, pytest.raises(OSError):
        serve_status(executor, port=server.port)  # in use: raised here, not on a thread


def test_close_ends_the_streams_and_is_idempotent(executor: Executor) -> None:
    server = serve_status(executor)
    opened, ended = threading.Event(), threading.Event()

    def follow() -> None:
        with httpx.stream("GET", server.url + "events", timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith(": toolbus events"):
                    opened.set()
        ended.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert opened.wait(10), "the stream did not open"
    started = time.monotonic()
    server.close()
    # Loose bounds for a busy machine, still well below the reader's 30 s
    # timeout: a stream the close left open would be ended only by that.
    assert ended.wait(20), "the stream did not end when the server closed"
    assert time.monotonic() - started < 20
    assert server.closed and "closed" in repr(server)
    server.close()
    assert not server._thread.is_alive()
    with pytest.raises(httpx.HTTPError):
        httpx.get(server.url + "status", timeout=2)


def test_the_server_outlives_its_executor_closing(executor: Executor, http: httpx.Client) -> None:
    run_calls(executor, 1)
    executor.close()
    body = http.get("/status").json()
    assert body["executor"]["closed"] is True and body["stats"]["ok"] == 1


def test_importing_toolbus_loads_no_web_or_live_machinery() -> None:
    code = (
        "import sys, toolbus, toolbus.observe\n"
        "heavy = [m for m in ('starlette', 'uvicorn', 'sse_starlette', 'prometheus_client', "
        "'rich.live', 'httpx') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == ""


def test_events_resume_on_a_new_server_reports_the_gap() -> None:
    """/events resumed across a server restart skipped the missed events silently (review 10b).

    A client (the page's EventSource, `toolbus top`) reconnects with
    Last-Event-ID to a status server that started after that id: the events in
    between were never kept, so it must get `reset`, not the next ones.
    """
    pytest.importorskip("starlette", reason="the web extra is not installed")
    import httpx

    from toolbus.observe import serve_status

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def work() -> str:
        """Works."""
        return "ok"

    with Executor(reg) as ex, log_json(ex, io.StringIO()):  # another subscriber: seqs go on
        first = serve_status(ex)
        ex.execute(ToolCall(id="seen", name="work", arguments={}))
        ex.drain_events()
        last = httpx.get(first.url + "status").json()["server"]["latest"]
        first.close()
        ex.execute(ToolCall(id="missed", name="work", arguments={}))  # nobody keeps these
        ex.drain_events()
        with serve_status(ex) as second:
            ex.execute(ToolCall(id="later", name="work", arguments={}))
            ex.drain_events()
            headers = {"Last-Event-ID": str(last)}
            with httpx.stream("GET", second.url + "events", headers=headers, timeout=10) as r:
                first_event: dict[str, str] = {}
                for line in r.iter_lines():
                    if not line:
                        if "data" in first_event:
                            break
                        continue
                    if line.startswith(":"):
                        continue
                    key, _, value = line.partition(":")
                    first_event[key] = value.strip()
    # Expected: a reset (what the client missed is gone); got: the event after
    # the gap, as if nothing had been missed.
    assert first_event.get("event") == "reset", first_event


def _raw_get(port: int, path: str, authorization: bytes) -> bytes:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: " + authorization + b"\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0]


@pytest.mark.parametrize("token", ["s3cret-token ", "s3cret-€-token"])
def test_serve_status_refuses_a_token_that_cannot_authenticate(token: str) -> None:
    """serve_status took a token no request can send, locking /metrics for good (review 10b).

    A token with trailing whitespace (HTTP strips it from the header) or a
    character beyond Latin-1 (a header cannot carry it) is accepted, and then
    no request can ever pass: /metrics (header only) is locked for good.
    Expected: a ValueError at serve_status, as for an empty token (or the
    token working).
    """
    pytest.importorskip("starlette", reason="the web extra is not installed")
    from toolbus.observe import serve_status

    with Executor(ToolRegistry()) as ex:
        try:
            server = serve_status(ex, token=token)
        except ValueError:
            return  # refused up front: fine
        with server:
            for encoding in ("utf-8", "latin-1"):
                try:
                    header = ("Bearer " + token).encode(encoding)
                except UnicodeEncodeError:
                    continue
                if b" 200 " in _raw_get(server.port, "/metrics", header):
                    return
    pytest.fail(f"serve_status accepted token {token!r}, which no request can send")
