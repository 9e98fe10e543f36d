"""Following a server's resources (`subscribe_resource`): each change is an
`mcp:resource-updated` event sent by the connection
(`toolbus/mcp/_resource_updates.py`).

2026-07-28: tests/mcp_servers/notes_server.py (`subscriptions/listen`),
in-process and over stdio, through a reconnection. 2025-11-25
(`resources/subscribe`, `notifications/resources/updated`): npm's
server-everything, whose `toggle-subscriber-updates` sends an update at
once; and the SDK's server, which refuses.
"""

from __future__ import annotations

import asyncio
import queue
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("mcp")

import mcp_types as types

from tests.conftest import wait_until
from tests.mcp_servers import library_server, notes_server
from tests.mcp_servers.peers import everything_server, use_peer
from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.mcp import (
    RESOURCE_UPDATED,
    MCPConnectError,
    MCPConnection,
    ResourceUpdated,
    connect,
    connect_stdio,
)
from toolbus.mcp._resource_updates import ResourceWatch

# The slow tier (tests/README.md): MCP servers as subprocesses (stdio, node).
pytestmark = pytest.mark.slow

NOTES = str(Path(notes_server.__file__))
TODAY, LATER = "notes://today", "notes://later"


class Heard:
    """The `mcp:resource-updated` events one connection sends, in order."""

    def __init__(self, conn: MCPConnection) -> None:
        self.events: queue.Queue[ResourceUpdated] = queue.Queue()
        self._signal = bus.signal(RESOURCE_UPDATED)
        self._signal.connect(self._on, sender=conn, weak=False)

    def _on(self, sender: object, event: ResourceUpdated) -> None:
        self.events.put(event)

    def next(self) -> ResourceUpdated:
        return self.events.get(timeout=30)

    def close(self) -> None:
        self._signal.disconnect(self._on)


@pytest.fixture(params=["in-process", "stdio"])
def notes(request: pytest.FixtureRequest) -> Iterator[MCPConnection]:
    if request.param == "in-process":
        with connect(notes_server.server) as conn:
            yield conn
    else:
        with connect_stdio(sys.executable, [NOTES]) as conn:
            yield conn


def writer(conn: MCPConnection) -> Executor:
    registry = ToolRegistry()
    conn.register(registry)
    return Executor(registry, timeout=30)


def write(ex: Executor, uri: str, text: str) -> None:
    result = ex.execute(ToolCall(name="write", arguments={"uri": uri, "text": text}))
    assert result.ok, result.error


def test_a_followed_resource_sends_an_event_for_each_change(notes: MCPConnection) -> None:
    heard = Heard(notes)
    notes.subscribe_resource(TODAY)
    assert notes.resource_subscriptions == {TODAY}
    with writer(notes) as ex:
        write(ex, LATER, "not followed")  # sends nothing: the next event is TODAY's
        write(ex, TODAY, "first")
        event = heard.next()
        assert (event.server, event.uri) == ("notes", TODAY)
        write(ex, TODAY, "second")
        assert heard.next().uri == TODAY
        # Stopped: a change of TODAY sends nothing; LATER, followed now, does.
        notes.unsubscribe_resource(TODAY)
        notes.subscribe_resource(LATER)
        write(ex, TODAY, "third")
        write(ex, LATER, "fourth")
        assert heard.next().uri == LATER
    assert heard.events.empty()
    heard.close()


def test_resources_followed_from_two_threads_at_once_are_both_heard() -> None:
    """Two changes of the set at once each retired the other's stream (found
    by review): one change at a time now."""
    with connect(notes_server.server) as conn, ThreadPoolExecutor(2) as pool:
        heard = Heard(conn)
        list(pool.map(conn.subscribe_resource, [TODAY, LATER]))
        assert conn.resource_subscriptions == {TODAY, LATER}
        with writer(conn) as ex:
            write(ex, TODAY, "one")
            write(ex, LATER, "two")
            assert {heard.next().uri, heard.next().uri} == {TODAY, LATER}
        heard.close()


def test_followed_resources_are_asked_for_again_after_a_reconnection() -> None:
    with connect_stdio(sys.executable, [NOTES]) as conn:
        heard = Heard(conn)
        conn.subscribe_resource(TODAY)
        with writer(conn) as ex:
            crashed = ex.execute(ToolCall(name="quit", arguments={}))
            assert crashed.status == "error"  # the server exited mid-call

            # The next session is asked for TODAY in the background: a write
            # is heard once it has been (polled: each try writes once more).
            def heard_a_write() -> bool:
                write(ex, TODAY, "again")
                return not heard.events.empty()

            wait_until(heard_a_write, what="an update heard on the new session", every=0.05)
        assert heard.next().uri == TODAY
        assert conn.status().connects == 2
        heard.close()


def test_the_async_twins_and_bad_uris() -> None:
    async def follow(conn: MCPConnection) -> frozenset[str]:
        await conn.asubscribe_resource(TODAY)
        await conn.aunsubscribe_resource(TODAY)
        return conn.resource_subscriptions

    with connect(notes_server.server) as conn:
        assert asyncio.run(follow(conn)) == frozenset()
        with pytest.raises(TypeError, match="uri must be a non-empty string"):
            conn.subscribe_resource("")
        assert conn.resource_subscriptions == frozenset()


def test_a_uri_the_listen_stream_does_not_honour_is_refused() -> None:
    """The server acknowledges a stream whose filter leaves the URI out."""

    class Stream:
        honored = types.SubscriptionFilter(resource_subscriptions=[])

        async def __aenter__(self) -> Stream:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

    class Client:
        protocol_version = "2026-07-28"

        def listen(self, **filters: object) -> Stream:
            return Stream()

    watch = ResourceWatch(lambda: "fake", sender=object())
    with pytest.raises(LookupError, match=r"does not report changes of \['notes://x'\]"):
        asyncio.run(watch.follow(Client(), "notes://x"))  # type: ignore[arg-type]
    assert watch.uris == set()


def test_a_server_without_subscriptions_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    use_peer("in-process-legacy", monkeypatch)
    with connect(library_server.server) as conn:
        with pytest.raises(
            MCPConnectError, match="could not follow 'docs://guide': Method not found"
        ):
            conn.subscribe_resource("docs://guide")
        assert conn.resource_subscriptions == frozenset()


def test_a_2025_11_25_server_notifies_unasked() -> None:
    with connect_stdio("node", [everything_server(), "stdio"]) as everything:
        uri = everything.resources()[0].uri
        heard = Heard(everything)
        everything.subscribe_resource(str(uri))
        with writer(everything) as ex:
            toggled = ex.execute(ToolCall(name="toggle-subscriber-updates", arguments={}))
            assert toggled.ok, toggled.error
            event = heard.next()  # sent at once, then every 5 s
            assert (event.server, event.uri) == ("mcp-servers/everything", str(uri))
            everything.unsubscribe_resource(str(uri))
            assert ex.execute(ToolCall(name="toggle-subscriber-updates", arguments={})).ok
        heard.close()
