"""What a journal holds of approvals: the requests waiting for a decision,
and the single-use decisions used.

`pending` keeps each request a call ended `deferred` with (an approval, a
question, an external tool's result), by digest, until a decision on it is
made: so after a restart, or from another process on the same journal,
`pending()` lists them, and `approve`, `deny` and `answer` mint decisions on
them under the journal's secret, which the executors on this journal take
(`toolbus.decisions`). `used_decisions` makes a single-use decision single
use across every process on the journal: the first to record its use wins.
Written at once, on the caller's thread, each in its own transaction.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..approvals import ApprovalRequest, ExternalRequest, InputRequest
from ..decisions import Minting
from ._encode import bindable

__all__ = ["HELD_SCHEMA", "HeldApprovals"]

HELD_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS pending (
    digest TEXT NOT NULL,
    call_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    tool TEXT NOT NULL,
    request TEXT NOT NULL,
    held REAL NOT NULL,
    agent_run TEXT,
    claimed REAL,
    PRIMARY KEY (digest, call_id)
)""",
    """CREATE TABLE IF NOT EXISTS used_decisions (
    id TEXT PRIMARY KEY,
    used REAL NOT NULL,
    expires REAL
)""",
)

# How long a decided request stays marked (`claimed`) before it is let go.
KEEP_DECIDED = 7 * 24 * 3600.0

_CLAIM = "UPDATE pending SET claimed = ? WHERE digest = ? AND call_id = ? AND claimed IS NULL"

# How a pending row says which request it holds.
_KINDS: dict[str, type[ApprovalRequest]] = {
    "approval": ApprovalRequest,
    "input": InputRequest,
    "external": ExternalRequest,
}


def _row(request: ApprovalRequest, held: float) -> tuple[Any, ...]:
    """A request's columns of `pending`, up to when it was held. Text UTF-8
    cannot hold (a lone surrogate in a call id: a model's JSON `"\\udc80"`)
    is written escaped, as the journal writes calls (`bindable`)."""
    return (
        request.digest,
        bindable(request.call_id),
        _kind(request),
        bindable(request.tool),
        _request_json(request),
        held,
    )


def _request_json(request: ApprovalRequest) -> str:
    try:
        return request.model_dump_json()
    except ValueError:  # a lone surrogate: the stdlib escapes it (ASCII out)
        return json.dumps(request.model_dump(mode="json"))


def _request(cls: type[ApprovalRequest], text: str) -> ApprovalRequest:
    """A request back from its row; ValueError if it is not one. Escaped lone
    surrogates (`_request_json`) are read by the stdlib, which takes them back."""
    try:
        return cls.model_validate_json(text)
    except ValueError:
        return cls.model_validate(json.loads(text))


def _kind(request: ApprovalRequest) -> str:
    if isinstance(request, InputRequest):
        return "input"
    return "external" if isinstance(request, ExternalRequest) else "approval"


class HeldApprovals(Minting):
    """The part of `Journal` that holds approvals, and mints decisions on them
    (`approve`, `deny`, `answer`) under the journal's secret: good for every
    executor on this journal, in any process."""

    _minter = "Journal"

    def _decision_secret(self) -> bytes:
        return self._key_secret

    _lock: threading.Lock
    _conn: sqlite3.Connection
    _key_secret: bytes
    # How long a held write waits for the write lock: the journal's `timeout`.
    _timeout: float

    if TYPE_CHECKING:  # Journal's own

        def _writable(self) -> sqlite3.Connection: ...

        def _check_open(self) -> None: ...

    # -- reading and minting -----------------------------------------------------------

    def pending(self) -> list[ApprovalRequest]:
        """The requests waiting for a decision (masked, as published), oldest
        first: every process's on this journal, and those of a process gone."""
        with self._lock:
            self._check_open()
            try:
                rows = self._conn.execute(
                    "SELECT kind, request FROM pending WHERE claimed IS NULL ORDER BY held, rowid"
                ).fetchall()
            except sqlite3.OperationalError:
                return []  # a journal of an older schema, not migrated yet: none held
        out: list[ApprovalRequest] = []
        for kind, text in rows:
            cls = _KINDS.get(kind)
            if cls is not None:
                try:
                    out.append(_request(cls, text))
                except ValueError:
                    continue  # a damaged row: the others still count
        return out

    # -- the executor's (`pipeline/_held.py`) --------------------------------------------

    def hold_request(self, request: ApprovalRequest, agent_run: str | None = None) -> None:
        """`request`, asked in `agent_run` (if any), waits for a decision
        (again, if it was decided: asked anew). Decided ones a week old are
        let go as it goes."""
        now = time.time()
        self._write(
            ("DELETE FROM pending WHERE claimed < ?", (now - KEEP_DECIDED,)),
            (
                "INSERT OR REPLACE INTO pending (digest, call_id, kind, tool, request, held, "
                "agent_run, claimed) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (*_row(request, now), None if agent_run is None else bindable(agent_run)),
            ),
        )

    def release_request(self, digest: str, call_id: str) -> bool:
        """The request of `digest` for call `call_id` was decided: True if it
        was waiting (this is where two processes completing one request are
        told apart: one of them marks it). Kept, marked, for a week: a
        process whose own write of it failed (`claim_unheld`) still finds it
        taken."""
        return self._write((_CLAIM, (time.time(), digest, bindable(call_id))))[-1] == 1

    def claim_unheld(self, request: ApprovalRequest, since: float) -> bool:
        """Claim `request`, which this process holds (asked at `since`) but
        whose last write here failed: True if nobody took it since (written
        first if the journal never had it; a row decided before `since` was
        an earlier asking of it)."""
        now = time.time()
        return (
            self._write(
                (
                    "INSERT OR IGNORE INTO pending (digest, call_id, kind, tool, request, held) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    _row(request, now),
                ),
                (
                    "UPDATE pending SET claimed = ? WHERE digest = ? AND call_id = ? "
                    "AND (claimed IS NULL OR claimed < ?)",
                    (now, request.digest, bindable(request.call_id), since),
                ),
            )[-1]
            == 1
        )

    def release_requests(self, keys: list[tuple[str, str]]) -> None:
        """The requests of `keys` (digest, call id) wait no more (their run was halted)."""
        now = time.time()
        self._write(*((_CLAIM, (now, digest, bindable(call_id))) for digest, call_id in keys))

    def use_decision(self, decision_id: str, expires_at: float | None) -> bool:
        """Record the use of a single-use decision: True if it was not used
        before (by any process on this journal). Uses whose decision expired
        a minute ago are let go as it goes (past its time a decision is
        refused before it is used: the minute covers the clocks read between)."""
        now = time.time()
        with self._lock:
            conn = self._writable()
            with _bounded(conn, self._timeout):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute("DELETE FROM used_decisions WHERE expires < ?", (now - 60,))
                    fresh = conn.execute(
                        "INSERT OR IGNORE INTO used_decisions (id, used, expires) VALUES (?, ?, ?)",
                        (decision_id, now, expires_at),
                    ).rowcount
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        return fresh == 1

    def _write(self, *statements: tuple[str, tuple[Any, ...]]) -> list[int]:
        """Run `statements` in one transaction; the rows each changed."""
        with self._lock:
            conn = self._writable()
            with _bounded(conn, self._timeout):
                conn.execute("BEGIN IMMEDIATE")
                try:
                    counts = [int(conn.execute(sql, params).rowcount) for sql, params in statements]
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        return counts


@contextlib.contextmanager
def _bounded(conn: sqlite3.Connection, seconds: float) -> Iterator[None]:
    """Wait at most `seconds` for the write lock (a held write runs on a call's
    own path: it must not wait as long as the writer thread may)."""
    before = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(before)}")
