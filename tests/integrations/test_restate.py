"""toolbus inside Restate handlers, against the real Restate server.

The server is `restate-server` from `.cache/npm` (restate_support.py); the
services are served in a thread of this process, so a test stops serving
mid-attempt (a crash, as Restate sees it) and serves again, and Restate
retries the invocation against it. Each test has handlers of its own,
registered once per module under names of their own.
"""

from __future__ import annotations

import asyncio
import json
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
from toolbus.integrations.restate import durable, serve
from toolbus.models import ErrorCode
from toolbus.policies import requires_approval

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
        self.needs_approval = True  # what `transfer`'s approval policy reads
        self.fail_until = 1  # the attempt of a handler that fails last
        self.results: dict[str, list[Any]] = {}  # invocation id: what a call returned

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


@registry.tool(read_only=True)
def wait_lookup(city: str, ctx: ToolContext) -> str:
    """The weather, once the test lets it answer (after the calls beside it)."""
    world.ran.append(("wait_lookup", ctx.idempotency_key))
    assert world.release.wait(30)
    return f"{city}: 4 degrees"


@registry.tool(policies=[requires_approval(when=lambda call: world.needs_approval)])
def transfer(amount: int, ctx: ToolContext) -> str:
    """Move money: approved first while the day's limit is reached."""
    world.ran.append(("transfer", ctx.idempotency_key))
    return f"transferred {amount}"


@registry.tool(policies=[requires_approval()])
def refund(amount: int, ctx: ToolContext) -> str:
    """Refund (a person approves it first)."""
    world.ran.append(("refund", ctx.idempotency_key))
    return f"refunded {amount}"


@registry.tool()
def plan(city: str, ctx: ToolContext) -> str:
    """A tool that makes a call of its own through the wrapper."""
    world.ran.append(("plan", ctx.idempotency_key))
    inner = tools.execute(ToolCall(id="inner", name="lookup", arguments={"city": city}))
    return f"planned around {inner.output}"


@registry.tool(read_only=True)
def read_menu(path: str) -> str:
    """A file's text, its undecodable bytes kept (`surrogateescape`)."""
    world.ran.append(("read_menu", None))
    return b"caf\xe9 menu".decode("utf-8", "surrogateescape")


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


@service.handler()
async def misuse(ctx: restate.Context, how: str) -> str:
    """What a handler meets when it uses the wrapper wrongly."""
    made = ToolCall(id="m", name="lookup", arguments={"city": "Oslo"})
    try:
        if how == "sync":
            tools.execute(made)
        elif how == "sync batch":
            tools.execute_batch([made])
        elif how == "bad priority":
            await tools.aexecute(made, priority="high")
        elif how == "bad keyword":
            await tools.aexecute_batch([made], approval=None)
    except (RuntimeError, TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


@service.handler()
async def secret(ctx: restate.Context) -> list[dict[str, Any]]:
    """Calls whose arguments hold a secret the handler got from elsewhere."""
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    done = await tools.aexecute_batch(
        [
            ToolCall(id="p", name="pay", arguments={"amount": 5, "api_key": SECRET}),
            ToolCall(
                id="q",
                name="pay",
                arguments=orjson.dumps({"amount": 6, "api_key": SECRET}).decode(),
            ),
        ]
    )
    lone = await tools.aexecute(
        ToolCall(id="r", name="pay", arguments={"amount": 7, "api_key": SECRET})
    )
    if world.attempts[invocation] == 1:
        raise RuntimeError("the first attempt fails after the calls")
    return _shown([*done.results, lone])


@service.handler()
async def transfer_later(ctx: restate.Context) -> list[Any]:
    """A transfer deferred on the first attempt, let through on a later one."""
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    result = await tools.aexecute(ToolCall(id="t", name="transfer", arguments={"amount": 100}))
    world.results.setdefault(invocation, []).append(result)
    world.needs_approval = False  # (the day's limit is reset)
    if world.attempts[invocation] <= world.fail_until:
        raise RuntimeError("a later step fails")
    return _shown([result])


@service.handler()
async def transfer_batch(ctx: restate.Context, stop_on_error: bool) -> list[Any]:
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    batch = await tools.aexecute_batch(
        [
            ToolCall(id="t", name="transfer", arguments={"amount": 100}),
            ToolCall(id="b", name="book", arguments={"restaurant": "Maaemo"}),
        ],
        stop_on_error=stop_on_error,
    )
    world.results.setdefault(invocation, []).append(batch.results)
    if world.attempts[invocation] <= world.fail_until:
        world.needs_approval = world.attempts[invocation] < 2  # (let through from the third)
        raise RuntimeError("a later step fails")
    return _shown(batch.results)


@service.handler()
async def approve_later(ctx: restate.Context) -> dict[str, Any]:
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    result = await tools.aexecute(ToolCall(id="f", name="refund", arguments={"amount": 3}))
    world.results.setdefault(invocation, []).append(result)
    if world.attempts[invocation] == 1:
        raise RuntimeError("the first attempt fails after the call")
    return _shown([result])[0]


@service.handler()
async def stuck(ctx: restate.Context) -> str:
    """A handler busy with something that is not Restate's (its first attempt)."""
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    if world.attempts[invocation] == 1:
        world.entered.set()
        await asyncio.Event().wait()  # (until cancelled)
    return "done"


@service.handler()
async def gathered(ctx: restate.Context, n: int) -> list[str]:
    """Lone calls gathered from tasks of one handler (they take turns)."""
    invocation = ctx.request().id
    world.attempts[invocation] = world.attempts.get(invocation, 0) + 1
    made = [
        ToolCall(id=f"g{j}", name="book" if j % 2 else "lookup", arguments=_args(j))
        for j in range(n)
    ]
    results = await asyncio.gather(*(tools.aexecute(c) for c in made))
    if world.attempts[invocation] == 1:
        raise RuntimeError("the first attempt fails after the calls")
    return [f"{r.output} {bool(r.metadata.get('replayed'))}" for r in results]


def _args(j: int) -> dict[str, Any]:
    return {"restaurant": f"R{j}"} if j % 2 else {"city": f"C{j}"}


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


def _decoded(journal: list[dict[str, Any]]) -> str:
    """The journal as text, with its byte arrays (payloads, results) decoded."""

    def undo(value: Any) -> Any:
        if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, list):
            return [undo(v) for v in value]
        if isinstance(value, dict):
            return {k: undo(v) for k, v in value.items()}
        return value

    return orjson.dumps([undo(orjson.loads(e["entry_json"])) for e in journal]).decode()


def test_no_secret_reaches_the_journal_or_the_events(
    restate_server: tuple[Server, Served],
) -> None:
    from toolbus import bus

    srv, _ = restate_server
    finished: list[Any] = []
    sub = bus.subscribe(lambda s, event, **_: finished.append(event), bus.FINISHED)
    try:
        invocation = srv.send("ToolbusTests/secret")
        answer = srv.attach(invocation)
        executor.drain_events()
    finally:
        sub.close()
    assert answer.status_code == 200, answer.text
    assert [r["output"] for r in answer.json()] == ["paid 5", "paid 6", "paid 7"]
    assert [r["replayed"] for r in answer.json()] == [True, True, True]
    assert len([t for t, _ in world.ran if t == "pay"]) == 3  # each ran once
    text = _decoded(srv.journal(invocation))
    assert "paid 5" in text and "toolbus-intent:pay" in text  # (decoded: it would show)
    assert SECRET not in text
    replayed = [e for e in finished if e.result.metadata.get("replayed")]
    assert len(replayed) == 3
    for event in finished:
        assert SECRET not in repr(event.arguments), event


def test_a_batch_replays_in_call_order_whatever_finished_first(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    raw = [
        {"name": "wait_lookup", "arguments": {"city": "Oslo"}, "fail_once": True},
        {"name": "lookup", "arguments": {"city": "Bergen"}},
        {"name": "lookup", "arguments": {"city": "Tromsø"}},
    ]
    invocation = srv.send("ToolbusTests/batch", raw)
    # The two lookups finish (and are journaled) before the first call does.
    wait_until(lambda: len(world.ran) == 3, 30, "the three calls started")
    wait_until(
        lambda: (
            sum(1 for e in srv.journal(invocation) if e["entry_type"] == "Notification: Run") == 2
        ),
        30,
        "the two lookups journaled",
    )
    world.release.set()
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert [(r["output"], r["replayed"]) for r in answer.json()] == [
        ("Oslo: 4 degrees", True),
        ("Bergen: 4 degrees", True),
        ("Tromsø: 4 degrees", True),
    ]
    assert world.attempts[invocation] == 2
    assert len(world.ran) == 3
    keys = sorted(k for _, k in world.ran if k)
    assert keys == [f"restate:{invocation}:{n}" for n in (1, 2, 3)]


def test_a_call_that_never_starts_journals_no_intent(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    invocation = srv.send("ToolbusTests/one", {"name": "book", "arguments": {"restaurant": 5}})
    answer = srv.attach(invocation)
    assert answer.json()["status"] == "rejected"  # (its arguments are not valid)
    assert world.ran == []
    journal = srv.journal(invocation)
    commands = [e["name"] for e in journal if e["entry_type"] == "Command: Run"]
    assert commands == ["toolbus-intent:book", "toolbus:book"]
    done = [
        orjson.loads(e["entry_json"])["Notification"]["Completion"]["Run"]["completion_id"]
        for e in journal
        if e["entry_type"] == "Notification: Run"
    ]
    assert done == [2]  # the result's: the intent's command holds nothing


def test_a_deferred_call_is_replayed_as_it_was_on_a_retry(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    invocation = srv.send("ToolbusTests/approve_later")
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "deferred"
    first, again = world.results[invocation]
    assert first.status == again.status == "deferred"
    assert again.metadata.get("replayed") is True
    assert again.approval_request == first.approval_request
    assert world.ran == []


@pytest.mark.parametrize("how", ["sync", "sync batch"])
def test_the_sync_methods_raise_inside_a_handler(
    restate_server: tuple[Server, Served], how: str
) -> None:
    srv, _ = restate_server
    answer = srv.call("ToolbusTests/misuse", how)
    assert answer.json().startswith("RuntimeError: ") and "use await a" in answer.json()
    assert world.ran == []


@pytest.mark.parametrize(
    ("how", "error"),
    [("bad priority", "TypeError: priority"), ("bad keyword", "TypeError: ")],
)
def test_a_bad_keyword_raises_before_anything_is_journaled(
    restate_server: tuple[Server, Served], how: str, error: str
) -> None:
    srv, _ = restate_server
    invocation = srv.send("ToolbusTests/misuse", how)
    answer = srv.attach(invocation)
    assert answer.json().startswith(error), answer.json()
    assert not [e for e in srv.journal(invocation) if e["entry_type"] == "Command: Run"]
    assert world.ran == []


async def test_outside_a_handler_the_methods_are_the_executors_own() -> None:
    made = ToolCall(id="o", name="lookup", arguments={"city": "Oslo"})
    assert tools.execute(made).output == "Oslo: 4 degrees"
    assert tools.execute_batch([made]).results[0].output == "Oslo: 4 degrees"
    assert (await tools.aexecute(made)).output == "Oslo: 4 degrees"
    assert (await tools.aexecute_batch([made])).results[0].output == "Oslo: 4 degrees"
    assert len(world.ran) == 4
    assert not any(str(k).startswith("restate:") for _, k in world.ran)


def test_the_wrappers_refuse_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"must be a toolbus\.Executor"):
        durable("not an executor")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_in_doubt must be a callable"):
        durable(executor, on_in_doubt="skip")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword"):
        tools.execute(ToolCall(id="x", name="lookup", arguments={}), priorty=1)


async def test_serve_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one"):
        await serve()
    with pytest.raises(ValueError, match="port"):
        await serve(service, port=70000)
    with pytest.raises(ValueError, match="port"):
        await serve(service, port=0)  # (the server must be told the port)
    with pytest.raises(TypeError, match=r"restate\.Service"):
        await serve(service, "ToolbusTests")
    with pytest.raises(ValueError, match="grace"):
        await serve(service, grace=-1)


# -- `serve`'s streams at stop (`_until`): driven directly, no server --------


class _Stream:
    """One stream as hypercorn hands it to the app: what it receives (fed by
    the test) and what the app sent; `until` is `_until`'s app around `app`."""

    def __init__(self, app: Any, scope_type: str = "http") -> None:
        from toolbus.integrations.restate._serve import _until

        self.expired = asyncio.Event()
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.task = asyncio.ensure_future(
            _until(app, self.expired)({"type": scope_type}, self.inbox.get, self._send)
        )

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


async def test_an_attempt_that_ends_within_grace_is_left_alone() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            seen.append((await receive())["type"])
            await send({"type": "http.response.body", "body": b"done"})
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    stream = _Stream(app)
    await stream.inbox.put({"type": "http.request"})
    assert await stream.task is None
    stream.expired.set()  # (grace runs out afterwards: nothing left to end)
    await asyncio.sleep(0)
    assert seen == ["http.request"]
    assert stream.sent == [{"type": "http.response.body", "body": b"done"}]


async def test_an_attempt_still_running_at_grace_is_cancelled_then_not_before() -> None:
    seen: list[str] = []
    busy = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["type"])
        busy.set()
        try:
            await asyncio.Event().wait()  # (busy with something that is not Restate's)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    stream = _Stream(app)
    await stream.inbox.put({"type": "http.request"})
    await busy.wait()  # (it received, and runs on: nothing ends it before grace)
    assert not stream.task.done()
    stream.expired.set()
    assert await stream.task is None  # (the stream ends, as one whose app returned)
    assert seen == ["http.request", "cancelled"]


async def test_a_handler_that_swallows_its_cancellation_is_cancelled_with_its_stream() -> None:
    seen: list[str] = []
    busy, cleaning = asyncio.Event(), asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        busy.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled at grace")
        cleaning.set()
        try:
            await asyncio.Event().wait()  # (a clean-up that hangs)
        except asyncio.CancelledError:
            seen.append("cancelled with its stream")
            raise

    stream = _Stream(app)
    await busy.wait()
    stream.expired.set()
    await cleaning.wait()
    stream.task.cancel()  # hypercorn gives up on the connection
    await asyncio.wait({stream.task})
    assert stream.task.cancelled()
    assert seen == ["cancelled at grace", "cancelled with its stream"]
    assert asyncio.all_tasks() == {asyncio.current_task()}  # (nothing left running)


async def test_an_error_of_the_app_is_the_streams() -> None:
    async def fails(scope: Any, receive: Any, send: Any) -> None:
        raise ValueError("broken app")

    with pytest.raises(ValueError, match="broken app"):
        await _Stream(fails).task

    busy = asyncio.Event()

    async def fails_when_cancelled(scope: Any, receive: Any, send: Any) -> None:
        busy.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("failed on its way out") from None

    stream = _Stream(fails_when_cancelled)
    await busy.wait()
    stream.expired.set()
    with pytest.raises(RuntimeError, match="on its way out"):
        await stream.task


async def test_streams_read_a_disconnect_once_grace_is_over_and_the_lifespan_is_not_cancelled() -> (
    None
):
    got: list[str] = []
    waiting = asyncio.Event()

    async def lifespan(scope: Any, receive: Any, send: Any) -> None:
        waiting.set()
        got.append((await receive())["type"])  # (not cancelled: it reads the disconnect)
        got.append((await receive())["type"])  # (at once: grace is over)

    stream = _Stream(lifespan, scope_type="lifespan")
    await waiting.wait()
    stream.expired.set()
    assert await stream.task is None
    assert got == ["http.disconnect", "http.disconnect"]


def test_lone_calls_gathered_in_one_handler_all_end_and_replay(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    invocation = srv.send("ToolbusTests/gathered", 6)
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert answer.json() == [
        "C0: 4 degrees True",
        "booked R1 True",
        "C2: 4 degrees True",
        "booked R3 True",
        "C4: 4 degrees True",
        "booked R5 True",
    ]
    assert world.attempts[invocation] == 2
    assert sorted(k for _, k in world.ran) == sorted(
        f"restate:{invocation}:{n}" for n in range(1, 7)
    )


def test_a_call_a_tool_makes_is_the_executors_own(restate_server: tuple[Server, Served]) -> None:
    srv, _ = restate_server
    invocation = srv.send("ToolbusTests/one", {"name": "plan", "arguments": {"city": "Oslo"}})
    answer = srv.attach(invocation)
    assert answer.json()["output"] == "planned around Oslo: 4 degrees"
    names = [e.get("name") for e in srv.journal(invocation) if e["entry_type"] == "Command: Run"]
    assert names == ["toolbus-intent:plan", "toolbus:plan"]  # the inner call: not journaled


def test_a_deferred_call_stays_deferred_when_its_policy_would_now_let_it_through(
    restate_server: tuple[Server, Served],
) -> None:
    # Asked again, it could only end as it did or take the handler down another
    # path than the journal's (which Restate refuses on every later attempt).
    srv, _ = restate_server
    world.fail_until = 3
    invocation = srv.send("ToolbusTests/transfer_later")
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert [r.status for r in world.results[invocation]] == ["deferred"] * 4
    assert world.ran == []
    assert answer.json()[0]["replayed"] is True


def test_text_json_cannot_hold_is_journaled_escaped_and_replayed_as_it_was(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    raw = [{"name": "read_menu", "arguments": {"path": "menu.txt"}, "fail_once": True}]
    invocation = srv.send("ToolbusTests/batch", raw)
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    # Read back as it was (it was the escape's text), as the model read it first.
    assert answer.json()[0]["output"] == "caf\udce9 menu"
    assert answer.json()[0]["replayed"] is True
    assert len(world.ran) == 1


def test_a_tool_name_holding_a_lone_surrogate_is_journaled_and_replayed(
    restate_server: tuple[Server, Served],
) -> None:
    # A model's JSON "\udc80" decodes to a lone surrogate: a run's name
    # holding one could not be sent to the server, and the attempt failed.
    srv, _ = restate_server
    raw = [
        {"name": "lookup", "arguments": {"city": "Oslo"}, "fail_once": True},
        {"name": "no\udc80such", "arguments": {}},
    ]
    sent = srv.http.post(  # (the stdlib's JSON: the surrogate as its escape)
        f"{srv.ingress}/ToolbusTests/batch/send",
        content=json.dumps(raw).encode(),
        headers={"content-type": "application/json"},
    )
    assert sent.status_code in (200, 202), sent.text
    invocation = sent.json()["invocationId"]
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    assert [(r["status"], r["code"], r["replayed"]) for r in answer.json()] == [
        ("ok", None, True),
        ("rejected", "TOOL_NOT_FOUND", True),
    ]
    assert world.ran == [("lookup", f"restate:{invocation}:1")]


def test_a_stopped_service_stops_whatever_its_handlers_do(
    restate_server: tuple[Server, Served],
) -> None:
    srv, served = restate_server
    invocation = srv.send("ToolbusTests/stuck")
    assert world.entered.wait(60)
    served.stop()  # (returns: it joins the serving thread, a hang guard)
    served.start()
    assert srv.attach(invocation).json() == "done"  # (retried against it, served again)


def test_a_record_too_large_for_restate_is_cut_and_says_so() -> None:
    from toolbus import ToolResult
    from toolbus.integrations._turns.records import read_result, result_record
    from toolbus.integrations.restate._calls import MAX_RECORD, _bounded

    huge = ToolResult(call_id="a", name="dump", status="ok", output="x" * (MAX_RECORD + 10))
    record = _bounded(result_record(huge), huge)
    assert len(record) <= MAX_RECORD
    back = read_result(record)
    assert back.status == "ok" and back.metadata["journal_cut"] > MAX_RECORD
    assert back.output.endswith("bytes journaled]")
    small = ToolResult(call_id="b", name="t", status="ok", output="fine")
    assert _bounded(result_record(small), small) == result_record(small)


@pytest.mark.parametrize("char", ["\u6f22", "\U0001f600", '"'])
def test_a_record_is_bounded_as_the_sdk_sends_it(char: str) -> None:
    """The bound was on the record's characters, but the SDK sends the
    record as its JSON string (`json.dumps`): a character out of ASCII is
    `\\uXXXX` there (two of them past the BMP), a quote `\\\"` twice over.
    A record of 6 million CJK characters went out as 36 MB, over the
    server's 32 MiB: refused, its attempt never ended."""
    from toolbus import ToolResult
    from toolbus.integrations._turns.records import read_result, result_record
    from toolbus.integrations.restate._calls import MAX_RECORD, _bounded

    big = ToolResult(call_id="a", name="dump", status="ok", output=char * 6_000_000)
    record = _bounded(result_record(big), big)
    assert len(json.dumps(record).encode()) <= MAX_RECORD  # as the SDK sends it
    back = read_result(record)
    assert back.metadata["journal_cut"] > MAX_RECORD
    assert back.output.startswith(char * 1000)
    small = ToolResult(call_id="b", name="t", status="ok", output=char * 1000)
    assert _bounded(result_record(small), small) == result_record(small)


def test_a_sync_in_doubt_handler_leaves_the_service_serving(
    restate_server: tuple[Server, Served],
) -> None:
    srv, served = restate_server
    asked = threading.Event()

    def slow_ledger(call: InDoubtCall) -> Any:
        asked.set()
        assert world.release.wait(60)  # (until another invocation was served)
        return Skip("booked (the ledger)")

    world.decision = None
    invocation = srv.send(
        "ToolbusTests/one", {"name": "slow_book", "arguments": {"restaurant": "Maaemo"}}
    )
    assert world.entered.wait(60)
    served.stop()  # the call is in doubt on the retry
    world.entered.clear()
    real = tools.on_in_doubt
    tools.on_in_doubt = slow_ledger
    try:
        served.start()
        assert asked.wait(60)
        other = srv.call("ToolbusTests/one", {"name": "lookup", "arguments": {"city": "Oslo"}})
        assert other.json()["output"] == "Oslo: 4 degrees"  # served while the ledger is asked
        world.release.set()
        assert srv.attach(invocation).json()["output"] == "booked (the ledger)"
    finally:
        tools.on_in_doubt = real


def test_a_deferred_call_asked_again_and_deferred_again_is_not_asked_a_third_time(
    restate_server: tuple[Server, Served],
) -> None:
    # Deferred, asked again and deferred again (its intent then journaled as
    # not started): from then on it is what it was, never run without an intent.
    srv, _ = restate_server
    world.fail_until = 3
    invocation = srv.send("ToolbusTests/transfer_batch", False)
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    firsts = [results[0].status for results in world.results[invocation]]
    assert firsts == ["deferred"] * 4
    assert not any(t == "transfer" for t, _ in world.ran)


def test_a_batch_that_stops_on_error_replays_its_deferred_call_as_it_was(
    restate_server: tuple[Server, Served],
) -> None:
    srv, _ = restate_server
    world.fail_until = 1
    invocation = srv.send("ToolbusTests/transfer_batch", True)
    answer = srv.attach(invocation)
    assert answer.status_code == 200, answer.text
    first, again = world.results[invocation]
    shown = [(r.status, r.error_code) for r in first]
    assert shown == [("deferred", "APPROVAL_REQUIRED"), ("cancelled", "ABORTED")]
    assert [(r.status, r.error_code) for r in again] == shown


_SIGNALS_AFTER = """
import asyncio, os, signal, sys
import restate
from tests.integrations.restate_support import free_port
from toolbus.integrations.restate import serve

svc = restate.Service("SignalsAfter")

@svc.handler()
async def h(ctx: restate.Context) -> str:
    return "hi"

async def main() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_soon(stop.set)
    await serve(svc, port=free_port(), stop=stop)
    print("served", flush=True)
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    await asyncio.Event().wait()  # (ended by the signal, its default handler back)

asyncio.run(main())
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signals_have_their_default_handlers_once_serve_returns(sig: str) -> None:
    import signal
    import subprocess
    import sys

    from tests.integrations.restate_support import ROOT

    done = subprocess.run(
        [sys.executable, "-c", _SIGNALS_AFTER, sig],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,  # (a hang guard: a swallowed signal would leave it waiting)
    )
    assert "served" in done.stdout, done.stderr
    if sig == "SIGTERM":
        assert done.returncode == -signal.SIGTERM
    else:
        assert "KeyboardInterrupt" in done.stderr
