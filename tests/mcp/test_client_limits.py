"""Per-server limits: `connect*(server_max_concurrency=N)`, one capacity group
shared by every tool of the server, that the tools bring to the executor
(`Tool.group_limits`) so that `Executor(groups=...)` need not repeat it.

Peers: the `mcp` SDK's `MCPServer` (tests/mcp_servers/spec_server.py)
in-process, where the test reads the server's own count of calls inside, and
over stdio, where the calls meet in pairs and report the peak they saw.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from tests.mcp_servers import spec_server
from tests.mcp_servers.peers import connect_spec
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry
from toolbus.mcp import MCPConnection, connect
from toolbus.models import ErrorCode
from toolbus.tools import Tool


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


@pytest.fixture(autouse=True)
def fresh_server() -> Iterator[None]:
    spec_server.reset()
    yield
    spec_server.reset()


# -- Tool.group_limits: a tool that defines its own group --------------------------------------


class Inside:
    """Counts the calls inside, and holds them until opened."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.now = self.peak = 0
        self.open = False

    def enter(self) -> None:
        with self.cond:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.open, 10)
            self.now -= 1

    def release(self) -> None:
        with self.cond:
            self.open = True
            self.cond.notify_all()


class Pooled(Tool):
    """A read-only tool in the capacity group `pool`, whose limit it defines."""

    read_only = True

    def __init__(self, name: str, limit: int, inside: Inside) -> None:
        self.name = name
        self.group_limits = {"pool": limit}
        self.inside = inside
        super().__init__()

    def run(self, params: Any, ctx: ToolContext) -> str:
        self.inside.enter()
        return "done"


def test_a_tools_own_group_limits_every_tool_in_it(make_executor: MakeExecutor) -> None:
    inside = Inside()
    registry = ToolRegistry([Pooled("a", 2, inside), Pooled("b", 2, inside)])
    assert registry.get("a").groups == ("pool",)  # type: ignore[union-attr]
    executor = make_executor(registry, max_parallel=8)  # no groups= needed
    calls = [call("a" if i % 2 else "b") for i in range(6)]
    with ThreadPoolExecutor(1) as pool:
        batch = pool.submit(executor.execute_batch, calls)
        with inside.cond:
            assert inside.cond.wait_for(lambda: inside.now == 2, 10)
        stats = executor.stats()
        assert (stats.in_flight, stats.queued) == (2, 4)
        inside.release()
        results = batch.result(10)
    assert [r.status for r in results] == ["ok"] * 6
    assert inside.peak == 2


def test_two_limits_for_one_group_are_refused(make_executor: MakeExecutor) -> None:
    inside = Inside()
    with pytest.raises(ValueError, match="tool 'b' defines capacity group 'pool' with limit 3, "
                       "and tool 'a' with limit 2"):  # fmt: skip
        Executor(ToolRegistry([Pooled("a", 2, inside), Pooled("b", 3, inside)]))
    with pytest.raises(ValueError, match=r"and Executor\(groups=...\) with limit 4"):
        Executor(ToolRegistry([Pooled("a", 2, inside)]), groups={"pool": 4})
    # Registered after the executor was made: learnt at the first call, and a
    # conflicting definition is refused with a result.
    registry = ToolRegistry()
    executor = make_executor(registry)
    inside.release()
    registry.register(Pooled("a", 2, inside))
    registry.register(Pooled("b", 3, inside))
    assert executor.execute(call("a")).status == "ok"
    refused = executor.execute(call("b"))
    assert (refused.status, refused.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert "defines capacity group 'pool' with limit 3" in (refused.error or "")


def test_group_limits_are_checked() -> None:
    with pytest.raises(ValueError, match=r"group_limits\['pool'\] must be >= 1"):
        Pooled("a", 0, Inside())


# -- server_max_concurrency -----------------------------------------------------------------


def _gates(conn: MCPConnection, **options: Any) -> ToolRegistry:
    registry = ToolRegistry()
    conn.register(registry, only=["gate_a", "gate_b"], **options)
    return registry


def test_a_server_limit_holds_in_process(make_executor: MakeExecutor) -> None:
    with connect(spec_server.server, server_max_concurrency=2) as conn:
        assert conn.capacity_group == "mcp:spec"
        registry = ToolRegistry()
        # The first two calls hold the server's two slots past the others' timeout.
        # (2 s: once let in, a gate_b call must end ok within it, which 0.5 s
        # did not always leave room for on a busy machine.)
        conn.register(registry, only=["gate_a"], timeout=30)
        conn.register(registry, only=["gate_b"], timeout=2)
        assert {t.group_limits["mcp:spec"] for t in registry.list()} == {2}
        executor = make_executor(registry, max_parallel=32)
        calls = [call("gate_a"), call("gate_a")] + [
            call("gate_b" if i % 2 else "gate_a") for i in range(18)
        ]
        with ThreadPoolExecutor(1) as pool:
            batch = pool.submit(executor.execute_batch, calls)
            assert spec_server.wait_until(lambda: spec_server.inside() == 2)
            stats = executor.stats()
            assert (stats.in_flight, stats.queued) == (2, 18)  # waiting in toolbus
            # Waiting is off the clock: gate_b's 2 s timeout passes unspent.
            time.sleep(2.5)  # time passing is the claim: not a wait for an event
            assert spec_server.inside() == 2
            assert executor.stats().queued == 18
            spec_server.open_gate()  # in-process: the server's own state
            results = batch.result(20)
    assert [r.status for r in results] == ["ok"] * 20, [r.error for r in results]
    assert spec_server.peak() == 2


def test_a_server_limit_holds_over_stdio(make_executor: MakeExecutor) -> None:
    # Each call waits for a second one inside (or for all 20 to have entered):
    # pairs meet, so at least two run at once, and the peak they report shows
    # whether a third ever got in.
    with connect_spec("stdio", server_max_concurrency=2) as conn:
        executor = make_executor(_gates(conn), max_parallel=32, timeout=20)
        calls = [call("gate_a" if i % 2 else "gate_b", meet=2, total=20) for i in range(20)]
        results = executor.execute_batch(calls)
    assert [r.status for r in results] == ["ok"] * 20, [r.error for r in results]
    assert max(r.output["result"] for r in results) == 2


def test_two_connections_with_other_limits_for_one_server_name_conflict() -> None:
    registry = ToolRegistry()
    with (
        connect(spec_server.server, server_max_concurrency=2) as two,
        connect(spec_server.server, server_max_concurrency=3) as three,
    ):
        two.register(registry, only=["weather"], prefix="two_")
        three.register(registry, only=["weather"], prefix="three_")
        with pytest.raises(ValueError, match="capacity group 'mcp:spec' with limit 3"):
            Executor(registry)
