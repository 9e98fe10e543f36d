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

Where an attempt runs is its backend's business (`toolbus/backends/`): the
scheduler hands it a `Job` and reads its report. At a deadline it settles
the attempt, interrupts it and tells the backend to let it go (a thread stuck
in a sync tool is abandoned, a task is cancelled). Threads are a shared budget:
a sync attempt starts only while abandoned plus running threads stay under
`max_abandoned_workers`, and a tool with `max_abandoned_per_tool` threads stuck
is refused (`TOOL_UNAVAILABLE`) while other tools go on.
"""

from __future__ import annotations

import logging
import threading
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .. import pipeline as _pipeline
from ..backends import Backend, BackendUnavailable, Host, Job
from ..models import ErrorCode, Status, ToolResult
from ..pipeline import BatchRun, Outcome, Run
from ._batches import announce_groups, announce_start, finish_batch, schedule_batch
from ._budget import ThreadBudget
from ._capacity import Capacity, Group, ToolGroup
from ._deadlines import Deadlines
from ._deadlock import would_deadlock
from ._messages import (
    Cancel,
    Close,
    Deadline,
    Expired,
    Grace,
    Report,
    Reports,
    RetryDue,
    StatusQuery,
    Submit,
    UntilDone,
)
from ._timers import TimerService

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Scheduler"]

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
    return not run.sv_closed and run.sv_gen == due.gen


class Scheduler(Deadlines):
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
    ) -> None:
        # Held by whichever thread is acting for the supervisor. Nobody ever
        # waits for it to post: see `post`.
        self.lock = threading.Lock()
        self._owner: int | None = None
        self._pending: deque[Any] = deque()
        self.services = services
        self.emitter = services.emitter
        self.timers = timers
        self.host = host
        # Where timer messages go (the supervisor actor's tell), set by `bind`.
        self._tell: Callable[[Any], None] = self.post
        self.max_parallel = max_parallel
        self.hook_grace = hook_grace
        self.pools: dict[int, ToolGroup] = {}
        self.slots = Capacity(max_parallel, self._nested_deadlock)
        # Named capacity groups that several tools share (Executor(groups=...)).
        self.groups: dict[str, Group] = {
            name: Group(name, limit) for name, limit in (groups or {}).items()
        }
        self.runs_open: set[Run] = set()
        # Policies' `Delay(until=future)`: the calls waiting on each future.
        self._untils: weakref.WeakKeyDictionary[Any, _Waiting] = weakref.WeakKeyDictionary()
        # Backends in use, and the budget of threads their jobs may hold.
        self.backends: dict[int, Backend] = {}
        self.budget = ThreadBudget(max_abandoned, max_abandoned_per_tool)
        for backend in backends:
            self._started(backend)
        self.closed = False
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
        self._pending.append(message)
        self._settle()

    def _settle(self) -> None:
        """Handle what is queued if nobody holds the lock, until nothing is.

        Re-checks after letting go: a message posted while we held the lock, by
        a thread that found it taken, is ours to handle."""
        pending = self._pending
        while pending and self.lock.acquire(blocking=False):
            self._owner = threading.get_ident()
            try:
                self._drain()
            finally:
                self._owner = None
                self.lock.release()

    def held_here(self) -> bool:
        """True on the thread that holds the lock (inside a handler)."""
        return self._owner == threading.get_ident()

    def ask(self, message: Any) -> Any:
        """Handle `message` once everything posted before it is handled, and
        return the answer (status, close). Waits for the lock."""
        if self._owner == threading.get_ident():
            return self._handle(message)  # asked from inside a handler (a backend)
        with self.lock:
            self._owner = threading.get_ident()
            try:
                self._drain()
                answer = self._handle(message)
                self._drain()
            finally:
                self._owner = None
        self._settle()  # what was posted while we let go, as `post` does
        return answer

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            while pending:
                self._handle(pending.popleft(), pump=False)
            self._handle(None)  # one pump for everything just handled

    def _handle(self, message: Any, *, pump: bool = True) -> Any:
        try:
            kind = type(message)
            if kind is Report:
                self._on_report(message)
            elif kind is Reports:
                for report in message.reports:
                    self._on_report(report)
            elif kind is Submit:
                self._on_submit(message)
            elif kind is Deadline:
                self._on_deadline(message)
            elif kind is Expired:
                self._on_expired(message)
            elif kind is RetryDue:
                self._on_retry_due(message)
            elif kind is UntilDone:
                self._on_until_done(message)
            elif kind is Grace:
                self._on_grace(message)
            elif kind is Cancel:
                self._on_cancel(message)
            elif kind is StatusQuery:
                return self._status()
            elif kind is Close:
                return self._on_close(message)
            if pump:
                self._pump()
        except BaseException as e:  # a bug here must not stop the supervisor
            log.error(
                "supervisor error on %s:\n%s",
                type(message).__name__,
                "".join(traceback.format_exception(e)),
            )
        return None

    # -- submission and the ready queue --------------------------------------------

    def _on_submit(self, msg: Submit) -> None:
        self.counters["submitted"] += len(msg.runs)
        b = msg.batch
        if b is not None:
            self.counters["batches"] += 1
            b.runs = list(msg.runs)
            b.remaining = len(b.runs)
            b.sv_group = Group(f"batch:{b.batch_id}", b.limit)
        self.runs_open.update(msg.runs)
        for run in msg.runs:
            if run.tool is not None:
                run.sv_pool = self._pool(run)
                if run.tool.group_limits:
                    self._learn_groups(run.tool)
                named = tuple(self.groups[n] for n in run.tool.groups if n in self.groups)
                run.sv_groups = (
                    (b.sv_group, run.sv_pool, *named) if b is not None else (run.sv_pool, *named)
                )
                if run.backend is not None:
                    try:
                        self._started(run.backend)
                    except Exception as e:
                        log.error("backend %r could not start: %s", run.backend.name, e)
        if self.closed:
            for run in msg.runs:
                self._finish_here(run, "cancelled", ErrorCode.CANCELLED, "the executor is closed")
            return
        if b is None:
            if not self._reject_unstartable(msg.runs[0]):
                self.slots.enqueue(msg.runs[0], front=msg.runs[0].parent is not None)
            return
        announce_start(b, self.emitter)
        b.schedule = schedule_batch(b, self.services.max_argument_bytes)
        eligible = b.schedule.open()
        b.sv_busy += 1  # every call may be rejected here: the batch ends after this
        try:
            for run in b.runs:
                self._reject_unstartable(run)
            announce_groups(b, self.emitter)
            for i in eligible:
                self.slots.enqueue(b.runs[i])
        finally:
            self._done_with(b)

    def _reject_unstartable(self, run: Run) -> bool:
        """Reject a run that can never start: unknown tool, no backend, refused
        at submission (a quota), or a missing capacity group."""
        if run.refusal is not None:
            code, message = run.refusal
            self._finish_here(run, "rejected", code, message)
            return True
        if run.tool is None:
            # The executor wrote the message (with close matches) on the caller's thread.
            message = run.last_error or f"Unknown tool '{run.call.name}'"
            self._finish_here(run, "rejected", ErrorCode.TOOL_NOT_FOUND, message)
            return True
        if run.backend is None:
            self._finish_here(run, "rejected", ErrorCode.TOOL_UNAVAILABLE, run.last_error)
            return True
        for name, limit in run.tool.group_limits.items():
            if self.groups[name].limit != limit:
                self._finish_here(
                    run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                    f"Tool '{run.call.name}' is unavailable: it defines capacity group "
                    f"{name!r} with limit {limit}, and the executor has it with limit "
                    f"{self.groups[name].limit}",
                )  # fmt: skip
                return True
        missing = [n for n in run.tool.groups if n not in self.groups]
        if missing:
            self._finish_here(
                run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: no capacity group named "
                f"{missing[0]!r} (Executor(groups=...) defines them)",
            )  # fmt: skip
            return True
        return False

    def _learn_groups(self, tool: Tool) -> None:
        """Make the groups a tool registered after the executor defines itself
        (`Tool.group_limits`); a conflicting limit is refused by `_reject_unstartable`."""
        for name, limit in tool.group_limits.items():
            if name not in self.groups:
                self.groups[name] = Group(name, limit)

    def _nested_deadlock(self, run: Run, group: Group) -> str | None:
        if not would_deadlock(run, group, self.runs_open):
            return None
        return (
            f"Tool '{run.call.name}' was called from inside another call, and every slot "
            f"of {group.name!r} is held by calls that wait, directly or through calls of "
            "their own, for that call: waiting would deadlock"
        )

    def _pool(self, run: Run) -> ToolGroup:
        tool = run.tool
        assert tool is not None
        pool = self.pools.get(id(tool))
        if pool is None or pool.tool is not tool:
            pool = self.pools[id(tool)] = ToolGroup(tool)
            # A backend with a fixed number of workers (a process pool): calls
            # beyond it wait here, in the queue, not on their deadline's clock.
            capacity = getattr(run.backend, "capacity", None)
            if capacity is not None:
                size = capacity(tool)
                pool.limit = size if pool.limit is None else min(pool.limit, size)
        return pool

    def _started(self, backend: Backend) -> None:
        if id(backend) in self.backends:
            return
        # Raises if the backend serves another executor; the call that
        # brought it gets that as its result (see _dispatch).
        backend.start(self.host)
        self.backends[id(backend)] = backend
        if backend.uses_threads:
            self.budget.backends.append(backend)

    def _pump(self) -> None:
        """Start every run that may start now."""
        while True:
            self._unpark_threads()
            run = self.slots.next_startable()
            refused = self.slots.refused
            while refused:
                r, why = refused.pop()
                self._finish_here(r, "rejected", ErrorCode.TOOL_UNAVAILABLE, why)
            if run is None:
                return
            self._dispatch(run)

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
        backend: Backend = run.backend
        if id(backend) not in self.backends:
            self._finish_here(
                run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: its backend {backend.name!r} "
                "serves another executor",
            )  # fmt: skip
            return
        if backend.uses_threads:
            room = self.budget.room(run)
            if room == "wait" and run.parent is not None:
                # Its callers hold threads of the budget while they wait for it.
                room = (
                    f"Tool '{run.call.name}' is unavailable: no thread is free within the "
                    "thread budget for a call made from inside another, and waiting could "
                    "deadlock"
                )
            if room == "wait":
                self.budget.park(run)
                return
            if room != "start":
                self._finish_here(run, "rejected", ErrorCode.TOOL_UNAVAILABLE, room)
                return
        n = run.attempt + 1
        if n > 1:
            self.counters["retries"] += 1
        run.begin_attempt(n)
        self.slots.take(run)
        if run.timeout is not None:
            self._arm(run, run.timeout, Deadline)
        try:
            backend.submit(Job(run, n))
        except BackendUnavailable as e:
            run.try_settle(n)
            self._finish_here(run, "rejected", ErrorCode.TOOL_UNAVAILABLE, str(e))
        except Exception as e:
            log.error("backend %r failed to take a job: %s", backend.name, e)
            run.try_settle(n)
            self._finish_here(
                run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: its backend failed ({type(e).__name__})",
            )  # fmt: skip

    # -- backends report -------------------------------------------------------------------

    def _detach(self, run: Run) -> None:
        """`run`'s current job is given up: its backend lets it go (a stuck thread
        counts as abandoned until it returns)."""
        backend = run.backend
        if backend is None or not run.sv_slot:
            return
        try:
            before = backend.abandoned()
            backend.cancel(Job(run, run.attempt))
            if backend.abandoned() > before:
                self.counters["abandoned_total"] += 1
        except Exception as e:  # a custom backend's bug must not lose calls
            log.error("backend %r failed to let a job go: %s", backend.name, e)

    def _on_report(self, msg: Report) -> None:
        job, outcome = msg.job, msg.outcome
        run = job.run
        try:
            run.backend.release(job, msg.worker)
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
        if outcome.kind == "lost" or run.sv_closed or run.attempt != job.attempt:
            return  # someone else settled this attempt and accounted for it
        if outcome.kind == "done":
            self._closed_run(run)
            return
        if outcome.kind == "delay":
            self._delayed(run, outcome)
            return
        self._disarm(run)  # retry: no deadline runs during the backoff
        self.slots.release(run)
        if run.sv_cancel is not None:
            code, reason = run.sv_cancel
            self._finish_here(run, "cancelled", code, reason)
            return
        self._arm(run, outcome.delay, RetryDue)

    def _delayed(self, run: Run, outcome: Outcome) -> None:
        """A policy delays the run before its first attempt: it gives its slot
        back and waits on a timer (or its policy's event), holding nothing."""
        self._disarm(run)
        self.slots.release(run)
        if run.sv_cancel is not None:
            code, reason = run.sv_cancel
            self._finish_here(run, "cancelled", code, reason)
            return
        run.attempt = 0  # not started: its next dispatch is its first attempt again
        self._arm(run, outcome.delay, RetryDue)
        until = outcome.until
        if until is not None:
            # Whichever comes first, the timer or the event; the other is stale.
            try:
                self._wait_until(until, RetryDue(run, 0, run.sv_gen))
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

    # -- cancellation --------------------------------------------------------------------

    def _on_cancel(self, msg: Cancel) -> None:
        runs = msg.batch.runs if msg.batch is not None else [msg.run] if msg.run else []
        for run in runs:
            self._cancel_run(run, msg.code, msg.reason, only_unstarted=False)

    def _cancel_run(self, run: Run, code: ErrorCode, reason: str, *, only_unstarted: bool) -> None:
        if run.sv_closed or run.completed:
            return
        if run.sv_slot:  # an attempt, or what follows its timeout, is under way
            if only_unstarted:
                return
            if not run.try_settle(run.attempt):
                # A worker holds the outcome (in its hooks): honour the cancel
                # when it reports, instead of retrying.
                run.sv_cancel = (code, reason)
                return
            run.stop_reason = "closed" if self.closed else "cancelled"
            run.interrupt()
            self._detach(run)
        elif only_unstarted and run.attempt > 0:
            return  # started, now backing off before a retry: let it go on
        self._finish_here(run, "cancelled", code, reason)

    # -- completion -----------------------------------------------------------------------

    def _finish_here(self, run: Run, status: Status, code: ErrorCode, message: str) -> None:
        """Finish a run with a result made by the supervisor itself (no user code)."""
        _pipeline.end_call(run, self.services, status, code, message)
        self._closed_run(run)

    def _closed_run(self, run: Run) -> None:
        if run.sv_closed:
            return
        run.sv_closed = True
        self.runs_open.discard(run)
        self._disarm(run)
        self.slots.closed(run)
        result = run.result
        if result is not None:
            self.counters[result.status] += 1
            if run.waiter is not None:
                # Woken last, after the books: stats() agrees with the result.
                run.waiter.release(result)
        b = run.batch
        if b is None:
            return
        b.remaining -= 1
        # Closing this run may close others of the batch (the calls a deferred
        # one holds back, the rest after a stop_on_error): the last of those
        # must not end the batch, and so release its caller, while this frame
        # still reads the batch. `_done_with` ends it once the outermost is done.
        b.sv_busy += 1
        try:
            self._batch_books(b, run, result)
        finally:
            self._done_with(b)

    def _done_with(self, b: BatchRun) -> None:
        """The supervisor is done with a part of `b`'s books: if that was the
        last part and every call has its result, the batch ends."""
        b.sv_busy -= 1
        if b.remaining == 0 and b.sv_busy == 0:
            finish_batch(b, self.emitter)

    def _batch_books(self, b: BatchRun, run: Run, result: ToolResult | None) -> None:
        """What a closed run changes in its batch: its schedule, the calls
        that wait for it, a stop on error."""
        if b.schedule is not None:
            if result is not None and result.status == "deferred":
                self._abort_waiters(b, run)
            if result is not None and result.status not in ("ok", "deferred"):
                g = b.schedule.group_of(run.index).index
                b.group_failures[g] = b.group_failures.get(g, 0) + 1
            for i in b.schedule.finish(run.index):
                self.slots.enqueue(b.runs[i])
            announce_groups(b, self.emitter)
            if (
                b.stop_on_error
                and not b.stopped
                and result is not None
                and result.status not in ("ok", "deferred")
            ):
                b.stopped = True
                reason = (
                    f"batch stopped: call {run.call.id} ('{run.call.name}') ended {result.status}"
                )
                for other in b.runs:
                    self._cancel_run(other, ErrorCode.ABORTED, reason, only_unstarted=True)

    def _abort_waiters(self, b: BatchRun, run: Run) -> None:
        """A deferred call never finished, as far as order goes: the later calls
        of its batch that would have waited for it end now, naming it."""
        assert b.schedule is not None
        reason = (
            f"not run: it had to wait for call {run.call.id} ('{run.call.name}'), "
            "which is deferred until approved"
        )
        for i in b.schedule.waiters_of(run.index):
            self._cancel_run(b.runs[i], ErrorCode.ABORTED, reason, only_unstarted=True)

    # -- status and shutdown ----------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        thread = self.budget.backends[0] if self.budget.backends else None
        busy, abandoned = self.budget.totals()
        idle = getattr(thread, "idle", None)
        return {
            **self.counters,
            "in_flight": self.slots.in_flight,
            "peak_in_flight": self.slots.peak,
            "queued": sum(1 for r in self.runs_open if r.sv_queued),
            "abandoned_workers": abandoned,
            "live_workers": busy
            + sum(idle(p.tool) for p in self.pools.values() if idle is not None)
            + sum(getattr(b, "live_workers", 0) for b in self.backends.values()),
            "workers_started": sum(getattr(b, "started", 0) for b in self.budget.backends)
            + sum(getattr(b, "workers_started", 0) for b in self.backends.values()),
            "pools": {
                p.tool.name: {
                    "idle": idle(p.tool) if idle is not None else 0,
                    "in_flight": p.in_flight,
                    "abandoned": thread.abandoned(p.tool) if thread is not None else 0,
                }
                for p in self.pools.values()
            },
            "timers": len(self.timers),
            "killed_workers": self.services.killed.value,
        }

    def _on_close(self, msg: Close) -> bool:
        if self.closed:
            return True
        self.closed = True
        for run in list(self.runs_open):
            self._cancel_run(run, ErrorCode.CANCELLED, msg.reason, only_unstarted=False)
        for run in list(self.runs_open):
            # A worker holds the outcome but is still in its hooks: do not wait.
            self._detach(run)
            self._finish_here(run, "cancelled", ErrorCode.CANCELLED, msg.reason)
        for backend in self.backends.values():
            try:
                backend.stop()
            except Exception as e:
                log.error("backend %r failed to stop: %s", backend.name, e)
        return True
