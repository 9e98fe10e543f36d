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

When a commit fails, nothing is dropped silently:

- an operation that cannot be written at all (a value SQLite cannot bind, a
  constraint) is found by applying the group again one operation at a time
  (each in a savepoint): only that one is left out, and logged by call id;
- when the journal itself cannot be written (its write lock held past the busy
  timeout, the disk full or failing), the callers waiting for their intents
  are released at once (their calls run unjournaled, as documented) and every
  operation is kept, intents included, to be written with the next commit
  (retried with a backoff) once the journal can be written again; whatever is
  still unwritten when the writer stops is logged by call id;
- when the file was removed or replaced under the writer (checked before each
  commit), or the writer died on an error of its own, the journal is *failed*:
  it says so loudly once, everything queued is logged by call id, and every
  later `put` raises `JournalFailed` at once (never a hang).

When idle, the writer prunes what the retention lets go (in small
transactions, so an intent never waits behind a long delete) and refreshes
the heartbeat of sessions that could not take an owner lock.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..models import ToolResult
from . import _store as store
from ._encode import result_from_json, result_json
from ._prune import CHUNK, prune_step
from ._retention import Retention

__all__ = ["JournalClosed", "JournalFailed", "JournalStats", "Writer"]

log = logging.getLogger("toolbus.journal")

# Operation kinds (the first item of each queued tuple).
INTENT = 1  # (INTENT, session, seq, call_id, tool, args, key, batch_id, at, replayable, future)
ATTEMPT = 2  # (ATTEMPT, session, seq, n, status, duration, at, call_id)
OUTCOME = 3  # (OUTCOME, session, seq, result, at)
SESSION = 4  # (SESSION, row, future)
CLOSE = 5  # (CLOSE, session, at)
FLUSH = 6  # (FLUSH, future)
STOP = 7  # (STOP, future)
PRUNE = 8  # (PRUNE, future): prune now; the future gets how many records went
# An intent whose caller no longer waits (its commit failed: the call ran
# unjournaled), kept to be written late so that its outcome has a record.
LATE_INTENT = 9  # (LATE_INTENT, session, seq, call_id, tool, args, key, batch_id, at)
_SYNCED = frozenset({INTENT, SESSION, FLUSH, STOP})
_WAITED = frozenset({INTENT, SESSION, FLUSH, STOP, PRUNE})  # their last item is a future
# Kept across a failed commit, to be written with the next one.
_KEPT = frozenset({INTENT, LATE_INTENT, ATTEMPT, OUTCOME, CLOSE})

MAX_GROUP = 2000  # operations per transaction at most
STARVED = 8  # commits in a row before a due prune step runs anyway
CHECKPOINT_IDLE = 64  # commits after which an idle writer checkpoints the WAL
CHECKPOINT_EVERY = 1000  # ... and after which it does so anyway (the WAL stays bounded)
WAL_SIZE_LIMIT = 8 * 1024 * 1024
PRUNE_EVERY = 600.0  # seconds between prunes (also after rows // 10 new records)
HEARTBEAT_EVERY = 10.0  # seconds, for sessions without an owner lock
RETRY_FIRST = 0.25  # seconds before a failed commit's operations are tried again ...
RETRY_MOST = 5.0  # ... doubling up to this
# Operations kept for a retry at most (the oldest are given up, logged): each
# retry writes them all in one transaction, so this bounds its size too.
MAX_KEPT = 20_000


class JournalClosed(RuntimeError):
    """The journal's writer was stopped: nothing more can be recorded."""


class JournalFailed(JournalClosed):
    """The journal cannot be written any more: its writer died, or its file was
    removed or replaced while in use. Logged loudly when it happens."""


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
    """Operations queued, in the transaction under way, or kept after a failed
    commit to be written with the next one: not committed yet."""
    dropped: int = 0
    """Operations given up on (logged by call id): one that cannot be written
    at all, or still unwritten when the writer stopped or the journal failed."""
    unjournaled: int = 0
    """Mutating calls that ran without their intent on disk: the intent's
    commit failed, or did not end within the executor's `journal_timeout`."""
    failed: bool = False
    """The journal failed (see `JournalFailed`): nothing more is recorded."""


# Every live writer, so that a forked child can disable its copies.
_WRITERS: weakref.WeakSet[Writer] = weakref.WeakSet()


class Writer:
    """The thread that owns the journal's write connection."""

    def __init__(self, path: Path, retention: Retention, max_result_bytes: int) -> None:
        self._path = path
        self._retention = retention
        self._max_result_bytes = max_result_bytes
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._put_lock = threading.Lock()
        self._closed = False
        self._failure: JournalFailed | None = None  # set once, under _put_lock
        self._queued = 0  # operations ever queued (under _put_lock)
        self._done = 0  # operations ever committed or given up (the writer's)
        self._unjournaled = 0  # under _put_lock (any thread counts them)
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened
        self._synchronous = "FULL"
        self._counts: dict[str, int] = dict.fromkeys(
            ("intents", "attempts", "outcomes", "replays", "commits", "synced_commits",
             "largest_group", "pruned", "failed_commits", "dropped"),
            0,
        )  # fmt: skip
        self._kept: list[tuple[Any, ...]] = []  # operations of failed commits, oldest first
        self._inflight: list[tuple[Any, ...]] = []  # the group being committed
        self._retry_at = 0.0  # monotonic time of the next try when some are kept
        self._backoff = RETRY_FIRST
        self._busy_since: float | None = None  # monotonic start of the commit under way
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
        _WRITERS.add(self)

    # -- any thread ----------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Start the thread and wait until its connection is open (errors raise
        here; `TimeoutError` if the file does not open within `timeout`)."""
        self._thread.start()
        try:
            self._ready.result(timeout)
        except TimeoutError:
            with self._put_lock:
                # Nothing more is queued; the thread stops as soon as it can.
                self._closed = True
                self._queued += 1
                self._queue.put((STOP, Future()))
            raise TimeoutError(
                f"journal {str(self._path)!r}: its file did not open for writing within "
                f"{timeout:g}s: its disk is not answering, or another connection holds its "
                "write lock"
            ) from None
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        # An executor never closed: at a clean interpreter exit (daemon threads
        # still run then), write what is queued, so that calls which did end
        # are not taken for calls in doubt. Calls still running stay without an
        # outcome: in doubt, as they should be.
        if not self._closed and self._failure is None:
            self.flush(2.0)

    def put(self, op: tuple[Any, ...]) -> None:
        """Queue `op`; never waits for I/O. Raises JournalClosed after `stop`,
        JournalFailed once the journal failed (at once: never blocks)."""
        with self._put_lock:
            if self._failure is not None:
                raise self._failure
            if self._closed:
                raise JournalClosed("the journal was closed")
            if self._thread.ident is not None and not self._thread.is_alive():
                # Gone without a word (it says why when it can): never wait for it.
                self._failure = JournalFailed("the journal's writer is not running")
                raise self._failure
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
        except JournalFailed:
            return False
        except JournalClosed:
            return True  # stopping flushes everything queued before it
        except Exception:  # TimeoutError, or the commit's own error
            return False
        return True

    def stop(self, timeout: float | None = None) -> bool:
        """Commit what is queued (synced), close the connection, end the thread."""
        fut: Future[None] = Future()
        with self._put_lock:
            if self._closed or self._failure is not None:
                self._closed = True
                fut.set_result(None)
            else:
                self._closed = True
                self._queued += 1
                self._queue.put((STOP, fut))
        atexit.unregister(self._at_exit)
        try:
            fut.result(timeout)
        except TimeoutError:
            log.warning(
                "journal %s: the writer did not stop within %.3gs (its disk is not answering, "
                "or another connection holds its write lock); it stops when it can",
                self._path,
                timeout,
            )
            return False
        if self._thread.ident is not None:
            self._thread.join(timeout)
        return not self._thread.is_alive()

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

    def stalled_for(self) -> float:
        """Seconds the commit under way has taken so far (0 when idle): a
        writer stuck on its disk shows here."""
        since = self._busy_since
        return 0.0 if since is None else max(0.0, time.monotonic() - since)

    def count_unjournaled(self) -> None:
        with self._put_lock:
            self._unjournaled += 1

    @property
    def failure(self) -> JournalFailed | None:
        """Why the journal failed, once it has (see `JournalFailed`)."""
        return self._failure

    def stats(self) -> JournalStats:
        return JournalStats(
            **self._counts,
            pending=self._queued - self._done,
            unjournaled=self._unjournaled,
            failed=self._failure is not None,
        )

    def _forked(self) -> None:
        """In a forked child: this copy has no thread; refuse everything at once."""
        self._put_lock = threading.Lock()  # may have been held by a thread the child lacks
        self._closed = True
        self._failure = JournalFailed(
            "the journal's writer runs in the parent process, not in this forked child"
        )
        with contextlib.suppress(Exception):
            atexit.unregister(self._at_exit)

    # -- the writer's thread -------------------------------------------------------

    def _main(self) -> None:
        try:
            conn = self._conn = store.connect(self._path)
            # Checkpoints are the writer's to run when idle (see _checkpoint),
            # not a commit's, so an intent never waits for one.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            # A checkpointed WAL is cut back to this size when it is reused.
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            st = os.stat(self._path)
            self._identity = (st.st_dev, st.st_ino)
        except BaseException as e:
            if self._conn is not None:
                self._conn.close()
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        try:
            self._loop()
        except BaseException as e:  # a fault of the writer's own: never a silent hang
            log.critical(
                "journal %s: the writer stopped on an unexpected error; nothing more is "
                "recorded (calls run unjournaled)",
                self._path,
                exc_info=True,
            )
            failure = JournalFailed(f"the journal's writer died: {type(e).__name__}: {e}")
            self._fail(failure, self._inflight)
        finally:
            self._fail_leftovers()
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _loop(self) -> None:
        q = self._queue
        while True:
            if self._failure is not None:
                return
            try:
                idle_step = self._prune_due and not self._kept
                op = q.get_nowait() if idle_step else q.get(timeout=self._wait_for())
            except queue.Empty:
                if self._kept:
                    if time.monotonic() >= self._retry_at:
                        self._group([])  # try the kept operations again, alone
                elif self._prune_due:
                    self._prune_some()
                else:
                    self._checkpoint()
                    self._periodic()
                continue
            ops = [op]
            with contextlib.suppress(queue.Empty):
                while len(ops) < MAX_GROUP:
                    ops.append(q.get_nowait())
            self._inflight = ops  # until _group has them (for _fail, if the writer dies)
            stop = self._group(ops)
            if stop is not None:
                if self._failure is None:
                    self._checkpoint(force=True)
                _resolve(stop)
                return
            if self._failure is not None:
                return
            self._since_checkpoint += 1
            if self._since_checkpoint >= CHECKPOINT_EVERY or (
                self._since_checkpoint >= CHECKPOINT_IDLE and q.empty()
            ):
                self._checkpoint()
            if self._prune_due and not self._kept:
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
        if self._kept:
            due = min(due, self._retry_at)
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

    # -- one group -------------------------------------------------------------------

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
                if _environmental(e):
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

    def _apply(self, ops: list[tuple[Any, ...]], *, careful: bool) -> _Applied:
        """Apply `ops` in one transaction and commit. `careful`: each operation
        in a savepoint, one that cannot be written left out (logged)."""
        conn = self._conn
        assert conn is not None
        applied = _Applied()
        synced = any(op[0] in _SYNCED for op in ops)
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
                    if _environmental(e):
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

    def _op(self, conn: sqlite3.Connection, op: tuple[Any, ...], applied: _Applied) -> None:
        kind = op[0]
        counts = applied.counts
        if kind == INTENT:
            applied.done.append(self._intent(conn, op, counts))
        elif kind == LATE_INTENT:
            _, session, seq, call_id, tool, args, key, batch_id, at = op
            conn.execute(
                store.INSERT_LATE_CALL, (session, seq, call_id, tool, args, key, batch_id, at)
            )
            counts["intents"] += 1
        elif kind == ATTEMPT:
            _, session, seq, n, status, duration, at, _call_id = op
            conn.execute(store.INSERT_ATTEMPT, (n, status, duration, at, session, seq))
            counts["attempts"] += 1
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

    def _committed(self, ops: list[tuple[Any, ...]], applied: _Applied) -> None:
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
                _what(op),
                type(error).__name__,
                error,
            )
            if op[0] in _WAITED:
                _resolve(op[-1], error=error)
        for waiter in applied.prunes:
            self._prune_waiters.append(waiter)
            self._prune_due = True
        for fut, value in applied.done:
            _resolve(fut, value)

    def _failed_commit(self, ops: list[tuple[Any, ...]], error: Exception, stopping: bool) -> None:
        """The journal cannot be written now: release whoever waits, keep the rest."""
        self._counts["failed_commits"] += 1
        kept: list[tuple[Any, ...]] = []
        unjournaled: list[str] = []
        for op in ops:
            kind = op[0]
            if kind == INTENT:
                _resolve(op[-1], error=error)  # the caller runs its call unjournaled
                unjournaled.append(str(op[3]))
                kept.append((LATE_INTENT, *op[1:-2]))
            elif kind in _KEPT:
                kept.append(op)
            elif kind in (SESSION, FLUSH):
                _resolve(op[-1], error=error)
            elif kind == PRUNE and op[1] not in self._prune_waiters:
                self._prune_waiters.append(op[1])
                self._prune_due = True
        log.error(
            "journal %s: a commit of %d operations failed (%s: %s)%s; %s",
            self._path,
            len(ops),
            type(error).__name__,
            error,
            f"; calls run without their intent on disk: {_ids(unjournaled)}" if unjournaled else "",
            "giving up on what it held, as the writer stops"
            if stopping
            else f"{len(kept)} operations kept, to be written when the journal can be again",
        )
        self._done += len(ops) - len(kept)
        if len(kept) > MAX_KEPT:
            self._give_up(kept[: len(kept) - MAX_KEPT], "too many operations wait for a retry")
            kept = kept[len(kept) - MAX_KEPT :]
        self._kept = kept
        self._retry_at = time.monotonic() + self._backoff
        self._backoff = min(RETRY_MOST, self._backoff * 2)
        if stopping:
            self._give_up(self._kept, "the writer stopped before they could be written")
            self._kept = []

    def _give_up(self, ops: list[tuple[Any, ...]], why: str) -> None:
        """Log, by call id, operations that will never be written."""
        if not ops:
            return
        self._counts["dropped"] += len(ops)
        self._done += len(ops)
        log.error(
            "journal %s: %s; not recorded: %s",
            self._path,
            why,
            "; ".join(_what(op) for op in ops[:200])
            + (f"; and {len(ops) - 200} more" if len(ops) > 200 else ""),
        )

    def _fail(self, error: JournalFailed, ops: Sequence[tuple[Any, ...]] = ()) -> None:
        """The journal can no longer be written: say so once, loudly; refuse
        every later `put`; release and log everything not written."""
        with self._put_lock:
            first = self._failure is None
            if first:
                self._failure = error
        if first:
            log.critical(
                "journal %s failed: %s. Calls run unjournaled from now on: a crash now "
                "leaves no record of them",
                self._path,
                error,
            )
        if ops:
            self._counts["failed_commits"] += 1
        pending = [*self._kept, *ops]
        self._kept = []
        with contextlib.suppress(queue.Empty):
            while True:  # nothing more is queued once _failure is set
                pending.append(self._queue.get_nowait())
        lost: list[tuple[Any, ...]] = []
        for op in pending:
            kind = op[0]
            if kind == STOP:
                _resolve(op[1])  # stopped: there is nothing more to write
            elif kind in _WAITED:
                _resolve(op[-1], error=error)
            if kind in _KEPT:
                lost.append(op)
            else:
                self._done += 1
        self._give_up(lost, "the journal failed")
        for fut in self._prune_waiters:
            _resolve(fut, error=error)
        self._prune_waiters = []

    def _intent(
        self, conn: sqlite3.Connection, op: tuple[Any, ...], counts: dict[str, int]
    ) -> tuple[Future[Any], Any]:
        _, session, seq, call_id, tool, args, key, batch_id, at, replayable, fut = op
        # From now on the caller cannot cancel it: it will get what was written.
        # A caller that stopped waiting (cancelled, or its wait timed out) runs
        # its call, or not, on its own: it is never recorded as a replay.
        waiting = _claim(fut)
        recorded: ToolResult | None = None
        replay_of: int | None = None
        if replayable and waiting:
            row = conn.execute(store.FIND_OK, (key, tool)).fetchone()
            if row is not None:
                try:
                    recorded = result_from_json(row[1])
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
        # The outcome says whether the call was answered from the journal: a
        # caller that gave up waiting for its intent ran its call instead.
        replayed = int(result.attempts == 0 and result.metadata.get("replayed") is True)
        conn.execute(
            store.SET_OUTCOME,
            (result.status, code, text, int(truncated), at, replayed, session, seq),
        )

    def _checkpoint(self, force: bool = False) -> None:
        """Copy the WAL into the database (PASSIVE: never waits for readers)."""
        if not force and self._since_checkpoint == 0:
            return
        self._since_checkpoint = 0
        assert self._conn is not None
        try:
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception as e:
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
        except Exception as e:
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
        except Exception as e:  # logged; the writer goes on (a prune is never vital)
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
        """Operations queued after STOP (a race with `put`): fail their futures,
        log the records among them."""
        lost = []
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                break
            if op[0] in _WAITED:
                _resolve(op[-1], error=JournalClosed("the journal was closed"))
            if op[0] in _KEPT:
                lost.append(op)
            else:
                self._done += 1
        self._give_up(lost, "they came after the writer stopped")
        for fut in self._prune_waiters:
            _resolve(fut, error=JournalClosed("the journal was closed"))
        self._prune_waiters = []


class _Applied:
    """What one committed transaction did."""

    __slots__ = ("counts", "done", "poisoned", "prunes", "synced")

    def __init__(self) -> None:
        self.counts = {"intents": 0, "attempts": 0, "outcomes": 0, "replays": 0}
        self.done: list[tuple[Future[Any], Any]] = []
        self.poisoned: list[tuple[tuple[Any, ...], BaseException]] = []
        self.prunes: list[Future[Any]] = []
        self.synced = False


def _environmental(error: BaseException) -> bool:
    """Whether `error` is the journal's (its lock, its disk, its file) rather
    than one operation's (a value SQLite cannot bind, a constraint)."""
    if isinstance(error, sqlite3.IntegrityError | sqlite3.DataError | sqlite3.InterfaceError):
        return False
    return isinstance(error, sqlite3.Error | OSError | MemoryError)


def _claim(fut: Future[Any]) -> bool:
    """Mark an intent's future running; False if its caller no longer waits."""
    if fut.running():
        return True  # claimed by an earlier try of the same group
    if fut.done():
        return False
    try:
        return fut.set_running_or_notify_cancel()
    except RuntimeError:
        return fut.running()


def _what(op: tuple[Any, ...]) -> str:
    """An operation, for a log line: what it is and whose."""
    kind = op[0]
    if kind in (INTENT, LATE_INTENT):
        return f"intent of call {op[3]!r} ({op[4]})"
    if kind == ATTEMPT:
        return f"attempt {op[3]} of call {op[7]!r}"
    if kind == OUTCOME:
        result = op[3]
        return f"outcome ({result.status}) of call {result.call_id!r} ({result.name})"
    if kind == CLOSE:
        return f"close of session {op[1]}"
    if kind == SESSION:
        return f"start of session {op[1][0]}"
    return f"operation {kind}"


def _ids(call_ids: list[str]) -> str:
    shown = ", ".join(map(repr, call_ids[:50]))
    return shown + (f" and {len(call_ids) - 50} more" if len(call_ids) > 50 else "")


def _resolve(fut: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    if fut.done():
        return
    with contextlib.suppress(Exception):  # cancelled meanwhile: nobody is waiting
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
