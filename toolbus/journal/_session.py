"""One executor's session on a journal: what the pipeline's steps call.

`begin`, `attempt_ended` and `ended` only queue operations (`_ops.py`) for
the writer (`_writer.py`): none of them waits for I/O, so they may be called
under the scheduler's lock. `begin` hands back an awaitable that resolves once
the intent is committed and synced; the step awaits it on whichever loop
drives it (`asyncio.wrap_future` works on any).

A call that ends while its tool still runs (a sync tool let go at its
timeout or at a cancel: a thread cannot be stopped) keeps its record open
until that attempt returns, its outcome held back meanwhile (`ended`,
`attempt_ended`): the intent of another call of its key finds it running,
here or in another process, and is refused (`IDEMPOTENCY_KEY_IN_USE`), so the
key's operation never runs twice at once. So does a call whose worker is
killed (`can_kill`, a process): a SIGKILL takes effect when the kernel
delivers it, and the attempt ends once the worker is seen dead, within
milliseconds (`_process_calls._seen_dead`).

Every wait is bounded by the executor's `journal_timeout`: the session's own
row when it starts (an error then), and each intent. An intent that is not on
disk in time, or whose commit failed, does not hold its call back: the call
runs unjournaled, and that is logged (ERROR, with the call id) and counted
(`JournalStats.unjournaled`). Its intent stays queued and is written when the
journal can be written again, with its outcome after it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..models import ToolResult, generated_id
from ._damaged import damaged
from ._encode import arguments_digest, arguments_json, bindable
from ._ops import (
    ATTEMPT,
    CLOSE,
    INTENT,
    OUTCOME,
    REMOTE_TASK,
    SESSION,
    JournalClosed,
    JournalFailed,
    KeyInUse,
    KeyReused,
    Unjournaled,
)
from ._owner import Here, OwnerLock
from ._writer import Writer

if TYPE_CHECKING:
    from ..pipeline import Run

__all__ = ["Intent", "Session"]

# What an intent comes to: an earlier ok call's result to replay, None (run
# the call), its key reused with other arguments, its key's call still
# running, or not on disk.
Intent = ToolResult | KeyReused | KeyInUse | Unjournaled | None

log = logging.getLogger("toolbus.journal")


class Session:
    """The pipeline's `Journal` for one executor: its calls, under its owner id."""

    def __init__(
        self,
        writer: Writer,
        me: Here,
        lock: OwnerLock,
        session_id: str,
        max_bytes: int,
        timeout: float,
        path: str = "",
        secret: bytes = b"",
    ) -> None:
        self.id = session_id
        self._secret = secret
        self._writer = writer
        self._lock = lock
        self._max_bytes = max_bytes
        self._timeout = timeout
        self._path = path
        self._seq = itertools.count(1)
        # Runs whose intent was queued, until their outcome is: dict operations
        # are atomic, so any thread may add and pop.
        self._open: dict[Run, int] = {}
        # Under `_tools`: how many attempts of each run are in their tool now,
        # and the outcomes held back until they have returned (`ended`).
        self._tools = threading.Lock()
        self._in_tool: dict[Run, int] = {}
        self._held: dict[Run, tuple[Any, ...]] = {}
        self._warned_closed = False
        now = time.time()
        row = (
            session_id,
            me.pid,
            me.host,
            me.machine,
            me.start_ticks,
            me.started,
            lock.name,
            now,
            now,
        )
        fut = writer.submit(SESSION, row)
        try:
            fut.result(timeout)  # synced before the first call
        except TimeoutError:
            # Written later if the disk comes back: closed at once then.
            try:
                writer.put((CLOSE, session_id, time.time()))
            except JournalClosed:
                pass
            raise TimeoutError(
                f"journal {path!r}: this executor's session was not recorded within "
                f"{timeout:g}s (journal_timeout): the journal's disk is not answering, or "
                "another process holds its write lock"
            ) from None
        except JournalClosed:
            raise
        except Exception as e:  # the commit failed (logged by the writer)
            if damaged(e):
                # Not the disk's passing trouble: every start would fail so.
                raise ValueError(
                    f"journal {path!r} is damaged and cannot be used: this executor's "
                    f"session could not be recorded: {e}"
                ) from None
            raise OSError(
                f"journal {path!r}: this executor's session could not be recorded: "
                f"{type(e).__name__}: {e}"
            ) from None
        if lock.name is None:
            writer.heartbeat(session_id, True)

    def begin(self, run: Run, key: str) -> Coroutine[Any, Any, Intent]:
        """Queue the intent; the awaitable resolves when it is on disk, to the
        recorded result of an earlier ok call with the same key (or None), or
        `KeyReused` when that call (or one still running) had other
        arguments, or `KeyInUse` when a call of the key with the same
        arguments is still running. It resolves to
        `Unjournaled` (logged) when the intent could not be written within the
        journal's timeout: the call then runs unrecorded, unless the journal
        is required."""
        seq = next(self._seq)
        origin = run.origin
        # Calls whose key rests only on their arguments (toolbus made their id
        # up, and the caller gave no key) are never replayed: two such calls
        # may well be meant to run twice.
        replayable = origin.idempotency_key is not None or not generated_id(origin.id)
        try:
            fut = self._writer.submit(
                INTENT,
                self.id,
                seq,
                bindable(run.call.id),
                bindable(run.call.name),
                arguments_json(run.masked, self._max_bytes),
                bindable(key),
                run.batch_id,
                time.time(),
                arguments_digest(
                    origin.arguments if run.keyed is None else run.keyed, self._secret
                ),
                replayable,
                run.remote_task,  # (picked up after a crash: kept with this intent at once)
            )
        except JournalClosed as e:  # closed before the executor, or failed: never waits
            return self._unjournaled(run, str(e) or "the journal was closed")
        self._open[run] = seq
        # Set here, not only when the step has awaited the intent: a call that
        # ends meanwhile (cancelled, closed) then still gets its outcome
        # recorded, by `finish` or just below, and is never left in doubt.
        run.note_journaled()
        if run.result is not None:
            self.ended(run, run.result)
        return self._committed(fut, run)

    async def _committed(self, fut: Future[Any], run: Run) -> Intent:
        writer = self._writer
        # A writer already stuck in one commit for longer than the timeout
        # (its disk not answering) is not waited for again by every call.
        wait = 0.0 if writer.stalled_for() >= self._timeout else self._timeout
        try:
            result: ToolResult | KeyReused | KeyInUse | None = await asyncio.wait_for(
                asyncio.wrap_future(fut), wait
            )
            return result
        except TimeoutError:
            timeout: float | None = self._timeout
            why = (
                f"it was not on disk within {self._timeout:g}s (journal_timeout): the "
                "journal's disk is not answering, or another process holds its write lock; "
                "it stays queued and is written, with the outcome, if the journal recovers"
            )
        except JournalFailed as e:
            timeout, why = None, str(e)
        except JournalClosed:
            timeout, why = None, "the journal was closed"
        except Exception as e:  # the commit's own error (the writer logged it)
            timeout, why = None, f"its commit failed ({type(e).__name__}: {e})"
        return await self._unjournaled(run, why, timeout)

    async def _unjournaled(self, run: Run, why: str, timeout: float | None = None) -> Unjournaled:
        """The call runs without its intent on disk: say so, by call id."""
        if run.is_live(1):
            self._writer.count_unjournaled()
            log.error(
                "journal %s: call %s (%s) runs without its intent on disk: %s",
                self._path,
                run.call.id,
                run.call.name,
                why,
            )
        return Unjournaled(why, timeout)

    def attempt_started(self, run: Run) -> bool:
        """The run's attempt is about to enter its tool: True (counted until
        `attempt_ended`), or False when the call has ended already (its
        outcome queued or held): its tool is not to start then, since its
        key is no longer held for it."""
        with self._tools:
            if run not in self._open:
                return False
            self._in_tool[run] = self._in_tool.get(run, 0) + 1
            return True

    def attempt_ended(self, run: Run, n: int, status: str, duration: float) -> None:
        """Queue an attempt's end (never raises: an attempt that returns after
        its call ended, on an abandoned thread, may come after close). The
        last attempt of an ended call to return lets its held outcome go."""
        with self._tools:
            left = self._in_tool.pop(run, 0) - 1
            if left > 0:
                self._in_tool[run] = left  # (an idempotent tool's retry runs beside it)
            seq = self._open.get(run)
            held = self._held.get(run)
            if held is not None:
                seq = held[2]
                if left > 0:
                    held = None
                else:
                    del self._held[run]
        if seq is not None:
            op = (ATTEMPT, self.id, seq, n, status, duration, time.time(), run.call.id)
            self._put(op, run)
        if held is not None:
            self._put(held, run)
            # After the outcome is queued: an intent queued meanwhile still
            # finds the record open, and is told why.
            self._writer.let_go.pop((self.id, held[2]), None)

    def remote_task(self, run: Run, handle: str) -> None:
        """Queue the handle of the call's work running elsewhere (never raises)."""
        seq = self._open.get(run)
        if seq is not None:
            self._put((REMOTE_TASK, self.id, seq, bindable(handle), run.call.id), run)

    def ended(self, run: Run, result: ToolResult) -> None:
        """Queue the call's outcome (once; later calls for the run do nothing),
        or hold it back while one of its attempts is still in its tool and its
        backend could not stop it (a thread let go: see the module's
        docstring). An ok outcome is never held: its key replays it, running
        nothing."""
        with self._tools:
            seq = self._open.pop(run, None)
            if seq is None:
                return
            op = (OUTCOME, self.id, seq, result, time.time())
            if result.status != "ok" and run in self._in_tool:
                self._held[run] = op
                # Before the caller has the result: its next call of the key
                # is told why it is refused (`_commit.py`, `_journaled._in_use`).
                self._writer.let_go[self.id, seq] = (
                    f"{result.status} killed" if _kills(run) else result.status
                )
                return
        self._put(op, run)

    def _put(self, op: tuple[Any, ...], run: Run) -> None:
        try:
            self._writer.put(op)
        except JournalClosed as e:
            # The journal was closed before this executor, or failed (said
            # loudly once, by the writer): the call is named here.
            if op[0] == OUTCOME:
                level = logging.ERROR if isinstance(e, JournalFailed) else logging.WARNING
                log.log(
                    level,
                    "journal %s: the outcome (%s) of call %s (%s) is not recorded: %s",
                    self._path,
                    op[3].status,
                    run.call.id,
                    run.call.name,
                    e,
                )
            else:
                log.debug("journal: an attempt of call %s is not recorded: %s", run.call.id, e)

    def close(self, timeout: float | None = None) -> bool:
        """Mark the session closed and wait until everything it wrote is on
        disk; then let go of the owner lock. False if `timeout` ran out."""
        flushed = True
        with self._tools:
            # Written now, whatever still runs: a closed session's open record
            # would be taken for one in doubt (its tool may run on here, but
            # nothing is left to tell the journal when it returns).
            held = list(self._held.items())
            self._held.clear()
            self._in_tool.clear()
        for run, op in held:
            self._put(op, run)
            self._writer.let_go.pop((self.id, op[2]), None)
        try:
            self._writer.put((CLOSE, self.id, time.time()))
            flushed = self._writer.flush(timeout)
        except JournalFailed:
            flushed = False
        except Exception:
            flushed = False  # the journal was closed first: it flushed then
        self._open.clear()
        self._lock.release()
        return flushed


def _kills(run: Run) -> bool:
    """Whether the run's backend stops an attempt it gives up for real (a
    process killed), rather than letting it run on (a thread)."""
    return getattr(run.backend, "can_kill", False) is True
