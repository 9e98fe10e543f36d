"""How a caller waits for its calls: the deadline backstop, and a wait given up.

A caller waiting for calls also wakes at their deadlines, and tells the
supervisor `Expired` for an attempt still running past its own, should the
timer thread fire late (the why: toolbus/actors/_backstop.py). A blocked
thread looks itself (`Waiting.block`); an event loop has one `LoopWatch` for
every call awaited on it (`Waiting.result`). A wait given up (the thread
interrupted, the awaiting task cancelled) cancels the calls waited for.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Sequence
from typing import Any

from ..actors import Scheduler
from ..actors._backstop import SPENT, overdue
from ..actors._loopwatch import LoopWatch
from ..actors._messages import BudgetSpent, Cancel, Expired, WaitGivenUp
from ..models import ErrorCode
from ..pipeline import BatchRun, LoopWaiter, Run, ThreadWaiter, Waiter

__all__ = ["Waiting"]


class Waiting:
    """An executor's waiting side: tells its scheduler of overdue attempts,
    and of calls nobody waits for any more. The calls waited for are `runs`:
    a `batch`'s, or the one `run`."""

    __slots__ = ("_last", "_scheduler", "_watches")

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        # The watch of each event loop that awaits calls.
        self._watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatch] = (
            weakref.WeakKeyDictionary()
        )
        # The watch last used, found without a lookup (weakly: a loop that is
        # gone takes its watch along, as the mapping lets it).
        self._last: weakref.ref[LoopWatch] | None = None

    def block(self, waiter: ThreadWaiter, runs: Sequence[Run]) -> None:
        """Block until `waiter` is released. Interrupted, it raises: the
        caller then gives the wait up (`given_up`), from wherever the
        interruption found it, this wait or its calls' submission."""
        noticed: set[tuple[Run, int]] = set()
        # From here on, a deadline set on this thread may come after a look
        # (a look's own `Expired` can start a queued call): such attempts get
        # a timer of their own (`_backstop.caller_watches`).
        waiter.looking = True
        wait = waiter.wait
        while True:
            # Tell the supervisor of overdue attempts; wait until the next look.
            late, wake = overdue(runs, time.monotonic(), noticed)
            for r, n in late:
                self._expired(r, n)
            if wait(wake):
                return

    def given_up(self, waiter: Waiter, why: str = "the caller was interrupted") -> None:
        """Nobody waits on `waiter` any more: the calls handed on with it that
        have no result yet end `cancelled` (`why`); none handed on, nothing
        happens. Safe from any point of a submission (`WaitGivenUp`)."""
        self._scheduler.post(WaitGivenUp(waiter, why))

    async def result(
        self,
        waiter: LoopWaiter,
        runs: Sequence[Run],
        batch: BatchRun | None,
        run: Run | None,
        why: str,
    ) -> Any:
        """What `waiter` is released with; cancelled, cancel the calls (`why`) and raise."""
        loop = waiter.loop
        watch = self._last() if self._last is not None else None
        if watch is None or watch.loop_ref() is not loop:
            watch = self._watches.get(loop)
            if watch is None:
                watch = self._watches[loop] = LoopWatch(loop, self._expired, self._scheduler)
            self._last = weakref.ref(watch)
        watch.watch(runs, waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self._cancel(batch, run, why)
            raise

    def close(self) -> None:
        """The executor closed (every call has its result): the loops' watches
        keep no timer for loops that may never look again."""
        for watch in list(self._watches.values()):
            watch.drop_backstop()

    def _expired(self, run: Run, attempt: int) -> None:
        self._scheduler.post(BudgetSpent(run) if attempt == SPENT else Expired(run, attempt))

    def _cancel(self, batch: BatchRun | None, run: Run | None, why: str) -> None:
        self._scheduler.post(Cancel(batch, run, ErrorCode.CANCELLED, why))
