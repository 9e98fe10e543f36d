"""What the writer does when a commit fails: nothing is dropped silently.

- The journal cannot be written now (its write lock held past the busy
  timeout, the disk full or failing): `_failed_commit` releases the callers
  waiting for their intents at once (their calls run unjournaled, as
  documented) and keeps every operation, intents included, to be written with
  the next commit, retried with a backoff;
- the journal can never be written again (its file removed or replaced, the
  writer dead on an error of its own): `_fail` says so loudly once, logs
  everything queued by call id, and every later `put` raises `JournalFailed`;
- operations given up on (too many kept, still unwritten when the writer
  stops, queued after it stopped) are logged by call id (`_give_up`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ._ops import (
    FLUSH,
    INTENT,
    KEPT,
    LATE_INTENT,
    PRUNE,
    SESSION,
    STOP,
    WAITED,
    JournalClosed,
    JournalFailed,
    ids,
    resolve,
    what,
)

__all__ = ["MAX_KEPT", "RETRY_FIRST", "RETRY_MOST", "CommitFailures"]

log = logging.getLogger("toolbus.journal")

RETRY_FIRST = 0.25  # seconds before a failed commit's operations are tried again ...
RETRY_MOST = 5.0  # ... doubling up to this
# Operations kept for a retry at most (the oldest are given up, logged): each
# retry writes them all in one transaction, so this bounds its size too.
MAX_KEPT = 20_000


class CommitFailures:
    """The writer's handling of failed commits (a part of `Writer`)."""

    _path: Path
    _queue: queue.SimpleQueue[tuple[Any, ...]]
    _put_lock: threading.Lock
    _failure: JournalFailed | None
    _counts: dict[str, int]
    _done: int
    _kept: list[tuple[Any, ...]]
    _retry_at: float
    _backoff: float
    _prune_due: bool
    _prune_waiters: list[Future[Any]]

    def _failed_commit(self, ops: list[tuple[Any, ...]], error: Exception, stopping: bool) -> None:
        """The journal cannot be written now: release whoever waits, keep the rest."""
        self._counts["failed_commits"] += 1
        kept: list[tuple[Any, ...]] = []
        unjournaled: list[str] = []
        for op in ops:
            kind = op[0]
            if kind == INTENT:
                resolve(op[-1], error=error)  # the caller runs its call unjournaled
                unjournaled.append(str(op[3]))
                # (without replayable and future; its remote task last)
                kept.append((LATE_INTENT, *op[1:-3], op[-2]))
            elif kind in KEPT:
                kept.append(op)
            elif kind in (SESSION, FLUSH):
                resolve(op[-1], error=error)
            elif kind == PRUNE and op[1] not in self._prune_waiters:
                self._prune_waiters.append(op[1])
                self._prune_due = True
        log.error(
            "journal %s: a commit of %d operations failed (%s: %s)%s; %s",
            self._path,
            len(ops),
            type(error).__name__,
            error,
            f"; calls run without their intent on disk: {ids(unjournaled)}" if unjournaled else "",
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
            "; ".join(what(op) for op in ops[:200])
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
                resolve(op[1])  # stopped: there is nothing more to write
            elif kind in WAITED:
                resolve(op[-1], error=error)
            if kind in KEPT:
                lost.append(op)
            else:
                self._done += 1
        self._give_up(lost, "the journal failed")
        for fut in self._prune_waiters:
            resolve(fut, error=error)
        self._prune_waiters = []

    def _fail_leftovers(self) -> None:
        """Operations queued after STOP (a race with `put`): fail their futures,
        log the records among them."""
        lost = []
        while True:
            try:
                op = self._queue.get_nowait()
            except queue.Empty:
                break
            if op[0] in WAITED:
                resolve(op[-1], error=JournalClosed("the journal was closed"))
            if op[0] in KEPT:
                lost.append(op)
            else:
                self._done += 1
        self._give_up(lost, "they came after the writer stopped")
        for fut in self._prune_waiters:
            resolve(fut, error=JournalClosed("the journal was closed"))
        self._prune_waiters = []
