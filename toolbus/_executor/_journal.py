"""The executor's journal: opened with it, its calls in doubt announced, closed with it.

`Executor(journal=..., journal_retention=..., journal_timeout=...)` opens (or
takes) a journal and a session of its own on it before any of its threads
starts; the mutating calls a dead process started and never finished are then
announced once, as `tool:in-doubt` events (later subscribers read
`Executor.in_doubt()` instead); `close` ends the session and, if the executor
made the journal, the journal.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from .._options import positive_number
from ..bus import Emitter
from ..bus import _signals as sig
from ..bus._events import InDoubt
from ..journal import Journal, JournalRecord, Retention
from ..journal._session import Session
from ..masking import MASK

__all__ = [
    "DEFAULT_JOURNAL_TIMEOUT",
    "CallsInDoubt",
    "acknowledged",
    "announce_in_doubt",
    "calls_in_doubt",
    "close_journal",
    "in_doubt_now",
    "open_journal",
]

log = logging.getLogger("toolbus")

DEFAULT_JOURNAL_TIMEOUT = 5.0  # seconds: Executor(journal_timeout=...)


def open_journal(
    journal: str | os.PathLike[str] | Journal | None,
    retention: Any,
    timeout: Any,
    required: Any = False,
    on_in_doubt: Any = None,
) -> tuple[Journal | None, bool, Session | None, list[JournalRecord]]:
    """Executor(journal=..., journal_retention=..., journal_timeout=...,
    journal_required=..., on_in_doubt=...): the journal, whether the executor
    made it (and so closes it), the executor's session on it, and the calls in
    doubt now. Nothing is left open on failure."""
    if on_in_doubt is not None and not callable(on_in_doubt):
        raise TypeError(
            "Executor: on_in_doubt must be a callable (sync or async) of an InDoubtCall, "
            f"got {type(on_in_doubt).__name__}"
        )
    if not isinstance(required, bool):
        raise TypeError(
            f"Executor: journal_required must be True or False, got {type(required).__name__}"
        )
    if journal is None:
        if required:
            raise ValueError("Executor: journal_required=True needs journal= (a path or a Journal)")
        if on_in_doubt is not None:
            raise ValueError("Executor: on_in_doubt= needs journal= (a path or a Journal)")
        if retention is not None:
            raise ValueError("Executor: journal_retention= needs journal= (a path or a Journal)")
        if timeout is not None:
            raise ValueError("Executor: journal_timeout= needs journal= (a path or a Journal)")
        return None, False, None, []
    wait = (
        DEFAULT_JOURNAL_TIMEOUT
        if timeout is None
        else positive_number(timeout, "journal_timeout", "Executor")
    )
    if isinstance(journal, Journal):
        if retention is not None:
            raise ValueError(
                "Executor: journal_retention= applies to a journal made from a path; "
                "give a Journal its own: Journal(path, retention=...)"
            )
        owned = False
    elif isinstance(journal, str | os.PathLike):
        checked = Retention.coerce(retention, "journal_retention", "Executor")
        journal = Journal(journal, create=True, retention=checked, timeout=wait)
        owned = True
    else:
        raise TypeError(
            f"Executor: journal must be a path or a toolbus.Journal, got {type(journal).__name__}"
        )
    session: Session | None = None
    try:
        session = journal._open_session(wait)
        found = journal.in_doubt()
    except BaseException:
        # Briefly: a journal that did not answer in time will not now either.
        close_journal(journal, owned, session, min(wait, 1.0))
        raise
    return journal, owned, session, found


def close_journal(
    journal: Journal | None, owned: bool, session: Session | None, timeout: float
) -> None:
    """Close the executor's session (its calls' outcomes on disk, its owner
    lock let go) and the journal if the executor made it; within `timeout`."""
    deadline = time.monotonic() + timeout
    if session is not None:
        session.close(timeout)
    if owned and journal is not None:
        journal.close(max(0.0, deadline - time.monotonic()))


def acknowledged(calls: Any, timeout: float) -> None:
    """Wait (up to `timeout`) for the calls in doubt decided so far to be
    acknowledged, before the executor closes its journal: each is written on
    a daemon thread of its own (`CallsInDoubt.settled`), which a closed
    journal refuses and a process that ends kills, and the call picked up
    (its remote task fetched) would be left in doubt for the next start."""
    if calls is not None:
        calls.acknowledged(timeout)


def announce_in_doubt(journal: Journal, emitter: Emitter, found: list[JournalRecord]) -> None:
    """One `tool:in-doubt` event per call in doubt, as the executor starts, and
    one warning listing them. Never raises: the executor works all the same."""
    if not found:
        return
    try:
        log.warning(
            "journal %s: %d call(s) in doubt (started, no outcome, owner gone): %s",
            journal.path,
            len(found),
            ", ".join(f"{r.call_id} ({r.tool})" for r in found[:20])
            + (" ..." if len(found) > 20 else ""),
        )
        if emitter.wants(sig.IN_DOUBT):
            for record in found:
                # A remote task's handle may be the only key to that work (an
                # MCP task id): kept in the journal, masked when published.
                shown = (
                    record
                    if record.remote_task is None
                    else record.model_copy(update={"remote_task": MASK})
                )
                emitter.emit(sig.IN_DOUBT, InDoubt(shown.call_id, shown.tool, shown))
    except Exception:
        log.exception("announcing the journal's calls in doubt failed")


class CallsInDoubt:
    """The calls in doubt when the executor started, by (key, tool), for
    `Executor(on_in_doubt=...)`: each is decided once, by the first call of
    its tool and key (`pipeline/_journaled.py`), then acknowledged."""

    def __init__(self, journal: Journal, found: list[JournalRecord], handler: Any) -> None:
        self.handler = handler
        self._journal = journal
        self._lock = threading.Lock()
        self._acks: list[threading.Thread] = []
        self._by_key: dict[tuple[str, str], list[JournalRecord]] = {}
        # (key, tool) -> the call deciding its record, and that record: until
        # that call's intent is written (or it records none), another call
        # of the key must not run (`busy`).
        self._deciding: dict[tuple[str, str], tuple[object, JournalRecord]] = {}
        for record in found:
            # Without a handler, only the calls whose work runs on elsewhere
            # are taken (to pick it up); the others run again as they did.
            if handler is not None or record.remote_task is not None:
                self._by_key.setdefault((record.idempotency_key, record.tool), []).append(record)

    @property
    def pending(self) -> bool:
        return bool(self._by_key or self._deciding)

    def take(self, key: str, tool: str, by: object) -> JournalRecord | None:
        """The record in doubt of `key` and `tool` for the call `by` to decide
        (None: none), the key then `busy` for others until `done(by)`."""
        with self._lock:
            if (key, tool) in self._deciding:
                return None
            records = self._by_key.get((key, tool))
            if not records:
                return None
            record = records.pop(0)
            if not records:
                del self._by_key[key, tool]
            self._deciding[key, tool] = (by, record)
            return record

    def busy(self, key: str, tool: str) -> JournalRecord | None:
        """The record another call is deciding for `key` and `tool`, if any."""
        with self._lock:
            deciding = self._deciding.get((key, tool))
            return None if deciding is None else deciding[1]

    def done(self, by: object) -> None:
        """The call `by` decided (its intent written, or none to write)."""
        with self._lock:
            for at in [at for at, (who, _) in self._deciding.items() if who is by]:
                del self._deciding[at]

    def restore(self, record: JournalRecord) -> None:
        """`record` is in doubt again (its call ended undecided, or before
        its tool picked its work up): the next call of its key decides it."""
        at = (record.idempotency_key, record.tool)
        with self._lock:
            self._by_key.setdefault(at, []).insert(0, record)
            deciding = self._deciding.get(at)
            if deciding is not None and deciding[1] is record:
                del self._deciding[at]

    def settled(self, record: JournalRecord) -> None:
        # On a thread of its own: acknowledging writes the journal (it may wait
        # for its write lock), and the call that decided may be on the loop.
        thread = threading.Thread(
            target=self._acknowledge, args=(record,), name="toolbus-journal-ack", daemon=True
        )
        with self._lock:
            self._acks = [t for t in self._acks if t.is_alive()]
            self._acks.append(thread)
        thread.start()

    def acknowledged(self, timeout: float) -> None:
        """Wait (up to `timeout`) for the decisions made so far to be acknowledged."""
        with self._lock:
            acks = list(self._acks)
        deadline = time.monotonic() + timeout
        for thread in acks:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _acknowledge(self, record: JournalRecord) -> None:
        try:
            self._journal.acknowledge(record)
        except Exception as e:  # the decision stands; the record stays in doubt
            log.warning(
                "journal %s: call %s in doubt was decided but not acknowledged: %s",
                self._journal.path,
                record.call_id,
                e,
            )


def calls_in_doubt(
    journal: Journal | None, found: list[JournalRecord], handler: Any
) -> CallsInDoubt | None:
    """The index of the calls in doubt, for `Executor(on_in_doubt=...)`
    (checked by `open_journal`) and for those whose work runs on elsewhere
    (`JournalRecord.remote_task`); None when there is nothing to decide."""
    if journal is None:
        return None
    if handler is None and not any(r.remote_task is not None for r in found):
        return None
    return CallsInDoubt(journal, found, handler)


def in_doubt_now(journal: Journal | None, calls: Any) -> list[JournalRecord]:
    """`Executor.in_doubt()`: the journal's calls in doubt, once the decisions
    made so far (`on_in_doubt`) are acknowledged."""
    if journal is None:
        return []
    if calls is not None:
        calls.acknowledged(DEFAULT_JOURNAL_TIMEOUT)
    return journal.in_doubt()
