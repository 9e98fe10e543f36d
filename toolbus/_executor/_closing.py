"""Closing an executor: its steps in order, within one budget, resumable.

Several steps wait (for the supervisor to stop, for the journal's last
writes, for the events still to deliver), so a Ctrl-C may land in any of
them. The executor keeps the number of the first step not yet done: a later
`close()` does that step again (each may be done again after being cut
short) and goes on, rather than returning at once and leaving the executor
half closed (its journal open, its timer and loop threads running). A
`close()` while another thread is closing returns at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pykka

from ..actors import Scheduler
from ..actors._messages import Close
from ..bus import Announcer
from ..pipeline import Services
from . import _journal as jrn
from ._deciding import Completions
from ._options import close_budget
from ._stats import ExecutorStats
from ._submission import SubmitHooks
from ._waiting import Waiting

if TYPE_CHECKING:
    from ..actors._timers import TimerService
    from ..backends._loop_thread import LoopThread
    from ..journal import Journal

__all__ = ["Closing"]

Left = Callable[[], float]  # the seconds left of the budget


class Closing:
    """The part of `Executor` that closes it."""

    _scheduler: Scheduler
    _services: Services
    _waiting: Waiting
    _supervisor: pykka.ActorRef[Any]
    _completions: Completions
    _journal: Journal | None
    _journal_owned: bool
    _journal_session: Any
    _announcer: Announcer
    _submission: SubmitHooks
    _timers: TimerService
    _loop: LoopThread
    _final_stats: ExecutorStats | None
    _closed: bool
    _close_lock: threading.Lock
    _close_step: int  # the first step not yet done (`_STEPS`)
    _closing: bool  # a thread is closing it now

    if TYPE_CHECKING:

        def stats(self) -> ExecutorStats: ...

    @property
    def closed(self) -> bool:
        """True once `close()` began: the executor takes no more calls."""
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what is unfinished, stop the actors, deliver pending events; all
        within `timeout` seconds in total.

        Events not delivered by then are counted (`stats().events_dropped`) and
        logged per receiver. Stuck tool threads are daemons, left behind. A
        close cut short (Ctrl-C) is finished by the next `close()`. Called from
        a receiver, it does not wait for delivery (the receiver would wait for
        itself): a thread of its own delivers within the budget, then counts
        what is left.
        """
        timeout = close_budget(timeout)  # first: a bad one must not half close it
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        mine = False  # this thread closes it (set with `_closing`: no call between)
        try:
            with self._close_lock:
                if self._closing or self._close_step == len(_STEPS):
                    return
                self._closed = self._closing = mine = True
            while self._close_step < len(_STEPS):
                _STEPS[self._close_step](self, left, timeout)
                self._close_step += 1
        finally:
            if mine:
                self._closing = False


def _end_calls(ex: Closing, left: Left, timeout: float) -> None:
    ex._scheduler.ask(Close("the executor was closed"))
    ex._waiting.close()
    ex._final_stats = ex.stats()


def _stop_supervisor(ex: Closing, left: Left, timeout: float) -> None:
    try:
        ex._supervisor.stop(timeout=left())
    except (pykka.ActorDeadError, pykka.Timeout):
        pass


def _close_journal(ex: Closing, left: Left, timeout: float) -> None:
    # Every call's outcome is queued now (a `complete` dropped puts its request back first):
    # its decisions on calls in doubt acknowledged, mark the session closed, sync, unlock.
    ex._completions.wait(left())
    jrn.acknowledged(ex._services.in_doubt, left())
    jrn.close_journal(ex._journal, ex._journal_owned, ex._journal_session, left())


def _deliver_events(ex: Closing, left: Left, timeout: float) -> None:
    ex._announcer.close(left(), why=f"close(timeout={timeout:g}) ran out of time")
    ex._submission.flush()


def _stop_threads(ex: Closing, left: Left, timeout: float) -> None:
    ex._timers.close()
    ex._loop.close()


_STEPS: tuple[Callable[[Closing, Left, float], None], ...] = (
    _end_calls,
    _stop_supervisor,
    _close_journal,
    _deliver_events,
    _stop_threads,
)
