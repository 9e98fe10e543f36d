"""The journal's writer: one thread, one connection, group commit.

Everyone else only queues operations (`put` never blocks on I/O; the
operations are in `_ops.py`). The writer's loop, here, takes whatever has
queued up and commits it as one group (`_commit.py`), so eight callers whose
intents arrive while a sync is under way share the next sync. A commit that
holds an intent (or a session's start, or a flush) runs with
`synchronous=FULL`: the commit returns only once the WAL is on disk, and only
then are the waiting callers' futures resolved. Attempts and outcomes alone
commit with `synchronous=NORMAL`: in WAL mode such a commit survives the death
of the process (it is in the OS's cache) and is on disk at the next full
commit or at `stop()`.

When a commit fails, nothing is dropped silently (`_failures.py`): an
operation that cannot be written at all is left out alone, and logged by call
id; when the journal cannot be written now, the callers waiting for their
intents are released at once (their calls run unjournaled, as documented) and
every operation is kept for the next commit (retried with a backoff); when
the file was removed or replaced under the writer, or the writer died on an
error of its own, the journal is *failed*: it says so loudly once, and every
later `put` raises `JournalFailed` at once (never a hang).

When idle, the writer prunes what the retention lets go, checkpoints the WAL
and refreshes the heartbeat of sessions that could not take an owner lock
(`_upkeep.py`).
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
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _store as store
from ._commit import GroupCommit
from ._failures import RETRY_FIRST, CommitFailures
from ._migrations import migrate
from ._ops import FLUSH, PRUNE, STOP, JournalClosed, JournalFailed, resolve
from ._owner import Here, here, lock_dir
from ._retention import Retention
from ._upkeep import PRUNE_EVERY, Upkeep

__all__ = ["JournalClosed", "JournalFailed", "JournalStats", "Writer"]

log = logging.getLogger("toolbus.journal")

MAX_GROUP = 2000  # operations per transaction at most
STARVED = 8  # commits in a row before a due prune step runs anyway
CHECKPOINT_IDLE = 64  # commits after which an idle writer checkpoints the WAL
CHECKPOINT_EVERY = 1000  # ... and after which it does so anyway (the WAL stays bounded)
WAL_SIZE_LIMIT = 8 * 1024 * 1024
HEARTBEAT_EVERY = 10.0  # seconds, for sessions without an owner lock


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


class Writer(GroupCommit, CommitFailures, Upkeep):
    """The thread that owns the journal's write connection."""

    def __init__(
        self,
        path: Path,
        retention: Retention,
        max_result_bytes: int,
        *,
        stale_after: float = 60.0,
        me: Here | None = None,
    ) -> None:
        self._path = path
        # To tell a call of a key still running from one in doubt (`_commit.py`).
        self._me = here() if me is None else me
        self._locks = lock_dir(path)
        self._stale_after = stale_after
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
        # (session, seq) -> how its call ended, for records its session holds
        # open while their tool, let go, runs on (`_session.py`): any thread.
        self.let_go: dict[tuple[str, int], str] = {}
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
            # A journal of an older schema is brought up to this one before
            # anything is written to it (a reader reads it as it is).
            migrate(conn, Path(self._path))
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
                resolve(stop)
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


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
