"""toolbus inside DBOS workflows, against real DBOS on SQLite (in this process).

What a crash leaves behind (a call's intent recorded, its result not) needs a
process that dies: `test_dbos_recovery.py`. Here a workflow is run again
with `DBOS.fork_workflow`, which replays the steps before a given one and
runs the rest, as a recovery does.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS, SetWorkflowID

from tests.integrations import dbos_support
from tests.integrations.dbos_support import POLL, call, steps_of
from toolbus import ErrorCode, Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.in_doubt import InDoubtCall
from toolbus.integrations._turns.records import call_key, read_result, result_record
from toolbus.integrations.dbos import DurableExecutor, durable

SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"


@pytest.fixture(scope="module")
def system_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("dbos") / "system.sqlite"
    with dbos_support.launched(path, "toolbus-tests"):
        yield path


class Ledger:
    """What the tools did, counted outside DBOS."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ran: list[tuple[str, Any, str | None]] = []

    def add(self, tool: str, value: Any, key: str | None) -> None:
        with self.lock:
            self.ran.append((tool, value, key))

    def count(self, tool: str) -> int:
        return sum(1 for t, _, _ in self.ran if t == tool)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture
def tools(system_db: Path, ledger: Ledger) -> Iterator[DurableExecutor]:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def lookup(x: int, ctx: ToolContext) -> int:
        ledger.add("lookup", x, ctx.idempotency_key)
        return x * 10

    @reg.tool()
    def charge(amount: int, ctx: ToolContext) -> str:
        ledger.add("charge", amount, ctx.idempotency_key)
        if amount < 0:
            raise ValueError("a negative charge")
        return f"charged {amount}"

    @reg.tool(idempotent=True)
    def put(key: str, value: str, ctx: ToolContext) -> str:
        ledger.add("put", key, ctx.idempotency_key)
        return "stored"

    @reg.tool()
    def login(user: str, api_key: str) -> str:
        ledger.add("login", user, None)
        return f"welcome {user}"

    @reg.tool(read_only=True)
    async def alookup(x: int, ctx: ToolContext) -> int:
        ledger.add("alookup", x, ctx.idempotency_key)
        await asyncio.sleep(0)
        return x + 1

    ex = Executor(reg)
    try:
        yield durable(ex)
    finally:
        ex.close()


def test_outside_a_workflow_a_call_is_the_executors_own(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    result = tools.execute(call("a", "lookup", x=1))
    batch = tools.execute_batch([call("b", "lookup", x=2), call("c", "charge", amount=3)])
    assert result.output == 10
    assert [r.output for r in batch.results] == [20, "charged 3"]
    assert "replayed" not in result.metadata
    # The executor's own keys (derived), not a workflow's.
    assert all(key is not None and not key.startswith("dbos:") for _, _, key in ledger.ran)


def test_each_call_is_a_step_and_a_mutating_one_records_its_intent_first(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    @DBOS.workflow()
    def turn_steps() -> list[Any]:
        batch = tools.execute_batch(
            [
                call("a", "lookup", x=1),
                call("b", "charge", amount=5),
                call("c", "put", key="k", value="v"),
            ]
        )
        one = tools.execute(call("d", "charge", amount=7))
        return [r.output for r in (*batch.results, one)]

    with SetWorkflowID("steps-1"):
        assert turn_steps() == [10, "charged 5", "stored", "charged 7"]
    # Each call takes two positions (its intent's, its result's), whatever
    # its tool: a read-only or idempotent one records no intent.
    assert steps_of("steps-1") == [
        (2, "toolbus:lookup"),
        (3, "toolbus-intent:charge"),
        (4, "toolbus:charge"),
        (6, "toolbus:put"),  # idempotent: no intent
        (7, "toolbus-intent:charge"),
        (8, "toolbus:charge"),
    ]
    # Each call's key is its workflow and its result step's position.
    keys = {(tool, value): key for tool, value, key in ledger.ran}
    assert keys == {
        ("lookup", 1): "dbos:steps-1:2",
        ("charge", 5): "dbos:steps-1:4",
        ("put", "k"): "dbos:steps-1:6",
        ("charge", 7): "dbos:steps-1:8",
    }


def test_a_forked_workflow_replays_what_finished_and_runs_the_rest(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    finished: list[Any] = []
    sub = bus.subscribe(lambda s, event, **_: finished.append(event), bus.FINISHED)

    @DBOS.workflow()
    def turn_fork() -> list[dict[str, Any]]:
        first = tools.execute_batch([call("a", "lookup", x=1), call("b", "charge", amount=5)])
        second = tools.execute_batch([call("c", "lookup", x=2), call("d", "charge", amount=6)])
        return [r.model_dump(mode="json") for r in (*first.results, *second.results)]

    try:
        with SetWorkflowID("fork-1"):
            original = turn_fork()
        assert ledger.count("lookup") == 2 and ledger.count("charge") == 2
        # Steps 1-4 are the first batch; from step 5 on, the second runs again.
        again = DBOS.fork_workflow("fork-1", 5).get_result(polling_interval_sec=POLL)
        tools.executor.drain_events()
    finally:
        sub.close()
    assert ledger.count("lookup") == 3 and ledger.count("charge") == 3
    assert [r["output"] for r in again] == [r["output"] for r in original]
    assert [r["metadata"].get("replayed") for r in again] == [True, True, None, None]
    assert [r["attempts"] for r in again] == [0, 0, 1, 1]
    replayed = [e for e in finished if e.result.metadata.get("replayed")]
    assert sorted(e.call_id for e in replayed) == ["a", "b"]
    # Its events carry the masked arguments, as any call's do.
    assert {e.call_id: e.arguments for e in replayed} == {"a": {"x": 1}, "b": {"amount": 5}}


def test_a_replayed_failure_stops_the_rest_of_its_batch_again(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    @DBOS.workflow()
    def turn_stop() -> list[tuple[str, str | None]]:
        batch = tools.execute_batch(
            [call("a", "charge", amount=-1), call("b", "charge", amount=2)], stop_on_error=True
        )
        tail = tools.execute(call("c", "lookup", x=1))
        return [(r.status, r.error_code) for r in (*batch.results, tail)]

    with SetWorkflowID("stop-1"):
        original = turn_stop()
    assert original == [
        ("error", ErrorCode.TOOL_ERROR),
        ("cancelled", ErrorCode.ABORTED),
        ("ok", None),
    ]
    # The aborted call never started: no intent of it was recorded.
    assert [n for _, n in steps_of("stop-1")] == [
        "toolbus-intent:charge",
        "toolbus:charge",
        "toolbus:charge",
        "toolbus:lookup",
    ]
    again = DBOS.fork_workflow("stop-1", max(i for i, _ in steps_of("stop-1"))).get_result(
        polling_interval_sec=POLL
    )
    assert again == original
    assert ledger.count("charge") == 1  # the failed one ran once; the aborted one never
    assert ledger.count("lookup") == 2  # the last step ran again after the fork


async def test_async_workflow_runs_its_batch_concurrently_and_replays(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    @DBOS.workflow()
    async def turn_async() -> list[Any]:
        batch = await tools.aexecute_batch([call(f"c{i}", "alookup", x=i) for i in range(5)])
        one = await tools.aexecute(call("z", "charge", amount=9))
        return [r.output for r in (*batch.results, one)]

    with SetWorkflowID("async-1"):
        assert await turn_async() == [1, 2, 3, 4, 5, "charged 9"]
    again = await (await DBOS.fork_workflow_async("async-1", 13)).get_result(
        polling_interval_sec=POLL
    )
    assert again == [1, 2, 3, 4, 5, "charged 9"]
    assert ledger.count("alookup") == 5 and ledger.count("charge") == 1
    assert {k for t, _, k in ledger.ran if t == "alookup"} == {
        f"dbos:async-1:{2 * i}" for i in range(1, 6)
    }


@pytest.mark.parametrize("sync", [True, False])
@pytest.mark.parametrize("decision", ["none", "skip", "rerun", "fail", "raises", "junk"])
def test_a_mutating_call_whose_intent_was_recorded_and_no_result_is_in_doubt(
    tools: DurableExecutor, ledger: Ledger, sync: bool, decision: str
) -> None:
    from toolbus.in_doubt import Fail, Rerun, Skip

    asked: list[InDoubtCall] = []

    async def ahandler(c: InDoubtCall) -> Any:
        return handler(c)

    def handler(c: InDoubtCall) -> Any:
        asked.append(c)
        if decision == "raises":
            raise RuntimeError(f"cannot reach the ledger for {c.arguments}")
        return {
            "none": None,
            "skip": Skip("charged 5 (found in the ledger)"),
            "rerun": Rerun(),
            "fail": Fail("the ledger is down"),
            "junk": "yes",
        }[decision]

    wrapped = durable(tools.executor, on_in_doubt=handler if sync else ahandler)
    wid = f"doubt-{decision}-{sync}"

    @DBOS.workflow(name=f"turn_doubt_{decision}_{sync}")
    def turn_doubt() -> dict[str, Any]:
        batch = wrapped.execute_batch([call("a", "lookup", x=1), call("b", "charge", amount=5)])
        return batch.results[1].model_dump(mode="json")

    with SetWorkflowID(wid):
        assert turn_doubt()["output"] == "charged 5"
    # Forked at the charge's result step: its intent replays, its result is
    # not there: what a crash while it ran leaves behind.
    fork = DBOS.fork_workflow(wid, 4)
    again = fork.get_result(polling_interval_sec=POLL)
    assert [(c.call_id, c.tool, c.arguments) for c in asked] == [("b", "charge", {"amount": 5})]
    # A fork is a workflow of its own: its keys are its own (a recovery keeps
    # the workflow's id, and so its keys: test_dbos_recovery.py).
    assert asked[0].idempotency_key == f"dbos:{fork.get_workflow_id()}:4"
    if decision == "rerun":
        assert again["status"] == "ok" and again["output"] == "charged 5"
        charges = [k for t, _, k in ledger.ran if t == "charge"]
        assert charges == [f"dbos:{wid}:4", asked[0].idempotency_key]
        return
    assert ledger.count("charge") == 1  # never run twice
    if decision == "skip":
        assert again["status"] == "ok"
        assert again["output"] == "charged 5 (found in the ledger)"
        assert again["metadata"] == {"in_doubt": "skipped"}
    else:
        assert again["status"] == "error" and again["error_code"] == "IN_DOUBT"
        assert again["metadata"] == {"in_doubt": "failed"}
        assert "an earlier attempt of this call may have run" in again["error"]
        if decision == "fail":
            assert "the ledger is down" in again["error"]
        if decision in ("raises", "junk"):
            assert "in-doubt handler" in again["error"]
            assert "amount" not in again["error"]


def test_no_secret_reaches_the_engines_tables(tools: DurableExecutor, system_db: Path) -> None:
    @DBOS.workflow()
    def turn_secret() -> str:
        result = tools.execute(call("a", "login", user="ada", api_key=SECRET))
        batch = tools.execute_batch([call("b", "login", user="bob", api_key=SECRET)])
        return f"{result.output} {batch.results[0].output}"

    with SetWorkflowID("secret-1"):
        assert turn_secret() == "welcome ada welcome bob"
    DBOS.fork_workflow("secret-1", 1).get_result(polling_interval_sec=POLL)
    names = [n for _, n in steps_of("secret-1")]
    assert names == ["toolbus-intent:login", "toolbus:login"] * 2
    with sqlite3.connect(system_db) as db:
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        for table in tables:
            for row in db.execute(f'select * from "{table}"'):
                assert SECRET not in " ".join(dbos_support.readable(cell) for cell in row), table


def test_a_record_of_an_output_holding_a_lone_surrogate_replays_it_as_it_was() -> None:
    """It was recorded as its Python text: a replay gave the model the string
    "{'report-\\\\udce9.txt': 1}" for the dict it had read; a metadata key's
    surrogate became three U+FFFD, silently (review)."""
    from toolbus import ToolResult

    e9, e8 = (
        b.decode("utf-8", "surrogateescape") for b in (b"report-\xe9.txt", b"report-\xe8.txt")
    )
    result = ToolResult(
        call_id="a",
        name="t",
        status="ok",
        output={e9: 1, e8: [e9, 2**70]},
        metadata={e9: "v", "f": e8},
    )
    record = result_record(result)
    record.encode()  # (an engine writes it as UTF-8)
    back = read_result(record)
    assert back.output == result.output
    assert back.metadata == {e9: "v", "f": e8, "replayed": True}
    plain = ToolResult(call_id="b", name="t", status="ok", output={"n": 2**70})
    assert read_result(result_record(plain)).output == {"n": 2**70}  # (was its text)


def test_a_record_reads_back_as_the_result_the_model_read() -> None:
    from toolbus import ToolResult

    result = ToolResult(
        call_id="a",
        name="t",
        status="error",
        error="boom",
        error_code=ErrorCode.TOOL_ERROR,
        attempts=2,
    )
    back = read_result(result_record(result))
    assert back.model_dump(exclude={"metadata", "attempts"}) == result.model_dump(
        exclude={"metadata", "attempts"}
    )
    assert back.metadata == {"replayed": True}
    with pytest.raises(ValueError, match="newer toolbus"):
        read_result('{"toolbus": 99, "result": {}}')
    with pytest.raises(ValueError, match="not a toolbus"):
        read_result(b"pickled")
    assert call_key("dbos", "w" * 300, 4).startswith("dbos:sha256:")
    assert len(call_key("dbos", "w" * 300, 4)) <= 256


def test_a_workflow_that_asks_for_other_calls_on_replay_fails_loudly(
    tools: DurableExecutor,
) -> None:
    asked = ["lookup"]

    @DBOS.workflow()
    def turn_drift() -> Any:
        return tools.execute(
            call("a", asked[0], x=1)
            if asked[0] == "lookup"
            else call("a", "put", key="k", value="v")
        ).output

    with SetWorkflowID("drift-1"):
        assert turn_drift() == 10
    asked[0] = "put"
    # DBOS's own check (its error types are not exported): the step at 1 was
    # `toolbus:lookup`, and the workflow now asks for `toolbus:put` there.
    with pytest.raises(Exception, match=r"toolbus:lookup|toolbus:put"):
        DBOS.fork_workflow("drift-1", 3).get_result(polling_interval_sec=POLL)


def test_the_handler_is_checked_when_the_wrapper_is_made(tools: DurableExecutor) -> None:
    with pytest.raises(TypeError, match="on_in_doubt must be a callable"):
        durable(tools.executor, on_in_doubt="skip")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a toolbus\.Executor"):
        durable(object())  # type: ignore[arg-type]
    assert InDoubtCall("a", "t", {}, "k").idempotency_key == "k"


# -- what a reviewer found (issue 23) -------------------------------------------------


def test_bad_keywords_are_refused_before_any_step_inside_a_workflow_or_not(
    tools: DurableExecutor,
) -> None:
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['timout'\]"):
        tools.execute(call("a", "lookup", x=1), timout=5)

    @DBOS.workflow()
    def turn_kwargs() -> str:
        try:
            tools.execute_batch([call("a", "lookup", x=1)], stop_on_eror=True)
        except TypeError as e:
            return str(e)
        return "no error"

    with SetWorkflowID("kwargs-1"):
        assert "stop_on_eror" in turn_kwargs()
    assert steps_of("kwargs-1") == []


async def test_aexecute_with_a_bad_keyword_raises_in_an_async_workflow(
    tools: DurableExecutor,
) -> None:
    @DBOS.workflow()
    async def turn_akwargs() -> str:
        try:
            await tools.aexecute(call("a", "alookup", x=1), timout=5)
        except TypeError as e:
            return str(e)
        return "no error"

    with SetWorkflowID("akwargs-1"):
        assert "timout" in await turn_akwargs()


async def test_sync_methods_in_an_async_workflow_say_what_to_use(tools: DurableExecutor) -> None:
    @DBOS.workflow()
    async def turn_sync_in_async() -> list[str]:
        said = []
        for method in (tools.execute, tools.execute_batch):
            try:
                method(
                    call("a", "lookup", x=1)
                    if method == tools.execute
                    else [call("a", "lookup", x=1)]
                )
            except RuntimeError as e:
                said.append(str(e))
        return said

    with SetWorkflowID("sync-in-async-1"):
        said = await turn_sync_in_async()
    assert [s.split("(")[0] for s in said] == [
        "DurableExecutor.execute",
        "DurableExecutor.execute_batch",
    ]
    assert all("use await a" in s for s in said)


def test_an_output_orjson_cannot_hold_is_recorded_exactly(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    # Its text once: a replay gave the workflow "1180591620717411303424" for
    # the integer its first run had (recorded now as the journal records it).
    @tools.executor.registry.tool(read_only=True, name="huge")
    def huge() -> int:
        ledger.add("huge", None, None)
        return 2**70

    @DBOS.workflow()
    def turn_huge() -> list[Any]:
        return [tools.execute(call("h", "huge")).output]

    with SetWorkflowID("huge-1"):
        assert turn_huge() == [2**70]
    assert DBOS.fork_workflow("huge-1", 3).get_result(polling_interval_sec=POLL) == [2**70]
    assert ledger.count("huge") == 1


def test_a_workflow_id_with_control_characters_is_hashed_into_the_key(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    @DBOS.workflow()
    def turn_tab() -> str:
        return str(tools.execute(call("a", "charge", amount=1)).status)

    with SetWorkflowID("tab\there"):
        assert turn_tab() == "ok"
    (key,) = [k for t, _, k in ledger.ran if t == "charge"]
    assert key is not None and key.startswith("dbos:sha256:") and key.endswith(":2")


def test_ids_and_names_holding_lone_surrogates_are_recorded_and_replayed(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    # A model's JSON "\udc80" decodes to a lone surrogate, which UTF-8 cannot
    # hold: a call id or a tool name holding one failed the workflow (the
    # intent's record and the step's name could not be written).
    @DBOS.workflow()
    def turn_odd() -> list[Any]:
        batch = tools.execute_batch(
            [call("odd\udc80id", "charge", amount=3), call("b", "no\udc80such", x=1)]
        )
        return [(r.call_id, r.status, r.error_code) for r in batch.results]

    with SetWorkflowID("odd-1"):
        first = turn_odd()
    assert first == [
        ("odd\udc80id", "ok", None),
        ("b", "rejected", ErrorCode.TOOL_NOT_FOUND),
    ]
    again = DBOS.fork_workflow("odd-1", 5).get_result(polling_interval_sec=POLL)
    assert again == first
    assert ledger.count("charge") == 1


def test_replayed_arguments_that_are_not_json_are_not_published(
    tools: DurableExecutor,
) -> None:
    finished: list[Any] = []
    sub = bus.subscribe(lambda s, event, **_: finished.append(event), bus.FINISHED)

    @DBOS.workflow()
    def turn_text() -> str:
        bad = ToolCall(id="t", name="login", arguments='{"user": "ada", "api_key": "' + SECRET)
        return str(tools.execute(bad).error_code)

    try:
        with SetWorkflowID("text-1"):
            assert turn_text() == "INVALID_ARGUMENTS"
        DBOS.fork_workflow("text-1", 3).get_result(polling_interval_sec=POLL)
        tools.executor.drain_events()
    finally:
        sub.close()
    assert len(finished) == 2
    assert [e.arguments for e in finished] == [None, None]
    assert finished[1].result.metadata.get("replayed") is True
    assert all(SECRET not in repr(e) for e in finished)


def test_a_replay_stands_whatever_the_batch_did_around_it(
    tools: DurableExecutor, ledger: Ledger
) -> None:
    from toolbus.policies import quota, requires_approval

    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    @reg.tool(policies=[quota(1)])
    def pay(amount: int) -> str:
        ledger.add("pay", amount, None)
        return f"paid {amount}"

    with Executor(reg) as ex:
        mine = durable(ex)

        @DBOS.workflow()
        def turn_quota() -> list[tuple[str, str | None]]:
            batch = mine.execute_batch(
                [
                    call("r", "refund", amount=1),
                    call("p1", "pay", amount=1),
                    call("p2", "pay", amount=2),
                ]
            )
            return [(r.status, r.error_code) for r in batch.results]

        with SetWorkflowID("quota-1"):
            first = turn_quota()
        again = DBOS.fork_workflow("quota-1", 99).get_result(polling_interval_sec=POLL)
    assert again == first
    assert ledger.count("pay") <= 1


async def test_cancelling_an_async_workflow_cancels_its_running_call(
    tools: DurableExecutor,
) -> None:
    import threading

    started = threading.Event()
    finished = threading.Event()
    ended: list[str] = []

    @tools.executor.registry.tool(name="slow_charge")
    def slow_charge(ctx: ToolContext) -> str:
        started.set()
        ended.append("cancelled" if ctx.wait_cancelled(30) else "ran out")
        finished.set()
        return "done"

    @DBOS.workflow()
    async def turn_cancel() -> str:
        return str((await tools.aexecute(call("s", "slow_charge"))).status)

    async def go() -> None:
        with SetWorkflowID("cancel-1"):
            await turn_cancel()

    task = asyncio.ensure_future(go())
    assert await asyncio.to_thread(started.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(finished.wait, 30)
    assert ended == ["cancelled"]


@pytest.mark.parametrize("raised", ["cancelled", "base"])
async def test_an_in_doubt_handler_that_raises_a_base_exception_fails_the_call(
    tools: DurableExecutor, raised: str
) -> None:
    class Odd(BaseException):
        pass

    async def handler(c: InDoubtCall) -> Any:
        if raised == "cancelled":
            raise asyncio.CancelledError
        raise Odd

    mine = durable(tools.executor, on_in_doubt=handler)
    wid = f"odd-{raised}"

    @DBOS.workflow(name=f"turn_odd_{raised}")
    async def turn_odd() -> list[str | None]:
        batch = await mine.aexecute_batch([call("a", "lookup", x=1), call("b", "charge", amount=5)])
        return [r.error_code for r in batch.results]

    with SetWorkflowID(wid):
        assert await turn_odd() == [None, None]
    handle = await DBOS.fork_workflow_async(wid, 4)
    assert await handle.get_result(polling_interval_sec=POLL) == [None, "IN_DOUBT"]


def test_calls_in_a_workflow_take_an_agent_run(tools: DurableExecutor) -> None:
    """`agent_run=` was refused by the durable methods (review of issue 28)."""

    @DBOS.workflow()
    def turn_runs() -> tuple[Any, Any]:
        one = tools.execute(call("a", "lookup", x=1), agent_run="r-7")
        many = tools.execute_batch([call("b", "lookup", x=2)], agent_run="r-7")
        return one.output, many.results[0].output

    with SetWorkflowID("agent-run-1"):
        assert turn_runs() == (10, 20)
    with pytest.raises(ValueError, match="agent_run"):
        tools.execute(call("c", "lookup", x=1), agent_run="")
