"""The in-doubt rule on toolbus's own journal, opted in with
`Executor(journal=..., on_in_doubt=...)` (`toolbus.in_doubt`,
`toolbus/pipeline/_journaled.py`).

The journal is the version-1 fixture (tests/fixtures/journal/v1.sqlite): its
call `call_doubt` (`charge(amount=99)`) was left in doubt by a process
killed with SIGKILL while the tool ran.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from toolbus import ErrorCode, Executor, Journal, ToolCall, ToolContext, ToolRegistry
from toolbus._executor import _journal
from toolbus.in_doubt import Fail, InDoubtCall, Rerun, Skip, never_rerun

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "journal" / "v1.sqlite"
DOUBT = ToolCall(id="call_doubt", name="charge", arguments={"amount": 99})


@pytest.fixture
def path(tmp_path: Path) -> Path:
    copy = tmp_path / "journal.sqlite"
    shutil.copyfile(FIXTURE, copy)
    return copy


def registry(*, idempotent: bool = False) -> tuple[ToolRegistry, list[str]]:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool(idempotent=idempotent)
    def charge(amount: int, ctx: ToolContext, api_key: str = "") -> str:
        ran.append(ctx.idempotency_key)
        return f"charged {amount}"

    return reg, ran


def record_key(path: Path) -> str:
    with Journal(path) as j:
        (record,) = j.in_doubt()
        return record.idempotency_key


def test_without_a_handler_a_call_in_doubt_runs_again_as_before(path: Path) -> None:
    reg, ran = registry()
    with Executor(reg, journal=path) as ex:
        assert ex.execute(DOUBT).ok
        assert [r.call_id for r in ex.in_doubt()] == ["call_doubt"]  # left as it was
    assert len(ran) == 1


def test_never_rerun_fails_it_and_clears_the_record(path: Path) -> None:
    reg, ran = registry()
    with Executor(reg, journal=path, on_in_doubt=never_rerun) as ex:
        result = ex.execute(DOUBT)
        assert result.status == "error" and result.error_code == ErrorCode.IN_DOUBT
        assert result.metadata == {"in_doubt": "failed"} and result.attempts == 0
        assert ex.in_doubt() == []  # decided: acknowledged
        # Decided once: the next call of that key runs.
        assert ex.execute(DOUBT).ok
    assert len(ran) == 1


@pytest.mark.parametrize("answer", ["skip", "rerun", "fail", "raises", "junk"])
def test_the_handler_decides(path: Path, answer: str) -> None:
    key = record_key(path)
    reg, ran = registry()
    asked: list[InDoubtCall] = []

    def handler(call: InDoubtCall) -> Any:
        asked.append(call)
        if answer == "raises":
            raise RuntimeError(f"ledger down for {call.arguments}")
        return {
            "skip": Skip("charged 99"),
            "rerun": Rerun(),
            "fail": Fail("ledger says no"),
            "junk": 42,
        }[answer]

    with Executor(reg, journal=path, on_in_doubt=handler) as ex:
        result = ex.execute(DOUBT)
        assert ex.in_doubt() == []
    assert [(c.call_id, c.tool, c.arguments, c.idempotency_key) for c in asked] == [
        ("call_doubt", "charge", {"amount": 99}, key)
    ]
    if answer == "rerun":
        assert result.ok and ran == [key]  # the same key
        return
    assert ran == []
    if answer == "skip":
        assert (result.status, result.output, result.metadata) == (
            "ok",
            "charged 99",
            {"in_doubt": "skipped"},
        )
    else:
        assert result.error_code == ErrorCode.IN_DOUBT
        assert ("ledger says no" in (result.error or "")) == (answer == "fail")
        assert "ledger down" not in (result.error or "")


async def test_an_async_handler_from_an_async_caller(path: Path) -> None:
    reg, ran = registry()

    async def handler(call: InDoubtCall) -> Skip:
        await asyncio.sleep(0)
        return Skip(f"charged {call.arguments['amount']}")

    with Executor(reg, journal=path, on_in_doubt=handler) as ex:
        result = await ex.aexecute(DOUBT)
    assert result.output == "charged 99" and ran == []


def test_an_idempotent_tool_runs_again_without_asking(path: Path) -> None:
    key = record_key(path)
    reg, ran = registry(idempotent=True)
    asked: list[InDoubtCall] = []
    with Executor(reg, journal=path, on_in_doubt=asked.append) as ex:
        assert ex.execute(DOUBT).ok
        assert ex.in_doubt() == []
    assert ran == [key] and asked == []


def test_a_call_with_an_id_toolbus_made_up_is_not_taken_for_it(path: Path) -> None:
    reg, ran = registry()
    with Executor(reg, journal=path, on_in_doubt=never_rerun) as ex:
        assert ex.execute(ToolCall(name="charge", arguments={"amount": 99})).ok
        assert [r.call_id for r in ex.in_doubt()] == ["call_doubt"]
    assert len(ran) == 1


def test_on_in_doubt_is_checked(tmp_path: Path) -> None:
    reg, _ = registry()
    with pytest.raises(ValueError, match=r"on_in_doubt= needs journal="):
        Executor(reg, on_in_doubt=never_rerun)
    with pytest.raises(TypeError, match="on_in_doubt must be a callable"):
        Executor(reg, journal=tmp_path / "j.sqlite", on_in_doubt="fail")  # type: ignore[arg-type]


def test_a_skipped_call_is_recorded_so_its_key_replays_it(path: Path) -> None:
    reg, ran = registry()
    with Executor(reg, journal=path, on_in_doubt=lambda c: Skip("charged 99")) as ex:
        assert ex.execute(DOUBT).metadata == {"in_doubt": "skipped"}
        again = ex.execute(DOUBT)
        assert again.output == "charged 99" and again.metadata.get("replayed") is True
    with Executor(reg, journal=path) as ex:  # and after a restart
        assert ex.execute(DOUBT).metadata.get("replayed") is True
    assert ran == []


def test_a_call_that_ends_while_its_handler_decides_leaves_the_record_in_doubt(
    path: Path,
) -> None:
    import threading

    reg, ran = registry()
    release = threading.Event()
    asked: list[str] = []

    def slow(call: InDoubtCall) -> Skip:
        asked.append(call.call_id)
        if len(asked) == 1:
            release.wait(30)  # past the call's timeout
        return Skip("charged 99")

    with Executor(reg, journal=path, on_in_doubt=slow) as ex:
        first = ex.execute(DOUBT, timeout=0.2)
        assert first.status == "timeout" and ex.stats().abandoned_workers == 1
        release.set()
        # Its worker comes back once the handler has returned and the
        # record was put back (the state this waits for, not a time).
        wait_until(lambda: ex.stats().abandoned_workers == 0, what="its worker back")
        assert [r.call_id for r in ex.in_doubt()] == ["call_doubt"]  # not decided
        second = ex.execute(DOUBT)
        assert second.metadata == {"in_doubt": "skipped"}
        assert ex.in_doubt() == []
    assert asked == ["call_doubt", "call_doubt"] and ran == []


def test_close_waits_for_its_decisions_on_calls_in_doubt_to_be_written(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A decision is acknowledged in the journal on a thread of its own: an
    # executor closing (a process ending) right after must not close the
    # journal first, or the call it decided is in doubt again at next start.
    writing, written = threading.Event(), threading.Event()
    acknowledge = Journal.acknowledge

    def slow(self: Journal, record: Any) -> None:
        writing.set()
        assert written.wait(30)  # until close is waiting for it
        acknowledge(self, record)

    closing = threading.Event()
    waits = _journal.acknowledged

    def watched(calls: Any, timeout: float) -> None:
        closing.set()
        waits(calls, timeout)

    monkeypatch.setattr(Journal, "acknowledge", slow)
    monkeypatch.setattr(_journal, "acknowledged", watched)
    reg, ran = registry()
    ex = Executor(reg, journal=path, on_in_doubt=never_rerun)
    assert ex.execute(DOUBT).error_code == ErrorCode.IN_DOUBT
    assert writing.wait(30)
    closer = threading.Thread(target=ex.close, kwargs={"timeout": 60})
    closer.start()
    assert closing.wait(30), "close went on without waiting for the acknowledgement"
    written.set()
    closer.join(60)
    assert not closer.is_alive()
    with Journal(path) as j:
        assert j.in_doubt() == []
    assert ran == []


def _left_in_doubt(path: Path, call: ToolCall) -> None:
    """`call` recorded with its arguments' digest, then left as a crash
    leaves it: its intent and no outcome, its session gone (closed)."""
    reg, _ = registry()
    with Executor(reg, journal=path) as ex:
        assert ex.execute(call).ok
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "UPDATE calls SET status = NULL, error_code = NULL, result = NULL, ended = NULL "
        "WHERE call_id = ?",
        (call.id,),
    )
    conn.close()


def test_a_call_with_other_arguments_under_the_key_of_a_call_in_doubt_is_not_decided_as_it(
    tmp_path: Path,
) -> None:
    # The caller's key names one operation: charge(99) under "order-42" is in
    # doubt. charge(50) under that key is another operation: the handler must
    # not skip it as if it were the one in doubt (nor let go of that one).
    path = tmp_path / "journal.sqlite"
    doubt = ToolCall(id="c1", name="charge", arguments={"amount": 99}, idempotency_key="order-42")
    _left_in_doubt(path, doubt)
    reg, ran = registry()
    asked: list[InDoubtCall] = []

    def handler(call: InDoubtCall) -> Skip:
        asked.append(call)
        return Skip("found in the ledger")

    with Executor(reg, journal=path, on_in_doubt=handler) as ex:
        other = ToolCall(
            id="c2", name="charge", arguments={"amount": 50}, idempotency_key="order-42"
        )
        refused = ex.execute(other)
        assert refused.status == "rejected", refused
        assert refused.error_code == ErrorCode.IDEMPOTENCY_KEY_REUSED
        assert asked == [] and [r.call_id for r in ex.in_doubt()] == ["c1"]
        # The call in doubt itself is still decided by the handler.
        assert ex.execute(doubt).metadata == {"in_doubt": "skipped"}
        assert [c.arguments for c in asked] == [{"amount": 99}]
        assert ex.in_doubt() == []
    assert ran == []


@pytest.mark.parametrize("answer", ["skip", "rerun"])
def test_a_second_call_of_the_key_while_its_call_in_doubt_is_decided_does_not_run(
    path: Path, answer: str
) -> None:
    # The second call found no record to decide (the first had taken it)
    # and no intent of its key running (the first's is written once
    # decided): it ran, while the handler found that the first had happened.
    key = record_key(path)
    reg, ran = registry()
    deciding, decide = threading.Event(), threading.Event()

    def handler(call: InDoubtCall) -> Any:
        deciding.set()
        assert decide.wait(30)
        return Skip("charged 99") if answer == "skip" else Rerun()

    with Executor(reg, journal=path, on_in_doubt=handler) as ex:
        results: list[Any] = []
        first = threading.Thread(target=lambda: results.append(ex.execute(DOUBT)))
        first.start()
        assert deciding.wait(30)
        second = ex.execute(DOUBT)
        decide.set()
        first.join(30)
        assert second.status == "rejected", second
        assert second.error_code == ErrorCode.IDEMPOTENCY_KEY_IN_USE
        assert results[0].ok
        # Once decided, the key's call is answered as for any call that ended.
        third = ex.execute(DOUBT)
        assert third.ok and third.metadata.get("replayed") is True
    assert ran == ([] if answer == "skip" else [key])
