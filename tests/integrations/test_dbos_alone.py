"""One mutating call from a sync workflow (`integrations/dbos/_alone.py`):
its intent's step inside its result's, on the workflow's thread.

Each state two steps can be left in is made with `DBOS.fork_workflow`, which
replays the steps before a given one and runs the rest, as a recovery does.
A lone charge takes positions 1 (its intent) and 2 (its result).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS, SetWorkflowID

from tests.conftest import wait_until
from tests.integrations import dbos_support
from tests.integrations.dbos_support import POLL, call, steps_of
from toolbus import ErrorCode, Executor, ToolCall, ToolContext, ToolRegistry, ToolResult, bus
from toolbus.in_doubt import Fail, InDoubtCall, Rerun, Skip
from toolbus.integrations.dbos import _alone, durable
from toolbus.policies import Admit, BasePolicy, Decision, Reject, requires_approval
from toolbus.tools import Tool

SECRET = "sk-live-9a8b7c6d5e4f3a2b1c0d"


@pytest.fixture(scope="module")
def system_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("dbos") / "system.sqlite"
    with dbos_support.launched(path, "toolbus-tests-alone"):
        yield path


class Gatekeeper(BasePolicy):
    """Rejects every call while `closed`."""

    name = "gatekeeper"

    def __init__(self) -> None:
        self.closed = True

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
        return (
            Reject(ErrorCode.TOOL_NOT_ALLOWED, "closed for the night") if self.closed else Admit()
        )


class Shop:
    """A charge tool and what it did, counted outside DBOS."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.charged: list[tuple[int, str | None]] = []
        self.gatekeeper = Gatekeeper()
        self.gatekeeper.closed = False
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.registry = reg = ToolRegistry()

        @reg.tool()
        def charge(amount: int, ctx: ToolContext) -> str:
            with self.lock:
                self.charged.append((amount, ctx.idempotency_key))
            self.started.set()
            self.release.wait(30)
            return f"charged {amount}"

        @reg.tool(policies=[self.gatekeeper])
        def guarded_charge(amount: int, ctx: ToolContext) -> str:
            return charge(amount, ctx)

        @reg.tool()
        def login(user: str, api_key: str) -> str:
            return f"welcome {user}"


@pytest.fixture
def shop(system_db: Path) -> Shop:
    return Shop()


def test_a_lone_mutating_call_records_its_intent_then_its_result(shop: Shop) -> None:
    with Executor(shop.registry) as ex:
        tools = durable(ex)

        @DBOS.workflow(name="alone_plain")
        def plain() -> str:
            return str(tools.execute(call("c", "charge", amount=5)).output)

        with SetWorkflowID("alone-plain"):
            assert plain() == "charged 5"
        assert [n for _, n in steps_of("alone-plain")] == [
            "toolbus-intent:charge",
            "toolbus:charge",
        ]
        # Run again with the same id: DBOS returns the recorded result and
        # the tool does not run.
        with SetWorkflowID("alone-plain"):
            assert plain() == "charged 5"
        assert shop.charged == [(5, "dbos:alone-plain:2")]


@pytest.mark.parametrize("decision", ["none", "skip", "rerun", "async-skip"])
def test_a_lone_call_in_doubt_is_decided_by_its_handler(shop: Shop, decision: str) -> None:
    asked: list[InDoubtCall] = []

    def handler(c: InDoubtCall) -> Any:
        asked.append(c)
        if decision == "skip":
            return Skip("found in the ledger")
        if decision == "rerun":
            return Rerun()
        return Fail("nobody knows") if decision == "none" else None

    async def ahandler(c: InDoubtCall) -> Any:
        asked.append(c)
        return Skip("found in the ledger")

    wid = f"alone-doubt-{decision}"
    with Executor(shop.registry) as ex:
        tools = durable(ex, on_in_doubt=ahandler if decision == "async-skip" else handler)

        @DBOS.workflow(name=f"alone_doubt_{decision}")
        def doubt() -> dict[str, Any]:
            return tools.execute(call("c", "charge", amount=5)).model_dump(mode="json")

        with SetWorkflowID(wid):
            assert doubt()["output"] == "charged 5"
        # Forked at the result's step: the intent replays, the result is not
        # there, as a crash while the tool ran leaves them.
        fork = DBOS.fork_workflow(wid, 2)
        again = fork.get_result(polling_interval_sec=POLL)
    key = f"dbos:{fork.get_workflow_id()}:2"
    assert [(c.call_id, c.tool, c.arguments, c.idempotency_key) for c in asked] == [
        ("c", "charge", {"amount": 5}, key)
    ]
    if decision == "rerun":
        assert again["output"] == "charged 5"
        assert shop.charged == [(5, f"dbos:{wid}:2"), (5, key)]
        return
    assert len(shop.charged) == 1  # never twice
    if decision == "none":
        assert again["status"] == "error" and again["error_code"] == ErrorCode.IN_DOUBT
        assert "nobody knows" in again["error"]
    else:
        assert again["status"] == "ok" and again["output"] == "found in the ledger"
        assert again["metadata"] == {"in_doubt": "skipped"}


def test_a_call_that_never_started_replays_as_it_ended_whatever_its_policy_says_now(
    shop: Shop,
) -> None:
    shop.gatekeeper.closed = True
    with Executor(shop.registry) as ex:
        tools = durable(ex)

        @DBOS.workflow(name="alone_rejected")
        def rejected() -> list[str]:
            first = tools.execute(call("c", "guarded_charge", amount=5))
            second = tools.execute(call("d", "charge", amount=1))
            return [first.status, str(first.error_code), second.status]

        with SetWorkflowID("alone-rejected"):
            assert rejected() == ["rejected", "TOOL_NOT_ALLOWED", "ok"]
        # Its result recorded, no intent (its tool never started).
        assert [i for i, _ in steps_of("alone-rejected")] == [2, 3, 4]
        shop.gatekeeper.closed = False  # would let it through now
        finished: list[Any] = []
        sub = bus.subscribe(lambda s, event, **_: finished.append(event), bus.FINISHED)
        try:
            fork = DBOS.fork_workflow("alone-rejected", 3)
            again = fork.get_result(polling_interval_sec=POLL)
            ex.drain_events()
        finally:
            sub.close()
    assert again == ["rejected", "TOOL_NOT_ALLOWED", "ok"]
    # The guarded charge never ran; the plain one after it ran again.
    assert shop.charged == [(1, "dbos:alone-rejected:4"), (1, f"dbos:{fork.get_workflow_id()}:4")]
    replayed = [e for e in finished if e.result.call_id == "c"]
    assert len(replayed) == 1 and replayed[0].result.metadata.get("replayed") is True


def test_a_lone_call_that_times_out_before_its_tool_starts_records_no_intent(shop: Shop) -> None:
    # The tool holds its worker until released; a second call with a short
    # deadline waits behind it for a worker, and ends timed out, never
    # started: its intent is not recorded.
    shop.release.clear()
    with Executor(shop.registry, max_parallel=1) as ex:
        tools = durable(ex)
        holder = ex.submit(call("h", "charge", amount=1))
        wait_until(shop.started.is_set)

        @DBOS.workflow(name="alone_timeout")
        def timed_out() -> list[str]:
            r = tools.execute(call("c", "charge", amount=2), call_timeout=0.2)
            return [r.status, str(r.error_code)]

        try:
            with SetWorkflowID("alone-timeout"):
                assert timed_out() == ["timeout", "DEADLINE_EXCEEDED"]
        finally:
            shop.release.set()
        assert holder.result().status == "ok"
    assert [i for i, _ in steps_of("alone-timeout")] == [2]
    assert [a for a, _ in shop.charged] == [1]


def test_a_secret_in_a_lone_call_never_reaches_the_engine(shop: Shop, system_db: Path) -> None:
    import sqlite3

    with Executor(shop.registry) as ex:
        tools = durable(ex)

        @DBOS.workflow(name="alone_secret")
        def secret() -> str:
            return str(tools.execute(call("c", "login", user="ada", api_key=SECRET)).output)

        with SetWorkflowID("alone-secret"):
            assert secret() == "welcome ada"
    with sqlite3.connect(system_db) as db:
        rows = db.execute(
            "select output from operation_outputs where workflow_uuid = ?", ("alone-secret",)
        )
        stored = [dbos_support.readable(r[0]) for r in rows]
    assert len(stored) == 2 and all(SECRET not in s for s in stored)


@pytest.mark.parametrize("batch", [False, True])
def test_an_intent_the_engine_cannot_record_keeps_its_tool_from_running(
    shop: Shop, monkeypatch: pytest.MonkeyPatch, batch: bool
) -> None:
    from dbos._dbos import _get_dbos_instance

    sys_db = _get_dbos_instance()._sys_db
    record = sys_db.record_operation_result

    def failing(output: Any, *args: Any, **kwargs: Any) -> Any:
        if output["function_name"].startswith("toolbus-intent:"):
            raise ConnectionError("the disk stopped answering")
        return record(output, *args, **kwargs)

    monkeypatch.setattr(sys_db, "record_operation_result", failing)
    seen: list[str] = []
    with Executor(shop.registry) as ex:
        tools = durable(ex)

        @DBOS.workflow(name=f"alone_unrecorded_{batch}")
        def unrecorded() -> None:
            c = call("c", "charge", amount=5)
            r = tools.execute_batch([c]).results[0] if batch else tools.execute(c)
            seen.append(r.status)  # (not reached: the engine's error raises)

        with SetWorkflowID(f"alone-unrecorded-{batch}"), pytest.raises(ConnectionError):
            unrecorded()
    assert shop.charged == [] and seen == []
    # What the call ended with is its result, recorded: the tool did not run.
    (step,) = DBOS.list_workflow_steps(f"alone-unrecorded-{batch}")
    assert step["function_name"] == "toolbus:charge"
    assert "the engine" in str(step["output"]) or "durable engine" in str(step["output"])


WAYS = ["execute", "execute_batch", "aexecute", "aexecute_batch"]


def run_calls(tools: Any, calls: list[ToolCall], way: str, **options: Any) -> list[ToolResult]:
    """`calls` through the wrapper, one by one or as a batch, from the
    workflow this runs in (an async way: on a loop of its own)."""

    async def run_async() -> list[ToolResult]:
        if way == "aexecute":
            return [await tools.aexecute(c, **options) for c in calls]
        return list((await tools.aexecute_batch(calls, **options)).results)

    if way == "execute":
        return [tools.execute(c, **options) for c in calls]
    if way == "execute_batch":
        return list(tools.execute_batch(calls, **options).results)
    return asyncio.run(run_async())


@pytest.mark.parametrize("way", WAYS)
def test_a_tool_runs_outside_the_workflow_as_dbos_sees_it(shop: Shop, way: str) -> None:
    # A tool is one step's work: a DBOS step it makes is a plain call, as
    # outside any workflow, and the workflow's positions stay the calls' own
    # (a position taken from a worker thread would depend on which tool ran
    # first).
    seen: list[Any] = []
    reg = ToolRegistry()

    @reg.tool()
    def audited_charge(amount: int) -> str:
        seen.append((DBOS.workflow_id, DBOS.step_id))
        return str(DBOS.run_step({"name": "audit"}, lambda: f"charged {amount}"))

    wid = f"audited-{way}"
    with Executor(reg) as ex:
        tools = durable(ex)
        calls = [call("c", "audited_charge", amount=5), call("d", "audited_charge", amount=6)]

        @DBOS.workflow(name=f"audited_{way}")
        def audited() -> list[str]:
            outputs = [str(r.output) for r in run_calls(tools, calls, way)]
            return [*outputs, DBOS.run_step({"name": "after"}, lambda: "after")]

        with SetWorkflowID(wid):
            assert audited() == ["charged 5", "charged 6", "after"]
    assert seen == [(None, None), (None, None)]
    assert steps_of(wid) == [
        (1, "toolbus-intent:audited_charge"),
        (2, "toolbus:audited_charge"),
        (3, "toolbus-intent:audited_charge"),
        (4, "toolbus:audited_charge"),
        (5, "after"),
    ]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("tool", ["lookup", "charge"])
def test_a_tool_that_outlives_its_call_leaves_the_workflow_alone(
    shop: Shop, way: str, tool: str
) -> None:
    # The call times out while its tool is held; the workflow goes on and
    # ends; then the tool, let go, makes a DBOS step: a plain call, no
    # position of the workflow's.
    release, started, done = threading.Event(), threading.Event(), threading.Event()
    reg = ToolRegistry()

    def late(x: int) -> str:
        started.set()
        release.wait(30)
        out = str(DBOS.run_step({"name": "late"}, lambda: "late"))
        done.set()
        return out

    reg.tool(name=tool, read_only=tool == "lookup")(late)
    with Executor(reg) as ex:
        tools = durable(ex)

        @DBOS.workflow(name=f"late_{tool}_{way}")
        def outlived() -> list[str]:
            (r,) = run_calls(tools, [call("c", tool, x=1)], way, call_timeout=0.1)
            return [r.status, DBOS.run_step({"name": "after"}, lambda: "after")]

        try:
            # Until the tool was running when its call timed out: on a loaded
            # machine a mutating call's intent step may outlast the 0.1 s, and
            # its tool then never starts (no tool outlived that call).
            for attempt in range(5):
                wid = f"late-{tool}-{way}-{attempt}"
                with SetWorkflowID(wid):
                    assert outlived() == ["timeout", "after"]
                if started.is_set():
                    break
        finally:
            release.set()
        assert started.is_set()
        assert done.wait(30)
    assert DBOS.get_workflow_status(wid).status == "SUCCESS"  # type: ignore[union-attr]
    assert [name for _, name in steps_of(wid)][-2:] == [f"toolbus:{tool}", "after"]


class Interrupted(BaseException):
    """What the workflow's thread is interrupted with (as Ctrl-C would)."""


def _held_and_counted(shop: Shop) -> tuple[ToolRegistry, list[str]]:
    """`hold` (the shop's charge: it waits for `shop.release`) and
    `counted_charge`, whose policy lists the calls it was asked about."""
    asked: list[str] = []

    class Counting(BasePolicy):
        name = "counting"

        def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision:
            asked.append(call.id)
            return Admit()

    reg = ToolRegistry()
    reg.tool(name="hold")(shop.registry.get("charge").fn)  # type: ignore[union-attr]
    reg.tool(name="counted_charge", policies=[Counting()])(lambda amount: f"charged {amount}")
    return reg, asked


@pytest.mark.parametrize("where", ["waiting", "handed_on"])
def test_a_lone_call_whose_workflow_is_interrupted_is_cancelled(
    shop: Shop, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "waiting": where the workflow's thread waits for its call (SIGUSR1);
    # "handed_on": once the call is handed to the executor, before the
    # thread holds it (as a signal landing there would).
    reg, asked = _held_and_counted(shop)
    finished: list[Any] = []
    sub = bus.subscribe(lambda s, event, **_: finished.append(event.result), bus.FINISHED)
    interrupts = _Interrupts()
    previous = signal.signal(signal.SIGUSR1, interrupts.handler)
    if where == "handed_on":
        handed_on = _alone.submit_waited

        def interrupting(*args: Any) -> Any:
            handed_on(*args)
            raise Interrupted

        monkeypatch.setattr(_alone, "submit_waited", interrupting)
    shop.release.clear()
    try:
        with Executor(reg, max_parallel=1) as ex:
            tools = durable(ex)
            holder = ex.submit(call("h", "hold", amount=1))
            wait_until(shop.started.is_set)

            @DBOS.workflow(name=f"alone_interrupted_{where}")
            def interrupted() -> str:
                return tools.execute(call("c", "counted_charge", amount=2)).status

            main = threading.main_thread().ident
            assert main == threading.get_ident()
            # Once the call is queued behind the holder, the workflow's
            # thread (this one) is interrupted where it waits for it (not on
            # its way back from submitting it, a few steps before).
            poke = threading.Thread(
                target=lambda: (
                    wait_until(lambda: ex.stats().queued == 1),
                    wait_until(lambda: _waiting_for_its_call(main)),
                    interrupts.poke(main),
                )
            )
            if where == "waiting":
                poke.start()
            with SetWorkflowID(f"alone-interrupted-{where}"), pytest.raises(Interrupted):
                interrupted()
            if where == "waiting":
                poke.join()
            wait_until(lambda: any(r.call_id == "c" for r in finished))
            shop.release.set()
            assert holder.result().status == "ok"
            ex.drain_events()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        shop.release.set()
        sub.close()
    (ended,) = [r for r in finished if r.call_id == "c"]
    assert ended.status == "cancelled" and asked == []  # stopped before it started


class _Interrupts:
    """SIGUSR1 raises `Interrupted` in the thread it is sent to, once."""

    def __init__(self) -> None:
        self.fired = threading.Event()

    def handler(self, signum: int, frame: Any) -> None:
        if not self.fired.is_set():  # (a signal sent again is not a second interrupt)
            self.fired.set()
            raise Interrupted

    def poke(self, thread_id: int) -> None:
        """Interrupt the thread. A signal that comes as it enters a wait,
        before it sleeps, is seen only when the wait ends: sent again until seen."""
        while not self.fired.wait(0.01):
            signal.pthread_kill(thread_id, signal.SIGUSR1)


def _waiting_for_its_call(thread_id: int) -> bool:
    """Whether the thread waits for its call in the intent's step: its
    innermost frame is the step's function (`mark`, in `_alone.py`), past the
    submission (a frame below it) and at its wait."""
    frame = sys._current_frames().get(thread_id)
    code = frame.f_code if frame is not None else None
    return code is not None and code.co_name == "mark" and code.co_filename.endswith("_alone.py")


def test_a_bad_keyword_value_raises_before_any_step(shop: Shop) -> None:
    with Executor(shop.registry) as ex:
        tools = durable(ex)

        @DBOS.workflow(name="alone_bad_value")
        def bad_value(which: str) -> None:
            c = call("c", "charge", amount=1)
            if which == "timeout":
                tools.execute(c, call_timeout=-1)
            elif which == "priority":
                tools.execute(c, priority="high")
            else:
                tools.execute_batch([c], approvals=42)

        for which in ("timeout", "priority", "approvals"):
            with SetWorkflowID(f"alone-bad-{which}"), pytest.raises((ValueError, TypeError)):
                bad_value(which)
            assert steps_of(f"alone-bad-{which}") == []
    assert shop.charged == []


@pytest.mark.parametrize("way", WAYS)
def test_a_deferred_call_asked_again_whose_tool_makes_a_step_takes_no_position(
    system_db: Path, way: str
) -> None:
    limit = [1]
    after_ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval(when=lambda c: c.arguments["amount"] > limit[0])])
    def pay(amount: int) -> str:
        return str(DBOS.run_step({"name": "bank"}, lambda: f"paid {amount}"))

    def after() -> str:
        after_ran.append("after")
        return "after"

    wid = f"deferred-step-{way}"
    with Executor(reg) as ex:
        tools = durable(ex)

        @DBOS.workflow(name=f"deferred_step_{way}")
        def deferred() -> list[str]:
            (r,) = run_calls(tools, [call("p", "pay", amount=5)], way)
            return [r.status, DBOS.run_step({"name": "after"}, after)]

        with SetWorkflowID(wid):
            assert deferred() == ["deferred", "after"]
        limit[0] = 10  # let through when asked again, after a recovery
        fork = DBOS.fork_workflow(wid, 3)  # (its result at 2, "after" at 3)
        assert fork.get_result(polling_interval_sec=POLL) == ["ok", "after"]
    # The tool's own step was a plain call: "after" kept its position, and
    # ran once per workflow (the fork's own run of it).
    assert after_ran == ["after", "after"]
    assert [n for _, n in steps_of(fork.get_workflow_id())] == [
        "toolbus-intent:pay",
        "toolbus:pay",
        "after",
    ]


def test_a_batch_whose_loop_is_interrupted_stops_its_calls_and_leaves_no_task_behind(
    shop: Shop,
) -> None:
    interrupts = _Interrupts()

    finished: list[Any] = []
    sub = bus.subscribe(lambda s, event, **_: finished.append(event.result), bus.FINISHED)
    previous = signal.signal(signal.SIGUSR1, interrupts.handler)
    shop.release.clear()
    try:
        with Executor(shop.registry, max_parallel=1) as ex:
            tools = durable(ex)

            @DBOS.workflow(name="batch_interrupted")
            def interrupted() -> None:
                tools.execute_batch([call("a", "charge", amount=1), call("b", "charge", amount=2)])

            @DBOS.workflow(name="batch_after")
            def after() -> list[str]:
                return [
                    r.status
                    for r in tools.execute_batch(
                        [call("z", "login", user="u", api_key="k")]
                    ).results
                ]

            main = threading.get_ident()
            assert main == threading.main_thread().ident
            poke = threading.Thread(
                target=lambda: (
                    wait_until(shop.started.is_set),
                    interrupts.poke(main),
                )
            )
            poke.start()
            with SetWorkflowID("batch-interrupted"), pytest.raises(Interrupted):
                interrupted()
            poke.join()
            # Both calls end (the running one abandoned), none left queued.
            wait_until(lambda: {r.call_id for r in finished} >= {"a", "b"})
            shop.release.set()
            # The next batch on this thread runs only its own calls.
            with SetWorkflowID("batch-after"):
                assert after() == ["ok"]
            ex.drain_events()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        shop.release.set()
        sub.close()
    assert {r.call_id: r.status for r in finished} == {
        "a": "cancelled",
        "b": "cancelled",
        "z": "ok",
    }
    assert [a for a, _ in shop.charged] == [1]  # b never ran
    assert [n for _, n in steps_of("batch-interrupted")] == ["toolbus-intent:charge"]


@pytest.mark.parametrize("way", WAYS)
def test_a_tool_acts_as_the_workflows_identity(system_db: Path, way: str) -> None:
    from dbos import DBOSContextSetAuth

    seen: list[Any] = []

    @DBOS.required_roles(["admin"])
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    reg = ToolRegistry()

    @reg.tool()
    def admin_refund(amount: int) -> str:
        seen.append((DBOS.authenticated_user, DBOS.authenticated_roles))
        return refund(amount)

    wid = f"identity-{way}"
    with Executor(reg) as ex:
        tools = durable(ex)

        @DBOS.workflow(name=f"identity_{way}")
        def as_admin() -> list[str]:
            return [
                str(r.output) for r in run_calls(tools, [call("r", "admin_refund", amount=3)], way)
            ]

        with DBOSContextSetAuth("alice", ["admin"]), SetWorkflowID(wid):
            assert as_admin() == ["refunded 3"]
    assert seen == [("alice", ["admin"])]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("tool", ["lookup", "charge"])
def test_every_submission_of_a_call_leaves_the_workflow_first_run_or_replay(
    shop: Shop, way: str, tool: str
) -> None:
    # What submission hooks see: outside the workflow, on its first run and
    # on a replay alike (a DBOS step a hook made must not take a position).
    reg = ToolRegistry()
    reg.tool(name=tool, read_only=tool == "lookup")(lambda x: f"{tool} {x}")
    seen: list[Any] = []
    wid = f"hooked-{tool}-{way}"
    with Executor(reg) as ex:
        ex.on_submit(lambda s: seen.append(s.context.run(lambda: DBOS.workflow_id)))
        tools = durable(ex)

        @DBOS.workflow(name=f"hooked_{tool}_{way}")
        def hooked() -> list[Any]:
            (r,) = run_calls(tools, [call("c", tool, x=1)], way)
            return [r.status, r.metadata.get("replayed")]

        with SetWorkflowID(wid):
            assert hooked() == ["ok", None]
        assert DBOS.fork_workflow(wid, 99).get_result(polling_interval_sec=POLL) == ["ok", True]
    assert seen == [None, None]


def test_an_async_batch_cancelled_at_any_turn_raises_its_cancellation(shop: Shop) -> None:
    # Cancelled at each of its first loop turns (as `asyncio.timeout` would):
    # the awaiting task gets CancelledError, never an error of the steps' own,
    # and every call ends once.
    finished: list[str] = []
    sub = bus.subscribe(lambda s, event, **_: finished.append(event.result.call_id), bus.FINISHED)
    outcomes: list[str] = []
    try:
        with Executor(shop.registry) as ex:
            tools = durable(ex)

            @DBOS.workflow(name="cancelled_batch")
            async def cancelled(k: int) -> str:
                task = asyncio.ensure_future(
                    tools.aexecute_batch(
                        [
                            call(f"{k}a", "login", user="u", api_key="k"),
                            call(f"{k}b", "charge", amount=k),
                        ]
                    )
                )
                for _ in range(k % 30):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    return "cancelled"
                return "completed"

            for k in range(300):
                with SetWorkflowID(f"cancelled-batch-{k}"):
                    outcomes.append(asyncio.run(cancelled(k)))
            ex.drain_events()
            wait_until(lambda: ex.stats().in_flight == 0)
            ex.drain_events()
    finally:
        sub.close()
    assert set(outcomes) <= {"cancelled", "completed"} and "cancelled" in outcomes
    assert len(finished) == len(set(finished))  # never twice


@pytest.mark.parametrize("way", WAYS)
def test_a_tool_that_changes_its_identity_changes_no_one_elses(system_db: Path, way: str) -> None:
    from dbos import DBOSContextSetAuth

    changed = threading.Event()
    seen: list[Any] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def escalate(x: int) -> str:
        DBOS.set_authentication("mallory", ["root"])
        changed.set()
        return "escalated"

    @reg.tool(read_only=True)
    def whoami(x: int) -> str:
        changed.wait(30)  # (in a batch: after the other tool changed its own)
        seen.append((DBOS.authenticated_user, DBOS.authenticated_roles))
        return "read"

    wid = f"escalate-{way}"
    with Executor(reg) as ex:
        tools = durable(ex)

        @DBOS.workflow(name=f"escalate_{way}")
        def guarded() -> list[Any]:
            with DBOSContextSetAuth("bob", ["user"]):
                calls = [call("e", "escalate", x=1), call("w", "whoami", x=2)]
                run_calls(tools, calls, way)
                return [DBOS.authenticated_user, DBOS.authenticated_roles]

        with SetWorkflowID(wid):
            assert guarded() == ["bob", ["user"]]
    assert seen == [("bob", ["user"])]


@pytest.mark.parametrize("way", WAYS)
def test_a_tool_does_not_use_up_the_workflows_start_options(system_db: Path, way: str) -> None:
    from dbos import SetWorkflowID as SetID

    @DBOS.workflow(name=f"child_{way}")
    def child(who: str) -> str:
        return who

    reg = ToolRegistry()

    @reg.tool()
    def spawn(x: int) -> str:
        return DBOS.start_workflow(child, "tool").get_workflow_id()

    wid = f"start-options-{way}"
    with Executor(reg) as ex:
        tools = durable(ex)

        @DBOS.workflow(name=f"start_options_{way}")
        def spawning() -> list[Any]:
            with SetID(f"{wid}-child"):
                (r,) = run_calls(tools, [call("s", "spawn", x=1)], way)
                mine = DBOS.start_workflow(child, "workflow")
            return [r.output != f"{wid}-child", mine.get_workflow_id(), mine.get_result()]

        with SetWorkflowID(wid):
            assert spawning() == [True, f"{wid}-child", "workflow"]


@pytest.mark.parametrize("way", WAYS)
def test_a_deferred_call_let_through_after_a_recovery_is_in_doubt_after_the_next(
    system_db: Path, way: str
) -> None:
    limit = [1]
    ran: list[int] = []
    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval(when=lambda c: c.arguments["amount"] > limit[0])])
    def pay(amount: int) -> str:
        ran.append(amount)
        return f"paid {amount}"

    wid = f"deferred-{way}"
    with Executor(reg) as ex:
        mine = durable(ex)

        @DBOS.workflow(name=f"deferred_{way}")
        def deferred() -> str:
            (r,) = run_calls(mine, [call("p", "pay", amount=5)], way)
            return r.status

        with SetWorkflowID(wid):
            assert deferred() == "deferred"
        assert [i for i, _ in steps_of(wid)] == [2]  # no intent: its tool never started
        limit[0] = 10  # asked again after a recovery, it runs
        first = DBOS.fork_workflow(wid, 3)
        assert first.get_result(polling_interval_sec=POLL) == "ok" and ran == [5]
        # Its intent says it was asked again; its result still says deferred:
        # after another crash it is in doubt, and not run again silently.
        again = DBOS.fork_workflow(first.get_workflow_id(), 3).get_result(polling_interval_sec=POLL)
    assert again == "error" and ran == [5]
