"""The journal's file: its schema and every query, on stdlib `sqlite3`.

One SQLite database in WAL mode. `calls` holds one row per journaled call: its
intent (written and synced before the tool runs), then its outcome (status,
error code, the published result as JSON). `attempts` holds one row per
attempt. `sessions` says who wrote each call (`_owner.py`); approvals, `_held.py`.
`meta` holds the HMAC secret of idempotency keys, made once with the file.

Connections are made here with autocommit off in SQLite's sense
(`isolation_level=None`: every transaction is an explicit `BEGIN`), a busy
timeout, WAL and `synchronous=FULL`. Pure functions over a connection: the
caller decides which thread runs them. One piece, a little over 400 lines:
the schema and every statement on it, so that a column is changed in one file.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import stat
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._held import HELD_SCHEMA
from ._migrations import SCHEMA_VERSION, migrate

__all__ = [
    "RECORD_COLUMNS",
    "acknowledge",
    "attempts_of",
    "check_writable",
    "connect",
    "connect_reader",
    "ensure_schema",
    "idle_sessions",
    "key_secret",
    "prepare_path",
    "prune_chunk",
    "records_query",
    "schema_ready",
    "select_records",
]

BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    machine TEXT NOT NULL,
    start_ticks INTEGER,
    process_started REAL,
    lock TEXT,
    opened REAL NOT NULL,
    heartbeat REAL NOT NULL,
    closed REAL
);
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT,
    key TEXT NOT NULL,
    batch_id TEXT,
    started REAL NOT NULL,
    replay_of INTEGER,
    status TEXT,
    error_code TEXT,
    result TEXT,
    truncated INTEGER NOT NULL DEFAULT 0,
    ended REAL,
    acknowledged REAL,
    args_digest TEXT,
    remote_task TEXT,
    UNIQUE (session, seq)
);
CREATE INDEX IF NOT EXISTS calls_ok_by_key ON calls (key, tool) WHERE status = 'ok';
CREATE INDEX IF NOT EXISTS calls_open ON calls (session)
    WHERE status IS NULL AND acknowledged IS NULL;
CREATE INDEX IF NOT EXISTS calls_by_call_id ON calls (call_id);
CREATE TABLE IF NOT EXISTS attempts (
    call INTEGER NOT NULL,
    n INTEGER NOT NULL,
    status TEXT NOT NULL,
    duration REAL NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (call, n)
) WITHOUT ROWID;
"""

_TABLES = frozenset({"meta", "sessions", "calls", "attempts"})


def prepare_path(path: Path, *, create: bool) -> None:
    """Check that a journal can live at `path`; make an empty file (mode 0600:
    it holds the key secret) when `create` and there is none yet. A journal
    only read (`create=False`) needs to be readable, nothing more.

    Raises FileNotFoundError, NotADirectoryError, IsADirectoryError,
    PermissionError or ValueError (not a regular file), each saying what is
    wrong with which path."""
    text = str(path)
    parent = path.parent
    try:
        st: os.stat_result | None = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:  # too long, a symlink loop, no search permission, ...
        raise type(e)(e.errno, f"journal {text!r}: {e.strerror}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(f"journal {text!r} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(
                f"journal {text!r} is not a regular file (it is {_kind(st.st_mode)}); "
                "a journal is an SQLite file"
            )
        if not os.access(path, os.R_OK):
            raise PermissionError(f"journal {text!r} is not readable by us")
        if create:
            check_writable(path)
        return
    if os.path.islink(path):
        raise FileNotFoundError(
            f"journal {text!r} is a symbolic link to {os.readlink(path)!r}, which does not exist"
        )
    if not parent.exists():
        raise FileNotFoundError(
            f"{'journal' if create else 'no journal at'} {text!r}: the directory "
            f"{str(parent)!r} does not exist"
        )
    if not parent.is_dir():
        raise NotADirectoryError(f"journal {text!r}: {str(parent)!r} is not a directory")
    if not create:
        raise FileNotFoundError(f"no journal at {text!r} (Journal(path, create=True) makes one)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"journal {text!r}: the directory {str(parent)!r} is not writable")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return  # made meanwhile by another process: fine
    except OSError as e:
        raise type(e)(e.errno, f"journal {text!r} cannot be created: {e.strerror}") from None
    os.close(fd)


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a named pipe"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a file"


def check_writable(path: Path) -> None:
    """PermissionError, saying why, if a journal at `path` cannot be written."""
    if not os.access(path, os.W_OK):
        raise PermissionError(
            f"journal {str(path)!r} is not writable by us (it can only be read: Journal(path))"
        )
    if not os.access(path.parent, os.W_OK | os.X_OK):
        # SQLite makes its -wal and -shm files beside the journal.
        raise PermissionError(
            f"journal {str(path)!r}: its directory {str(path.parent)!r} is not writable "
            "(SQLite keeps its -wal and -shm files there)"
        )


def connect(path: Path, *, any_thread: bool = False) -> sqlite3.Connection:
    """A connection in WAL mode with synchronous=FULL and a busy timeout."""
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=not any_thread, timeout=BUSY_TIMEOUT_MS / 1000
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Only for a new file (setting it writes, so it would wait for the
        # write lock): pruned pages are then given back with `incremental_vacuum`.
        if conn.execute("PRAGMA page_count").fetchone()[0] == 0:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"cannot switch to WAL mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def connect_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection (any thread): it writes nothing, so it needs no
    write access and never waits for the journal's write lock."""
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    conn = sqlite3.connect(
        uri,
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    except BaseException:
        conn.close()
        raise
    return conn


def schema_ready(conn: sqlite3.Connection, path: Path) -> bool:
    """True if the file holds a toolbus journal, False if it is empty (a new
    file); ValueError for anything else. Reads only."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"journal {str(path)!r} has schema version {version}; this toolbus reads "
            f"up to {SCHEMA_VERSION} (upgrade toolbus)"
        )
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if 1 <= version <= SCHEMA_VERSION and tables >= _TABLES:
        return True  # an older version is migrated by the first writer (`ensure_schema`)
    if version == 0 and not tables - {"meta"}:
        return False
    raise ValueError(f"{str(path)!r} is an SQLite database but not a toolbus journal")


def ensure_schema(conn: sqlite3.Connection, path: Path) -> bytes:
    """Make the tables if missing, or bring an older journal's up to this
    version (`MIGRATIONS`); return the key secret (made once, here)."""
    if schema_ready(conn, path):
        migrate(conn, path)
    else:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in (*_SCHEMA.split(";"), *HELD_SCHEMA):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO meta (name, value) VALUES ('key_secret', ?)",
                (secrets.token_bytes(32),),
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return key_secret(conn, path)


def key_secret(conn: sqlite3.Connection, path: Path) -> bytes:
    """The journal's HMAC secret of idempotency keys. Reads only."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE name = 'key_secret'").fetchone()
    except sqlite3.DatabaseError:
        # Its index may be what is damaged: the table itself is a page or two.
        row = conn.execute(
            "SELECT value FROM meta NOT INDEXED WHERE name = 'key_secret'"
        ).fetchone()
    if row is None or not isinstance(row[0], bytes) or len(row[0]) < 16:
        raise ValueError(f"journal {str(path)!r} has no key secret: it is damaged")
    return bytes(row[0])


# -- the writer's statements ------------------------------------------------------

INSERT_SESSION = (
    "INSERT OR REPLACE INTO sessions (id, pid, host, machine, start_ticks, process_started, "
    "lock, opened, heartbeat, closed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)"
)
CLOSE_SESSION = "UPDATE sessions SET closed = ?, heartbeat = ? WHERE id = ?"
HEARTBEAT = "UPDATE sessions SET heartbeat = ? WHERE id = ? AND closed IS NULL"
# The newest ok outcome of a key (for this tool) with these arguments (or none
# recorded: schema version 1), and the record it first came from; ANY_OK: any.
FIND_OK = (
    "SELECT coalesce(replay_of, id), result FROM calls "
    "WHERE key = ? AND tool = ? AND status = 'ok' "
    "AND (args_digest = ? OR args_digest IS NULL) ORDER BY id DESC LIMIT 1"
)
ANY_OK = "SELECT 1 FROM calls WHERE key = ? AND tool = ? AND status = 'ok' LIMIT 1"
# The records of a key (for this tool) with no outcome, not acknowledged: each
# running, or in doubt once its owner is gone; with its owner's session row.
OPEN_OF_KEY = (
    "SELECT c.args_digest, s.id, s.pid, s.host, s.machine, s.start_ticks, s.lock, "
    "s.opened, s.heartbeat, s.closed, c.seq FROM calls c "
    "LEFT JOIN sessions s ON s.id = c.session "
    "WHERE c.key = ? AND c.tool = ? AND c.status IS NULL AND c.acknowledged IS NULL"
)
INSERT_CALL = (
    "INSERT INTO calls (session, seq, call_id, tool, arguments, key, batch_id, started, "
    "args_digest, replay_of, remote_task) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# An intent written after its commit failed (its call ran meanwhile): never a replay.
INSERT_LATE_CALL = (
    "INSERT OR IGNORE INTO calls (session, seq, call_id, tool, arguments, key, batch_id, "
    "started, args_digest, remote_task) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
INSERT_ATTEMPT = (
    "INSERT OR REPLACE INTO attempts (call, n, status, duration, at) "
    "SELECT id, ?, ?, ?, ? FROM calls WHERE session = ? AND seq = ?"
)
# The outcome also says whether the call was a replay: one whose caller gave up
# waiting for its intent ran instead, whatever the intent found.
SET_OUTCOME = (
    "UPDATE calls SET status = ?, error_code = ?, result = ?, truncated = ?, ended = ?, "
    "replay_of = CASE WHEN ? THEN replay_of END "
    "WHERE session = ? AND seq = ? AND status IS NULL"
)


def prune_chunk(
    conn: sqlite3.Connection, *, max_age: float | None, rows: int | None, now: float, limit: int
) -> int:
    """Delete up to `limit` finished records beyond the retention (in one
    transaction, the caller's); return how many.

    Finished: with an outcome, or acknowledged. Beyond the retention: ended (or
    acknowledged) more than `max_age` seconds ago, or older than the newest
    `rows` records. Records without an outcome are never deleted here."""
    clauses: list[str] = []
    params: list[Any] = []
    if max_age is not None:
        clauses.append("coalesce(ended, acknowledged) < ?")
        params.append(now - max_age)
    if rows is not None:
        clauses.append("id <= (SELECT id FROM calls ORDER BY id DESC LIMIT 1 OFFSET ?)")
        params.append(rows)
    if not clauses:
        return 0
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM calls WHERE (status IS NOT NULL OR acknowledged IS NOT NULL) "
            f"AND ({' OR '.join(clauses)}) ORDER BY id LIMIT ?",
            (*params, limit),
        )
    ]
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    conn.execute(f"DELETE FROM attempts WHERE call IN ({marks})", ids)
    conn.execute(f"DELETE FROM calls WHERE id IN ({marks})", ids)
    return len(ids)


def idle_sessions(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    """Sessions with no records left: (id, lock, closed, heartbeat)."""
    return list(
        conn.execute(
            "SELECT id, lock, closed, heartbeat FROM sessions s "
            "WHERE NOT EXISTS (SELECT 1 FROM calls c WHERE c.session = s.id)"
        )
    )


# -- reading ---------------------------------------------------------------------------

RECORD_COLUMNS = (
    "c.id, c.call_id, c.tool, c.arguments, c.key, c.batch_id, c.started, c.replay_of, "
    "c.status, c.error_code, c.result, c.truncated, c.ended, c.acknowledged, "
    "c.session, s.pid, s.host, s.machine, s.start_ticks, s.process_started, s.lock, "
    "s.opened, s.heartbeat, s.closed"
)

SET_REMOTE_TASK = "UPDATE calls SET remote_task = ? WHERE session = ? AND seq = ?"


def select_records(
    conn: sqlite3.Connection, where: str, params: Sequence[Any], limit: int | None = None
) -> list[tuple[Any, ...]]:
    """Records (joined with their sessions), newest first; last, the remote
    task and the arguments' digest (None where the table, which a writer may
    migrate meanwhile, has no such column)."""
    sql = records_query(conn, where)
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return list(conn.execute(sql, tuple(params)))


def records_query(conn: sqlite3.Connection, where: str) -> str:
    """The statement of `select_records`, without its limit."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
    remote = "c.remote_task" if "remote_task" in columns else "NULL"
    digest = "c.args_digest" if "args_digest" in columns else "NULL"
    return (
        f"SELECT {RECORD_COLUMNS}, {remote}, {digest} FROM calls c "
        "LEFT JOIN sessions s ON s.id = c.session "
        f"WHERE {where} ORDER BY c.id DESC"
    )


def attempts_of(conn: sqlite3.Connection, ids: Iterable[int]) -> dict[int, list[tuple[Any, ...]]]:
    """The attempts of the records `ids`, by record, in order."""
    found: dict[int, list[tuple[Any, ...]]] = {}
    ids = list(ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            f"SELECT call, n, status, duration, at FROM attempts WHERE call IN ({marks}) "
            "ORDER BY call, n",
            chunk,
        ):
            found.setdefault(row[0], []).append(row)
    return found


def acknowledge(conn: sqlite3.Connection, ids: Sequence[int], now: float) -> int:
    """Mark records `ids` acknowledged (those without an outcome); return how many."""
    if not ids:
        return 0
    marks = ",".join("?" * len(ids))
    cur = conn.execute(
        f"UPDATE calls SET acknowledged = ? WHERE id IN ({marks}) "
        "AND status IS NULL AND acknowledged IS NULL",
        (now, *ids),
    )
    return cur.rowcount
