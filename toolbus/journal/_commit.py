"""Where group commit happens: one group of operations, one transaction.

The writer's loop (`_writer.py`) hands `_group` whatever has queued up; it is
applied in one transaction and committed once, with `synchronous=FULL` when
the group holds an intent (or a session's start, or a flush) and `NORMAL`
otherwise; only then are the waiting callers' futures resolved. An operation
SQLite cannot write at all is found by applying the group again one operation
at a time, each in a savepoint, and left out alone. A commit the journal
cannot take, or a file removed or replaced, goes to `_failures.py`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..models import ToolResult
from . import _store as store
from ._encode import result_from_json, result_json
from ._failures import RETRY_FIRST
from ._ops import (
    ATTEMPT,
    CLOSE,
    FLUSH,
    INTENT,
    LATE_INTENT,
    OUTCOME,
    PRUNE,
    REMOTE_TASK,
    SESSION,
    STOP,
    SYNCED,
    WAITED,
    JournalFailed,
    KeyInUse,
    KeyReused,
    claim,
    resolve,
    what,
)
from ._owner import Here, SessionInfo, gone

__all__ = ["Applied", "GroupCommit", "environmental"]

log = logging.getLogger("toolbus.journal")


class Applied:
    """What one committed transaction did."""

    __slots__ = ("counts", "done", "poisoned", "prunes", "synced")

    def __init__(self) -> None:
        self.counts = {"intents": 0, "attempts": 0, "outcomes": 0, "replays": 0}
        self.done: list[tuple[Future[Any], Any]] = []
        self.poisoned: list[tuple[tuple[Any, ...], BaseException]] = []
        self.prunes: list[Future[Any]] = []
        self.synced = False


def environmental(error: BaseException) -> bool:
    """Whether `error` is the journal's (its lock, its disk, its file) rather
    than one operation's (a value SQLite cannot bind, a constraint)."""
    if isinstance(error, sqlite3.IntegrityError | sqlite3.DataError | sqlite3.InterfaceError):
        return False
    return isinstance(error, sqlite3.Error | OSError | MemoryError)


class GroupCommit:
    """The writer's commit of one group (a part of `Writer`)."""

    _path: Path
    _max_result_bytes: int
    _conn: sqlite3.Connection | None
    _identity: tuple[int, int] | None
    _synchronous: str
    _counts: dict[str, int]
    _done: int
    _kept: list[tuple[Any, ...]]
    _inflight: list[tuple[Any, ...]]
    _backoff: float
    _busy_since: float | None
    _heartbeats: set[str]
    _prune_due: bool
    _since_prune: int
    _prune_waiters: list[Future[Any]]
    _me: Here
    _locks: Path
    _stale_after: float
    let_go: dict[tuple[str, int], str]

    if TYPE_CHECKING:

        def _fail(self, error: JournalFailed, ops: Sequence[tuple[Any, ...]] = ...) -> None: ...
        def _failed_commit(
            self, ops: list[tuple[Any, ...]], error: Exception, stopping: bool
        ) -> None: ...

    def _group(self, new: list[tuple[Any, ...]]) -> Future[None] | None:
        """Commit the kept operations and `new` (in this order: the order they
        were queued in). Returns the STOP operation's future when one was among them."""
        ops = self._inflight = self._kept + new
        self._kept = []
        stop = next((op[1] for op in new if op[0] == STOP), None)
        self._busy_since = time.monotonic()
        try:
            self._check_file()
            try:
                applied = self._apply(ops, careful=False)
            except Exception as e:
                if environmental(e):
                    raise
                # One operation cannot be written: apply them one by one, so
                # that only it is left out.
                applied = self._apply(ops, careful=True)
        except JournalFailed as e:
            self._inflight = []
            self._fail(e, ops)
            return stop
        except Exception as e:  # the disk is full, the lock is held, the file went away
            self._inflight = []
            self._failed_commit(ops, e, stopping=stop is not None)
            return stop
        finally:
            self._busy_since = None
        self._committed(ops, applied)
        self._inflight = []
        return stop

    def _check_file(self) -> None:
        """The journal's path must still name the file the writer opened: a
        removed or replaced file would take every commit to a file nobody reads."""
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            problem = "was removed"
        except OSError:
            return  # cannot tell: the commit says whether it can be written
        else:
            if (st.st_dev, st.st_ino) == self._identity:
                return
            problem = "was replaced by another file"
        raise JournalFailed(
            f"the journal file {str(self._path)!r} {problem} while in use; nothing more "
            "is recorded in it"
        )

    def _set_synchronous(self, mode: str) -> None:
        if mode != self._synchronous:
            assert self._conn is not None
            self._conn.execute(f"PRAGMA synchronous = {mode}")
            self._synchronous = mode

    def _apply(self, ops: list[tuple[Any, ...]], *, careful: bool) -> Applied:
        """Apply `ops` in one transaction and commit. `careful`: each operation
        in a savepoint, one that cannot be written left out (logged)."""
        conn = self._conn
        assert conn is not None
        applied = Applied()
        synced = any(op[0] in SYNCED for op in ops)
        self._set_synchronous("FULL" if synced else "NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        try:
            for op in ops:
                if not careful:
                    self._op(conn, op, applied)
                    continue
                conn.execute("SAVEPOINT op")
                try:
                    self._op(conn, op, applied)
                except Exception as e:
                    if environmental(e):
                        raise
                    conn.execute("ROLLBACK TO op")
                    applied.poisoned.append((op, e))
                conn.execute("RELEASE op")
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        applied.synced = synced
        return applied

    def _op(self, conn: sqlite3.Connection, op: tuple[Any, ...], applied: Applied) -> None:
        kind = op[0]
        counts = applied.counts
        if kind == INTENT:
            applied.done.append(self._intent(conn, op, counts))
        elif kind == LATE_INTENT:
            _, session, seq, call_id, tool, args, key, batch_id, at, digest, remote = op
            conn.execute(
                store.INSERT_LATE_CALL,
                (session, seq, call_id, tool, args, key, batch_id, at, digest, remote),
            )
            counts["intents"] += 1
        elif kind == ATTEMPT:
            _, session, seq, n, status, duration, at, _call_id = op
            conn.execute(store.INSERT_ATTEMPT, (n, status, duration, at, session, seq))
            counts["attempts"] += 1
        elif kind == REMOTE_TASK:
            _, session, seq, handle, _call_id = op
            conn.execute(store.SET_REMOTE_TASK, (handle, session, seq))
        elif kind == OUTCOME:
            self._outcome(conn, op)
            counts["outcomes"] += 1
        elif kind == SESSION:
            conn.execute(store.INSERT_SESSION, op[1])
            applied.done.append((op[2], None))
        elif kind == CLOSE:
            _, session, at = op
            conn.execute(store.CLOSE_SESSION, (at, at, session))
            self._heartbeats.discard(session)
        elif kind == FLUSH:
            applied.done.append((op[1], None))
        elif kind == PRUNE:
            applied.prunes.append(op[1])

    def _intent(
        self, conn: sqlite3.Connection, op: tuple[Any, ...], counts: dict[str, int]
    ) -> tuple[Future[Any], Any]:
        _, session, seq, call_id, tool, args, key, batch_id, at, digest, replayable, remote, fut = (
            op
        )
        # From now on the caller cannot cancel it: it will get what was written.
        # A caller that stopped waiting (cancelled, or its wait timed out) runs
        # its call, or not, on its own: it is never recorded as a replay.
        waiting = claim(fut)
        recorded: ToolResult | KeyReused | KeyInUse | None = None
        replay_of: int | None = None
        if replayable and waiting:
            row = conn.execute(store.FIND_OK, (key, tool, digest)).fetchone()
            if row is None and conn.execute(store.ANY_OK, (key, tool)).fetchone() is not None:
                # The key ended ok only for other arguments: refused, not
                # answered with that call's result. (Records of schema
                # version 1 have no digest: they replay as they always did.)
                recorded = KeyReused(key)
            elif row is None:
                # Looked for in this transaction, which holds the write lock
                # until the intent below is in: of two calls of one key, from
                # any thread or process, the second sees the first's record.
                recorded = self._running(conn, key, tool, digest)
            else:
                try:
                    recorded = result_from_json(row[1])
                    replay_of = row[0]
                    counts["replays"] += 1
                except ValueError as e:
                    log.warning("journal: record %s holds an unreadable result: %s", row[0], e)
        conn.execute(
            store.INSERT_CALL,
            (session, seq, call_id, tool, args, key, batch_id, at, digest, replay_of, remote),
        )
        counts["intents"] += 1
        return fut, recorded

    def _running(
        self, conn: sqlite3.Connection, key: str, tool: str, digest: str | None
    ) -> KeyInUse | KeyReused | None:
        """Whether a call of `key` (and `tool`) is running: with the same
        arguments (`KeyInUse`) or others (`KeyReused`). A record whose owner
        is gone is in doubt, not running: the in-doubt rule deals with it.
        One whose call ended while its tool, let go, runs on is held open by
        its session (`_session.py`), which says so in `let_go`."""
        found: KeyInUse | KeyReused | None = None
        alive: dict[str, bool] = {}
        now = time.time()
        for row in conn.execute(store.OPEN_OF_KEY, (key, tool)):
            recorded, session = row[0], row[1]
            if session is None:
                continue  # no owner recorded: it can be nobody's running call
            if session not in alive:
                try:
                    pid, host, machine, ticks, lock, opened, beat, closed = row[2:10]
                    info = SessionInfo(
                        session, pid, host, machine, ticks, lock, opened, beat, closed
                    )
                    alive[session] = not gone(info, self._me, self._locks, self._stale_after, now)
                except Exception as e:  # a hand-edited row: as `Journal.records` leaves it out
                    log.warning("journal %s: session %s is unreadable: %s", self._path, session, e)
                    alive[session] = False
            if not alive[session]:
                continue
            if recorded is None or digest is None or recorded == digest:
                # (schema version 1 records: taken for the same)
                return KeyInUse(key, self.let_go.get((session, row[10])))
            found = KeyReused(key)
        return found

    def _outcome(self, conn: sqlite3.Connection, op: tuple[Any, ...]) -> None:
        _, session, seq, result, at = op
        try:
            text, truncated = result_json(result, self._max_result_bytes)
        except Exception as e:  # an output JSON cannot hold: keep the status at least
            log.warning("journal: the result of call %s cannot be written: %s", result.call_id, e)
            text, truncated = None, True
        code = result.error_code.value if result.error_code is not None else None
        # The outcome says whether the call was answered from the journal: a
        # caller that gave up waiting for its intent ran its call instead.
        replayed = int(result.attempts == 0 and result.metadata.get("replayed") is True)
        conn.execute(
            store.SET_OUTCOME,
            (result.status, code, text, int(truncated), at, replayed, session, seq),
        )

    def _committed(self, ops: list[tuple[Any, ...]], applied: Applied) -> None:
        c = self._counts
        c["commits"] += 1
        if applied.synced:
            c["synced_commits"] += 1
        for name, n in applied.counts.items():
            c[name] += n
        c["largest_group"] = max(c["largest_group"], applied.counts["intents"])
        self._since_prune += applied.counts["intents"]
        self._done += len(ops)
        if self._backoff > RETRY_FIRST:
            log.warning("journal %s: writing again after failed commits", self._path)
        self._backoff = RETRY_FIRST
        for op, error in applied.poisoned:
            c["dropped"] += 1
            log.error(
                "journal %s: the %s could not be written and is left out (%s: %s)",
                self._path,
                what(op),
                type(error).__name__,
                error,
            )
            if op[0] in WAITED:
                resolve(op[-1], error=error)
        for waiter in applied.prunes:
            self._prune_waiters.append(waiter)
            self._prune_due = True
        for fut, value in applied.done:
            resolve(fut, value)
