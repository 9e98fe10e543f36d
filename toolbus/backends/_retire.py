"""When an idle worker process or Ray actor retires (the executor's loop thread).

A worker that has sat idle for `idle_timeout` seconds is stopped, unless it is
one of the `KEEP` workers each tool keeps warm: a tool used before answers its
next call without a cold start, and a burst's extra workers do not live for the
executor's life. The decision (`overdue`) is pure; `Retirement` is the timer
that asks it, armed only while a pool has more workers than it keeps, so a pool
at its floor costs no wake-ups at all. (Worker threads retire the same way, on
their own inbox's timeout: `_thread_pool.py`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

__all__ = ["KEEP", "Idle", "Retirement", "overdue"]

KEEP = 1  # workers each tool keeps however long they idle (its floor)


class Idle(Protocol):
    """A worker that knows since when it has been idle (loop time, seconds)."""

    @property
    def idle_since(self) -> float: ...


W = TypeVar("W", bound=Idle)


def overdue(
    idle: Sequence[W], live: int, now: float, idle_timeout: float, keep: int = KEEP
) -> tuple[list[W], float | None]:
    """The idle workers to retire at `now`, longest idle first, never leaving
    fewer than `keep` of the `live` ones; and when to look again (loop time),
    or None if nothing can be due before another worker goes idle."""
    spare = live - keep
    if spare <= 0 or not idle:
        return [], None
    by_age = sorted(idle, key=lambda w: w.idle_since)
    gone = [w for w in by_age[:spare] if now - w.idle_since >= idle_timeout]
    rest = by_age[len(gone) :]
    if spare - len(gone) <= 0 or not rest:
        return gone, None
    return gone, rest[0].idle_since + idle_timeout


class Retirement(Generic[W]):
    """One pool's retirement timer.

    The pool calls `idle()` each time a worker goes idle; the timer then fires
    when the oldest idle worker comes due, retires what `overdue` says through
    `retire` (which returns False for a worker taken meanwhile) and re-arms
    itself while more may come due."""

    def __init__(
        self,
        idle_timeout: float,
        workers: Callable[[], tuple[Sequence[W], int]],
        retire: Callable[[W], bool],
    ) -> None:
        self.idle_timeout = idle_timeout
        self._workers = workers  # (the idle ones, how many are live)
        self._retire = retire
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False
        self.retired = 0

    def idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """A worker went idle: make sure the timer runs (the loop's thread)."""
        if self._timer is None and not self._stopped:
            self._timer = loop.call_at(loop.time() + self.idle_timeout, self._due, loop)

    def stop(self) -> None:
        """Any thread: retire nothing more (a timer armed fires, and does nothing)."""
        self._stopped = True

    def _due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if self._stopped:
            return
        idle, live = self._workers()
        gone, again = overdue(idle, live, loop.time(), self.idle_timeout)
        for w in gone:
            # False: taken meanwhile; it calls `idle` again when it is done.
            if self._retire(w):
                self.retired += 1
        if again is not None:
            self._timer = loop.call_at(again, self._due, loop)
