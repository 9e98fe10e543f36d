"""The deadline backstop for async callers: one watcher per event loop.

A blocking caller wakes at the deadlines of its own calls (`_backstop.py`). An
awaiting caller cannot block, so each event loop that awaits calls of an
executor gets one watcher: it keeps the calls awaited on that loop and a
single timer for the next time one of them may be overdue (or, while some are
still queued, `POLL`). One timer per loop, not per call: ten thousand calls in
flight cost one timer and one scan per wake-up. A call is forgotten when its
waiter is released (`LoopWaiter.unwatch`), without a callback of its own.

An attempt dispatched on this loop, as it was submitted or later (a queued
call started when another ended, a retry), has no deadline timer of its own
(`caller_watches`): the watch looks at its deadline, since a timer would free
its caller, who resumes on this loop, no sooner. For a loop that
cannot look (blocked by other code, stopped, closed), the watch keeps one
timer on the executor's timer thread (`Backstop`), `BLOCKED_LOOP` after each
look it means to make: if the loop has not looked by then, the scheduler
looks for it (`LoopStalled`), until the loop does or nothing is left.

Its times are `time.monotonic()`'s, as deadlines are; the loop is only given
delays, so a loop with a clock of its own (`loop.time()`) is timed right.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

from ..pipeline import LoopWaiter, Run
from ._backstop import BLOCKED_LOOP, POLL, overdue

__all__ = ["Backstop", "LoopWatch"]

# Tells the supervisor an attempt is overdue.
Notify = Callable[[Run, int], None]


class Backstop(Protocol):
    """Where a watch keeps its timer for a loop that cannot look (the scheduler)."""

    def arm_loop_backstop(self, delay: float, watch: LoopWatch, gen: int) -> Any: ...

    def disarm_loop_backstop(self, handle: Any) -> None: ...


class LoopWatch:
    """The calls awaited on one loop, watched for overdue attempts: on the loop
    thread, but for what the backstop uses from its own (`watched`, `rearm`,
    `backstop_gen`) and `drop_backstop`, any thread's."""

    __slots__ = (
        "__weakref__", "_backstop", "_guard", "_guard_at", "_guard_lock", "_handle", "_noticed",
        "_notify", "_polling", "_runs", "_when", "backstop_gen", "loop_ref",
    )  # fmt: skip

    def __init__(
        self, loop: asyncio.AbstractEventLoop, notify: Notify, backstop: Backstop | None = None
    ) -> None:
        self.loop_ref = weakref.ref(loop)  # weak: watches are kept per loop, weakly
        self._notify = notify
        self._backstop = backstop
        self._runs: dict[Run, None] = {}  # insertion-ordered set
        self._noticed: set[tuple[Run, int]] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf  # when `_handle` fires, monotonic (inf: none armed)
        # The timer was armed within POLL (it fires at most POLL from then, so
        # sooner than a look armed now would): no clock to read per call.
        self._polling = False
        # The backstop's timer, when it fires (monotonic), and its generation:
        # bumped when it is replaced or dropped, so that the one before is
        # stale. Under `_guard_lock`: the backstop re-arms from its thread.
        self._guard_lock = threading.Lock()
        self._guard: Any = None
        self._guard_at = -math.inf
        self.backstop_gen = 0

    def watched(self) -> list[Run]:
        """Any thread: the calls watched now (a copy)."""
        return list(self._runs)

    def rearm(self, delay: float, gen: int) -> None:
        """The backstop's thread: look again in `delay` seconds, if its timer
        (generation `gen`) was neither replaced nor dropped meanwhile."""
        with self._guard_lock:
            if gen != self.backstop_gen or self._backstop is None:
                return
            self._guard = self._backstop.arm_loop_backstop(delay, self, gen)
            self._guard_at = time.monotonic() + delay

    def drop_backstop(self) -> None:
        """Any thread: no backstop's timer (nothing to watch, or the executor
        is closing)."""
        with self._guard_lock:
            if self._guard is not None:
                assert self._backstop is not None
                self.backstop_gen += 1
                self._backstop.disarm_loop_backstop(self._guard)
                self._guard = None
                self._guard_at = -math.inf

    def watch(self, runs: Sequence[Run], waiter: LoopWaiter) -> None:
        """Watch `runs` until `waiter`, theirs, is released (not at all if it
        was already)."""
        loop = self.loop_ref()
        if loop is None or waiter.future.done():
            return
        self._runs.update(dict.fromkeys(runs))
        waiter.unwatch = partial(self._forget, runs)
        waiter.watch = self
        # Attempts dispatched on this loop as they were submitted: the first
        # look is at their deadline (they have no timer: `caller_watches`).
        when = self._when
        for run in runs:
            deadline = run.deadline
            if deadline is not None and deadline < when:
                when = deadline
        if not self._polling:
            # Queued calls have no deadline yet: look again within POLL at most.
            when = min(when, time.monotonic() + POLL)
            self._polling = True
        if when < self._when:
            self._arm(loop, when)

    def expect(self, deadline: float) -> bool:
        """On the loop: an attempt of a call watched here was dispatched on
        this loop, and has no timer of its own: look at its `deadline` (as
        for one dispatched as it was submitted). False if the loop is gone."""
        loop = self.loop_ref()
        if loop is None:
            return False
        if deadline < self._when:
            self._arm(loop, deadline)
        return True

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Look at `when` (monotonic), and have the backstop look by
        `BLOCKED_LOOP` later, should this loop not have by then.

        A backstop's timer still to come by then is kept: it looks, finds
        nothing late of a loop that looks, and looks again when it would be
        (`Scheduler._on_loop_stalled`). So a burst of calls watched while
        others are arms it once, not once each."""
        if self._handle is not None:
            self._handle.cancel()
        now = time.monotonic()
        self._handle = loop.call_later(when - now, self._look)
        self._when = when
        backstop = self._backstop
        due = when + BLOCKED_LOOP
        if backstop is not None and not (now < self._guard_at <= due):
            with self._guard_lock:
                self.backstop_gen += 1
                if self._guard is not None:
                    backstop.disarm_loop_backstop(self._guard)
                self._guard = backstop.arm_loop_backstop(due - now, self, self.backstop_gen)
                self._guard_at = due

    def _disarm(self) -> None:
        """Nothing to look for: no timer, and no backstop's."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = math.inf
        self._polling = False
        if self._guard is not None:
            self.drop_backstop()

    def _forget(self, runs: Sequence[Run]) -> None:
        for run in runs:
            self._runs.pop(run, None)
        if self._noticed:
            gone = set(runs)
            self._noticed = {k for k in self._noticed if k[0] not in gone}
        if not self._runs and self._handle is not None:
            self._disarm()  # nothing to watch: hold no call, no timer

    def _look(self) -> None:
        # No timer now: an attempt dispatched here while the scheduler is
        # told what is late (a queued call started in a slot set free) arms
        # one at its own deadline (`expect`), which this look keeps if sooner.
        self._handle = None
        self._when = math.inf
        loop = self.loop_ref()
        if loop is None or not self._runs:
            self._disarm()
            return
        now = time.monotonic()
        late, wake = overdue(list(self._runs), now, self._noticed)
        for run, attempt in late:
            self._notify(run, attempt)
        if wake is not None and self._runs and now + wake < self._when:
            self._arm(loop, now + wake)
        if self._runs and self._handle is not None:  # (telling may have ended some)
            self._polling = self._when - now <= POLL
        else:
            self._disarm()
