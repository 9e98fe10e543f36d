"""The journal's schema version, and how an older journal becomes this one.

A journal file carries its schema version (`PRAGMA user_version`). A toolbus
refuses a newer one; the first writer that opens an older one migrates it
forward (`migrate`), one version at a time, in one transaction: a crash
during it leaves the file as it was. Readers read any version they know.

- 1 -> 2 (issue 23): `calls.args_digest`, an HMAC of the call's arguments,
  what tells a caller's idempotency key reused for other arguments apart.
  Records written before have none: they replay as they always did.
- 2 -> 3 (issue 28): the tables `pending` (requests waiting for a decision)
  and `used_decisions` (single-use decisions used): `_held.py`.
- 3 -> 4 (issue 26): `calls.remote_task`, the handle of a call's work
  running elsewhere (an MCP server's task), to pick it up after a crash.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from ._held import HELD_SCHEMA

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate"]

log = logging.getLogger("toolbus.journal")

SCHEMA_VERSION = 4

# From each older version to the next, in order.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE calls ADD COLUMN args_digest TEXT",),
    2: HELD_SCHEMA,
    3: ("ALTER TABLE calls ADD COLUMN remote_task TEXT",),
}


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring a journal of an older schema version up to `SCHEMA_VERSION`
    (nothing to do for a current one)."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read again under the write lock: another writer may have just done it.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for v in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS[v]:
                try:
                    conn.execute(statement)
                except sqlite3.OperationalError as e:
                    raise sqlite3.OperationalError(
                        f"migrating from schema version {v} to {v + 1} failed "
                        f"(the file is left at version {version}): {e}"
                    ) from None
        if version < SCHEMA_VERSION:
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            log.info("journal %s: schema version %d -> %d", path, version, SCHEMA_VERSION)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
