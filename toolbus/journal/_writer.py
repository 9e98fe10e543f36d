"""The journal's writer: one thread, one connection, group commit.

Everyone else only queues operations (`put` never blocks on I/O). The writer
takes whatever has queued up, applies it all in one transaction and commits
once, so eight callers whose intents arrive while a sync is under way share
the next sync. A commit that holds an intent (or a session's start, or a
flush) runs with `synchronous=FULL`: the commit returns only once the WAL is
on disk, and only then are the waiting callers' futures resolved. Attempts and
outcomes alone commit with `synchronous=NORMAL`: in WAL mode such a commit
survives the death of the process (it is in the OS's cache) and is on disk at
the next full commit or at `stop()`.

When idle, the writer prunes what the retention lets go (in small
transactions, so an intent never waits behind a long delete) and refreshes
the heartbeat of sessions that could not take an owner lock.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import sqlite3
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import ToolResult
from . import _store as store
from ._encode import result_json
from ._prune import CHUNK, prune_step
from ._retention import Retention

__all__ = ["JournalClosed", "JournalStats", "Writer"]

log = logging.getLogger("toolbus.journal")

# Operation kinds (the first item of each queued tuple).
INTENT = 1  # (INTENT, session, seq, call_id, tool, args, key, batch_id, at, replayable, future)
ATTEMPT = 2  # (ATTEMPT, session, seq, n, status, duration, at)
OUTCOME = 3  # (OUTCOME, session, seq, result, at)
SESSION = 4  # (SESSION, row, future)
CLOSE = 5  # (CLOSE, session, at)
FLUSH = 6  # (FLUSH, future)
STOP = 7  # (STOP, future)
PRUNE = 8  # (PRUNE, future): prune now; the future gets how many records went
_SYNCED = frozenset({INTENT, SESSION, FLUSH, STOP})
_WAITED = frozenset({INTENT, SESSION, FLUSH, STOP, PRUNE})  # their last item is a future

MAX_GROUP = 2000  # operations per transaction at most
STARVED = 8  # commits in a row before a due prune step runs anyway
CHECKPOINT_IDLE = 64  # commits after which an idle writer checkpoints the WAL
CHECKPOINT_EVERY = 1000  # ... and after which it does so anyway (the WAL stays bounded)
WAL_SIZE_LIMIT = 8 * 1024 * 1024
PRUNE_EVERY = 600.0  # seconds between prunes (also after rows // 10 new records)
HEARTBEAT_EVERY = 10.0  # seconds, for sessions without an owner lock


class JournalClosed(RuntimeError):
    """The journal's writer was stopped: nothing more can be recorded."""


@dataclass(frozen=True, slots=True)
class JournalStats:
    """The writer's counters: what was recorded, in how many commits."""

    intents: int = 0
    attempts: int = 0
    outcomes: int = 0
    replays: int = 0
    commits: int = 0
    """Transactions committed."""
    synced_commits: int = 0
    """Of those, the ones that waited for the disk (they held intents): with
    group commit, fewer than `intents` when callers overlap."""
    largest_group: int = 0
    """The most intents one commit held."""
    pruned: int = 0
    failed_commits: int = 0
    pending: int = 0
    """Operations queued or in the transaction under way: not committed yet."""


class Writer:
    """The thread that owns the journal's write connection."""

    def __init__(self, path: Path, retention: Retention, max_result_bytes: int) -> None:
        self._path = path
        self._retention = retention
        self._max_result_bytes = max_result_bytes
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._put_lock = threading.Lock()
        self._closed = False
        self._queued = 0  # operations ever queued (under _put_lock)
        self._done = 0  # operations ever committed or failed (the writer's)
        self._conn: sqlite3.Connection | None = None
        self._synchronous = "FULL"
        self._counts: dict[str, int] = dict.fromkeys(
            ("intents", "attempts", "outcomes", "replays", "commits", "synced_commits",
             "largest_group", "pruned", "failed_commits"),
            0,
        )  # fmt: skip
        self._heartbeats: set[str] = set()  # open sessions without an owner lock
        self._prune_due = True  # at start
        self._next_prune = 0.0
        self._since_prune = 0  # intents since the last prune
        self._starved = 0  # commits since a prune step while one is due
        self._pruned_now = 0  # records pruned since the prune that is due began
        self._prune_waiters: list[Future[Any]] = []
        self._since_checkpoint = 0  # commits since the WAL was last checkpointed
        self._next_heartbeat = time.monotonic() + HEARTBEAT_EVERY
        self._thread = threading.Thread(target=self._main, name="toolbus-journal", daemon=True)
        self._ready: Future[None] = Future()

    # -- any thread ----------------------------------------------------------------

    def start(self) -> None:
        """Start the thread and wait until its connection is open (errors raise here)."""
        self._thread.start()
        self._ready.result()
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        # An executor never closed: at a clean interpreter exit (daemon threads
        # still run then), write what is queued, so that calls which did end
        # are not taken for calls in doubt. Calls still running stay without an
        # outcome: in doubt, as they should be.
        if not self._closed:
            self.flush(2.0)

    def put(self, op: tuple[Any, ...]) -> None:
        """Queue `op`; never waits for I/O. Raises JournalClosed after `stop`."""
        with self._put_lock:
            if self._closed:
                raise JournalClosed("the journal was closed")
            self._queued += 1
            self._queue.put(op)

    def submit(self, op_kind: int, *args: Any) -> Future[Any]:
        """Queue an operation whose last item is a future; return the future."""
        fut: Future[Any] = Future()
        self.put((op_kind, *args, fut))
        return fut

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is committed and synced; False
        if `timeout` ran out or the commit failed (logged)."""
        try:
            self.submit(FLUSH).result(timeout)
        except JournalClosed:
            return True  # stopping flushes everything queued before it
        except Exception:  # TimeoutError, or the commit's own error
            return False
        return True

    def stop(self, timeout: float | None = None) -> bool:
        """Commit what is queued (synced), close the connection, end the thread."""
        fut: Future[None] = Future()
        with self._put_lock:
            if self._closed:
                return not self._thread.is_alive()
            self._closed = True
            self._queued += 1
            self._queue.put((STOP, fut))
        atexit.unregister(self._at_exit)
        try:
            fut.result(timeout)
        except TimeoutError:
            log.warning("journal %s: the writer did not stop within %ss", self._path, timeout)
            return False
        self._thread.join(timeout)
        return True

    def prune(self, timeout: float | None = None) -> int:
        """Prune now, up to the retention; wait and return how many records went."""
        result: int = self.submit(PRUNE).result(timeout)
        return result

    def heartbeat(self, session: str, on: bool) -> None:
        """Refresh (or stop refreshing) `session`'s heartbeat while it is open."""
        # Only the writer iterates the set; add/discard are atomic.
        if on:
            self._heartbeats.add(session)
        else:
            self._heartbeats.discard(session)

    def stats(self) -> JournalStats:
        return JournalStats(**self._counts, pending=self._queued - self._done)

    # -- the writer's thread -------------------------------------------------------

    def _main(self) -> None:
        try:
            self._conn = store.connect(self._path)
            # Checkpoints are the writer's to run when idle (see _checkpoint),
            # not a commit's, so an intent never waits for one.
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
            # A checkpointed WAL is cut back to this size when it is reused.
            self._conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        except BaseException as e:
            if self._conn is not None:
                self._conn.close()
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        try:
            self._loop()
        finally:
            self._fail_leftovers()
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()

    def _loop(self) -> None:
        q = self._queue
        while True:
            try:
                op = q.get_nowait() if self._prune_due else q.get(timeout=self._wait_for())
            except queue.Empty:
                if self._prune_due:
                    self._prune_some()
                else:
                    self._checkpoint()
                    self._periodic()
                continue
            ops = [op]
            with contextlib.suppress(queue.Empty):
                while len(ops) < MAX_GROUP:
                    ops.append(q.get_nowait())
            stop = self._commit(ops)
            self._done += len(ops)
            if stop is not None:
                self._checkpoint(force=True)
                stop.set_result(None)
                return
            self._since_checkpoint += 1
            if self._since_checkpoint >= CHECKPOINT_EVERY or (
                self._since_checkpoint >= CHECKPOINT_IDLE and q.empty()
            ):
                self._checkpoint()
            if self._prune_due:
                # Under a load that never lets the queue run dry, prune anyway
                # now and then: one small step between commits.
                self._starved += 1
                if self._starved >= STARVED:
                    self._prune_some()
            self._periodic()

    def _wait_for(self) -> float:
        now = time.monotonic()
        due = self._next_heartbeat if self._heartbeats else now + PRUNE_EVERY
        due = min(due, self._next_prune)
        return max(0.001, due - now)

    def _periodic(self) -> None:
        now = time.monotonic()
        if self._heartbeats and now >= self._next_heartbeat:
            self._next_heartbeat = now + HEARTBEAT_EVERY
            self._write_heartbeats()
        rows = self._retention.rows
        if now >= self._next_prune or (rows is not None and self._since_prune > rows // 10):
            self._prune_due = True

    def _set_synchronous(self, mode: str) -> None:
        if mode != self._synchronous:
            assert self._conn is not None
            self._conn.execute(f"PRAGMA synchronous = {mode}")
            self._synchronous = mode

    def _commit(self, ops: list[tuple[Any, ...]]) -> Future[None] | None:
        """Apply `ops` in one transaction; resolve their futures once committed.
        Returns the STOP operation's future when one was among them."""
        conn = self._conn
        assert conn is not None
        synced = any(op[0] in _SYNCED for op in ops)
        done: list[tuple[Future[Any], Any]] = []
        stop: Future[None] | None = None
        counts = {"intents": 0, "attempts": 0, "outcomes": 0, "replays": 0}
        try:
            self._set_synchronous("FULL" if synced else "NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for op in ops:
                    kind = op[0]
                    if kind == INTENT:
                        done.append(self._intent(conn, op, counts))
                    elif kind == ATTEMPT:
                        _, session, seq, n, status, duration, at = op
                        conn.execute(store.INSERT_ATTEMPT, (n, status, duration, at, session, seq))
                        counts["attempts"] += 1
                    elif kind == OUTCOME:
                        self._outcome(conn, op)
                        counts["outcomes"] += 1
                    elif kind == SESSION:
                        conn.execute(store.INSERT_SESSION, op[1])
                        done.append((op[2], None))
                    elif kind == CLOSE:
                        _, session, at = op
                        conn.execute(store.CLOSE_SESSION, (at, at, session))
                        self._heartbeats.discard(session)
                    elif kind == FLUSH:
                        done.append((op[1], None))
                    elif kind == STOP:
                        stop = op[1]
                    elif kind == PRUNE:
                        self._prune_waiters.append(op[1])
                        self._prune_due = True
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except Exception as e:  # the disk is full, the file went away, ...
            self._counts["failed_commits"] += 1
            log.error(
                "journal %s: a commit of %d operations failed (%s: %s); "
                "the calls waiting for their intents run unjournaled",
                self._path,
                len(ops),
                type(e).__name__,
                e,
            )
            for fut, _ in done:
                _resolve(fut, error=e)
            for op in ops:  # futures not reached before the failure
                if op[0] in (INTENT, SESSION, FLUSH):
                    _resolve(op[-1], error=e)
                elif op[0] == PRUNE and op[1] not in self._prune_waiters:
                    self._prune_waiters.append(op[1])
                    self._prune_due = True
            return stop
        c = self._counts
        c["commits"] += 1
        if synced:
            c["synced_commits"] += 1
        for name, n in counts.items():
            c[name] += n
        c["largest_group"] = max(c["largest_group"], counts["intents"])
        self._since_prune += counts["intents"]
        for fut, value in done:
            _resolve(fut, value)
        return stop

    def _intent(
        self, conn: sqlite3.Connection, op: tuple[Any, ...], counts: dict[str, int]
    ) -> tuple[Future[Any], Any]:
        _, session, seq, call_id, tool, args, key, batch_id, at, replayable, fut = op
        # From now on the caller cannot cancel it: it will get what was written.
        fut.set_running_or_notify_cancel()
        recorded: ToolResult | None = None
        replay_of: int | None = None
        if replayable:
            row = conn.execute(store.FIND_OK, (key, tool)).fetchone()
            if row is not None:
                try:
                    recorded = ToolResult.model_validate_json(row[1])
                    replay_of = row[0]
                    counts["replays"] += 1
                except ValueError as e:
                    log.warning("journal: record %s holds an unreadable result: %s", row[0], e)
        conn.execute(
            store.INSERT_CALL, (session, seq, call_id, tool, args, key, batch_id, at, replay_of)
        )
        counts["intents"] += 1
        return fut, recorded

    def _outcome(self, conn: sqlite3.Connection, op: tuple[Any, ...]) -> None:
        _, session, seq, result, at = op
        try:
            text, truncated = result_json(result, self._max_result_bytes)
        except Exception as e:  # an output JSON cannot hold: keep the status at least
            log.warning("journal: the result of call %s cannot be written: %s", result.call_id, e)
            text, truncated = None, True
        code = result.error_code.value if result.error_code is not None else None
        conn.execute(
            store.SET_OUTCOME, (result.status, code, text, int(truncated), at, session, seq)
        )

    def _checkpoint(self, force: bool = False) -> None:
        """Copy the WAL into the database (PASSIVE: never waits for readers)."""
        if not force and self._since_checkpoint == 0:
            return
        self._since_checkpoint = 0
        assert self._conn is not None
        try:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as e:
            log.warning("journal %s: checkpoint failed: %s", self._path, e)

    def _write_heartbeats(self) -> None:
        conn = self._conn
        assert conn is not None
        now = time.time()
        try:
            self._set_synchronous("NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(store.HEARTBEAT, [(now, s) for s in list(self._heartbeats)])
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            log.warning("journal %s: heartbeat failed: %s", self._path, e)

    def _prune_some(self) -> None:
        """One step of pruning; when nothing is left, the prune is over."""
        conn = self._conn
        assert conn is not None
        self._starved = 0
        try:
            self._set_synchronous("NORMAL")
            deleted = prune_step(conn, self._retention, self._path)
        except sqlite3.Error as e:
            log.warning("journal %s: pruning failed: %s", self._path, e)
            deleted = 0
        self._counts["pruned"] += deleted
        self._pruned_now += deleted
        if deleted < CHUNK:
            self._prune_due = False
            self._since_prune = 0
            self._next_prune = time.monotonic() + PRUNE_EVERY
            waiters, self._prune_waiters = self._prune_waiters, []
            for fut in waiters:
                _resolve(fut, self._pruned_now)
            self._pruned_now = 0

    def _fail_leftovers(self) -> None:
        """Operations queued after STOP (a race with `put`): fail their futures."""
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                return
            if op[0] in _WAITED:
                _resolve(op[-1], error=JournalClosed("the journal was closed"))
        for fut in self._prune_waiters:
            _resolve(fut, error=JournalClosed("the journal was closed"))


def _resolve(fut: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    if fut.done():
        return
    with contextlib.suppress(Exception):  # cancelled meanwhile: nobody is waiting
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)
