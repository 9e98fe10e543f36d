"""The writer's idle work: checkpoints, heartbeats, pruning.

Run by the writer's loop (`_writer.py`) when no operation waits, or now and
then between commits under a load that never lets the queue run dry. Each is
its own small transaction, so an intent never waits behind a long delete;
none is vital: a failure is logged and the writer goes on.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _store as store
from ._ops import resolve
from ._prune import CHUNK, prune_step
from ._retention import Retention

__all__ = ["PRUNE_EVERY", "Upkeep"]

log = logging.getLogger("toolbus.journal")

PRUNE_EVERY = 600.0  # seconds between prunes (also after rows // 10 new records)


class Upkeep:
    """The writer's idle steps (a part of `Writer`)."""

    _path: Path
    _retention: Retention
    _conn: sqlite3.Connection | None
    _counts: dict[str, int]
    _heartbeats: set[str]
    _prune_due: bool
    _next_prune: float
    _since_prune: int
    _starved: int
    _pruned_now: int
    _prune_waiters: list[Future[Any]]
    _since_checkpoint: int

    if TYPE_CHECKING:

        def _set_synchronous(self, mode: str) -> None: ...

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
                resolve(fut, self._pruned_now)
            self._pruned_now = 0
