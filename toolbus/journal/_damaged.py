"""Reading a journal around a damaged page.

A damaged page (a disk error, a file cut or overwritten by hand) makes SQLite
fail every statement that reaches it with SQLITE_CORRUPT ("database disk image
is malformed"), and a plain scan of `calls` reaches it wherever it is. So when
the plain reading fails so, the records are read again one at a time, each by
its number: the numbers come from the table scanned from either end and from
its indexes (separate pages), so that only the records on the damaged page
itself are lost. Each record named somewhere but not readable is left out with
a warning naming its number; the others are listed, and an executor starts.
Damage where the journal cannot be used at all (its schema, its key secret,
its sessions) is a `ValueError` naming the file, raised where it is opened
(`_journal._error`, `Session`), with `damaged` telling it from other errors.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _store as store

__all__ = ["damaged", "read_records"]

log = logging.getLogger("toolbus.journal")

# Where record numbers may still be read when a page of the table is damaged:
# the table from its first and from its last record, and two of its indexes.
_NUMBERS = (
    "SELECT id FROM calls NOT INDEXED ORDER BY id",
    "SELECT id FROM calls NOT INDEXED ORDER BY id DESC",
    "SELECT id FROM calls INDEXED BY calls_open WHERE status IS NULL AND acknowledged IS NULL",
    "SELECT id FROM calls INDEXED BY calls_by_call_id",
)


def damaged(error: BaseException) -> bool:
    """Whether `error` is SQLite finding a page of the file damaged (not a
    lock, not the disk; nor a file that never was a database: SQLITE_NOTADB)."""
    code = getattr(error, "sqlite_errorcode", None)
    return (
        isinstance(error, sqlite3.DatabaseError)
        and isinstance(code, int)
        and (code & 0xFF) == sqlite3.SQLITE_CORRUPT
    )


def read_records(
    conn: sqlite3.Connection,
    where: str,
    params: Sequence[Any],
    limit: int | None,
    path: Path,
) -> tuple[list[tuple[Any, ...]], dict[int, list[tuple[Any, ...]]]]:
    """`store.select_records` and the records' attempts; around a damaged
    page when the file has one (each record lost logged by its number)."""
    try:
        rows = store.select_records(conn, where, params, limit)
        return rows, store.attempts_of(conn, [r[0] for r in rows])
    except sqlite3.DatabaseError as e:
        if not damaged(e):
            raise
        log.warning(
            "journal %s is damaged (%s): listing the records that can still be read",
            path,
            e,
        )
    rows = _rows_one_by_one(conn, where, params, limit, path)
    return rows, _attempts_one_by_one(conn, [r[0] for r in rows], path)


def _numbers(conn: sqlite3.Connection) -> set[int]:
    found: set[int] = set()
    for sql in _NUMBERS:
        try:
            for (number,) in conn.execute(sql):
                found.add(number)
        except sqlite3.OperationalError:
            continue  # an older file without that index
        except sqlite3.DatabaseError as e:
            if not damaged(e):
                raise
            # Keep what came before the damaged page: the other scans read beyond it.
    return found


def _rows_one_by_one(
    conn: sqlite3.Connection,
    where: str,
    params: Sequence[Any],
    limit: int | None,
    path: Path,
) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    lost: list[int] = []
    error: sqlite3.DatabaseError | None = None
    # One statement for all, so that SQLite prepares it once.
    sql = store.records_query(conn, f"c.id = ? AND ({where})")
    for number in sorted(_numbers(conn), reverse=True):
        try:
            found = conn.execute(sql, (number, *params)).fetchall()
        except sqlite3.DatabaseError as e:
            if not damaged(e):
                raise
            lost.append(number)
            error = e
            continue
        rows.extend(found)
        if limit is not None and len(rows) >= limit:
            break
    if lost:
        shown = ", ".join(map(str, lost[:50])) + (
            f" and {len(lost) - 50} more" if len(lost) > 50 else ""
        )
        log.warning(
            "journal %s: record(s) %s cannot be read and are left out (%s)", path, shown, error
        )
    return rows


def _attempts_one_by_one(
    conn: sqlite3.Connection, ids: list[int], path: Path
) -> dict[int, list[tuple[Any, ...]]]:
    try:
        return store.attempts_of(conn, ids)
    except sqlite3.DatabaseError as e:
        if not damaged(e):
            raise
    found: dict[int, list[tuple[Any, ...]]] = {}
    for number in ids:
        try:
            found.update(store.attempts_of(conn, [number]))
        except sqlite3.DatabaseError as e:
            if not damaged(e):
                raise
            log.warning(
                "journal %s: the attempts of record %s cannot be read and are left out (%s)",
                path,
                number,
                e,
            )
    return found
