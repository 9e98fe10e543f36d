"""The durable journal through the public API: intents, outcomes, replay,
idempotency keys, secrets, retention, errors, concurrency and group commit.

The crash case (kill -9 of an agent process) is in test_crash.py.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor, wait_until
from toolbus import (
    AttemptFailure,
    ErrorCode,
    Executor,
    Journal,
    RetryDecision,
    RetryPolicy,
    ToolCall,
    ToolContext,
    ToolRegistry,
    bus,
)
from toolbus.journal import JournalClosed, JournalFailed, JournalRecord, Retention
from toolbus.journal import _store as store
from toolbus.journal._owner import Here, OwnerLock, SessionInfo, gone, here, lock_dir
from toolbus.journal._writer import Writer
from toolbus.models import generated_id
from toolbus.providers._common import fallback_call_id

FAST = RetryPolicy(max_retries=2, backoff_base=0.001, jitter=0)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "agent-journal.sqlite"


def _counting_registry() -> tuple[ToolRegistry, list[str]]:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool
    def book(item: str, ctx: ToolContext) -> str:
        ran.append(ctx.idempotency_key)
        return f"booked {item}"

    @reg.tool(read_only=True)
    def look(item: str) -> str:
        ran.append("look")
        return item

    return reg, ran


def _fake_in_doubt(path: Path, call_id: str) -> None:
    """A call left in doubt by a session that is gone (closed without its
    outcome), written straight into the file: only a crash makes one through
    the API, and test_crash.py does that."""
    conn = sqlite3.connect(path, isolation_level=None)
    now = time.time()
    conn.execute(
        "INSERT OR IGNORE INTO sessions (id, pid, host, machine, opened, heartbeat, closed) "
        "VALUES ('gone', 1, 'h', 'm', ?, ?, ?)",
        (now, now, now),
    )
    seq = conn.execute("SELECT count(*) FROM calls WHERE session = 'gone'").fetchone()[0] + 1
    conn.execute(
        "INSERT INTO calls (session, seq, call_id, tool, arguments, key, started) "
        "VALUES ('gone', ?, ?, 'book', '{}', 'k', ?)",
        (seq, call_id, now),
    )
    conn.close()


# -- what is recorded ---------------------------------------------------------------------


def test_intent_is_on_disk_before_the_tool_runs(make_executor: MakeExecutor, path: Path) -> None:
    seen: list[JournalRecord | None] = []
    reg = ToolRegistry()

    @reg.tool
    def book(item: str, ctx: ToolContext) -> str:
        # Another connection (as another process would) sees the intent already.
        with Journal(path) as reader:
            seen.append(reader.get(ctx.call_id))
        return "ok"

    ex = make_executor(reg, journal=path)
    r = ex.execute(ToolCall(id="c1", name="book", arguments={"item": "table"}))
    assert r.status == "ok"
    (record,) = seen
    assert record is not None
    assert (record.call_id, record.tool, record.arguments) == ("c1", "book", {"item": "table"})
    assert record.state == "running"  # its owner is alive: not in doubt
    assert record.status is None
    assert record.owner.pid == os.getpid()


def test_attempts_outcome_and_owner_are_recorded(make_executor: MakeExecutor, path: Path) -> None:
    keys: list[tuple[int, str]] = []
    reg = ToolRegistry()

    @reg.tool(retry=FAST)
    def send(to: str, ctx: ToolContext) -> str:
        keys.append((ctx.attempt, ctx.idempotency_key))
        if ctx.attempt < 3:
            raise ConnectionError("flaky network")
        return f"sent to {to}"

    ex = make_executor(reg, journal=path)
    r = ex.execute(ToolCall(id="m1", name="send", arguments={"to": "ann"}))
    assert (r.status, r.attempts) == ("ok", 3)
    # The same key for every attempt of the call.
    assert [n for n, _ in keys] == [1, 2, 3]
    assert len({k for _, k in keys}) == 1
    ex.close()
    with Journal(path) as j:
        (record,) = j.records()
    assert record.idempotency_key == keys[0][1]
    assert [(a.n, a.status) for a in record.attempts] == [(1, "error"), (2, "error"), (3, "ok")]
    assert (record.state, record.status) == ("ended", "ok")
    assert record.result is not None and record.result.output == "sent to ann"
    assert record.owner.closed is not None  # close() marked the session closed
    assert record.owner.process_started is not None
    assert not lock_dir(path).joinpath(record.owner.session).exists()


def test_read_only_and_rejected_calls_are_not_journaled(
    make_executor: MakeExecutor, path: Path
) -> None:
    reg, _ = _counting_registry()
    ex = make_executor(reg, journal=path)
    assert ex.execute(ToolCall(id="r1", name="look", arguments={"item": "x"})).ok
    bad = ex.execute(ToolCall(id="b1", name="book", arguments={"nope": 1}))
    assert bad.status == "rejected"
    ex.close()
    with Journal(path) as j:
        assert j.records() == []


def test_idempotent_tool_keeps_its_key_across_a_timeout_retry(path: Path) -> None:
    keys: list[str] = []
    reg = ToolRegistry()

    # 2 s: the retry runs under the same timeout as the hung first attempt,
    # and must end ok (0.2 s was not always enough on a busy machine).
    @reg.tool(idempotent=True, timeout=2, retry=FAST)
    def upsert(row: str, ctx: ToolContext) -> str:
        keys.append(ctx.idempotency_key)
        if ctx.attempt == 1:
            ctx.wait_cancelled(10)  # hangs until its deadline lets it go
            return "late"
        return "stored"

    class RetryTimeouts(Executor):
        # The default policy retries timeouts of read-only tools only; a tool
        # marked idempotent may be retried all the same when a hook says so.
        def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
            return RetryDecision(failure.attempt < 2, 0.0)

    with RetryTimeouts(reg, journal=path) as ex:
        r = ex.execute(ToolCall(id="u1", name="upsert", arguments={"row": "a"}))
    assert (r.status, r.output, r.attempts) == ("ok", "stored", 2)
    assert len(keys) == 2 and keys[0] == keys[1]


def test_explicit_idempotency_key_overrides(make_executor: MakeExecutor, path: Path) -> None:
    reg, ran = _counting_registry()
    ex = make_executor(reg, journal=path)
    r = ex.execute(ToolCall(name="book", arguments={"item": "a"}, idempotency_key="order-42"))
    assert r.ok and ran == ["order-42"]
    # Another call id (toolbus's own), the same arguments: the key is what counts.
    again = ex.execute(ToolCall(name="book", arguments={"item": "a"}, idempotency_key="order-42"))
    assert again.metadata.get("replayed") is True
    assert again.output == "booked a"
    assert ran == ["order-42"]


def test_a_key_reused_with_other_arguments_is_refused_naming_the_key_only(
    make_executor: MakeExecutor, path: Path
) -> None:
    reg, ran = _counting_registry()
    ex = make_executor(reg, journal=path)
    first = ex.execute(ToolCall(name="book", arguments={"item": "a"}, idempotency_key="order-42"))
    assert first.ok
    other = ex.execute(
        ToolCall(name="book", arguments={"item": "secret-b"}, idempotency_key="order-42")
    )
    assert other.status == "rejected"
    assert other.error_code == ErrorCode.IDEMPOTENCY_KEY_REUSED
    assert other.error == (
        "Tool 'book' was not run: idempotency key 'order-42' was already used for a call "
        "with other arguments; use a new key"
    )
    assert other.attempts == 0 and "secret-b" not in (other.error or "")
    assert ran == ["order-42"]  # not run
    # The same key with its own arguments still replays; spacing and key order
    # of a JSON text do not make other arguments.
    same = ex.execute(
        ToolCall(name="book", arguments='{ "item" : "a" }', idempotency_key="order-42")
    )
    assert same.metadata.get("replayed") is True and ran == ["order-42"]
    # And the refused call's record says so: it is not in doubt.
    assert ex.in_doubt() == []


def _held_registry() -> tuple[ToolRegistry, list[int], threading.Event, threading.Event]:
    """`charge`, which says it started and then holds until released."""
    ran: list[int] = []
    started, release = threading.Event(), threading.Event()
    reg = ToolRegistry()

    @reg.tool
    def charge(amount: int) -> str:
        ran.append(amount)
        started.set()
        release.wait(30)
        return f"charged {amount}"

    return reg, ran, started, release


def test_a_key_sent_again_while_its_call_runs_is_refused_not_run_twice(
    make_executor: MakeExecutor, path: Path
) -> None:
    reg, ran, started, release = _held_registry()
    ex = make_executor(reg, journal=path)
    first = ex.submit(
        ToolCall(id="x1", name="charge", arguments={"amount": 5}, idempotency_key="order-1")
    )
    assert started.wait(30)
    same = ex.execute(
        ToolCall(id="x2", name="charge", arguments={"amount": 5}, idempotency_key="order-1")
    )
    assert (same.status, same.error_code, same.attempts) == (
        "rejected",
        ErrorCode.IDEMPOTENCY_KEY_IN_USE,
        0,
    )
    assert same.error == (
        "Tool 'charge' was not run: a call with idempotency key 'order-1' and these "
        "arguments is still running; send it again once that call has ended (if it "
        "succeeded, its result is returned)"
    )
    other = ex.execute(
        ToolCall(id="x3", name="charge", arguments={"amount": 999}, idempotency_key="order-1")
    )
    assert (other.status, other.error_code) == ("rejected", ErrorCode.IDEMPOTENCY_KEY_REUSED)
    release.set()
    assert first.result(30).ok
    # Once it has ended, the key replays it, and still refuses other arguments.
    again = ex.execute(
        ToolCall(id="x4", name="charge", arguments={"amount": 5}, idempotency_key="order-1")
    )
    assert again.metadata.get("replayed") is True and again.output == "charged 5"
    later = ex.execute(
        ToolCall(id="x5", name="charge", arguments={"amount": 999}, idempotency_key="order-1")
    )
    assert later.error_code == ErrorCode.IDEMPOTENCY_KEY_REUSED
    assert ran == [5]
    assert ex.in_doubt() == []  # the refused calls' records ended too


@pytest.mark.parametrize("executors", [1, 2], ids=["one-executor", "two-executors-one-file"])
def test_one_key_sent_twice_at_once_runs_once(path: Path, executors: int) -> None:
    reg, ran, started, release = _held_registry()
    # Two executors on one path: two journals, two writers, two connections,
    # as two processes would have.
    exs = [Executor(reg, journal=path) for _ in range(executors)]
    together = threading.Barrier(2)  # (cyclic: once per round)
    results: queue.Queue[Any] = queue.Queue()

    def send(ex: Executor, call: ToolCall) -> None:
        together.wait(30)
        results.put(ex.execute(call))

    try:
        for n in range(10):
            started.clear()
            release.clear()
            call = ToolCall(
                id=f"r{n}", name="charge", arguments={"amount": n}, idempotency_key=f"order-{n}"
            )
            threads = [
                threading.Thread(target=send, args=(exs[i % executors], call)) for i in range(2)
            ]
            for t in threads:
                t.start()
            # The call that runs holds its tool until released: the one that
            # comes back first is the other, refused without running.
            refused = results.get(timeout=30)
            assert (refused.status, refused.error_code) == (
                "rejected",
                ErrorCode.IDEMPOTENCY_KEY_IN_USE,
            )
            assert started.wait(30)
            release.set()
            assert results.get(timeout=30).ok
            for t in threads:
                t.join(30)
        assert ran == list(range(10))
    finally:
        release.set()
        for ex in exs:
            ex.close()


def test_calls_without_a_key_of_their_own_may_run_at_once(path: Path) -> None:
    # Same tool and arguments, ids toolbus made up: one derived key, and they
    # may be meant to run twice, so neither is taken for the other running.
    both_in = threading.Barrier(2)
    reg = ToolRegistry()

    @reg.tool
    def add_item(item: str) -> str:
        both_in.wait(30)  # broken (an error) unless both run at the same time
        return f"added {item}"

    with Executor(reg, journal=path) as ex:
        handles = [ex.submit(ToolCall(name="add_item", arguments={"item": "milk"})) for _ in "ab"]
        assert [h.result(30).status for h in handles] == ["ok", "ok"]


def test_a_key_whose_call_is_in_doubt_is_not_taken_for_running(
    make_executor: MakeExecutor, path: Path
) -> None:
    reg, ran = _counting_registry()
    ex = make_executor(reg, journal=path)
    _fake_in_doubt(path, "c1")  # key 'k', tool 'book', its session closed
    r = ex.execute(ToolCall(id="c2", name="book", arguments={"item": "a"}, idempotency_key="k"))
    assert r.ok and "replayed" not in r.metadata
    assert ran == ["k"]


def test_keys_depend_on_tool_arguments_and_model_id_not_on_hooks(path: Path) -> None:
    reg, ran = _counting_registry()

    def inject(call: ToolCall) -> ToolCall:  # injected credentials must not change the key
        return call.with_arguments({**call.arguments, "item": call.arguments["item"]})

    with Executor(reg, journal=path, pre_call=[inject]) as ex:
        ex.execute(ToolCall(id="k1", name="book", arguments={"item": "a"}))
        ex.execute(ToolCall(id="k2", name="book", arguments={"item": "a"}))
        ex.execute(ToolCall(name="book", arguments={"item": "a"}))
        ex.execute(ToolCall(name="book", arguments={"item": "b"}))
    k1, k2, gen_a, gen_b = ran
    assert len({k1, k2, gen_a, gen_b}) == 4
    # A new executor on the same journal: same secret, same keys (toolbus ids left out).
    with Executor(reg, journal=path) as ex:
        ex.execute(ToolCall(name="book", arguments={"item": "a"}))
    assert ran[-1] == gen_a
    # Without a journal, keys are per executor (a random secret).
    with Executor(reg) as ex:
        ex.execute(ToolCall(name="book", arguments={"item": "a"}))
    assert ran[-1] != gen_a


# -- replay -------------------------------------------------------------------------------


def test_replayed_call_returns_its_recorded_result_without_running(path: Path) -> None:
    reg, ran = _counting_registry()
    call = ToolCall(id="call_abc", name="book", arguments={"item": "table for 2"})
    with Executor(reg, journal=path) as ex:
        first = ex.execute(call)
        assert first.ok and len(ran) == 1
        second = ex.execute(call)
    assert len(ran) == 1
    assert second.metadata["replayed"] is True
    assert (second.status, second.output, second.attempts) == ("ok", "booked table for 2", 0)
    # After a restart too (the agent-framework#3938 case).
    with Executor(reg, journal=path) as ex, bus.Recorder(bus.FINISHED, sender=ex) as rec:
        third = ex.execute(call)
        ex.drain_events()
    assert len(ran) == 1
    assert third.metadata["replayed"] is True and third.output == "booked table for 2"
    assert rec.of(bus.FINISHED)[0].result.metadata["replayed"] is True
    with Journal(path) as j:
        records = j.records(call_id="call_abc")
    assert [r.replay_of for r in records] == [records[-1].id, records[-1].id, None]
    assert all(r.status == "ok" for r in records)


def test_only_ok_outcomes_are_replayed(make_executor: MakeExecutor, path: Path) -> None:
    attempts: list[int] = []
    reg = ToolRegistry()

    @reg.tool
    def pay(amount: int) -> str:
        attempts.append(amount)
        if len(attempts) == 1:
            raise ValueError("card declined")
        return "paid"

    ex = make_executor(reg, journal=path)
    call = ToolCall(id="p1", name="pay", arguments={"amount": 5})
    assert ex.execute(call).status == "error"
    r = ex.execute(call)  # the error is not replayed: it runs again
    assert (r.status, r.output, len(attempts)) == ("ok", "paid", 2)
    assert "replayed" not in r.metadata


def test_calls_without_a_model_id_or_key_are_never_replayed(
    make_executor: MakeExecutor, path: Path
) -> None:
    reg, ran = _counting_registry()
    ex = make_executor(reg, journal=path)
    a = ex.execute(ToolCall(name="book", arguments={"item": "milk"}))
    b = ex.execute(ToolCall(name="book", arguments={"item": "milk"}))
    assert a.ok and b.ok and "replayed" not in b.metadata
    assert len(ran) == 2 and ran[0] == ran[1]  # the same key, run twice all the same


def test_a_key_replays_only_for_its_own_tool(make_executor: MakeExecutor, path: Path) -> None:
    reg, ran = _counting_registry()

    @reg.tool
    def cancel_booking(item: str) -> str:
        ran.append("cancel")
        return "cancelled"

    ex = make_executor(reg, journal=path)
    ex.execute(ToolCall(name="book", arguments={"item": "a"}, idempotency_key="k"))
    r = ex.execute(ToolCall(name="cancel_booking", arguments={"item": "a"}, idempotency_key="k"))
    assert r.output == "cancelled" and ran == ["k", "cancel"]


async def test_async_callers_and_async_tools_are_journaled(path: Path) -> None:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool
    async def notify(who: str) -> str:
        ran.append(who)
        await asyncio.sleep(0)
        return f"told {who}"

    @reg.tool
    def log_it(line: str) -> str:
        ran.append(line)
        return "logged"

    async with Executor(reg, journal=path) as ex:
        results = await asyncio.gather(
            *(
                ex.aexecute(ToolCall(id=f"n{i}", name="notify", arguments={"who": str(i)}))
                for i in range(5)
            ),
            ex.aexecute(ToolCall(id="l1", name="log_it", arguments={"line": "x"})),
        )
        assert all(r.ok for r in results)
        again = await ex.aexecute(ToolCall(id="n3", name="notify", arguments={"who": "3"}))
        assert again.metadata["replayed"] is True
        journal = ex.journal
        assert journal is not None
        assert journal.flush(5)
    assert sorted(ran) == ["0", "1", "2", "3", "4", "x"]
    with Journal(path) as j:
        assert sorted(r.call_id for r in j.records()) == ["l1", "n0", "n1", "n2", "n3", "n3", "n4"]


# -- in doubt and acknowledging -----------------------------------------------------------


def test_in_doubt_events_at_start_and_acknowledge(path: Path) -> None:
    reg, _ = _counting_registry()
    Executor(reg, journal=path).close()  # makes the file
    _fake_in_doubt(path, "lost-1")
    _fake_in_doubt(path, "lost-2")
    with bus.Recorder(bus.IN_DOUBT) as rec, Executor(reg, journal=path) as ex:
        events = rec.wait_for(bus.IN_DOUBT, 2)
        assert sorted(e.call_id for e in events) == ["lost-1", "lost-2"]
        assert all(isinstance(e.record, JournalRecord) and e.record.in_doubt for e in events)
        assert [r.call_id for r in ex.in_doubt()] == ["lost-1", "lost-2"]
        journal = ex.journal
        assert journal is not None
        assert journal.acknowledge("lost-1") == 1
        assert journal.acknowledge("lost-1") == 0  # nothing left in doubt under that id
        assert [r.call_id for r in ex.in_doubt()] == ["lost-2"]
        (left,) = ex.in_doubt()
        assert journal.acknowledge(left) == 1
        assert ex.in_doubt() == []
        assert journal.get("lost-1").state == "acknowledged"  # type: ignore[union-attr]
    with bus.Recorder(bus.IN_DOUBT) as rec, Executor(reg, journal=path) as ex:
        ex.drain_events()
        assert rec.of(bus.IN_DOUBT) == []


def test_no_journal_no_doubt(make_executor: MakeExecutor) -> None:
    reg, _ = _counting_registry()
    ex = make_executor(reg)
    assert ex.journal is None and ex.in_doubt() == []


def test_cancelled_while_writing_its_intent_is_not_left_in_doubt(path: Path) -> None:
    """Calls cancelled while their intents wait for the disk never run, and
    their records get an outcome: they are not in doubt later."""
    reg, ran = _counting_registry()
    with Executor(reg, journal=path) as ex:
        journal = ex.journal
        assert journal is not None
        blocker = sqlite3.connect(path, isolation_level=None, timeout=10)
        blocker.execute("BEGIN EXCLUSIVE")  # the writer waits for this lock

        async def go() -> None:
            tasks = [
                asyncio.ensure_future(
                    ex.aexecute(ToolCall(id=f"c{i}", name="book", arguments={"item": "x"}))
                )
                for i in range(2)
            ]
            # Both intents are queued, or in the writer's blocked transaction.
            await asyncio.to_thread(wait_until, lambda: journal.stats().pending >= 2)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await task

        try:
            asyncio.run(go())
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert journal.flush(10)
    assert ran == []
    with Journal(path) as j:
        records = j.records()
        assert records  # at least the queued one began
        assert {r.status for r in records} == {"cancelled"}
        assert j.in_doubt() == []


def test_journal_closed_under_an_executor_the_calls_still_run(
    make_executor: MakeExecutor, path: Path
) -> None:
    reg, ran = _counting_registry()
    journal = Journal(path, create=True)
    ex = make_executor(reg, journal=journal)
    journal.close()
    r = ex.execute(ToolCall(id="z", name="book", arguments={"item": "x"}))
    assert r.ok and len(ran) == 1  # not lost: run unjournaled, and logged


def test_one_journal_shared_by_two_executors(path: Path) -> None:
    reg, ran = _counting_registry()
    with Journal(path, create=True) as journal:
        with Executor(reg, journal=journal) as a, Executor(reg, journal=journal) as b:
            a.execute(ToolCall(id="s1", name="book", arguments={"item": "x"}))
            r = b.execute(ToolCall(id="s1", name="book", arguments={"item": "x"}))
            assert r.metadata["replayed"] is True
        assert not journal.closed  # not the executors' to close
        sessions = {rec.owner.session for rec in journal.records()}
        assert len(sessions) == 2
    assert len(ran) == 1


# -- secrets ------------------------------------------------------------------------------

SECRET = "sk-secret-7f3a9c2e51d84b06"


def test_no_secret_reaches_the_journal_file(path: Path) -> None:
    reg = ToolRegistry()

    @reg.tool
    def deploy(target: str, api_key: str) -> dict[str, Any]:
        return {"target": target, "note": f"deployed with {api_key}"}

    @reg.tool
    def rotate(api_key: str) -> str:
        raise RuntimeError(f"rotation refused for key {api_key}")

    with Executor(reg, journal=path) as ex:
        ok = ex.execute(
            ToolCall(id="d1", name="deploy", arguments={"target": "prod", "api_key": SECRET})
        )
        bad = ex.execute(ToolCall(id="d2", name="rotate", arguments={"api_key": SECRET}))
        raw = ex.execute(
            ToolCall(id="d3", name="deploy", arguments=f'{{"target": "x", "api_key": "{SECRET}"}}')
        )
        assert ok.ok and bad.status == "error" and raw.ok
        assert SECRET not in str(ok) + str(bad) + str(raw)
        # Read before close too, while the WAL still holds everything.
        files = [p for p in path.parent.rglob("*") if p.is_file()]
        assert any(p.name.endswith("-wal") for p in files)
        for p in files:
            assert SECRET.encode() not in p.read_bytes(), p
    for p in (p for p in path.parent.rglob("*") if p.is_file()):
        assert SECRET.encode() not in p.read_bytes(), p
    with Journal(path) as j:
        d1 = j.get("d1")
        assert d1 is not None and d1.arguments == {"target": "prod", "api_key": "***"}
    assert oct(path.stat().st_mode & 0o777) == "0o600"


# -- size bounds --------------------------------------------------------------------------


def test_big_results_are_recorded_cut_down_and_say_so(path: Path) -> None:
    reg = ToolRegistry()
    runs: list[int] = []

    @reg.tool
    def dump(n: int) -> str:
        runs.append(n)
        return "x" * n

    with Journal(path, create=True, max_result_bytes=2000) as journal:
        with Executor(reg, journal=journal) as ex:
            full = ex.execute(ToolCall(id="big", name="dump", arguments={"n": 200_000}))
            assert len(full.output) == 200_000  # the caller gets it all
            replayed = ex.execute(ToolCall(id="big", name="dump", arguments={"n": 200_000}))
        record = journal.records(call_id="big")[-1]
    assert record.truncated and record.result is not None
    assert len(record.result.output) < 2000
    assert record.result.metadata["journal_truncated"] is True
    assert replayed.metadata["replayed"] is True and replayed.metadata["journal_truncated"]
    assert runs == [200_000]


# -- retention ----------------------------------------------------------------------------


def _book_many(ex: Executor, prefix: str, n: int) -> None:
    for i in range(n):
        assert ex.execute(ToolCall(id=f"{prefix}{i}", name="book", arguments={"item": str(i)})).ok


def test_retention_prunes_by_rows_keeps_what_is_in_doubt(path: Path) -> None:
    reg, _ = _counting_registry()
    with Executor(reg, journal=path, journal_retention={"rows": 10, "days": None}) as ex:
        journal = ex.journal
        assert journal is not None
        _fake_in_doubt(path, "doubt-1")  # the oldest record of all but one
        _book_many(ex, "r", 30)
        journal.prune()
        kept = journal.records()
    ids = [r.call_id for r in kept]
    assert "doubt-1" in ids  # never pruned silently
    assert [i for i in ids if i != "doubt-1"] == [f"r{i}" for i in range(29, 19, -1)]


def test_retention_prunes_by_age(path: Path) -> None:
    reg, _ = _counting_registry()
    with Executor(reg, journal=path, journal_retention=Retention(days=1, rows=None)) as ex:
        _book_many(ex, "old", 5)
        _book_many(ex, "new", 3)
        journal = ex.journal
        assert journal is not None
        assert journal.flush(5)
        conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        conn.execute("UPDATE calls SET ended = ended - 2 * 86400 WHERE call_id LIKE 'old%'")
        conn.close()
        assert journal.prune() == 5
        assert sorted(r.call_id for r in journal.records()) == ["new0", "new1", "new2"]


def test_retention_prunes_at_open_off_the_callers_path(path: Path) -> None:
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        _book_many(ex, "a", 40)
    with Executor(reg, journal=path, journal_retention={"rows": 15}) as ex:
        journal = ex.journal
        assert journal is not None
        wait_until(lambda: journal.stats().pruned >= 25, what="the prune at open")
        assert len(journal.records()) == 15


def test_reading_journal_can_prune(path: Path) -> None:
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        _book_many(ex, "a", 12)
    with Journal(path, retention={"rows": 4}) as j:
        assert j.prune() == 8
        assert len(j.records()) == 4


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ({"days": 0}, ValueError, "journal_retention: days must be > 0"),
        ({"rows": "10"}, TypeError, "journal_retention: rows must be an integer"),
        ({"rows": 0}, ValueError, "rows must be >= 1"),
        ({"rows": True}, TypeError, "rows must be an integer"),
        ({"days": float("nan")}, ValueError, "days must be a number"),
        ({"weeks": 2}, ValueError, "unknown key(s) 'weeks'"),
        ({"days": None, "rows": None}, ValueError, "grow without limit"),
        (30, TypeError, "must be a toolbus.journal.Retention or a mapping"),
    ],
)
def test_bad_retention_is_refused_at_construction(
    path: Path, value: Any, error: type[Exception], words: str
) -> None:
    reg, _ = _counting_registry()
    with pytest.raises(error) as info:
        Executor(reg, journal=path, journal_retention=value)
    assert words in str(info.value)
    assert str(info.value).startswith("Executor: journal_retention")
    assert not path.exists()  # nothing made for a refused option


def test_retention_needs_a_journal_from_a_path(path: Path) -> None:
    reg, _ = _counting_registry()
    with pytest.raises(ValueError, match="journal_retention= needs journal="):
        Executor(reg, journal_retention={"rows": 5})
    with (
        Journal(path, create=True) as j,
        pytest.raises(ValueError, match="Journal\\(path, retention"),
    ):
        Executor(reg, journal=j, journal_retention={"rows": 5})
    assert Retention() == Retention(days=30, rows=100_000)


# -- bad paths ----------------------------------------------------------------------------


def test_journal_in_a_missing_directory(tmp_path: Path) -> None:
    reg, _ = _counting_registry()
    where = tmp_path / "nope" / "journal.sqlite"
    with pytest.raises(FileNotFoundError, match=r"directory .*nope.* does not exist"):
        Executor(reg, journal=where)
    with pytest.raises(FileNotFoundError, match="no journal at"):
        Journal(tmp_path / "missing.sqlite")  # reading never makes one


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_journal_in_an_unwritable_directory(tmp_path: Path) -> None:
    reg, _ = _counting_registry()
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            Executor(reg, journal=locked / "j.sqlite")
    finally:
        locked.chmod(0o700)


def test_journal_where_no_file_can_be_made(tmp_path: Path) -> None:
    reg, _ = _counting_registry()
    with pytest.raises(OSError, match="journal"):
        Executor(reg, journal="/proc/self/toolbus-journal.sqlite")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        Executor(reg, journal=tmp_path)
    with pytest.raises(TypeError, match=r"journal must be a path or a toolbus\.Journal"):
        Executor(reg, journal=42)  # type: ignore[arg-type]


def test_a_file_that_is_not_a_journal(tmp_path: Path) -> None:
    reg, _ = _counting_registry()
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not SQLite\n" * 100)
    with pytest.raises(ValueError, match="not a toolbus journal"):
        Executor(reg, journal=text)
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="not a toolbus journal"):
        Journal(other)


# -- concurrency and group commit ---------------------------------------------------------


def test_concurrent_mutating_calls_are_all_durable(path: Path) -> None:
    reg, ran = _counting_registry()
    threads, per_thread = 8, 25
    errors: list[BaseException] = []
    with Executor(reg, journal=path, max_parallel=8) as ex:

        def caller(t: int) -> None:
            try:
                for i in range(per_thread):
                    r = ex.execute(ToolCall(id=f"t{t}-{i}", name="book", arguments={"item": "x"}))
                    assert r.ok
            except BaseException as e:
                errors.append(e)

        workers = [threading.Thread(target=caller, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        journal = ex.journal
        assert journal is not None
        assert journal.flush(10)
        stats = journal.stats()
    assert errors == []
    assert len(ran) == threads * per_thread
    assert stats.intents == stats.outcomes == threads * per_thread
    assert stats.failed_commits == 0
    with Journal(path) as j:  # a fresh connection: what is on disk
        records = j.records()
    assert len(records) == threads * per_thread
    assert {r.status for r in records} == {"ok"}


def test_intents_queued_together_share_one_commit(path: Path) -> None:
    """Group commit: while the writer waits (here: on another connection's
    lock), intents pile up; they are then written in one transaction, one sync."""
    reg, ran = _counting_registry()
    callers = 8
    with Executor(reg, journal=path, max_parallel=callers) as ex:
        journal = ex.journal
        assert journal is not None
        blocker = sqlite3.connect(path, isolation_level=None, timeout=10)
        blocker.execute("BEGIN EXCLUSIVE")
        before = journal.stats()
        results: list[Any] = []
        workers = [
            threading.Thread(
                target=lambda i=i: results.append(
                    ex.execute(ToolCall(id=f"g{i}", name="book", arguments={"item": str(i)}))
                )
            )
            for i in range(callers)
        ]
        try:
            for w in workers:
                w.start()
            # Every intent is in the writer's blocked transaction or queued behind it.
            wait_until(lambda: journal.stats().pending >= callers, what="queued intents")
            assert ran == []  # no tool runs before its intent is on disk
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        for w in workers:
            w.join()
        after = journal.stats()
    assert len(results) == callers and all(r.ok for r in results)
    assert after.intents - before.intents == callers
    # At most two groups: what the writer had taken when it blocked, and the rest.
    assert after.largest_group >= callers // 2
    assert after.synced_commits - before.synced_commits <= 2


# -- owners: when is a session gone -------------------------------------------------------


def _session(me: Here, **changes: Any) -> SessionInfo:
    now = time.time()
    values: dict[str, Any] = {
        "session": "s",
        "pid": me.pid,
        "host": me.host,
        "machine": me.machine,
        "start_ticks": me.start_ticks,
        "lock": None,
        "opened": now,
        "heartbeat": now,
        "closed": None,
    }
    values.update(changes)
    return SessionInfo(**values)


@pytest.fixture
def zombie() -> Iterator[int]:
    """A child process that has exited and is not reaped yet."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])

    def state() -> str:
        text = Path(f"/proc/{proc.pid}/stat").read_text()
        return text[text.rfind(")") + 2]

    wait_until(lambda: state() == "Z", what="the child to exit")
    yield proc.pid
    proc.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_when_an_owner_is_gone(tmp_path: Path, zombie: int) -> None:
    me = here()
    locks = tmp_path
    assert not gone(_session(me), me, locks, 60)  # this very process
    assert gone(_session(me, closed=time.time()), me, locks, 60)
    assert me.start_ticks is not None
    # The pid now belongs to a process that started at another time: reused.
    assert gone(_session(me, start_ticks=me.start_ticks - 1), me, locks, 60)
    assert gone(_session(me, pid=zombie), me, locks, 60)  # dead, only not reaped
    assert gone(_session(me, pid=2**22 + 12345), me, locks, 60)  # no such process
    # Another host (or container): only the heartbeat says.
    far = {"host": "elsewhere", "machine": "other-boot/pid:[1]"}
    assert not gone(_session(me, **far), me, locks, 60)
    assert gone(_session(me, **far, heartbeat=time.time() - 61), me, locks, 60)
    # An owner lock overrides all of that: held means alive, free means gone.
    (locks / "free").write_text("")
    assert gone(_session(me, lock="free"), me, locks, 60)
    assert gone(_session(me, lock="removed"), me, locks, 60)
    held = OwnerLock(locks, "held")
    assert held.name == "held"
    assert not gone(_session(me, lock="held", **far, heartbeat=0.0), me, locks, 60)
    held.release()
    assert gone(_session(me, lock="held", **far, heartbeat=time.time()), me, locks, 60)


def test_without_owner_locks_the_process_and_heartbeat_decide(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system without flock, a session is judged by its process (same
    machine) and kept fresh by a heartbeat (for other hosts)."""
    import toolbus.journal._owner as owner
    import toolbus.journal._writer as writer

    monkeypatch.setattr(owner, "fcntl", None)
    monkeypatch.setattr(writer, "HEARTBEAT_EVERY", 0.01)
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        assert ex.execute(ToolCall(id="n1", name="book", arguments={"item": "x"})).ok
        journal = ex.journal
        assert journal is not None
        assert journal.flush(5)
        record = journal.get("n1")
        assert record is not None
        session = record.owner.session
        assert not lock_dir(path).joinpath(session).exists()
        conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        opened = conn.execute("SELECT heartbeat FROM sessions WHERE id = ?", (session,)).fetchone()
        wait_until(
            lambda: (
                conn.execute("SELECT heartbeat FROM sessions WHERE id = ?", (session,)).fetchone()[
                    0
                ]
                > opened[0]
            ),
            what="a heartbeat",
        )
        # A call of this open session without an outcome: running, not in doubt.
        conn.execute(
            "INSERT INTO calls (session, seq, call_id, tool, arguments, key, started) "
            "VALUES (?, 999, 'open-1', 'book', '{}', 'k', 0)",
            (session,),
        )
        assert journal.get("open-1").state == "running"  # type: ignore[union-attr]
        assert ex.in_doubt() == []
    with Journal(path) as j:
        assert [r.call_id for r in j.in_doubt()] == ["open-1"]  # closed: gone
    conn.close()


# -- when the journal misbehaves: bounded waits, nothing lost, nothing silent ---------------


class Gate:
    """Stands in for a disk that stops answering: while closed, the writer's
    next commit blocks (inside its transaction, as a stuck fsync would)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.open.set()
        self.blocked = threading.Event()
        original = Writer._apply

        def apply(writer: Writer, ops: list[Any], *, careful: bool) -> Any:
            if not self.open.is_set():
                self.blocked.set()
                self.open.wait(30)
            return original(writer, ops, careful=careful)

        monkeypatch.setattr(Writer, "_apply", apply)

    def close(self) -> None:
        self.open.clear()
        self.blocked.clear()

    def stall(self, journal: Journal) -> threading.Thread:
        """Close the gate and have the writer stuck in a commit (of a flush)."""
        self.close()
        flusher = threading.Thread(target=journal.flush, args=(30,), daemon=True)
        flusher.start()
        assert self.blocked.wait(5), "the writer did not start a commit"
        return flusher


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(("toolbus", "Supervisor"))}


def test_a_stuck_disk_delays_a_mutating_call_by_journal_timeout_at_most(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The intent wait is bounded: after `journal_timeout` the call runs
    unjournaled (logged as an error, by call id, and counted); its intent and
    outcome stay queued and are written once the disk answers again."""
    gate = Gate(monkeypatch)
    reg, ran = _counting_registry()
    # Waiting for the stuck writer again would take journal_timeout (5 s):
    # the bound on "did not wait" (4.5 s) stays under it, however loaded the machine.
    with Executor(reg, journal=path, timeout=10, journal_timeout=5) as ex:
        journal = ex.journal
        assert journal is not None
        assert ex.execute(ToolCall(id="before", name="book", arguments={"item": "x"})).ok
        flusher = gate.stall(journal)
        began = time.monotonic()
        r = ex.execute(ToolCall(id="stuck-1", name="book", arguments={"item": "y"}))
        first = time.monotonic() - began
        # Released at journal_timeout, not when the disk answers (never, here).
        assert r.ok and first < 20
        # The writer is known to be stuck now: the next call does not wait again.
        began = time.monotonic()
        assert ex.execute(ToolCall(id="stuck-2", name="book", arguments={"item": "z"})).ok
        assert time.monotonic() - began < 4.5  # not the 5 s wait again
        # Read-only calls never wait for the journal.
        assert ex.execute(ToolCall(id="look", name="look", arguments={"item": "x"})).ok
        stats = journal.stats()
        assert stats.unjournaled == 2 and stats.pending >= 4
        assert len(ran) == 4
        unjournaled = [
            rec.getMessage()
            for rec in caplog.records
            if rec.levelname == "ERROR" and "runs without its intent on disk" in rec.getMessage()
        ]
        assert len(unjournaled) == 2 and "stuck-1" in unjournaled[0]
        assert "journal_timeout" in unjournaled[0]
        gate.open.set()  # the disk answers again
        flusher.join(5)
        assert journal.flush(5)
    with Journal(path) as j:
        records = {r.call_id: r for r in j.records()}
        assert j.in_doubt() == []
    # Nothing lost: both calls are recorded, with their outcomes, and never
    # as replays (they ran).
    for cid in ("stuck-1", "stuck-2"):
        assert (records[cid].state, records[cid].status) == ("ended", "ok")
        assert records[cid].replay_of is None


def test_a_caller_that_gave_up_on_its_intent_is_not_recorded_as_a_replay(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    reg, ran = _counting_registry()
    # 2 s: what gives up on the stuck journal below, and what the session's
    # row, the first intent and the replay at the end must be on disk within
    # (0.2 s was not always enough for them on a busy machine).
    with Executor(reg, journal=path, journal_timeout=2) as ex:
        journal = ex.journal
        assert journal is not None
        call = ToolCall(id="pay-1", name="book", arguments={"item": "x"})
        assert ex.execute(call).ok
        flusher = gate.stall(journal)
        again = ex.execute(call)  # would be a replay, but nobody waits for the journal
        assert again.ok and "replayed" not in again.metadata
        gate.open.set()
        flusher.join(5)
        assert journal.flush(5)
        # Later, with the journal answering, the key replays as before.
        assert ex.execute(call).metadata["replayed"] is True
    assert len(ran) == 2
    with Journal(path) as j:
        second = j.records(call_id="pay-1")[1]
    assert (second.status, second.replay_of) == ("ok", None)


def test_an_executor_on_a_stuck_journal_fails_clearly_and_leaks_nothing(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(monkeypatch)
    reg, _ = _counting_registry()
    with Journal(path, create=True) as journal:
        with Executor(reg, journal=journal):
            pass  # the writer is running
        flusher = gate.stall(journal)
        before = _threads()
        began = time.monotonic()
        with pytest.raises(TimeoutError, match=r"session was not recorded within 0\.3s"):
            Executor(reg, journal=journal, journal_timeout=0.3)
        assert time.monotonic() - began < 10  # not held until the disk answers (never, here)
        assert _threads() <= before  # no timers, no supervisor left behind
        assert list(lock_dir(path).iterdir()) == []  # the owner lock was let go
        gate.open.set()
        flusher.join(5)
        with Executor(reg, journal=journal) as ex:  # and it works again
            assert ex.execute(ToolCall(id="after", name="book", arguments={"item": "x"})).ok


def test_an_executor_on_a_locked_journal_fails_clearly(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holding the write lock longer than journal_timeout."""
    # SQLite's busy timeout (what waiting for the lock would take) made long,
    # so it is far from the bounds below however loaded the machine.
    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 60_000)
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        ex.execute(ToolCall(id="a", name="book", arguments={"item": "x"}))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        began = time.monotonic()
        with Journal(path) as reader:  # reading never waits for the write lock
            assert [r.call_id for r in reader.records()] == ["a"]
        assert time.monotonic() - began < 10
        with pytest.raises(TimeoutError, match="another process holds its write lock"):
            Executor(reg, journal=path, journal_timeout=0.3)
        assert time.monotonic() - began < 20
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_journal_timeout_is_checked(path: Path) -> None:
    reg, _ = _counting_registry()
    with pytest.raises(ValueError, match="Executor: journal_timeout must be > 0"):
        Executor(reg, journal=path, journal_timeout=0)
    with pytest.raises(TypeError, match="Executor: journal_timeout must be a number"):
        Executor(reg, journal=path, journal_timeout="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="journal_timeout= needs journal="):
        Executor(reg, journal_timeout=5)


def _short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The write lock held past SQLite's busy timeout fails a commit: make the
    timeout short, so a test needs not wait 10 s for it."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 150)


def test_a_failed_commit_keeps_outcomes_until_they_are_written(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The write lock held past the busy timeout while a call ends: the commit
    of its outcome fails, the outcome is kept and written once the lock is
    free; after a clean close the call is not in doubt and, re-sent, is
    replayed, not run again."""
    _short_busy_timeout(monkeypatch)
    started, go = threading.Event(), threading.Event()
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool
    def pay(order: str) -> str:
        ran.append(order)
        started.set()
        go.wait(10)
        return f"paid {order}"

    with Executor(reg, journal=path, timeout=None) as ex:
        journal = ex.journal
        assert journal is not None
        results: list[Any] = []
        worker = threading.Thread(
            target=lambda: results.append(
                ex.execute(ToolCall(id="pay-1", name="pay", arguments={"order": "42"}))
            )
        )
        worker.start()
        assert started.wait(5)  # its intent is on disk
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        go.set()
        worker.join(5)
        assert results[0].ok
        wait_until(lambda: journal.stats().failed_commits >= 1, what="a failed commit")
        assert journal.stats().pending >= 1  # kept, not dropped
        blocker.execute("ROLLBACK")
        blocker.close()
        assert journal.flush(5)
        assert journal.stats().dropped == 0
    assert any("operations kept" in r.getMessage() for r in caplog.records)
    with Journal(path) as j:
        assert j.in_doubt() == []
        assert j.get("pay-1").status == "ok"  # type: ignore[union-attr]
    with Executor(reg, journal=path) as ex:
        again = ex.execute(ToolCall(id="pay-1", name="pay", arguments={"order": "42"}))
    assert again.metadata["replayed"] is True and ran == ["42"]


def test_a_failed_intent_commit_releases_its_caller_and_is_written_late(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _short_busy_timeout(monkeypatch)
    reg, ran = _counting_registry()
    with Executor(reg, journal=path, journal_timeout=60) as ex:
        journal = ex.journal
        assert journal is not None
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            began = time.monotonic()
            r = ex.execute(ToolCall(id="late-1", name="book", arguments={"item": "x"}))
            # Released by the failed commit itself, not by journal_timeout (60 s).
            assert r.ok and time.monotonic() - began < 15
            assert journal.stats().unjournaled == 1
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert journal.flush(5)
    with Journal(path) as j:
        record = j.get("late-1")
    assert record is not None and (record.state, record.status) == ("ended", "ok")
    with Executor(reg, journal=path) as ex:  # recorded after all: re-sent, replayed
        assert ex.execute(ToolCall(id="late-1", name="book", arguments={"item": "x"})).metadata[
            "replayed"
        ]
    assert len(ran) == 1


def test_what_cannot_be_written_by_close_is_logged_by_call_id(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _short_busy_timeout(monkeypatch)
    started, go = threading.Event(), threading.Event()
    reg = ToolRegistry()

    @reg.tool
    def pay(order: str) -> str:
        started.set()
        go.wait(10)
        return "paid"

    ex = Executor(reg, journal=path, timeout=None)
    journal = ex.journal
    assert journal is not None
    worker = threading.Thread(
        target=ex.execute, args=(ToolCall(id="pay-9", name="pay", arguments={"order": "9"}),)
    )
    worker.start()
    assert started.wait(5)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        go.set()
        worker.join(5)
        ex.close(timeout=5)  # the lock is still held: the outcome cannot be written
        stats = journal.stats()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert stats.dropped >= 1
    lost = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert any("outcome (ok) of call 'pay-9'" in m for m in lost), lost


def test_one_unwritable_operation_does_not_spoil_its_group(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An operation SQLite refuses (here: an intent made unbindable on purpose)
    is left out of its group commit alone, and logged; the others in the same
    transaction are written."""
    gate = Gate(monkeypatch)
    original = Writer._intent

    def intent(writer: Writer, conn: sqlite3.Connection, op: Any, counts: Any) -> Any:
        if op[3] == "poison":
            raise sqlite3.InterfaceError("Error binding parameter 4: type 'X' is not supported")
        return original(writer, conn, op, counts)

    monkeypatch.setattr(Writer, "_intent", intent)
    reg, ran = _counting_registry()
    with Executor(reg, journal=path, max_parallel=4) as ex:
        journal = ex.journal
        assert journal is not None
        flusher = gate.stall(journal)
        results: dict[str, Any] = {}
        workers = [
            threading.Thread(
                target=lambda cid=cid: results.__setitem__(
                    cid, ex.execute(ToolCall(id=cid, name="book", arguments={"item": cid}))
                )
            )
            for cid in ("order-1", "poison", "order-2")
        ]
        for w in workers:
            w.start()
        wait_until(lambda: journal.stats().pending >= 4, what="three intents queued")
        gate.open.set()  # one group: the three intents
        for w in workers:
            w.join(10)
        flusher.join(5)
        assert all(r.ok for r in results.values()) and len(ran) == 3  # nothing lost
        stats = journal.stats()
        assert stats.dropped == 1 and stats.unjournaled == 1 and stats.failed_commits == 0
    assert any(
        "intent of call 'poison'" in r.getMessage() and r.levelname == "ERROR"
        for r in caplog.records
    )
    with Journal(path) as j:
        assert {r.call_id: r.status for r in j.records()} == {"order-1": "ok", "order-2": "ok"}
        assert j.in_doubt() == []


def test_a_call_id_utf8_cannot_hold_is_recorded_escaped(path: Path) -> None:
    """A lone surrogate (a model's JSON "\\udc80") in a call id or a tool's
    output: recorded with the surrogate escaped; found by the same id."""
    reg = ToolRegistry()

    @reg.tool
    def book(item: str) -> str:
        return "booked \udc81" + item

    odd = "bad\udc80id"
    with Executor(reg, journal=path) as ex:
        assert ex.execute(ToolCall(id=odd, name="book", arguments={"item": "x"})).ok
        assert ex.execute(ToolCall(id="fine", name="book", arguments={"item": "y"})).ok
        journal = ex.journal
        assert journal is not None
        assert journal.stats().failed_commits == journal.stats().dropped == 0
    with Journal(path) as j:
        record = j.get(odd)
        assert record is not None and record.call_id == "bad\\udc80id"
        assert record.status == "ok" and record.arguments == {"item": "x"}
        assert record.result is not None and record.result.output == "booked \udc81x"
        assert j.get("fine") is not None and j.in_doubt() == []


def test_a_writer_that_dies_fails_fast_never_hangs(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reg, ran = _counting_registry()
    with Journal(path, create=True) as journal:
        # journal_timeout (60 s) far from the bound: no call waits for it.
        ex = Executor(reg, journal=journal, timeout=2, journal_timeout=60)
        assert ex.execute(ToolCall(id="a", name="book", arguments={"item": "x"})).ok

        def broken(writer: Writer, ops: list[Any]) -> Any:
            raise RuntimeError("a bug in the writer")

        monkeypatch.setattr(Writer, "_group", broken)
        began = time.monotonic()
        assert ex.execute(ToolCall(id="b", name="book", arguments={"item": "x"})).ok
        wait_until(lambda: journal.stats().failed, what="the journal to fail")
        monkeypatch.undo()
        # Every later call: no wait at all.
        assert ex.execute(ToolCall(id="c", name="book", arguments={"item": "x"})).ok
        assert time.monotonic() - began < 15
        assert len(ran) == 3
        assert any(r.levelname == "CRITICAL" for r in caplog.records)
        with pytest.raises(JournalFailed, match="writer died: RuntimeError"):
            Executor(reg, journal=journal)
        assert not journal.flush(1)
        ex.close(timeout=2)


def test_an_error_while_pruning_does_not_stop_the_writer(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toolbus.journal._upkeep as writer_module

    def bad_prune(*args: Any) -> int:
        raise OverflowError("Python int too large to convert to SQLite INTEGER")

    monkeypatch.setattr(writer_module, "prune_step", bad_prune)
    reg, ran = _counting_registry()
    with Executor(reg, journal=path) as ex:
        journal = ex.journal
        assert journal is not None
        assert ex.execute(ToolCall(id="a", name="book", arguments={"item": "x"})).ok
        assert journal.flush(5) and not journal.stats().failed
    with Journal(path) as j:
        assert j.get("a").status == "ok"  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_journal_file_removed_or_replaced_is_noticed(
    path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    reg, ran = _counting_registry()
    # journal_timeout (60 s) far from the bound: no call waits for it.
    with Executor(reg, journal=path, timeout=2, journal_timeout=60) as ex:
        journal = ex.journal
        assert journal is not None
        assert ex.execute(ToolCall(id="a", name="book", arguments={"item": "x"})).ok
        assert journal.flush(5)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        if how == "replaced":
            path.write_text("not a database")
        began = time.monotonic()
        results = [
            ex.execute(ToolCall(id=f"b{i}", name="book", arguments={"item": str(i)}))
            for i in range(3)
        ]
        assert all(r.ok for r in results) and time.monotonic() - began < 15
        stats = journal.stats()
        assert stats.failed and stats.unjournaled == 3
        assert not journal.flush(1)
    loud = [r.getMessage() for r in caplog.records if r.levelname == "CRITICAL"]
    assert len(loud) == 1 and f"was {how}" in loud[0]
    assert len(ran) == 4


def test_a_failed_constructor_leaves_no_thread(path: Path) -> None:
    reg, _ = _counting_registry()
    journal = Journal(path, create=True)
    journal.close()
    before = _threads()
    for _ in range(5):
        with pytest.raises(JournalClosed):
            Executor(reg, journal=journal)
    assert _threads() <= before


def test_a_malformed_record_is_left_out_and_logged(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        ex.execute(ToolCall(id="a", name="book", arguments={"item": "x"}))
    _fake_in_doubt(path, "doubt-1")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "INSERT INTO calls (session, seq, call_id, tool, arguments, key, started) "
        "VALUES ('gone', 99, 'bad', 'book', '{}', 'k', 'yesterday')"
    )
    conn.close()
    with Journal(path) as j:
        assert [r.call_id for r in j.in_doubt()] == ["doubt-1"]
        assert {r.call_id for r in j.records()} == {"a", "doubt-1"}
    assert any("is malformed and left out" in r.getMessage() for r in caplog.records)
    before = _threads()
    with Executor(reg, journal=path) as ex:  # starts all the same
        assert [r.call_id for r in ex.in_doubt()] == ["doubt-1"]

    # And whatever fails while the journal is opened leaves nothing behind.
    def broken(self: Journal) -> list[JournalRecord]:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(Journal, "in_doubt", broken)
    with pytest.raises(sqlite3.DatabaseError):
        Executor(reg, journal=path)
    assert _threads() <= before
    assert list(lock_dir(path).iterdir()) == []


PAGE = 4096  # SQLite's default page size, which the journal keeps


def _journal_of_many_records(path: Path) -> dict[str, int]:
    """A closed journal: one call in doubt, then 200 ended calls big enough
    for a few to a page; their record numbers by call id."""
    reg, _ = _counting_registry()
    with Executor(reg, journal=path):
        pass
    _fake_in_doubt(path, "doubt-1")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for n in range(200):
        conn.execute(
            "INSERT INTO calls (session, seq, call_id, tool, arguments, key, started, status, "
            "ended) VALUES ('gone', ?, ?, 'book', ?, ?, 1.0, 'ok', 2.0)",
            (100 + n, f"bulk-{n:04d}", '{"item": "%s"}' % ("x" * 1000), f"key-{n}"),
        )
    conn.execute("COMMIT")
    numbers = dict(conn.execute("SELECT call_id, id FROM calls"))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return numbers


def _damage(path: Path, page: int) -> None:
    """Overwrite page `page` (numbered from 1, as SQLite does) with garbage."""
    with open(path, "r+b") as f:
        f.seek((page - 1) * PAGE)
        f.write(b"\xab" * PAGE)


def test_a_damaged_page_of_records_leaves_out_only_those_records(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    numbers = _journal_of_many_records(path)
    data = path.read_bytes()
    # The table's leaf pages (type 0x0D) that hold bulk records: one in the
    # middle is damaged, and the records written in it are lost.
    leaves = [
        n
        for n in range(2, len(data) // PAGE + 1)
        if data[(n - 1) * PAGE] == 0x0D and b"bulk-" in data[(n - 1) * PAGE : n * PAGE]
    ]
    victim = leaves[len(leaves) // 2]
    lost = {
        m.decode() for m in re.findall(rb"bulk-\d{4}", data[(victim - 1) * PAGE : victim * PAGE])
    }
    assert lost and "doubt-1" not in lost
    _damage(path, victim)
    with Journal(path) as j:
        assert [r.call_id for r in j.in_doubt()] == ["doubt-1"]
        listed = {r.call_id for r in j.records()}
        assert listed == set(numbers) - lost
    # Each listing warns once, naming the numbers of the records left out.
    warnings = [r.getMessage() for r in caplog.records if "cannot be read" in r.getMessage()]
    assert len(warnings) == 2
    for warning in warnings:
        assert str(path) in warning
        named = warning.split("record(s) ")[1].split(" cannot")[0]
        assert {int(n) for n in named.split(", ")} == {numbers[c] for c in lost}
    reg, ran = _counting_registry()
    with Executor(reg, journal=path) as ex:  # starts all the same
        assert [r.call_id for r in ex.in_doubt()] == ["doubt-1"]
        assert ex.execute(ToolCall(id="after", name="book", arguments={"item": "y"})).ok
    assert len(ran) == 1


@pytest.mark.parametrize("table", ["sessions", "meta"])
def test_a_journal_damaged_where_it_cannot_be_used_is_a_value_error_naming_it(
    path: Path, table: str
) -> None:
    _journal_of_many_records(path)
    conn = sqlite3.connect(path)
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    conn.close()
    _damage(path, root)
    reg, _ = _counting_registry()
    before = _threads()
    with pytest.raises(
        ValueError, match=r"is damaged and cannot be used: .*database disk image is malformed"
    ) as e:
        Executor(reg, journal=path)
    assert str(path) in str(e.value)
    assert _threads() <= before
    assert list(lock_dir(path).iterdir()) == []


def test_reading_a_journal_needs_no_write_access_and_writes_nothing(path: Path) -> None:
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        ex.execute(ToolCall(id="a", name="book", arguments={"item": "x"}))
    files = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in path.parent.iterdir()}
    with Journal(path) as j:
        assert [r.call_id for r in j.records()] == ["a"] and j.in_doubt() == []
    assert {p.name for p in path.parent.iterdir()} >= set(files)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == files[path.name]
    empty = path.with_name("empty.sqlite")
    empty.touch()
    with pytest.raises(ValueError, match="empty, not a toolbus journal yet"):
        Journal(empty)
    assert empty.stat().st_size == 0  # nothing made by a reader


def test_retention_values_beyond_what_the_journal_can_hold_are_refused(path: Path) -> None:
    reg, _ = _counting_registry()
    for value, words in (
        ({"rows": 2**63}, "rows must be at most"),
        ({"rows": 10**30}, "rows must be at most"),
        ({"days": 1e306}, "days must be at most"),
    ):
        with pytest.raises(ValueError, match=words):
            Executor(reg, journal=path, journal_retention=value)
        with pytest.raises(ValueError, match=words):
            Journal(path, create=True, retention=value)
    assert not path.exists()
    assert Retention(days=1_000_000, rows=10**12).rows == 10**12


# -- ids and keys -------------------------------------------------------------------------


def test_generated_ids_are_known_from_any_process() -> None:
    assert generated_id(ToolCall(name="t").id)
    assert generated_id("call_1f3a_12")  # made by another process
    assert generated_id(fallback_call_id(0, "add_item", '{"item": "milk"}'))
    for model_id in ("call_abc123", "call_Ab3xYz9QwErTy", "toolu_01A", "call_1f3a_", "c1"):
        assert not generated_id(model_id)


def test_provider_fallback_ids_are_never_replayed(path: Path) -> None:
    """A model reply without call ids: each call gets `call_toolbus_<hash>`, the
    same for the same call in a later turn. Two turns adding milk add it twice."""
    from toolbus.providers import openai

    reg = ToolRegistry()
    basket: list[str] = []

    @reg.tool
    def add_item(item: str) -> str:
        basket.append(item)
        return f"{len(basket)} items"

    turn = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"type": "function", "function": {"name": "add_item", "arguments": '{"item": "milk"}'}}
        ],
    }
    with Executor(reg, journal=path) as ex:
        for _ in range(2):
            [call] = openai.chat_tool_calls(turn)
            assert call.id.startswith("call_toolbus_")
            assert "replayed" not in ex.execute(call).metadata
    assert basket == ["milk", "milk"]


def test_a_generated_id_from_another_process_keeps_the_key(path: Path) -> None:
    """A ToolCall made (with a generated id) by a process that has since died,
    re-sent by its successor: the same key, since the id is not part of it."""
    reg, ran = _counting_registry()
    with Executor(reg, journal=path) as ex:
        ex.execute(ToolCall(name="book", arguments={"item": "eggs"}))
        ex.execute(ToolCall(id="call_7fff0_3", name="book", arguments={"item": "eggs"}))
        ex.execute(
            ToolCall(id="call_toolbus_0123456789abcdef", name="book", arguments={"item": "eggs"})
        )
    assert len(ran) == 3 and len(set(ran)) == 1


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("", "must not be empty or blank"),
        ("   ", "must not be empty or blank"),
        ("order\x00-1", "printable"),
        ("a\nb", "printable"),
        ("k" * 257, "at most 256 characters, got 257"),
        ("k" * 1_000_000, "at most 256 characters"),
    ],
)
def test_bad_idempotency_keys_are_refused(path: Path, key: str, words: str) -> None:
    # A ToolCall made by the caller: an error at once, where it is made.
    with pytest.raises(ValueError, match=words):
        ToolCall(name="book", arguments={"item": "x"}, idempotency_key=key)
    # A call given as a mapping (or made without validation): a result, never
    # an exception out of execute, and the tool does not run under another key.
    reg, ran = _counting_registry()
    as_dict = {"id": "k1", "name": "book", "arguments": {"item": "x"}, "idempotency_key": key}
    unchecked = ToolCall.model_construct(
        id="k2", name="book", arguments={"item": "x"}, idempotency_key=key
    )
    with Executor(reg, journal=path) as ex:
        for r in (
            ex.execute(as_dict),
            ex.execute(unchecked),
            ex.execute_batch([as_dict])[0],
            asyncio.run(ex.aexecute(as_dict)),
        ):
            assert (r.status, r.error_code) == ("rejected", "INVALID_ARGUMENTS")
            assert words.split(",", maxsplit=1)[0] in (r.error or "")
    assert ran == []
    assert ToolCall(name="book", idempotency_key="order-42 #1").idempotency_key == "order-42 #1"


def test_odd_journal_paths_are_clear_errors_at_once(tmp_path: Path) -> None:
    reg, _ = _counting_registry()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere" / "j.sqlite")
    for where, error, words in (
        ("", ValueError, "path is empty"),
        ("/dev/null", ValueError, r"not a regular file \(it is a character device\)"),
        (fifo, ValueError, r"not a regular file \(it is a named pipe\)"),
        (dangling, FileNotFoundError, "is a symbolic link to .*nowhere.*, which does not exist"),
        (tmp_path / ("a" * 300), OSError, "journal .*: File name too long"),
        (f"{tmp_path}/x\0y", ValueError, "NUL character"),
    ):
        began = time.monotonic()
        with pytest.raises(error, match=words):
            Executor(reg, journal=where)
        assert time.monotonic() - began < 10  # refused, never opened (a FIFO would block)


def test_a_long_outage_keeps_a_bounded_backlog_and_logs_what_it_gives_up(
    path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import toolbus.journal._failures as writer_module

    _short_busy_timeout(monkeypatch)
    monkeypatch.setattr(writer_module, "MAX_KEPT", 1)
    reg, _ = _counting_registry()
    with Executor(reg, journal=path) as ex:
        journal = ex.journal
        assert journal is not None
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            assert ex.execute(ToolCall(id="out-1", name="book", arguments={"item": "x"})).ok
            wait_until(lambda: journal.stats().dropped >= 2, what="the backlog to be cut")
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert journal.flush(5)
    given_up = [r.getMessage() for r in caplog.records if "too many operations" in r.getMessage()]
    assert given_up and "call 'out-1'" in given_up[0]
