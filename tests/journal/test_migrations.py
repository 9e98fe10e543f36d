"""A journal written by an older toolbus: read as it is, migrated forward by the
first writer, in one transaction (`toolbus/journal/_migrations.py`).

The fixture `tests/fixtures/journal/v1.sqlite` is a journal of schema version
1 as toolbus wrote it before the schema could change (made by
`tests/fixtures/journal/make_v1.py`): an `ok` charge under the caller's key
`order-17`, an `error` call, and a call left in doubt by a killed process.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.journal.test_journal import Gate
from toolbus import ErrorCode, Executor, Journal, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.journal import _migrations

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "journal" / "v1.sqlite"


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    path = tmp_path / "journal.sqlite"
    shutil.copyfile(FIXTURE, path)
    return path


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def version(path: Path) -> int:
    with sqlite3.connect(path) as db:
        value: int = db.execute("PRAGMA user_version").fetchone()[0]
        return value


def columns(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {row[1] for row in db.execute("PRAGMA table_info(calls)")}


def registry() -> tuple[ToolRegistry, list[str]]:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool()
    def charge(amount: int, ctx: ToolContext, api_key: str = "") -> str:
        ran.append(ctx.idempotency_key)
        return f"charged {amount}"

    return reg, ran


def test_the_fixture_is_a_version_1_journal() -> None:
    assert version(FIXTURE) == 1
    assert "args_digest" not in columns(FIXTURE)


def test_a_reader_reads_an_older_journal_without_changing_it(v1: Path) -> None:
    with Journal(v1) as journal:
        states = {r.call_id: (r.state, r.status) for r in journal.records()}
        doubt = [r.call_id for r in journal.in_doubt()]
    assert states == {
        "call_ok": ("ended", "ok"),
        "call_err": ("ended", "error"),
        "call_doubt": ("in_doubt", None),
    }
    assert doubt == ["call_doubt"]
    assert version(v1) == 1


def test_an_executor_migrates_it_and_everything_in_it_still_holds(v1: Path) -> None:
    reg, ran = registry()
    announced: list[str] = []
    sub = bus.subscribe(lambda _s, event, **_: announced.append(event.call_id), bus.IN_DOUBT)
    try:
        with Executor(reg, journal=v1) as ex:
            assert version(v1) == _migrations.SCHEMA_VERSION == 4
            assert "args_digest" in columns(v1)
            assert {"pending", "used_decisions"} <= tables(v1)  # 2 -> 3
            assert "remote_task" in columns(v1)  # 3 -> 4
            ex.drain_events()
            # The call in doubt is announced as before the migration.
            assert announced == ["call_doubt"]
            # The ok call of version 1 replays under its key; its record has
            # no digest, so its arguments are not compared (as before).
            again = ex.execute(
                ToolCall(name="charge", arguments={"amount": 5}, idempotency_key="order-17")
            )
            assert again.metadata.get("replayed") is True and again.output == "charged 5"
            # Other arguments under that key replay it too (it was written
            # without a digest), and do not change what its own arguments get.
            other = ex.execute(
                ToolCall(name="charge", arguments={"amount": 500}, idempotency_key="order-17")
            )
            assert other.metadata.get("replayed") is True and other.output == "charged 5"
            assert ex.execute(
                ToolCall(name="charge", arguments={"amount": 5}, idempotency_key="order-17")
            ).metadata.get("replayed")
            # A new call is recorded with its digest: reusing its key for
            # other arguments is refused.
            first = ex.execute(
                ToolCall(name="charge", arguments={"amount": 7}, idempotency_key="order-18")
            )
            other = ex.execute(
                ToolCall(name="charge", arguments={"amount": 8}, idempotency_key="order-18")
            )
            assert first.ok and other.error_code == ErrorCode.IDEMPOTENCY_KEY_REUSED
            assert ran == ["order-18"]
    finally:
        sub.close()
    with sqlite3.connect(v1) as db:
        digests = dict(db.execute("SELECT call_id, args_digest FROM calls"))
    assert digests["call_ok"] is None and digests["call_doubt"] is None
    assert all(
        len(d) == 64 for c, d in digests.items() if c not in ("call_ok", "call_err", "call_doubt")
    )
    # Opened again: nothing more to do.
    with Executor(reg, journal=v1):
        assert version(v1) == 4


def test_a_migration_that_fails_leaves_the_file_as_it_was(
    v1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        _migrations.MIGRATIONS,
        1,
        ("ALTER TABLE calls ADD COLUMN args_digest TEXT", "SELECT no_such_column FROM calls"),
    )
    reg, _ = registry()
    with pytest.raises(
        OSError,
        match=r"migrating from schema version 1 to 2 failed \(the file is left at version 1\)",
    ):
        Executor(reg, journal=v1)
    assert version(v1) == 1 and "args_digest" not in columns(v1)
    monkeypatch.undo()
    with Executor(reg, journal=v1):
        assert version(v1) == 4


def test_a_newer_journal_is_refused(v1: Path) -> None:
    with sqlite3.connect(v1) as db:
        db.execute("PRAGMA user_version = 5")
    reg, _ = registry()
    with pytest.raises(ValueError, match="schema version 5; this toolbus reads up to 4"):
        Executor(reg, journal=v1)


def test_a_required_journal_refuses_a_mutating_call_it_cannot_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reg, ran = registry()

    @reg.tool(read_only=True)
    def look(item: str) -> str:
        return item

    gate = Gate(monkeypatch)
    with Executor(
        reg, journal=tmp_path / "j.sqlite", journal_required=True, journal_timeout=1
    ) as ex:
        journal = ex.journal
        assert journal is not None
        assert ex.execute(ToolCall(id="c1", name="charge", arguments={"amount": 1})).ok
        flusher = gate.stall(journal)  # the disk stops answering
        refused = ex.execute(ToolCall(id="c2", name="charge", arguments={"amount": 2}))
        assert refused.status == "rejected"
        assert refused.error_code == ErrorCode.JOURNAL_UNAVAILABLE
        assert refused.error == (
            "Tool 'charge' was not run: the journal could not record the call within 1s, "
            "and this executor runs no mutating call unrecorded; try again later"
        )
        assert refused.attempts == 0 and len(ran) == 1
        # Read-only calls never wait for the journal: they still run.
        assert ex.execute(ToolCall(id="l1", name="look", arguments={"item": "x"})).ok
        gate.open.set()
        flusher.join(10)
        assert journal.flush(10)
        assert ex.execute(ToolCall(id="c3", name="charge", arguments={"amount": 3})).ok
    with Journal(tmp_path / "j.sqlite") as j:
        records = {r.call_id: r for r in j.records()}
        assert j.in_doubt() == []
    # The refused call's intent was written late, with its outcome.
    assert (records["c2"].status, records["c2"].error_code) == ("rejected", "JOURNAL_UNAVAILABLE")


def test_a_closed_required_journal_refuses_too(tmp_path: Path) -> None:
    reg, ran = registry()
    journal = Journal(tmp_path / "j.sqlite", create=True)
    with Executor(reg, journal=journal, journal_required=True) as ex:
        journal.close()
        r = ex.execute(ToolCall(id="z", name="charge", arguments={"amount": 1}))
    assert r.error_code == ErrorCode.JOURNAL_UNAVAILABLE and ran == []
    assert r.error == (
        "Tool 'charge' was not run: the journal could not record the call, and this "
        "executor runs no mutating call unrecorded; try again later"
    )


def test_journal_required_is_checked(tmp_path: Path) -> None:
    reg, _ = registry()
    with pytest.raises(ValueError, match=r"journal_required=True needs journal="):
        Executor(reg, journal_required=True)
    with pytest.raises(TypeError, match="journal_required must be True or False, got str"):
        Executor(reg, journal=tmp_path / "j.sqlite", journal_required="yes")  # type: ignore[arg-type]
