"""`toolbus.Journal`: a durable record of mutating calls, and what it says.

Open one to read it (`Journal(path)`), or hand a path or a `Journal` to
`Executor(journal=...)`, which records every mutating call in it. Reading is
done on a read-only connection of the Journal's own (it needs no write access
and never waits for the write lock); calls are recorded only ever on its
writer thread (`_writer.py`), started when an executor first uses it;
`acknowledge()` and a `prune()` without a writer open a write connection when
first used.

One piece: opening a journal file, checking what it is and reading it are
one object's job (`Journal`); the writer is `_writer.py`.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from .._json import loads
from .._options import positive_int, positive_number
from ..models import ToolResult
from . import _store as store
from ._damaged import damaged, read_records
from ._encode import bindable, result_from_json
from ._held import HeldApprovals
from ._migrations import migrate
from ._owner import Here, OwnerLock, SessionInfo, gone, here, lock_dir
from ._prune import CHUNK, prune_step
from ._records import JournalAttempt, JournalOwner, JournalRecord, RecordState
from ._retention import Retention
from ._session import Session
from ._writer import JournalClosed, JournalStats, Writer

__all__ = ["Journal"]

log = logging.getLogger("toolbus.journal")


class Journal(HeldApprovals):
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
      `in_doubt`);
    - `timeout`: seconds to wait for the disk while opening (default 5): a
      journal whose disk does not answer, or whose tables cannot be made
      because another process holds its write lock, is a `TimeoutError`.

    `Journal(path)` only reads: it opens the file read-only (no write access
    needed, no write lock waited for), and never makes or changes anything
    until `acknowledge()`, `prune()` or an executor writes.

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
        timeout: float = 5.0,
    ) -> None:
        self.retention = Retention.coerce(retention, "retention", "Journal")
        self._max_result_bytes = positive_int(max_result_bytes, "max_result_bytes", "Journal")
        self._stale_after = positive_number(stale_after, "stale_after", "Journal")
        self._timeout = positive_number(timeout, "timeout", "Journal")
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"Journal: path must be a path, got {type(path).__name__} {path!r}")
        if not os.fspath(path):
            raise ValueError("Journal: path is empty; name a file, like 'agent-journal.sqlite'")
        if "\0" in str(os.fspath(path)):
            raise ValueError(f"Journal: path {os.fspath(path)!r} holds a NUL character")
        self.path = Path(path).absolute()
        store.prepare_path(self.path, create=create)
        self._lock = threading.Lock()
        self._closed = False
        self._writer: Writer | None = None
        self._write_conn: sqlite3.Connection | None = None  # acknowledge, prune without a writer
        self._here: Here = here()
        self._conn, self._key_secret = _bounded(
            lambda: _open(self.path, create),
            self._timeout,
            f"journal {str(self.path)!r}: opening it",
            lambda opened: opened[0].close(),
        )

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
        return self._records("c.call_id = ?", (bindable(call_id),), limit)

    def get(self, call_id: str) -> JournalRecord | None:
        """The newest record of `call_id`, or None."""
        found = self._records("c.call_id = ?", (bindable(call_id),), 1)
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
            where, params = f"{_OPEN} AND c.call_id = ?", (bindable(call),)
        else:
            raise TypeError(
                f"acknowledge() takes a call id or a JournalRecord, not {type(call).__name__}"
            )
        ids = [r.id for r in self._records(where, params) if r.state == "in_doubt"]
        if not ids:
            return 0
        with self._lock:
            conn = self._writable()
            conn.execute("BEGIN IMMEDIATE")
            try:
                n = store.acknowledge(conn, ids, time.time())
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
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
            conn = self._writable()
            while True:
                n = prune_step(conn, self.retention, self.path)
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
            if self._write_conn is not None:
                self._write_conn.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for executors -----------------------------------------------------------------

    def _open_session(self, timeout: float | None = None) -> Session:
        """A new session for an executor (starts the writer on first use).
        Every wait is bounded by `timeout` (the journal's own by default)."""
        wait = self._timeout if timeout is None else timeout
        with self._lock:
            self._check_open()
            writer = self._writer
            if writer is not None and writer.failure is not None:
                raise writer.failure
            if writer is None:
                store.check_writable(self.path)
                writer = Writer(
                    self.path,
                    self.retention,
                    self._max_result_bytes,
                    stale_after=self._stale_after,
                    me=self._here,
                )
                try:
                    writer.start(wait)
                except sqlite3.DatabaseError as e:
                    raise _error(self.path, e) from None
                self._writer = writer
        session_id = secrets.token_hex(8)
        lock = OwnerLock(lock_dir(self.path), session_id)
        try:
            return Session(
                writer,
                self._here,
                lock,
                session_id,
                self._max_result_bytes,
                wait,
                str(self.path),
                self._key_secret,
            )
        except BaseException:
            lock.release()
            raise

    # -- internals ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise JournalClosed(f"{self!r} is closed")

    def _writable(self) -> sqlite3.Connection:
        """The write connection of `acknowledge` and `prune` (under `_lock`)."""
        self._check_open()
        conn = self._write_conn
        if conn is None:
            store.check_writable(self.path)
            try:
                conn = self._write_conn = store.connect(self.path, any_thread=True)
                migrate(conn, self.path)
            except sqlite3.DatabaseError as e:
                raise _error(self.path, e) from None
        return conn

    def _records(
        self, where: str, params: Sequence[Any], limit: int | None = None
    ) -> list[JournalRecord]:
        with self._lock:
            self._check_open()
            rows, attempts = read_records(self._conn, where, params, limit, self.path)
        locks = lock_dir(self.path)
        now = time.time()
        verdicts: dict[str, bool] = {}  # session -> gone, one look per session
        records = []
        for row in rows:
            try:
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
            except Exception as e:  # a damaged or hand-edited row: the others still count
                log.warning(
                    "journal %s: record %s is malformed and left out (%s: %s)",
                    self.path,
                    row[0],
                    type(e).__name__,
                    str(e).splitlines()[0] if str(e) else "",
                )
        return records


# Records without an outcome and not acknowledged.
_OPEN = "c.status IS NULL AND c.acknowledged IS NULL"


def _error(path: Path, e: sqlite3.DatabaseError) -> Exception:
    text = str(e)
    if damaged(e):
        # A journal once, most likely: "not a toolbus journal" would mislead.
        return ValueError(f"journal {str(path)!r} is damaged and cannot be used: {text}")
    if "readonly" in text or "read-only" in text:
        return PermissionError(f"journal {str(path)!r} cannot be written: {text}")
    if isinstance(e, sqlite3.OperationalError):
        return OSError(f"journal {str(path)!r}: {text}")
    return ValueError(f"{str(path)!r} is not a toolbus journal: {text}")


def _open(path: Path, create: bool) -> tuple[sqlite3.Connection, bytes]:
    """The read-only connection and the key secret; the tables are made first
    (`create`) when the file is new."""
    try:
        conn = store.connect_reader(path)
    except sqlite3.DatabaseError as e:
        raise _error(path, e) from None
    try:
        if not store.schema_ready(conn, path):
            if not create:
                raise ValueError(
                    f"{str(path)!r} is empty, not a toolbus journal yet "
                    "(Journal(path, create=True) makes one there)"
                )
            writer = store.connect(path)
            try:
                store.ensure_schema(writer, path)
            finally:
                writer.close()
        return conn, store.key_secret(conn, path)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _error(path, e) from None
    except BaseException:
        conn.close()
        raise


def _bounded(
    fn: Callable[[], Any], timeout: float, what: str, undo: Callable[[Any], object]
) -> Any:
    """`fn()` on a thread of its own, waited for at most `timeout` seconds:
    TimeoutError naming `what` then (and `undo` is applied to what `fn` makes,
    if it ever returns). Errors of `fn` raise here."""
    fut: Future[Any] = Future()
    lock = threading.Lock()
    abandoned = False

    def run() -> None:
        try:
            value = fn()
        except BaseException as e:
            fut.set_exception(e)
            return
        with lock:
            if not abandoned:
                fut.set_result(value)
                return
        undo(value)  # nobody waits for it any more

    threading.Thread(target=run, name="toolbus-journal-open", daemon=True).start()
    try:
        return fut.result(timeout)
    except TimeoutError:
        with lock:
            if not fut.done():
                abandoned = True
        if not abandoned:
            return fut.result()  # just in time
        raise TimeoutError(
            f"{what} did not finish within {timeout:g}s: is its disk answering? "
            "(or another process holds its write lock while its tables are made)"
        ) from None


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
            result = result_from_json(row[10])
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
        remote_task=row[24],
        arguments_digest=row[25],
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
