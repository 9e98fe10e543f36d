"""Pruning: what the retention lets go, a small transaction at a time.

Run by the writer thread when it has nothing else to do (and by
`Journal.prune()`), never on a call's path. Each step deletes at most `CHUNK`
finished records in one transaction, so an intent that arrives meanwhile
waits for one small delete at most. Records without an outcome (running or
in doubt) are never pruned. Sessions that have no records left are dropped
once their owner is gone, with their lock files.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

from . import _store as store
from ._owner import lock_dir, lock_free
from ._retention import Retention

__all__ = ["CHUNK", "prune_step"]

CHUNK = 500
# A session without an owner lock and without records is dropped this long
# after its last heartbeat (its owner cannot be checked otherwise).
_IDLE_SESSION = 86400.0


def prune_step(conn: sqlite3.Connection, retention: Retention, path: Path) -> int:
    """Delete up to CHUNK records beyond `retention`; return how many (fewer
    than CHUNK: nothing is left to prune)."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        deleted = store.prune_chunk(
            conn, max_age=retention.seconds, rows=retention.rows, now=now, limit=CHUNK
        )
        dropped: list[str] = []
        if deleted < CHUNK:
            dropped = _drop_sessions(conn, path, now)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    locks = lock_dir(path)
    for name in dropped:
        with contextlib.suppress(OSError):
            (locks / name).unlink()
    if deleted:
        conn.execute(f"PRAGMA incremental_vacuum({CHUNK})")
    return deleted


def _drop_sessions(conn: sqlite3.Connection, path: Path, now: float) -> list[str]:
    """Drop sessions with no records whose owner is gone; return their lock files."""
    locks = lock_dir(path)
    files: list[str] = []
    for session, lock, closed, heartbeat in store.idle_sessions(conn):
        if closed is not None:
            dead = True
        elif lock is not None:
            dead = lock_free(locks / lock) is True
        else:
            dead = now - heartbeat > _IDLE_SESSION
        if dead:
            conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
            if lock is not None:
                files.append(lock)
    return files
