"""One executor's session on a journal: what the pipeline's steps call.

`begin`, `attempt_ended` and `ended` only queue operations for the writer
(`_writer.py`): none of them waits for I/O, so they may be called under the
scheduler's lock. `begin` hands back an awaitable that resolves once the
intent is committed and synced; the step awaits it on whichever loop drives
it (`asyncio.wrap_future` works on any).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..models import ToolResult, generated_id
from ._encode import arguments_json
from ._owner import Here, OwnerLock
from ._writer import ATTEMPT, CLOSE, INTENT, OUTCOME, SESSION, JournalClosed, Writer

if TYPE_CHECKING:
    from ..pipeline import Run

__all__ = ["Session"]

log = logging.getLogger("toolbus.journal")


async def _committed(fut: Future[Any]) -> ToolResult | None:
    result: ToolResult | None = await asyncio.wrap_future(fut)
    return result


class Session:
    """The pipeline's `Journal` for one executor: its calls, under its owner id."""

    def __init__(
        self, writer: Writer, me: Here, lock: OwnerLock, session_id: str, max_bytes: int
    ) -> None:
        self.id = session_id
        self._writer = writer
        self._lock = lock
        self._max_bytes = max_bytes
        self._seq = itertools.count(1)
        # Runs whose intent was queued, until their outcome is: dict operations
        # are atomic, so any thread may add and pop.
        self._open: dict[Run, int] = {}
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
        writer.submit(SESSION, row).result()  # synced before the first call
        if lock.name is None:
            writer.heartbeat(session_id, True)

    def begin(self, run: Run, key: str) -> Coroutine[Any, Any, ToolResult | None]:
        """Queue the intent; the awaitable resolves when it is on disk, to the
        recorded result of an earlier ok call with the same key (or None)."""
        seq = next(self._seq)
        origin = run.origin
        # Calls whose key rests only on their arguments (toolbus made their id
        # up, and the caller gave no key) are never replayed: two such calls
        # may well be meant to run twice.
        replayable = origin.idempotency_key is not None or not generated_id(origin.id)
        fut = self._writer.submit(
            INTENT,
            self.id,
            seq,
            run.call.id,
            run.call.name,
            arguments_json(run.masked, self._max_bytes),
            key,
            run.batch_id,
            time.time(),
            replayable,
        )
        self._open[run] = seq
        # Set here, not only when the step has awaited the intent: a call that
        # ends meanwhile (cancelled, closed) then still gets its outcome
        # recorded, by `finish` or just below, and is never left in doubt.
        run.journaled = True
        if run.result is not None:
            self.ended(run, run.result)
        return _committed(fut)

    def attempt_ended(self, run: Run, n: int, status: str, duration: float) -> None:
        """Queue an attempt's end (never raises: an attempt that returns after
        its call ended, on an abandoned thread, may come after close)."""
        seq = self._open.get(run)
        if seq is not None:
            self._put((ATTEMPT, self.id, seq, n, status, duration, time.time()))

    def ended(self, run: Run, result: ToolResult) -> None:
        """Queue the call's outcome (once; later calls for the run do nothing)."""
        seq = self._open.pop(run, None)
        if seq is not None:
            self._put((OUTCOME, self.id, seq, result, time.time()))

    def _put(self, op: tuple[Any, ...]) -> None:
        try:
            self._writer.put(op)
        except JournalClosed:
            log.debug("journal closed: dropped a record of session %s", self.id)

    def close(self, timeout: float | None = None) -> bool:
        """Mark the session closed and wait until everything it wrote is on
        disk; then let go of the owner lock. False if `timeout` ran out."""
        flushed = True
        try:
            self._writer.put((CLOSE, self.id, time.time()))
            flushed = self._writer.flush(timeout)
        except Exception:
            flushed = False  # the journal was closed first: it flushed then
        self._open.clear()
        self._lock.release()
        return flushed
