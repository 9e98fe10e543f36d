"""`toolbus.Journal`: a durable record of mutating calls, and what it says.

Open one to read it (`Journal(path)`), or hand a path or a `Journal` to
`Executor(journal=...)`, which records every mutating call in it. Reading is
done on a connection of the Journal's own; writing only ever on its writer
thread (`_writer.py`), started when an executor first uses it.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._json import loads
from .._options import positive_int, positive_number
from ..models import ToolResult
from . import _store as store
from ._owner import Here, OwnerLock, SessionInfo, gone, here, lock_dir
from ._prune import CHUNK, prune_step
from ._records import JournalAttempt, JournalOwner, JournalRecord, RecordState
from ._retention import Retention
from ._session import Session
from ._writer import JournalClosed, JournalStats, Writer

__all__ = ["Journal"]


class Journal:
    """A journal of mutating tool calls in an SQLite file (WAL mode).

    `Journal(path)` opens an existing journal; `create=True` makes it when
    missing (its directory must exist). `Executor(journal=path)` does that for
    you and records every mutating call; pass a `Journal` instead to share it
    between executors or to set its options:

    - `retention`: a `Retention` or a mapping `{"days": ..., "rows": ...}`:
      how long finished records are kept (default 30 days, 100 000 records);
    - `max_result_bytes`: a recorded result larger than this (as JSON) has its
      output cut down, and says so (default 64 KiB);
    - `stale_after`: seconds without a heartbeat after which a session that
      could not take an owner lock, on another host, counts as gone (see
      `in_doubt`).

    Errors for a path that cannot hold a journal (a missing directory, no
    permission, a file that is not a journal) are raised here, saying which.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        retention: Retention | Mapping[str, Any] | None = None,
        max_result_bytes: int = 65536,
        stale_after: float = 60.0,
    ) -> None:
        self.retention = Retention.coerce(retention, "retention", "Journal")
        self._max_result_bytes = positive_int(max_result_bytes, "max_result_bytes", "Journal")
        self._stale_after = positive_number(stale_after, "stale_after", "Journal")
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"Journal: path must be a path, got {type(path).__name__} {path!r}")
        self.path = Path(path).absolute()
        store.prepare_path(self.path, create=create)
        self._lock = threading.Lock()
        self._closed = False
        self._writer: Writer | None = None
        self._here: Here = here()
        try:
            self._conn = store.connect(self.path, any_thread=True)
        except sqlite3.DatabaseError as e:
            raise _error(self.path, e) from None
        try:
            self._key_secret = store.ensure_schema(self._conn, self.path)
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise _error(self.path, e) from None
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"Journal({str(self.path)!r})"

    # -- reading -----------------------------------------------------------------------

    def in_doubt(self) -> list[JournalRecord]:
        """Mutating calls that started (their intent is recorded) and have no
        outcome, whose owner session is gone, and that nobody acknowledged:
        each may or may not have had its effect. Oldest first."""
        return [r for r in reversed(self._records(_OPEN, ())) if r.state == "in_doubt"]

    def records(
        self, *, call_id: str | None = None, limit: int | None = None
    ) -> list[JournalRecord]:
        """Every record (or those of `call_id`), newest first, at most `limit`."""
        if limit is not None:
            limit = positive_int(limit, "limit", "Journal.records")
        if call_id is None:
            return self._records("1", (), limit)
        return self._records("c.call_id = ?", (call_id,), limit)

    def get(self, call_id: str) -> JournalRecord | None:
        """The newest record of `call_id`, or None."""
        found = self._records("c.call_id = ?", (call_id,), 1)
        return found[0] if found else None

    def acknowledge(self, call: str | JournalRecord) -> int:
        """Clear a call in doubt: someone has dealt with it (checked what it did,
        redone or undone it). Pass its call id (every record of that id in doubt
        is cleared) or one `JournalRecord`. Returns how many records were
        cleared: 0 if none was in doubt (running calls are never cleared)."""
        params: tuple[Any, ...]
        if isinstance(call, JournalRecord):
            where, params = f"{_OPEN} AND c.id = ?", (call.id,)
        elif isinstance(call, str):
            where, params = f"{_OPEN} AND c.call_id = ?", (call,)
        else:
            raise TypeError(
                f"acknowledge() takes a call id or a JournalRecord, not {type(call).__name__}"
            )
        ids = [r.id for r in self._records(where, params) if r.state == "in_doubt"]
        with self._lock:
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                n = store.acknowledge(self._conn, ids, time.time())
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return n

    # -- upkeep ------------------------------------------------------------------------

    def prune(self, timeout: float | None = None) -> int:
        """Delete the finished records the retention lets go, now; return how
        many. (The writer also does this on its own, when idle.)"""
        writer = self._writer
        if writer is not None:
            try:
                return writer.prune(timeout)
            except JournalClosed:
                pass
        total = 0
        with self._lock:
            self._check_open()
            while True:
                n = prune_step(self._conn, self.retention, self.path)
                total += n
                if n < CHUNK:
                    return total

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything recorded so far is committed and on disk;
        False if `timeout` ran out first."""
        writer = self._writer
        return True if writer is None else writer.flush(timeout)

    def stats(self) -> JournalStats:
        """The writer's counters (all zero for a journal only read)."""
        writer = self._writer
        return JournalStats() if writer is None else writer.stats()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = 5.0) -> None:
        """Commit and sync what is queued, stop the writer, close the file.
        Executors still using the journal record nothing more (logged)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            writer = self._writer
        if writer is not None:
            writer.stop(timeout)
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for executors -----------------------------------------------------------------

    def _open_session(self) -> Session:
        """A new session for an executor (starts the writer on first use)."""
        with self._lock:
            self._check_open()
            writer = self._writer
            if writer is None:
                writer = Writer(self.path, self.retention, self._max_result_bytes)
                try:
                    writer.start()
                except sqlite3.DatabaseError as e:
                    raise _error(self.path, e) from None
                self._writer = writer
        session_id = secrets.token_hex(8)
        lock = OwnerLock(lock_dir(self.path), session_id)
        try:
            return Session(writer, self._here, lock, session_id, self._max_result_bytes)
        except BaseException:
            lock.release()
            raise

    # -- internals ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosed(f"{self!r} is closed")

    def _records(
        self, where: str, params: Sequence[Any], limit: int | None = None
    ) -> list[JournalRecord]:
        with self._lock:
            self._check_open()
            rows = store.select_records(self._conn, where, params, limit)
            attempts = store.attempts_of(self._conn, [r[0] for r in rows])
        locks = lock_dir(self.path)
        now = time.time()
        verdicts: dict[str, bool] = {}  # session -> gone, one look per session
        records = []
        for row in rows:
            state: RecordState
            if row[8] is not None:
                state = "ended"
            elif row[13] is not None:
                state = "acknowledged"
            else:
                session = row[14]
                if session not in verdicts:
                    verdicts[session] = row[15] is None or gone(
                        _session_info(row), self._here, locks, self._stale_after, now
                    )
                state = "in_doubt" if verdicts[session] else "running"
            records.append(_record(row, state, attempts.get(row[0], ())))
        return records


# Records without an outcome and not acknowledged.
_OPEN = "c.status IS NULL AND c.acknowledged IS NULL"


def _error(path: Path, e: sqlite3.DatabaseError) -> Exception:
    if isinstance(e, sqlite3.OperationalError):
        return OSError(f"journal {str(path)!r}: {e}")
    return ValueError(f"{str(path)!r} is not a toolbus journal: {e}")


def _session_info(row: Sequence[Any]) -> SessionInfo:
    return SessionInfo(
        session=row[14],
        pid=row[15],
        host=row[16],
        machine=row[17],
        start_ticks=row[18],
        lock=row[20],
        opened=row[21],
        heartbeat=row[22],
        closed=row[23],
    )


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return loads(text)
    except ValueError:
        return text


def _record(row: Sequence[Any], state: RecordState, attempts: Sequence[Any]) -> JournalRecord:
    result: ToolResult | None = None
    if row[10] is not None:
        try:
            result = ToolResult.model_validate_json(row[10])
        except ValueError:
            result = None
    owner = JournalOwner(
        session=row[14],
        pid=row[15] if row[15] is not None else 0,
        host=row[16] or "",
        process_started=row[19],
        opened=row[21] if row[21] is not None else 0.0,
        closed=row[23],
    )
    return JournalRecord(
        id=row[0],
        call_id=row[1],
        tool=row[2],
        arguments=_json(row[3]),
        idempotency_key=row[4],
        batch_id=row[5],
        started=row[6],
        replay_of=row[7],
        status=row[8],
        error_code=row[9],
        result=result,
        truncated=bool(row[11]),
        ended=row[12],
        acknowledged=row[13],
        owner=owner,
        state=state,
        attempts=tuple(
            JournalAttempt(n=a[1], status=a[2], duration=a[3], at=a[4]) for a in attempts
        ),
    )
