"""The operations queued to the journal's writer, and how their callers hear back.

Each operation is a tuple whose first item is its kind (below); the kinds a
caller waits on end with a `Future`, resolved once the operation is committed
(or failed). Also here: the errors `Writer.put` raises, and how an operation
is named in a log line (by call id), for whoever gives up on one.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATTEMPT",
    "CLOSE",
    "FLUSH",
    "INTENT",
    "KEPT",
    "LATE_INTENT",
    "OUTCOME",
    "PRUNE",
    "REMOTE_TASK",
    "SESSION",
    "STOP",
    "SYNCED",
    "WAITED",
    "JournalClosed",
    "JournalFailed",
    "KeyInUse",
    "KeyReused",
    "Unjournaled",
    "claim",
    "ids",
    "resolve",
    "what",
]

# Operation kinds (the first item of each queued tuple).
# (INTENT, session, seq, call_id, tool, args, key, batch_id, at, digest, replayable, remote,
#  future): `remote` the call's remote task when it picks one up (after a crash)
INTENT = 1
ATTEMPT = 2  # (ATTEMPT, session, seq, n, status, duration, at, call_id)
OUTCOME = 3  # (OUTCOME, session, seq, result, at)
SESSION = 4  # (SESSION, row, future)
CLOSE = 5  # (CLOSE, session, at)
FLUSH = 6  # (FLUSH, future)
STOP = 7  # (STOP, future)
PRUNE = 8  # (PRUNE, future): prune now; the future gets how many records went
# An intent whose caller no longer waits (its commit failed: the call ran
# unjournaled), kept to be written late so that its outcome has a record.
# (LATE_INTENT, session, seq, call_id, tool, args, key, batch_id, at, digest, remote)
LATE_INTENT = 9
REMOTE_TASK = 10  # (REMOTE_TASK, session, seq, handle, call_id)
SYNCED = frozenset({INTENT, SESSION, FLUSH, STOP})
WAITED = frozenset({INTENT, SESSION, FLUSH, STOP, PRUNE})  # their last item is a future
# Kept across a failed commit, to be written with the next one.
KEPT = frozenset({INTENT, LATE_INTENT, ATTEMPT, REMOTE_TASK, OUTCOME, CLOSE})


class JournalClosed(RuntimeError):
    """The journal's writer was stopped: nothing more can be recorded."""


class JournalFailed(JournalClosed):
    """The journal cannot be written any more: its writer died, or its file was
    removed or replaced while in use. Logged loudly when it happens."""


@dataclass(frozen=True, slots=True)
class KeyReused:
    """What an intent found: its caller's idempotency key ended `ok` before,
    or is still running, for a call of the same tool with other arguments
    (nothing is replayed)."""

    key: str


@dataclass(frozen=True, slots=True)
class KeyInUse:
    """What an intent found: a call of the same tool under its caller's
    idempotency key, with the same arguments, is still running (its owner
    session is open): one operation must not run twice at once. `let_go`:
    how that call ended ("timeout", "cancelled", ...) when it did end but its
    tool, let go, still runs ("timeout killed", ...: its worker process was
    killed and is not yet seen dead); known only to the journal whose session it is."""

    key: str
    let_go: str | None = None


@dataclass(frozen=True, slots=True)
class Unjournaled:
    """What an intent came to when it is not on disk: why (the call runs
    unrecorded, unless the journal is required). `timeout`: the seconds it
    was given, when that is why."""

    why: str
    timeout: float | None = None


def claim(fut: Future[Any]) -> bool:
    """Mark an intent's future running; False if its caller no longer waits."""
    if fut.running():
        return True  # claimed by an earlier try of the same group
    if fut.done():
        return False
    try:
        return fut.set_running_or_notify_cancel()
    except RuntimeError:
        return fut.running()


def resolve(fut: Future[Any], value: Any = None, error: BaseException | None = None) -> None:
    if fut.done():
        return
    with contextlib.suppress(Exception):  # cancelled meanwhile: nobody is waiting
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)


def what(op: tuple[Any, ...]) -> str:
    """An operation, for a log line: what it is and whose."""
    kind = op[0]
    if kind in (INTENT, LATE_INTENT):
        return f"intent of call {op[3]!r} ({op[4]})"
    if kind == ATTEMPT:
        return f"attempt {op[3]} of call {op[7]!r}"
    if kind == REMOTE_TASK:
        return f"remote task of call {op[4]!r}"
    if kind == OUTCOME:
        result = op[3]
        return f"outcome ({result.status}) of call {result.call_id!r} ({result.name})"
    if kind == CLOSE:
        return f"close of session {op[1]}"
    if kind == SESSION:
        return f"start of session {op[1][0]}"
    return f"operation {kind}"


def ids(call_ids: list[str]) -> str:
    shown = ", ".join(map(repr, call_ids[:50]))
    return shown + (f" and {len(call_ids) - 50} more" if len(call_ids) > 50 else "")
