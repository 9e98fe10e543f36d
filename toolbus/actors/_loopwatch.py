"""The deadline backstop for async callers: one watcher per event loop.

A blocking caller wakes at the deadlines of its own calls (`_backstop.py`). An
awaiting caller cannot block, so each event loop that awaits calls of an
executor gets one watcher: it keeps the calls awaited on that loop and a
single timer for the next time one of them may be overdue (or, while some are
still queued, `POLL`). One timer per loop, not per call: ten thousand calls in
flight cost one timer and one scan per wake-up. A call is forgotten when its
waiter is released (`LoopWaiter.unwatch`), without a callback of its own.

For an attempt dispatched on this loop as it was submitted, the watch acts
at the deadline: a timer thread's would free the caller, who resumes on this
loop, no sooner. It is the only timer of one that runs as a task here, and
the first of one that runs elsewhere (`timer_lag`).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable, Sequence
from functools import partial

from ..pipeline import LoopWaiter, Run
from ._backstop import POLL, overdue

__all__ = ["LoopWatch"]

# Tells the supervisor an attempt is overdue.
Notify = Callable[[Run, int], None]


class LoopWatch:
    """The calls awaited on one loop, watched for overdue attempts (loop thread only)."""

    __slots__ = (
        "__weakref__", "_handle", "_noticed", "_notify", "_polling", "_runs", "_when", "loop_ref",
    )  # fmt: skip

    def __init__(self, loop: asyncio.AbstractEventLoop, notify: Notify) -> None:
        self.loop_ref = weakref.ref(loop)  # weak: watches are kept per loop, weakly
        self._notify = notify
        self._runs: dict[Run, None] = {}  # insertion-ordered set
        self._noticed: set[tuple[Run, int]] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf  # the loop time `_handle` fires at (inf: none armed)
        # The timer was armed within POLL (it fires at most POLL from then, so
        # sooner than a look armed now would): no clock to read per call.
        self._polling = False

    def watch(self, runs: Sequence[Run], waiter: LoopWaiter) -> None:
        """Watch `runs` until `waiter`, theirs, is released (not at all if it
        was already)."""
        loop = self.loop_ref()
        if loop is None or waiter.future.done():
            return
        self._runs.update(dict.fromkeys(runs))
        waiter.unwatch = partial(self._forget, runs)
        # Attempts dispatched on this loop as they were submitted have no timer
        # at their deadline (`timer_lag`): the first look is there.
        when = self._when
        for run in runs:
            deadline = run.deadline
            if deadline is not None and deadline < when:
                when = deadline
        if not self._polling:
            # Queued calls have no deadline yet: look again within POLL at most.
            when = min(when, loop.time() + POLL)
            self._polling = True
        if when < self._when:
            if self._handle is not None:
                self._handle.cancel()
            self._handle = loop.call_at(when, self._look)
            self._when = when

    def _forget(self, runs: Sequence[Run]) -> None:
        for run in runs:
            self._runs.pop(run, None)
        if self._noticed:
            gone = set(runs)
            self._noticed = {k for k in self._noticed if k[0] not in gone}
        if not self._runs and self._handle is not None:
            self._handle.cancel()  # nothing to watch: hold no call, no timer
            self._handle = None
            self._when = math.inf
            self._polling = False

    def _look(self) -> None:
        self._handle = None
        self._when = math.inf
        self._polling = False
        loop = self.loop_ref()
        if loop is None or not self._runs:
            return
        late, wake = overdue(list(self._runs), loop.time(), self._noticed)
        for run, attempt in late:
            self._notify(run, attempt)
        if wake is not None and self._runs:  # (telling may have ended some)
            self._when = loop.time() + wake
            self._handle = loop.call_at(self._when, self._look)
            self._polling = wake <= POLL
