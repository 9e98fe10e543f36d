"""A policy's `Delay`: a run waits, holding nothing, for a timer or a future.

A policy may delay a run before its first attempt (`Delay(seconds, until=...)`):
it gives its slot back and waits on a `RetryDue` timer, and, with `until`, on
a future as well, whichever comes first. Many runs may wait on one future (a
flight presumed lost, a policy's event): they share one done-callback.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from ..pipeline import Outcome, Run
from ._completion import Completion
from ._messages import RetryDue, UntilDone

__all__ = ["Delays"]

log = logging.getLogger("toolbus.actors")


class _Waiting:
    """The calls delayed until one future is done (see `Scheduler._wait_until`)."""

    __slots__ = ("dues", "prune_at")

    def __init__(self, due: RetryDue) -> None:
        self.dues = [due]
        self.prune_at = 16

    def add(self, due: RetryDue) -> None:
        dues = self.dues
        dues.append(due)
        if len(dues) >= self.prune_at:
            # Drop the calls no longer waiting on it (their timer won, they
            # ended): amortised, the list stays within twice those that wait.
            dues[:] = [d for d in dues if _waits(d)]
            self.prune_at = max(16, 2 * len(dues))


def _waits(due: RetryDue) -> bool:
    run = due.run
    return not run.ticket.closed and run.ticket.gen == due.gen


class Delays(Completion):
    """The scheduler's delayed runs (a part of `Scheduler`)."""

    # Policies' `Delay(until=future)`: the calls waiting on each future.
    _untils: weakref.WeakKeyDictionary[Any, _Waiting]

    def _delayed(self, run: Run, outcome: Outcome) -> None:
        """A policy delays the run before its first attempt: it gives its slot
        back and waits on a timer (or its policy's event), holding nothing."""
        self._disarm(run)
        self.slots.release(run)
        if run.ticket.cancel is not None:
            code, reason = run.ticket.cancel
            self._finish_here(run, "cancelled", code, reason)
            return
        run.not_started()
        self._arm(run, outcome.delay, RetryDue)
        until = outcome.until
        if until is not None:
            # Whichever comes first, the timer or the event; the other is stale.
            try:
                self._wait_until(until, RetryDue(run, 0, run.ticket.gen))
            except Exception as e:  # not a future after all: the timer stands
                log.error("a policy's delay has no usable `until` (%s): waiting it out", e)

    def _wait_until(self, until: Any, due: RetryDue) -> None:
        """Send `due` when `until` is done (unless its timer wins first).

        One done-callback per future, however many calls wait on it and however
        often: a future that never completes (a flight presumed lost, a policy's
        event that never comes) would otherwise keep a callback, and through it
        the run, per delay, for as long as the future lives. The calls waiting
        on it are kept here, the stale ones (their timer won) dropped as more
        come; the entry goes with the future."""
        try:
            waiting = self._untils.get(until)
        except TypeError:  # unhashable: one callback for this delay, as it comes
            until.add_done_callback(lambda _: self._tell(due))
            return
        if waiting is not None:
            waiting.add(due)
            return
        try:
            self._untils[until] = _Waiting(due)
        except TypeError:  # not weakly referenceable: as above
            until.add_done_callback(lambda _: self._tell(due))
            return
        try:
            until.add_done_callback(lambda f: self._tell(UntilDone(f)))
        except BaseException:
            del self._untils[until]
            raise

    def _on_until_done(self, msg: UntilDone) -> None:
        waiting = self._untils.pop(msg.future, None)
        if waiting is not None:
            for due in waiting.dues:
                self._on_retry_due(due)  # a stale one (its timer won) is dropped there
