"""Where a timeout happens: deadlines, grace periods and backoffs, as timers.

Every attempt gets a `Deadline` timer when it is dispatched; what follows a
timeout (the retry decision, post-call hooks) gets a `Grace` timer; a retry
waits out its backoff as a `RetryDue` timer. The timers run on the
`TimerService` thread and only `tell` the supervisor actor, which hands the
message to these handlers, under the scheduler's lock. A waiting caller that
sees an attempt overdue before its timer fired sends `Expired` (`_backstop.py`,
`_loopwatch.py`), which acts as the timer would have; an attempt its caller
is sure to look at has no timer at all, and for a loop that cannot look, its
watch's one timer (`LoopStalled`) looks at the loop's calls from here.

Every change of a run's timer bumps its generation, and a timer message counts
only if it carries the current one: a deadline that fired just as the attempt
reported cannot turn a retry into a timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backends import Job
from ..bus import _signals as sig
from ..bus._events import TimedOut
from ..models import ErrorCode
from ..pipeline import (
    ADMISSION,
    EARLY,
    FINISHING,
    OFF_CLOCK,
    QUEUED,
    SUPERVISOR,
    Run,
    finish,
    make_result,
    off_clock,
    plain_after_timeout,
    ran_out,
    spent_result,
    timed_out_here,
)
from ..policies._protocol import policy_name
from ._backstop import BLOCKED_LOOP, SPENT, overdue
from ._messages import BudgetSpent, Deadline, Expired, Grace, LoopStalled, RetryDue

if TYPE_CHECKING:
    from ..bus import Emitter
    from ..models import Status
    from ..pipeline import Services
    from ._budget import ThreadBudget
    from ._capacity import Capacity
    from ._loopwatch import LoopWatch
    from ._timers import TimerHandle, TimerService

__all__ = ["Deadlines"]

log = logging.getLogger("toolbus.actors")

TimerMessage = Deadline | Grace | RetryDue


class Deadlines:
    """The scheduler's timer handlers (a part of `Scheduler`)."""

    timers: TimerService
    services: Services
    emitter: Emitter
    counters: dict[str, int]
    hook_grace: float
    budget: ThreadBudget
    slots: Capacity
    _tell: Callable[[Any], None]

    if TYPE_CHECKING:

        def _finish_here(self, run: Run, status: Status, code: ErrorCode, message: str) -> None: ...
        def _detach(self, run: Run) -> None: ...
        def _closed_run(self, run: Run) -> None: ...
        def post(self, message: Any) -> None: ...

    def _arm(self, run: Run, delay: float, make: Callable[[Run, int, int], TimerMessage]) -> None:
        if run.ticket.timer is not None:
            self._disarm(run)
        run.ticket.armed = make
        # The message is made if the timer fires (`_fire`), from what it is
        # armed with now: almost every deadline is cancelled, unread.
        run.ticket.timer = self.timers.schedule(
            delay if type(delay) is float else _as_delay(delay),
            self._fire,
            make,
            run,
            run.attempt,
            run.ticket.gen,
        )

    def _fire(
        self, make: Callable[[Run, int, int], TimerMessage], run: Run, n: int, gen: int
    ) -> None:
        """On the timer thread: the timer armed for attempt `n` (generation
        `gen`) of `run` is due; its message goes to the supervisor."""
        self._tell(make(run, n, gen))

    def _disarm(self, run: Run) -> None:
        self.timers.cancel(run.ticket.timer)
        run.ticket.timer = None
        run.ticket.armed = None
        run.ticket.gen += 1

    def _current(self, msg: TimerMessage) -> bool:
        """True if the timer message is the run's live timer (not stale)."""
        run = msg.run
        if run.ticket.closed or msg.gen != run.ticket.gen:
            return False
        # Sent by a policy's event rather than the timer (`Delay(until=...)`),
        # the timer is still armed: it goes now, not when it would have fired.
        self.timers.cancel(run.ticket.timer)
        run.ticket.timer = None
        run.ticket.armed = None
        run.ticket.gen += 1
        return True

    def _back_off(self, run: Run, delay: float) -> None:
        """`run`'s attempt failed and is to be retried after `delay` seconds:
        its slot goes and a timer waits out the backoff (a cancel asked while
        the outcome was being decided ends it instead)."""
        self._disarm(run)  # no deadline runs during the backoff
        self.slots.release(run)
        if run.ticket.cancel is not None:
            code, reason = run.ticket.cancel
            self._finish_here(run, "cancelled", code, reason)
            return
        self._arm(run, delay, RetryDue)
        # Parked for its retry: the scheduler's claim (a timeout's) is honoured,
        # and owes the call no end (`_mend.py`).
        run.settled = True

    def _on_retry_due(self, msg: RetryDue) -> None:
        if self._current(msg):
            self.slots.enqueue(msg.run, front=True)

    # -- deadlines -----------------------------------------------------------------------

    def _on_deadline(self, msg: Deadline) -> None:
        if not self._current(msg):
            return
        run, n = msg.run, msg.attempt
        phase = run.phase
        if phase in (QUEUED, ADMISSION) and run.out_of_budget():
            # Dispatched with time left, but its tool has not begun (its
            # worker not started, a busy loop, its arguments being checked,
            # its pre-call hooks) when the whole call's time ran out: it
            # never ran, and never will.
            self._spent_before_start(run, n)
            return
        if phase in OFF_CLOCK:
            what, delay = off_clock(run, time.monotonic())
            if what == "spent":
                self._spent_before_start(run, n)
            elif what == "undecided":
                self._undecided(run, n)
            else:
                self._arm(run, delay, Deadline)
            return
        left = run.remaining()
        if left is not None and left > EARLY:
            self._arm(run, left, Deadline)  # moved on (by a journal write)
            return
        if not run.try_settle(n, SUPERVISOR):
            # The worker settled the attempt and is in its post-attempt hooks.
            if not run.completed:
                run.ticket.timed_out_in = ""  # (not an earlier attempt's)
                self._arm(run, self.hook_grace, Grace)
            return
        self.counters["timeouts"] += 1
        # Announced first: nothing about the attempt (its worker's kill, say)
        # comes before its timeout.
        if self.emitter.wants(sig.TIMEOUT):
            self.emitter.emit(
                sig.TIMEOUT,
                TimedOut(
                    run.call.id,
                    run.call.name,
                    run.batch_id,
                    n,
                    run.allowed or 0.0,
                    parent_call_id=run.parent_call_id,
                    _run=run.token,
                ),
            )
        run.interrupt("timeout")
        self._detach(run)
        stage = run.ticket.timed_out_in = phase if phase in (ADMISSION, FINISHING) else ""
        if plain_after_timeout(run, self.services):
            # Nothing that follows runs code of the user's: decided here and
            # now, on whichever thread noticed the timeout (most often the
            # waiting caller itself, see `_backstop.py`), so the caller is
            # freed without another hop or a new thread.
            try:
                outcome = timed_out_here(run, n, stage, self.services)
            except Exception as e:  # a bug of toolbus's: the call still ends
                log.error("deciding call %s's timeout failed: %s", run.call.id, type(e).__name__)
                self._finish_here(run, "timeout", *ran_out(run, stage))
                return
            if outcome.kind == "retry":
                self._back_off(run, outcome.delay)
            elif outcome.kind == "done":
                self._closed_run(run)
            return
        # What follows a timeout (retry decision, post-call hooks) is user code:
        # the backend runs it as a job of its own, under a grace deadline. If
        # no thread may be had for it, the call ends here, its hooks unrun.
        backend = run.backend
        if backend.uses_threads and self.budget.room(run) != "start":
            self._finish_here(run, "timeout", *ran_out(run, stage))
            return
        self._arm(run, self.hook_grace, Grace)
        try:
            backend.submit(Job(run, n, stage))
        except Exception as e:
            log.error("backend %r failed to take a job: %s", backend.name, e)
            self._finish_here(run, "timeout", *ran_out(run, stage))

    def _spent_at_dispatch(self, run: Run) -> bool:
        """`run` is let out (a slot, a thread, its batch's order) with no time
        left before its whole-call deadline: it ends as if it had waited on,
        its next attempt never begun (True), or it may start (False)."""
        if (run.due or 0.0) - time.monotonic() > EARLY:
            return False
        self._end_spent(run)
        return True

    def _spent_before_start(self, run: Run, n: int) -> None:
        """The whole call's deadline came while attempt `n` was being set up
        (its policies deciding, its intent being journaled, its worker
        starting): it ends `DEADLINE_EXCEEDED` without a `tool:timeout` (its
        tool never started), counted as not run, so no breaker counts it."""
        if not run.try_settle(n, SUPERVISOR):
            if not run.completed:
                self._arm(run, self.hook_grace, Grace)
            return
        run.interrupt("timeout")
        self._detach(run)
        finish(run, spent_result(run, n - 1), self.services)
        self._closed_run(run)

    def _on_budget(self, msg: BudgetSpent) -> None:
        """The whole call's deadline came: a call that is not in an attempt
        (queued, parked for a thread, backing off, delayed by a policy,
        waiting for its batch's order) ends `DEADLINE_EXCEEDED` now. One in
        an attempt is left to the attempt's deadline, which is never later."""
        run = msg.run
        t = run.ticket
        if t.closed or run.completed or t.slot or run.due is None:
            return
        if run.due - time.monotonic() > EARLY:  # (a backstop that woke early)
            return
        self._end_spent(run)

    def _end_spent(self, run: Run) -> None:
        """`run`, between attempts, ends now: its whole call's time is up."""
        finish(run, spent_result(run, run.attempt), self.services)
        self._closed_run(run)

    def _undecided(self, run: Run, n: int) -> None:
        """A policy took a whole timeout to decide about `run`: the call ends
        `rejected`, naming it (a guard that cannot answer fails closed)."""
        if not run.try_settle(n, SUPERVISOR):
            # It decided just now, and the worker holds the outcome: let it go
            # on, bounded as any attempt is.
            if not run.completed:
                self._arm(run, self.hook_grace, Grace)
            return
        at = run.policy_at
        name = policy_name(run.policies[at]) if at < len(run.policies) else "?"
        run.interrupt("timeout")  # cancels an async policy's task; a sync one's thread is let go
        self._detach(run)
        message = (
            f"Tool '{run.call.name}' is unavailable: its policy {name} did not decide "
            f"within {run.timeout}s"
        )
        # attempts=0, as for any call its policies refused: its tool never ran.
        result = make_result(
            run, "rejected", error=message, code=ErrorCode.TOOL_UNAVAILABLE, attempts=0
        )
        finish(run, result, self.services)
        self._closed_run(run)

    def _on_expired(self, msg: Expired) -> None:
        """A caller saw the attempt overdue before its timer fired: act as the timer."""
        run = msg.run
        if run.ticket.closed or run.attempt != msg.attempt or run.ticket.armed is not Deadline:
            return  # settled, retried, or the timer already acted
        self._on_deadline(Deadline(run, msg.attempt, run.ticket.gen))

    # -- a loop that cannot look -------------------------------------------------------

    def arm_loop_backstop(self, delay: float, watch: LoopWatch, gen: int) -> TimerHandle:
        """Any thread: the timer that looks at `watch`'s calls for its loop,
        should the loop not look by then (`LoopWatch`; generation `gen`)."""
        return self.timers.schedule(delay, self._tell, LoopStalled(watch, gen))

    def disarm_loop_backstop(self, handle: TimerHandle) -> None:
        """Any thread: a timer `arm_loop_backstop` armed is not needed."""
        self.timers.cancel(handle)

    def _on_loop_stalled(self, msg: LoopStalled) -> None:
        """The timer a loop's watch keeps for a loop that cannot look (blocked,
        stopped, closed): act on what it finds late by `BLOCKED_LOOP` and
        more, as the loop would have, and look again when the next may be,
        until the watch arms a timer of its own again (a new generation) or
        nothing is left to watch. A loop that looks leaves it nothing to act on."""
        watch = msg.watch
        if msg.gen != watch.backstop_gen:
            return  # replaced by a timer of the watch's own
        # Seen as of `BLOCKED_LOOP` ago: what is late by less is the loop's to
        # act on (so the wake is when the next is late by that much). A fresh
        # notice set: the loop's own is the loop's, and a notice it had sent
        # already is ignored here once acted on.
        late, wake = overdue(watch.watched(), time.monotonic() - BLOCKED_LOOP, set())
        for run, attempt in late:
            if attempt == SPENT:
                self._on_budget(BudgetSpent(run))
            else:
                self._on_expired(Expired(run, attempt))
        if wake is not None:
            watch.rearm(wake, msg.gen)

    def _on_grace(self, msg: Grace) -> None:
        if not self._current(msg):
            return
        run = msg.run
        if run.completed:
            return  # finished just now; the worker's report closes it
        self._detach(run)
        # The result first, then the interrupt: hooks that stop on it must find
        # the call finished, not end it themselves (as cancelled, say).
        if run.ticket.cancel is not None:
            code, reason = run.ticket.cancel
            self._finish_here(run, "cancelled", code, reason)
        else:
            # What ran out first (the pre-call steps, say), then the grace.
            code, text = ran_out(run, run.ticket.timed_out_in)
            self._finish_here(
                run, "timeout", code,
                f"{text}; its hooks did not return within {self.hook_grace}s after that",
            )  # fmt: skip
        run.interrupt()


def _as_delay(delay: Any) -> float:
    """A hook's retry delay as a number (garbage counts as 0); the timer service
    clamps whatever is out of range (NaN, negative, beyond what a wait accepts)."""
    try:
        return float(delay)
    except (TypeError, ValueError):
        return 0.0
