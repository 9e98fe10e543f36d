"""The scheduler: the supervisor's state and decisions, under one lock.

It takes batches, releases calls in their schedule's order as capacity allows
(`max_parallel`, each batch's limit, each tool's `max_concurrency`, the thread
budget), arms deadlines and backoffs as timers, and turns timeouts and
cancellations into results. It runs no tool, hook or subscriber code.

Whoever has news posts it (`post`), and the handler runs *inline* on the
posting thread when the lock is free: a caller submitting calls (admission and
dispatch happen on the caller's thread, so a single call costs two hand-offs:
caller -> tool's backend -> caller), a backend reporting an outcome (the next
queued call is dispatched from there), a caller cancelling. When the lock is
taken, the message waits in a queue that the holder empties before letting go,
so no thread ever blocks behind another (no convoys). Only timers go through
the supervisor actor's mailbox (`_supervisor.py`): it is told only when it has
work. Because every handler holds the lock, the state below belongs to one
thread at a time, as it did when one actor owned it. Replies are matched by
attempt number and timer messages by a per-run generation, so anything stale
is dropped.

The handlers are grouped by what they decide: admission (`_admission.py`),
how runs end and what that changes in their batch (`_completion.py`), a
policy's delays (`_delays.py`), timeouts (`_deadlines.py`), the numbers
`stats()` reads (`_status.py`), bounded queues and `tool:queued`
(`_backpressure.py`); here are the lock, the message dispatch, the dispatch
of attempts to backends and their reports.

Where an attempt runs is its backend's business (`toolbus/backends/`): the
scheduler hands it a `Job` and reads its report. At a deadline it settles the
attempt, interrupts it and tells the backend to let it go (a stuck thread is
abandoned, a task cancelled). Threads are a shared budget (`_budget.py`).

It is one piece past 400 lines: the lock's entry points (`post`, `ask`), the
dispatch of attempts and the report handler are the path every call takes,
read together.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .. import pipeline as _pipeline
from .._interrupts import INTERRUPTS, interrupts_caller
from ..backends import Backend, BackendUnavailable, Host, Job
from ..bus import _signals as sig
from ..models import ErrorCode
from ..pipeline import SUPERVISOR, Outcome, Run
from ._admission import Admission
from ._backpressure import Backpressure
from ._backstop import caller_watches
from ._budget import ThreadBudget
from ._capacity import Capacity, Group, ToolGroup
from ._delays import Delays
from ._lost import requeue
from ._mend import OWED, Torn, mend, note_torn
from ._messages import (
    BudgetSpent,
    Cancel,
    CancelWhere,
    Close,
    Deadline,
    Expired,
    Grace,
    HaltRun,
    LoopStalled,
    Report,
    Reports,
    RetryDue,
    StatusQuery,
    SubmissionCutShort,
    Submit,
    SubmitIfRoom,
    UntilDone,
    WaitGivenUp,
)
from ._status import status
from ._timers import TimerService

__all__ = ["Scheduler"]

log = logging.getLogger("toolbus.actors")

_new = object.__new__
_set = object.__setattr__  # (a frozen dataclass's own `__init__` sets its fields so)


class Scheduler(Admission, Delays, Backpressure):
    """The supervisor's state; every public method takes its lock."""

    def __init__(
        self,
        services: _pipeline.Services,
        timers: TimerService,
        host: Host,
        *,
        max_parallel: int,
        max_abandoned: int,
        max_abandoned_per_tool: int,
        hook_grace: float,
        backends: list[Backend] = (),  # type: ignore[assignment]
        groups: Mapping[str, int] | None = None,
        max_queued: int | None = None,
        group_queues: Mapping[str, int] | None = None,
    ) -> None:
        # Held by whichever thread is acting for the supervisor. Nobody ever
        # waits for it to post: see `post`. Reentrant only so that a thread
        # can tell it took it (`_is_owned`): a signal's exception raised as
        # `acquire` returns would otherwise leave it held for ever (`_took`);
        # a handler's own posts never take it again (`owner`).
        self.lock = threading.RLock()
        # The thread holding the lock (its ident), read without it by anyone
        # asking "am I inside a handler?".
        self.owner: int | None = None
        self._pending: deque[Any] = deque()
        # A signal's exception (KeyboardInterrupt) raised on the main thread
        # while it handled messages: raised again there once it lets go of
        # the lock (`post`), so the caller is interrupted as it asked.
        self._interrupt: BaseException | None = None
        # The runs such an exception left half done, mended before the
        # thread lets go of the lock (`_mend.py`).
        self._torn: dict[Run, Torn] = {}
        self.services = services
        self.emitter = services.emitter
        self.timers = timers
        self.host = host
        # Where timer messages go (the supervisor actor's tell), set by `bind`.
        self._tell: Callable[[Any], None] = self.post
        self.max_parallel = max_parallel
        self.hook_grace = hook_grace
        self.pools: dict[int, ToolGroup] = {}
        self.slots = Capacity(max_parallel, self._nested_deadlock, max_queued=max_queued)
        # Waits are noted only while `tool:queued` has a listener (`_backpressure.py`).
        self.slots.listen = self.emitter.listening.get(sig.QUEUED, ())
        # Named capacity groups that several tools share (Executor(groups=...)),
        # each with the bound on its queue, if any.
        queues = group_queues or {}
        self.groups: dict[str, Group] = {
            name: Group(name, limit, queues.get(name)) for name, limit in (groups or {}).items()
        }
        # Producers blocked for room (on_full="wait"): see _backpressure.py.
        self.bounded = max_queued is not None or bool(queues)  # (else none ever waits)
        self.room_lock = threading.Lock()
        self.room = threading.Condition(self.room_lock)
        self.blocked = 0
        self.room_gen = 0
        self.room_seen: tuple[int, ...] | None = None
        self.runs_open: set[Run] = set()
        # Policies' `Delay(until=future)`: the calls waiting on each future.
        self._untils = weakref.WeakKeyDictionary()
        # Backends in use, and the budget of threads their jobs may hold.
        self.backends: dict[int, Backend] = {}
        self.budget = ThreadBudget(max_abandoned, max_abandoned_per_tool)
        self.given_up = 0  # jobs ever let go of (`_detach`): a bound on stuck threads
        for backend in backends:
            self._started(backend)
        self.closed = False
        self.stopped_backends: set[int] = set()  # (by id: as `backends`)
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "submitted", "batches", "ok", "error", "timeout", "cancelled", "rejected",
                "deferred", "retries", "timeouts", "late_results", "abandoned_total",
            ),
            0,
        )  # fmt: skip

    def bind(self, tell: Callable[[Any], None]) -> None:
        """Send timer messages through `tell` (the supervisor actor's mailbox)."""
        self._tell = tell

    # -- handling, inline under the lock ------------------------------------------

    def post(self, message: Any) -> None:
        """Have `message` handled; never waits, never raises.

        The message joins a queue; whoever holds the lock handles the queue
        before letting go. If the lock is free, this thread takes it and does
        so itself (the common case: a call is admitted and dispatched on its
        caller's thread, a report handled on the reporting worker's). Nobody
        blocks on a busy supervisor, so threads never convoy behind the one
        that holds it, and a backend may post from inside `submit`.
        """
        pending = self._pending
        # (`owner` set: a handler posts, on the thread holding the lock; its
        # message waits in the queue for that thread, as another thread's would.)
        if not pending and self.owner is None:
            try:
                taken = self.lock.acquire(blocking=False)
            except BaseException as e:
                taken = self._took(e)
            if taken:
                # Nobody held the lock and nothing waits: handle it here at once
                # (the common case, without a trip through the queue). From here
                # every step is inside the `try`, and the `finally` calls nothing
                # before it lets go of the lock: a signal's exception (raised where
                # a function is called or entered) cannot leave it held.
                try:
                    if pending:  # posted between our look and the lock: theirs goes first
                        pending.append(message)
                        message = None
                    self.owner = threading.get_ident()
                    if message is not None:
                        self._handle(message)
                    if pending:
                        self._drain()
                finally:
                    interrupt = self._interrupt
                    if interrupt is not None:  # mended before letting go (`_mend.py`)
                        try:
                            interrupt = mend(self, interrupt)
                        except BaseException as e:  # (a signal's, as it began: still owed)
                            self._interrupt, interrupt = OWED, e
                    self.owner = None
                    self.lock.release()
                # Posted while we held the lock, by a thread that found it
                # taken; or mending still owed (cut short by another signal's).
                if pending or (interrupt is not None and self._interrupt is OWED):
                    try:
                        self._settle()
                    except BaseException as e:  # (a signal's)
                        interrupt = self._settle_again(e)
                if interrupt is not None:
                    raise interrupt
                return
        pending.append(message)
        try:
            self._settle()
        except BaseException as e:  # (a signal's: `_settle` raises no other)
            interrupt = self._settle_again(e)  # (the same, or a later signal's)
            raise interrupt from None

    def _settle_again(self, interrupt: BaseException) -> BaseException:
        """A signal's exception cut `_settle` short: settle again (what is
        queued must not wait for a later post); the exception to raise."""
        for _ in range(3):
            try:
                self._settle()
                break
            except BaseException as e:
                interrupt = e
        return interrupt

    def _settle(self) -> None:
        """Handle what is queued if nobody holds the lock, until nothing is.

        Re-checks after letting go: a message posted while we held the lock, by
        a thread that found it taken, is ours to handle; so is mending still
        owed (`OWED`: a signal's exception cut it short), a few times over. An
        interrupt is raised once nothing is left."""
        pending = self._pending
        raised = None
        owed = 0
        while self.owner is None:
            if not pending:
                if self._interrupt is not OWED or owed == _OWED_TRIES:
                    break
                owed += 1
            try:
                if not self.lock.acquire(blocking=False):
                    break
            except BaseException as e:
                if not self._took(e):
                    raise
            try:
                self.owner = threading.get_ident()
                self._drain()
            finally:  # (inline: see `post`'s)
                interrupt = self._interrupt
                if interrupt is not None:
                    try:
                        interrupt = mend(self, interrupt)
                    except BaseException as e:
                        self._interrupt, interrupt = OWED, e
                self.owner = None
                self.lock.release()
            if interrupt is not None:
                raised = interrupt
        if raised is not None:
            raise raised

    def _took(self, interrupt: BaseException) -> bool:
        """A signal's exception was raised as this thread tried the lock: True
        if it took the lock all the same (it then handles the queue and raises
        the exception once it lets go, as it does one raised in a handler)."""
        if not self.lock._is_owned():  # type: ignore[attr-defined]
            raise interrupt
        self._interrupt = interrupt
        return True

    def held_here(self) -> bool:
        """True on the thread that holds the lock (inside a handler)."""
        return self.owner == threading.get_ident()

    def ask(self, message: Any) -> Any:
        """Handle `message` once everything posted before it is handled, and
        return the answer (status, close). Waits for the lock."""
        if self.owner == threading.get_ident():
            return self._handle(message)  # asked from inside a handler (a backend)
        with self.lock:  # (taken and let go with no step between a signal could stop)
            try:
                self.owner = threading.get_ident()
                self._drain()
                answer = self._handle(message)
                self._drain()
            finally:
                interrupt = self._interrupt
                if interrupt is not None:
                    try:
                        interrupt = mend(self, interrupt)
                    except BaseException as e:
                        self._interrupt, interrupt = OWED, e
                self.owner = None
        try:
            self._settle()  # what was posted meanwhile, as `post` does
        except BaseException as e:  # (a signal's)
            interrupt = self._settle_again(e)
        if interrupt is not None:
            raise interrupt
        return answer

    def _drain(self) -> None:
        """Handle every queued message, then pump. A signal's exception landing
        between messages is the holder's to raise once it lets go, as one in a
        handler is, and loses no message: each leaves the queue once handled."""
        pending = self._pending
        while True:
            pumping = False
            try:
                while pending:
                    while pending:
                        self._handle(pending[0], pump=False)
                        pending.popleft()
                    pumping = True
                    self._handle(None)  # one pump for everything just handled
                    pumping = False
                return
            except BaseException as e:  # (a signal's: `_handle` keeps the others)
                self._interrupt = e
                note_torn(e, self._torn)
                if not pumping and _began(e):
                    pending.popleft()  # what its handler did stands, as if raised inside it
                pending.append(None)  # a message that does nothing: the pump owed

    def _handle(self, message: Any, *, pump: bool = True) -> Any:
        answer = None
        try:
            kind = type(message)
            if kind is Report:
                self._on_report(*message)
            elif kind is Reports:
                for job, outcome, worker in message.reports:
                    self._on_report(worker, job, outcome)
            elif kind is Submit:
                self._on_submit(message)
            elif kind is Deadline:
                self._on_deadline(message)
            elif kind is Expired:
                self._on_expired(message)
            elif kind is LoopStalled:
                self._on_loop_stalled(message)
            elif kind is BudgetSpent:
                self._on_budget(message)
            elif kind is RetryDue:
                self._on_retry_due(message)
            elif kind is UntilDone:
                self._on_until_done(message)
            elif kind is Grace:
                self._on_grace(message)
            elif kind is Cancel:
                self._on_cancel(message)
            elif kind is CancelWhere:
                answer = self._on_cancel_where(message)
            elif kind is WaitGivenUp:
                self._on_wait_given_up(message)
            elif kind is HaltRun:
                answer = self._on_halt(message)
            elif kind is StatusQuery:
                return status(self)
            elif kind is Close:
                return self._close_and_wake(message)
            elif kind is SubmitIfRoom:
                answer = self._submit_if_room(message.submit)
            elif kind is SubmissionCutShort:
                self._on_cut_short(message.submit)
            if pump and (  # unless `_pump` would find nothing to do (the common case)
                (slots := self.slots).ready.size
                or slots.refused
                or slots.overfull
                or slots.fresh
                or slots.parked
                or self.budget.waiting.size
                or self.blocked
            ):
                self._pump()
        except BaseException as e:  # a bug here must not stop the supervisor
            if interrupts_caller(e):
                # A signal handler's (Ctrl-C) on the thread that was acting for
                # the supervisor: what it did so far stands, the calls of a
                # submission it cut short end, and the thread is interrupted
                # once it lets go of the lock.
                log.info(
                    "interrupted (%s) while handling %s", type(e).__name__, type(message).__name__
                )
                self._interrupt = e
                note_torn(e, self._torn)
                if type(message) is Submit:  # admitted or dispatched part way
                    self._submission_interrupted(message)
                elif type(message) in (SubmissionCutShort, SubmitIfRoom):  # (the same)
                    self._submission_interrupted(message.submit)
                else:  # what its handler had not begun is handled again (`_lost.py`)
                    requeue(self, message, e)
                return answer
            log.error(
                "supervisor error on %s:\n%s",
                type(message).__name__,
                "".join(traceback.format_exception(e)),
            )
        return answer

    def _pump(self) -> None:
        """Start every run that may start now; then shed what a bounded queue
        cannot hold, announce the waits that began, and wake the producers
        blocked for room (`_backpressure.py`). It has nothing to do unless one
        of `ready`, `refused`, `overfull`, `fresh`, `parked`, the budget's
        `waiting` or `blocked` holds something: `_handle` looks at them
        first (a frame less on every call's path)."""
        slots = self.slots
        while True:
            if self.budget.waiting.size:
                self._unpark_threads()
            run = slots.next_startable() if slots.ready.size else None
            refused = slots.refused
            while refused:
                r, why = refused.pop()
                self._finish_here(r, "rejected", ErrorCode.TOOL_UNAVAILABLE, why)
            if run is not None:
                self._dispatch(run)
                continue
            ready = slots.ready
            if (
                slots.overfull
                or (
                    ready.size
                    and slots.max_queued is not None
                    and ready.size - ready.dead > slots.max_queued
                )
            ) and self._shed_one():
                continue  # (one at a time: what it ends may let others start)
            break
        if slots.fresh or slots.parked:
            self._announce_waits()
        if self.blocked:
            self._room_changed()

    # -- the thread budget (see _budget.py) ---------------------------------------------

    def _unpark_threads(self) -> None:
        """Let the first waiting sync run that fits go (one: dispatch decides if
        more fit) and refuse those that never will."""
        while self.budget.waiting:
            ready = self.budget.next_ready()
            if ready is None:
                return
            run, room = ready
            if room == "start":
                self.slots.enqueue(run, front=True)
                return
            self._finish_here(run, "rejected", ErrorCode.TOOL_UNAVAILABLE, room)

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatch(self, run: Run) -> None:
        if run.due is not None and self._spent_at_dispatch(run):
            return
        backend: Backend = run.backend
        if id(backend) not in self.backends:
            self._finish_here(
                run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: its backend {backend.name!r} "
                "serves another executor",
            )  # fmt: skip
            return
        if backend.uses_threads and (
            # Threads held now are at most the attempts holding slots plus every
            # job ever given up (`_detach`): below both limits, there is room
            # without asking the backends to count (the common case).
            self.slots.in_flight + self.given_up >= self.budget.least
        ):
            room = self.budget.room(run)
            if room == "wait" and run.parent is not None:
                # Its callers hold threads of the budget while they wait for it.
                room = (
                    f"Tool '{run.call.name}' is unavailable: no thread is free within the thread "
                    "budget for a call made from inside another, and waiting could deadlock"
                )
            if room == "wait":
                self._park_for_thread(run)
                return
            if room != "start":
                self._finish_here(run, "rejected", ErrorCode.TOOL_UNAVAILABLE, room)
                return
        n = run.attempt + 1
        if n > 1:
            self.counters["retries"] += 1
        run.begin_attempt(n)
        self.slots.take(run)
        deadline = run.deadline  # the earlier of its two clocks (`begin_attempt`)
        if deadline is not None:
            if caller_watches(run):
                run.ticket.armed = Deadline  # its caller's first look is its timer
            else:
                self._arm(run, deadline - time.monotonic(), Deadline)
        # `Job(run, n)`, made as its dataclass `__init__` would make it, without
        # that frame: every attempt of every call makes one.
        job: Job = _new(Job)
        _set(job, "run", run)
        _set(job, "attempt", n)
        _set(job, "timed_out_in", None)
        try:
            backend.submit(job)
        except BackendUnavailable as e:
            run.try_settle(n, SUPERVISOR)
            self._finish_here(run, "rejected", ErrorCode.TOOL_UNAVAILABLE, str(e))
        except INTERRUPTS:
            # A signal's, as its backend took it, queued or not: it ends here,
            # once (anything queued finds its attempt over), and the thread
            # is interrupted (see `_handle`).
            self._cancel_run(
                run, ErrorCode.CANCELLED, "interrupted as it was handed to its backend",
                only_unstarted=False,
            )  # fmt: skip
            raise
        except BaseException as e:  # (a CancelledError too: it must not hold its slot)
            log.error("backend %r failed to take a job: %r", backend.name, e)
            run.try_settle(n, SUPERVISOR)
            self._finish_here(
                run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: its backend failed ({type(e).__name__})",
            )  # fmt: skip

    # -- backends report -------------------------------------------------------------------

    def _on_report(self, worker: Any, job: Job, outcome: Outcome) -> None:
        run = job.run
        try:
            run.backend.release(job, worker)
        except Exception as e:  # a custom backend's bug must not lose calls
            log.error("backend %r failed to release a job: %s", run.backend.name, e)
        if outcome.kind == "late":
            self.counters["late_results"] += 1
            return
        if outcome.timed_out:
            # The attempt overran its deadline before the timer fired: it
            # settled itself as a timeout, and its value is a late result.
            self.counters["timeouts"] += 1
            self.counters["late_results"] += 1
        if outcome.kind == "lost" or run.ticket.closed or run.attempt != job.attempt:
            return  # someone else settled this attempt and accounted for it
        if outcome.kind == "done":
            self._closed_run(run)
            return
        if outcome.kind == "delay":
            self._delayed(run, outcome)
            return
        self._back_off(run, outcome.delay)  # a retry


# How often `_settle` takes the lock again only to mend what is owed.
_OWED_TRIES = 4


def _began(error: BaseException) -> bool:
    """Whether `error` came out of the handler `_drain` called, after it began.

    A signal's exception is raised where a function is entered, before it does
    anything: that frame's last instruction is its first (offset 0). A Python
    signal handler's frame follows the frame it interrupted, and may be the
    only one below `_drain`'s (a signal landing in `_drain` itself)."""
    tb = error.__traceback__
    below = tb.tb_next if tb is not None else None
    return below is not None and below.tb_frame.f_code is _HANDLE and below.tb_lasti > 0


_HANDLE = Scheduler._handle.__code__
