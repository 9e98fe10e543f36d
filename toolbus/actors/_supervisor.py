"""The supervisor: one actor that schedules every call and never blocks.

It receives batches, releases calls in barrier order as capacity allows
(`max_parallel`, each batch's limit, each tool's `max_concurrency`), arms
deadlines and backoffs as timers, and turns timeouts and cancellations into
results. It only ever `tell`s: no blocking ask to a worker, no tool, hook or
subscriber code on its thread. Replies are matched by attempt number and timer
messages by a per-run generation, so anything stale is dropped. That is why it
answers a status query in a millisecond while tools hang.

A worker stuck in a sync tool cannot be stopped. At the deadline it is detached
from its pool (counted as abandoned) and a fresh worker takes its place; if it
ever returns, its late result is discarded and the worker rejoins the pool.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

import pykka

from .. import pipeline as _pipeline
from .._sync import simple_inbox
from ..bus import _signals as sig
from ..bus._events import TimedOut
from ..models import ErrorCode, Status
from ..scheduling import BarrierSchedule
from ._batches import announce_groups, announce_start, finish_batch
from ._messages import (
    AfterTimeout,
    Cancel,
    Close,
    Deadline,
    Grace,
    Invoke,
    Report,
    RetryDue,
    StatusQuery,
    Submit,
)
from ._pool import Pool
from ._run import ADMISSION, FINISHING, Run
from ._slots import Slots
from ._timers import TimerService
from ._worker import ToolWorker, WorkerHandle

__all__ = ["Supervisor"]

log = logging.getLogger("toolbus.actors")

TimerMessage = Deadline | Grace | RetryDue


class Supervisor(pykka.ThreadingActor):
    use_daemon_thread = True
    _create_actor_inbox = staticmethod(simple_inbox)  # C SimpleQueue, not queue.Queue

    def __init__(
        self,
        services: _pipeline.Services,
        timers: TimerService,
        *,
        max_parallel: int,
        max_abandoned: int,
        hook_grace: float,
    ) -> None:
        super().__init__()
        self.services = services
        self.emitter = services.emitter
        self.timers = timers
        self.max_parallel = max_parallel
        self.max_abandoned = max_abandoned
        self.hook_grace = hook_grace
        self.pools: dict[int, Pool] = {}
        self.slots = Slots(max_parallel)
        self.detached: set[WorkerHandle] = set()
        self.runs_open: set[Run] = set()
        self.worker_seq = 0
        self.closed = False
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "submitted", "batches", "ok", "error", "timeout", "cancelled", "rejected",
                "retries", "timeouts", "late_results", "abandoned_total", "workers_started",
            ),
            0,
        )  # fmt: skip

    # -- the mailbox ------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is Report:
                self._on_report(message)
            elif kind is Submit:
                self._on_submit(message)
            elif kind is Deadline:
                self._on_deadline(message)
            elif kind is RetryDue:
                self._on_retry_due(message)
            elif kind is Grace:
                self._on_grace(message)
            elif kind is Cancel:
                self._on_cancel(message)
            elif kind is StatusQuery:
                return self._status()
            elif kind is Close:
                return self._on_close(message)
            self._pump()
        except BaseException as e:  # a bug here must not stop the supervisor
            log.error(
                "supervisor error on %s:\n%s",
                type(message).__name__,
                "".join(traceback.format_exception(e)),
            )
        return None

    # -- timers: every change of a run's timer bumps its generation ---------------

    def _arm(self, run: Run, delay: float, make: Callable[[Run, int, int], TimerMessage]) -> None:
        self._disarm(run)
        run.sv_timer = self.timers.schedule(
            _as_delay(delay), self.actor_ref.tell, make(run, run.attempt, run.sv_gen)
        )

    def _disarm(self, run: Run) -> None:
        self.timers.cancel(run.sv_timer)
        run.sv_timer = None
        run.sv_gen += 1

    def _current(self, msg: TimerMessage) -> bool:
        """True if the timer message is the run's live timer (not stale)."""
        run = msg.run
        if run.sv_closed or msg.gen != run.sv_gen:
            return False
        run.sv_timer = None
        run.sv_gen += 1
        return True

    # -- submission and the ready queue --------------------------------------------

    def _on_submit(self, msg: Submit) -> None:
        self.counters["submitted"] += len(msg.runs)
        b = msg.batch
        if b is not None:
            self.counters["batches"] += 1
            b.runs = list(msg.runs)
            b.remaining = len(b.runs)
        self.runs_open.update(msg.runs)
        for run in msg.runs:
            if run.tool is not None:
                run.sv_pool = self._pool(run)
        if self.closed:
            for run in msg.runs:
                self._finish_here(run, "cancelled", ErrorCode.CANCELLED, "the executor is closed")
            return
        if b is None:
            if not self._reject_unknown(msg.runs[0]):
                self.slots.enqueue(msg.runs[0])
            return
        announce_start(b, self.emitter)
        b.schedule = BarrierSchedule([r.read_only for r in b.runs])
        eligible = b.schedule.open()
        for run in b.runs:
            self._reject_unknown(run)
        announce_groups(b, self.emitter)
        for i in eligible:
            self.slots.enqueue(b.runs[i])

    def _reject_unknown(self, run: Run) -> bool:
        if run.tool is not None:
            return False
        # The executor wrote the message (with close matches) on the caller's thread.
        message = run.last_error or f"Unknown tool '{run.call.name}'"
        self._finish_here(run, "rejected", ErrorCode.TOOL_NOT_FOUND, message)
        return True

    def _pool(self, run: Run) -> Pool:
        tool = run.tool
        assert tool is not None
        pool = self.pools.get(id(tool))
        if pool is None or pool.tool is not tool:
            pool = self.pools[id(tool)] = Pool(tool)
        return pool

    def _pump(self) -> None:
        """Start every run that may start now."""
        while (run := self.slots.next_startable()) is not None:
            self._dispatch(run)

    # -- dispatch and slots -------------------------------------------------------------

    def _acquire(self, pool: Pool) -> WorkerHandle | None:
        if pool.idle:
            w = pool.idle.pop()
        else:
            if self.detached and len(self.detached) >= self.max_abandoned:
                return None  # replacing stuck workers has hit its limit
            try:
                ref = ToolWorker.start(self.services, self.actor_ref)
            except Exception as e:  # e.g. "can't start new thread"
                log.error("could not start a worker for %r: %s", pool, e)
                return None
            self.worker_seq += 1
            w = WorkerHandle(ref, pool, self.worker_seq)
            ref.tell(w)
            pool.started += 1
            self.counters["workers_started"] += 1
        pool.busy += 1
        return w

    def _dispatch(self, run: Run) -> None:
        worker = self._acquire(run.sv_pool)
        if worker is None:
            self._finish_here(
                run, "rejected", ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: {len(self.detached)} workers are "
                f"stuck in calls that timed out (limit {self.max_abandoned})",
            )  # fmt: skip
            return
        n = run.attempt + 1
        if n > 1:
            self.counters["retries"] += 1
        run.begin_attempt(n)
        self.slots.take(run)
        run.sv_worker = worker
        if run.timeout is not None:
            self._arm(run, run.timeout, Deadline)
        worker.ref.tell(Invoke(run, n))

    # -- workers report -------------------------------------------------------------------

    def _free_worker(self, w: WorkerHandle | None) -> None:
        if w is None:
            return
        if w in self.detached:
            # An abandoned worker came back: it is healthy again, let it serve.
            self.detached.discard(w)
        else:
            w.pool.busy -= 1
        if self.closed:
            w.ref.stop(block=False)
        else:
            w.pool.idle.append(w)

    def _detach(self, run: Run) -> None:
        """The worker busy with `run` is stuck: take it out of its pool."""
        w = run.sv_worker
        run.sv_worker = None
        if w is None or w in self.detached:
            return
        w.pool.busy -= 1
        self.detached.add(w)
        self.counters["abandoned_total"] += 1

    def _on_report(self, msg: Report) -> None:
        run, w = msg.run, msg.worker
        if run.sv_worker is w:
            run.sv_worker = None
        self._free_worker(w)
        if msg.kind == "late":
            self.counters["late_results"] += 1
            return
        if msg.kind == "lost" or run.sv_closed or run.attempt != msg.attempt:
            return  # someone else settled this attempt and accounted for it
        if msg.kind == "done":
            self._closed_run(run)
            return
        self._disarm(run)  # retry: no deadline runs during the backoff
        self.slots.release(run)
        if run.sv_cancel is not None:
            code, reason = run.sv_cancel
            self._finish_here(run, "cancelled", code, reason)
            return
        self._arm(run, msg.delay, RetryDue)

    def _on_retry_due(self, msg: RetryDue) -> None:
        if self._current(msg):
            self.slots.enqueue(msg.run, front=True)

    # -- deadlines -----------------------------------------------------------------------

    def _on_deadline(self, msg: Deadline) -> None:
        if not self._current(msg):
            return
        run, n = msg.run, msg.attempt
        phase = run.phase
        if not run.try_settle(n):
            # The worker settled the attempt and is in its post-attempt hooks.
            if not run.completed:
                self._arm(run, self.hook_grace, Grace)
            return
        self.counters["timeouts"] += 1
        run.interrupt()
        self._detach(run)
        if self.emitter.wants(sig.TIMEOUT):
            self.emitter.emit(
                sig.TIMEOUT,
                TimedOut(run.call.id, run.call.name, run.batch_id, n, run.timeout or 0.0),
            )
        worker = self._acquire(run.sv_pool)
        if worker is None:
            self._finish_here(
                run, "timeout", ErrorCode.EXECUTION_TIMEOUT,
                f"Tool '{run.call.name}' timed out after {run.timeout}s",
            )  # fmt: skip
            return
        # What follows a timeout (retry decision, post-call hooks) is user code:
        # a fresh worker of the same pool runs it, under a grace deadline.
        run.sv_worker = worker
        self._arm(run, self.hook_grace, Grace)
        worker.ref.tell(AfterTimeout(run, n, phase if phase in (ADMISSION, FINISHING) else ""))

    def _on_grace(self, msg: Grace) -> None:
        if not self._current(msg):
            return
        run = msg.run
        if run.completed:
            return  # finished just now; the worker's report closes it
        run.interrupt()
        self._detach(run)
        if run.sv_cancel is not None:
            code, reason = run.sv_cancel
            self._finish_here(run, "cancelled", code, reason)
            return
        self._finish_here(
            run, "timeout", ErrorCode.EXECUTION_TIMEOUT,
            f"Tool '{run.call.name}' timed out: its hooks did not return within "
            f"{self.hook_grace}s after the deadline",
        )  # fmt: skip

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
            run.interrupt()
            self._detach(run)
        elif only_unstarted and run.attempt > 0:
            return  # started, now backing off before a retry: let it go on
        self._finish_here(run, "cancelled", code, reason)

    # -- completion -----------------------------------------------------------------------

    def _finish_here(self, run: Run, status: Status, code: ErrorCode, message: str) -> None:
        """Finish a run with a result made by the supervisor itself (no user code)."""
        result = _pipeline.make_result(run, status, error=message, code=code)
        _pipeline.finish(run, result, self.services)
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
        b = run.batch
        if b is None:
            return
        b.remaining -= 1
        if b.schedule is not None:
            if result is not None and result.status != "ok":
                g = b.schedule.group_of(run.index).index
                b.group_failures[g] = b.group_failures.get(g, 0) + 1
            for i in b.schedule.finish(run.index):
                self.slots.enqueue(b.runs[i])
            announce_groups(b, self.emitter)
            if b.stop_on_error and not b.stopped and result is not None and result.status != "ok":
                b.stopped = True
                reason = (
                    f"batch stopped: call {run.call.id} ('{run.call.name}') ended {result.status}"
                )
                for other in b.runs:
                    self._cancel_run(other, ErrorCode.ABORTED, reason, only_unstarted=True)
        if b.remaining == 0:
            finish_batch(b, self.emitter)

    # -- status and shutdown ----------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        return {
            **self.counters,
            "in_flight": self.slots.in_flight,
            "peak_in_flight": self.slots.peak,
            "queued": sum(1 for r in self.runs_open if r.sv_queued),
            "abandoned_workers": len(self.detached),
            "live_workers": sum(len(p.idle) + p.busy for p in self.pools.values()),
            "pools": {
                p.tool.name: {"idle": len(p.idle), "busy": p.busy, "in_flight": p.in_flight}
                for p in self.pools.values()
            },
            "timers": len(self.timers),
        }

    def on_stop(self) -> None:
        # Stopped without Close (or with tells behind it): pykka would drop the
        # Submits still in the mailbox, and their callers would wait forever.
        others = []
        while not self.actor_inbox.empty():
            envelope = self.actor_inbox.get()
            if type(envelope.message) is Submit:
                self.closed = True
                self._on_submit(envelope.message)
            else:
                others.append(envelope)
        for envelope in others:  # asks among them get ActorDeadError from pykka
            self.actor_inbox.put(envelope)
        if not self.closed:
            self._on_close(Close("the executor stopped"))

    def _on_close(self, msg: Close) -> bool:
        self.closed = True
        for run in list(self.runs_open):
            self._cancel_run(run, ErrorCode.CANCELLED, msg.reason, only_unstarted=False)
        for run in list(self.runs_open):
            # A worker holds the outcome but is still in its hooks: do not wait.
            self._detach(run)
            self._finish_here(run, "cancelled", ErrorCode.CANCELLED, msg.reason)
        for pool in self.pools.values():
            for w in pool.idle:
                w.ref.stop(block=False)
            pool.idle.clear()
        return True


def _as_delay(delay: Any) -> float:
    """A hook's retry delay as a number (garbage counts as 0); the timer service
    clamps whatever is out of range (NaN, negative, beyond what a wait accepts)."""
    try:
        return float(delay)
    except (TypeError, ValueError):
        return 0.0
