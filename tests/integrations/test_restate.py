"""toolbus inside Restate handlers, against the real Restate server.

The server is `restate-server` from `.cache/npm` (restate_support.py); the
services are served in a thread of this process, so a test stops serving
mid-attempt (a crash, as Restate sees it) and serves again, and Restate
retries the invocation against it. Each test has handlers of its own,
registered once per module under names of their own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

pytest.importorskip("restate", reason="the restate extra is not installed")

import restate

from tests.conftest import wait_until
from tests.integrations.restate_support import Served, Server, server
from toolbus import Executor, ToolCall, ToolContext, ToolRegistry
from toolbus.in_doubt import InDoubtCall, Rerun, Skip
from toolbus.integrations.restate import durable
from toolbus.models import ErrorCode

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-live-4f9a8b7c6d5e"


class World:
    """What the tools did, seen from the tests (the service runs in this process)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str | None]] = []  # (tool, key)
        self.entered = threading.Event()  # `slow_book` started
        self.release = threading.Event()  # lets `slow_book` finish
        self.fail_once: set[str] = set()  # handlers that fail their first attempt
        self.in_doubt: list[InDoubtCall] = []
        self.decision: Any = None  # what the in-doubt handler returns
        self.attempts: dict[str, int] = {}  # invocation id: attempts of its handler

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


world = World()
registry = ToolRegistry()


@registry.tool(read_only=True)
def lookup(city: str, ctx: ToolContext) -> str:
    """The weather."""
    world.ran.append(("lookup", ctx.idempotency_key))
    return f"{city}: 4 degrees"


@registry.tool()
def book(restaurant: str, ctx: ToolContext) -> str:
    """Book a table."""
    world.ran.append(("book", ctx.idempotency_key))
    return f"booked {restaurant}"


@registry.tool()
def slow_book(restaurant: str, ctx: ToolContext) -> str:
    """Book a table, slowly: waits until the test lets it finish."""
    world.ran.append(("slow_book", ctx.idempotency_key))
    world.entered.set()
    while not world.release.wait(0.01):
        if ctx.cancelled:
            world.ran.append(("slow_book cancelled", ctx.idempotency_key))
            return "stopped"
    return f"booked {restaurant}"


@registry.tool()
def pay(amount: int, api_key: str, ctx: ToolContext) -> str:
    """Pay with a card."""
    world.ran.append(("pay", ctx.idempotency_key))
    return f"paid {amount}"


def on_in_doubt(call: InDoubtCall) -> Any:
    world.in_doubt.append(call)
    return world.decision


executor = Executor(registry)
tools = durable(executor, on_in_doubt=on_in_doubt)
service = restate.Service("ToolbusTests")


def _calls(raw: list[dict[str, Any]]) -> list[ToolCall]:
    return [
        ToolCall(id=f"c{i}", name=c["name"], arguments=c["arguments"]) for i, c in enumerate(raw)
    ]


def _shown(results: Any) -> list[dict[str, Any]]:
    return [
        {
            "status": r.status,
            "output": r.output,
            "code": r.error_code,
            "error": r.error,
            "replayed": bool(r.metadata.get("replayed")),
        }
        for r in results
    ]


@service.handler()
async def batch(ctx: restate.Context, raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    done = await tools.aexecute_batch(_calls(raw))
    if invocation not in world.fail_once:
        world.fail_once.add(invocation)
        if raw and raw[0].get("fail_once"):
            raise RuntimeError("the first attempt fails after the batch")
    return _shown(done.results)


@service.handler()
async def one(ctx: restate.Context, raw: dict[str, Any]) -> dict[str, Any]:
    result = await tools.aexecute(ToolCall(id="one", name=raw["name"], arguments=raw["arguments"]))
    return _shown([result])[0]


@pytest.fixture(scope="module")
def restate_server() -> Iterator[tuple[Server, Served]]:
    with server() as running, Served(service) as served:
        running.register(served.uri)
        yield running, served


@pytest.fixture(autouse=True)
def _fresh_world() -> None:
    world.reset()


def test_a_batch_runs_once_and_journals_each_call_without_its_arguments(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    calls = [
        {"name": "lookup", "arguments": {"city": "Oslo"}},
        {"name": "pay", "arguments": {"amount": 5, "api_key": SECRET}},
    ]
    invocation = srv.send("ToolbusTests/batch", calls)
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert [r["output"] for r in answer.json()] == ["Oslo: 4 degrees", "paid 5"]
    assert sorted(t for t, _ in world.ran) == ["lookup", "pay"]
    keys = dict(world.ran)
    assert keys["lookup"] == f"restate:{invocation}:1"
    assert keys["pay"] == f"restate:{invocation}:2"
    journal = srv.journal(invocation)
    names = [e["name"] for e in journal if e["entry_type"].startswith("Command: Run")]
    assert names == ["toolbus:lookup", "toolbus-intent:pay", "toolbus:pay"]
    text = orjson.dumps(journal).decode()
    assert SECRET not in text and SECRET[3:] not in text


def test_a_retried_invocation_replays_finished_calls_without_running_them(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    raw = [
        {"name": "lookup", "arguments": {"city": "Oslo"}, "fail_once": True},
        {"name": "book", "arguments": {"restaurant": "Maaemo"}},
    ]
    invocation = srv.send("ToolbusTests/batch", raw)
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert [(r["output"], r["replayed"]) for r in answer.json()] == [
        ("Oslo: 4 degrees", True),
        ("booked Maaemo", True),
    ]
    assert sorted(t for t, _ in world.ran) == ["book", "lookup"]  # each ran once
    assert world.attempts[invocation] == 2


def test_a_call_cut_off_mid_run_is_in_doubt_and_ends_in_doubt_by_default(
    restate_server: tuple[Server, Served],
) -> None:
    srv, served = restate_server
    invocation = srv.send(
        "ToolbusTests/one", {"name": "slow_book", "arguments": {"restaurant": "Maaemo"}}
    )
    assert world.entered.wait(60)
    served.stop()  # the attempt ends while the tool runs: its intent is on record
    world.release.set()
    served.start()
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    shown = answer.json()
    assert shown["status"] == "error" and shown["code"] == ErrorCode.IN_DOUBT
    assert [c.tool for c in world.in_doubt] == ["slow_book"]
    assert world.in_doubt[0].idempotency_key == f"restate:{invocation}:1"
    assert [t for t, _ in world.ran if t == "slow_book"] == ["slow_book"]


def test_a_call_in_doubt_runs_again_under_its_key_when_the_handler_says_so(
    restate_server: tuple[Server, Served],
) -> None:
    srv, served = restate_server
    world.decision = Rerun()
    invocation = srv.send(
        "ToolbusTests/one", {"name": "slow_book", "arguments": {"restaurant": "Maaemo"}}
    )
    assert world.entered.wait(60)
    served.stop()
    world.release.set()
    served.start()
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"] == "booked Maaemo"
    keys = [k for t, k in world.ran if t == "slow_book"]
    assert keys == [f"restate:{invocation}:1"] * 2


def test_a_call_in_doubt_the_handler_skips_returns_its_output(
    restate_server: tuple[Server, Served],
) -> None:
    srv, served = restate_server
    world.decision = Skip("booked Maaemo (found in the ledger)")
    invocation = srv.send(
        "ToolbusTests/one", {"name": "slow_book", "arguments": {"restaurant": "Maaemo"}}
    )
    assert world.entered.wait(60)
    served.stop()
    world.release.set()
    served.start()
    answer = srv.attach(invocation)
    assert answer.json()["output"] == "booked Maaemo (found in the ledger)"
    assert [t for t, _ in world.ran if t == "slow_book"] == ["slow_book"]


def test_a_cancelled_invocation_cancels_its_running_call(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    invocation = srv.send(
        "ToolbusTests/one", {"name": "slow_book", "arguments": {"restaurant": "Maaemo"}}
    )
    assert world.entered.wait(60)
    srv.cancel(invocation)
    answer = srv.attach(invocation)
    assert answer.status_code == 409, answer.text
    wait_until(lambda: ("slow_book cancelled", f"restate:{invocation}:1") in world.ran, 30)
