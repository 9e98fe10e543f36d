"""The supervisor: one actor that schedules every call and never blocks.

It receives batches, releases calls in barrier order as capacity allows
(`max_parallel`, each batch's limit, each tool's `max_concurrency`), arms
deadlines and backoffs as timers, and turns timeouts and cancellations into
results. It only ever `tell`s: no blocking ask to a worker, no tool, hook or
subscriber code on its thread, stale replies dropped by attempt number. That is
why it answers a status query in a millisecond while tools hang.

A worker stuck in a sync tool cannot be stopped. At the deadline it is detached
from its pool (counted as abandoned) and a fresh worker takes its place; if it
ever returns, its late result is discarded and the worker rejoins the pool.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

import pykka

from .. import pipeline as _pipeline
from .._sync import simple_inbox
from ..bus import _signals as sig
from ..bus._events import BatchComplete, BatchStart, ParallelComplete, ParallelStart, TimedOut
from ..models import ErrorCode
from ..scheduling import BarrierSchedule
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
from ._run import ADMISSION, FINISHING, BatchRun, Run
from ._timers import TimerService
from ._worker import ToolWorker, WorkerHandle

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Supervisor"]

log = logging.getLogger("toolbus.actors")


class _Pool:
    """The workers serving one tool (supervisor-owned, not thread-safe)."""

    __slots__ = ("busy", "idle", "in_flight", "limit", "started", "tool", "waiting")

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.limit = tool.max_concurrency
        self.idle: list[WorkerHandle] = []
        self.busy = 0
        self.in_flight = 0
        self.started = 0
        self.waiting: deque[Run] = deque()

    def __repr__(self) -> str:
        return f"pool {self.tool.name!r}"


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
        self.pools: dict[int, _Pool] = {}
        self.ready: deque[Run] = deque()
        self.in_flight = 0
        self.detached: set[WorkerHandle] = set()
        self.runs_open: set[Run] = set()
        self.worker_seq = 0
        self.closed = False
        self.counters: dict[str, int] = {
            "submitted": 0,
            "batches": 0,
            "ok": 0,
            "error": 0,
            "timeout": 0,
            "cancelled": 0,
            "rejected": 0,
            "retries": 0,
            "timeouts": 0,
            "late_results": 0,
            "abandoned_total": 0,
            "workers_started": 0,
        }
        self.peak_in_flight = 0

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

    # -- submission and scheduling -----------------------------------------------

    def _on_submit(self, msg: Submit) -> None:
        c = self.counters
        c["submitted"] += len(msg.runs)
        if self.closed:
            for run in msg.runs:
                self._finish_here(run, "cancelled", ErrorCode.CANCELLED, "the executor is closed")
            return
        b = msg.batch
        if b is None:
            run = msg.runs[0]
            self.runs_open.add(run)
            if self._reject_unknown(run):
                return
            self.ready.append(run)
            return
        c["batches"] += 1
        b.runs = list(msg.runs)
        b.remaining = len(b.runs)
        self.runs_open.update(b.runs)
        if self.emitter.wants(sig.BATCH_START):
            ro = sum(1 for r in b.runs if r.tool is not None and r.read_only)
            mut = sum(1 for r in b.runs if r.tool is not None and not r.read_only)
            self.emitter.emit(sig.BATCH_START, BatchStart(b.batch_id, len(b.runs), ro, mut))
        b.schedule = BarrierSchedule([r.read_only for r in b.runs])
        eligible = b.schedule.open()
        for run in b.runs:
            self._reject_unknown(run)
        self._announce_groups(b)
        for i in eligible:
            run = b.runs[i]
            if not run.sv_closed:
                self.ready.append(run)
        if b.remaining == 0:
            self._batch_done(b)

    def _reject_unknown(self, run: Run) -> bool:
        if run.tool is not None:
            return False
        # The executor wrote the message (with close matches) on the caller's thread.
        message = run.last_error or f"Unknown tool '{run.call.name}'"
        self._finish_here(run, "rejected", ErrorCode.TOOL_NOT_FOUND, message)
        return True

    def _pump(self) -> None:
        """Start eligible runs while there is capacity."""
        ready = self.ready
        while ready and self.in_flight < self.max_parallel:
            run = ready.popleft()
            if run.sv_closed:
                continue
            assert run.tool is not None
            pool = self._pool(run.tool)
            if pool.limit is not None and pool.in_flight >= pool.limit:
                pool.waiting.append(run)
                continue
            b = run.batch
            if b is not None and b.in_flight >= b.limit:
                b.waiting.append(run)
                continue
            self._dispatch(run, pool)

    def _pool(self, tool: Tool) -> _Pool:
        pool = self.pools.get(id(tool))
        if pool is None or pool.tool is not tool:
            pool = self.pools[id(tool)] = _Pool(tool)
        return pool

    def _acquire(self, pool: _Pool) -> WorkerHandle | None:
        if pool.idle:
            w = pool.idle.pop()
        else:
            if self.detached and len(self.detached) >= self.max_abandoned:
                return None  # replacing stuck workers has hit its limit
            self.worker_seq += 1
            ref = ToolWorker.start(self.services, self.actor_ref)
            w = WorkerHandle(ref, pool, self.worker_seq)
            ref.tell(w)
            pool.started += 1
            self.counters["workers_started"] += 1
        pool.busy += 1
        return w

    def _dispatch(self, run: Run, pool: _Pool) -> None:
        worker = self._acquire(pool)
        if worker is None:
            self._finish_here(
                run,
                "rejected",
                ErrorCode.TOOL_UNAVAILABLE,
                f"Tool '{run.call.name}' is unavailable: {len(self.detached)} workers are "
                f"stuck in calls that timed out (limit {self.max_abandoned})",
            )
            return
        n = run.attempt + 1
        if n > 1:
            self.counters["retries"] += 1
        run.begin_attempt(n)
        self._take_slot(run, pool)
        run.sv_worker = worker
        if run.timeout is not None:
            run.sv_timer = self.timers.schedule(run.timeout, self.actor_ref.tell, Deadline(run, n))
        worker.ref.tell(Invoke(run, n))

    def _take_slot(self, run: Run, pool: _Pool) -> None:
        run.sv_slot = True
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        pool.in_flight += 1
        if run.batch is not None:
            run.batch.in_flight += 1

    def _release_slot(self, run: Run) -> None:
        if not run.sv_slot:
            return
        run.sv_slot = False
        self.in_flight -= 1
        assert run.tool is not None
        pool = self._pool(run.tool)
        pool.in_flight -= 1
        if pool.waiting:
            self.ready.appendleft(pool.waiting.popleft())
        b = run.batch
        if b is not None:
            b.in_flight -= 1
            if b.waiting:
                self.ready.appendleft(b.waiting.popleft())

    # -- workers report -------------------------------------------------------

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
        if msg.kind == "lost":
            # Someone else (deadline, cancellation, grace) settled this attempt and
            # has already accounted for the run; only the worker is news.
            return
        if run.sv_closed or run.attempt != msg.attempt:
            return
        self.timers.cancel(run.sv_timer)
        run.sv_timer = None
        if msg.kind == "done":
            self._closed_run(run)
        else:  # retry
            self._release_slot(run)
            run.sv_timer = self.timers.schedule(
                msg.delay, self.actor_ref.tell, RetryDue(run, msg.attempt)
            )

    def _on_retry_due(self, msg: RetryDue) -> None:
        run = msg.run
        if run.sv_closed or run.attempt != msg.attempt:
            return
        run.sv_timer = None
        self.ready.appendleft(run)

    # -- deadlines ------------------------------------------------------------

    def _on_deadline(self, msg: Deadline) -> None:
        run, n = msg.run, msg.attempt
        if run.sv_closed or run.attempt != n:
            return
        run.sv_timer = None
        phase = run.phase
        if not run.try_settle(n):
            # The worker settled the attempt and is in its post-attempt hooks.
            if not run.completed:
                run.sv_timer = self.timers.schedule(
                    self.hook_grace, self.actor_ref.tell, Grace(run, n)
                )
            return
        self.counters["timeouts"] += 1
        run.interrupt()
        self._detach(run)
        if self.emitter.wants(sig.TIMEOUT):
            self.emitter.emit(
                sig.TIMEOUT,
                TimedOut(run.call.id, run.call.name, run.batch_id, n, run.timeout or 0.0),
            )
        assert run.tool is not None
        worker = self._acquire(self._pool(run.tool))
        if worker is None:
            self._finish_here(
                run,
                "timeout",
                ErrorCode.EXECUTION_TIMEOUT,
                f"Tool '{run.call.name}' timed out after {run.timeout}s",
            )
            return
        run.sv_worker = worker
        run.sv_timer = self.timers.schedule(self.hook_grace, self.actor_ref.tell, Grace(run, n))
        worker.ref.tell(AfterTimeout(run, n, phase if phase in (ADMISSION, FINISHING) else ""))

    def _on_grace(self, msg: Grace) -> None:
        run, n = msg.run, msg.attempt
        if run.sv_closed or run.attempt != n:
            return
        run.sv_timer = None
        if run.completed:
            return
        run.interrupt()
        self._detach(run)
        self._finish_here(
            run,
            "timeout",
            ErrorCode.EXECUTION_TIMEOUT,
            f"Tool '{run.call.name}' timed out: its hooks did not return within "
            f"{self.hook_grace}s after the deadline",
        )

    # -- cancellation -----------------------------------------------------------

    def _on_cancel(self, msg: Cancel) -> None:
        runs = msg.batch.runs if msg.batch is not None else [msg.run] if msg.run else []
        for run in runs:
            self._cancel_run(run, msg.code, msg.reason, only_unstarted=False)

    def _cancel_run(self, run: Run, code: ErrorCode, reason: str, *, only_unstarted: bool) -> None:
        if run.sv_closed or run.completed:
            return
        if run.sv_slot:  # an attempt is running
            if only_unstarted:
                return
            if not run.try_settle(run.attempt):
                return  # the worker has the outcome; let it finish
            run.interrupt()
            self._detach(run)
        elif only_unstarted and run.attempt > 0:
            return  # started, now backing off before a retry: let it go on
        self.timers.cancel(run.sv_timer)
        run.sv_timer = None
        self._finish_here(run, "cancelled", code, reason)

    # -- completion -------------------------------------------------------------

    def _finish_here(self, run: Run, status: Any, code: ErrorCode, message: str) -> None:
        """Finish a run with a result made by the supervisor itself (no user code)."""
        result = _pipeline.make_result(run, status, error=message, code=code)
        _pipeline.finish(run, result, self.services)
        self._closed_run(run)

    def _closed_run(self, run: Run) -> None:
        if run.sv_closed:
            return
        run.sv_closed = True
        self.runs_open.discard(run)
        self.timers.cancel(run.sv_timer)
        run.sv_timer = None
        self._release_slot(run)
        result = run.result
        if result is not None:
            self.counters[result.status] += 1
        b = run.batch
        if b is None or b.schedule is None:
            return
        b.remaining -= 1
        if result is not None and result.status != "ok":
            g = b.schedule.group_of(run.index).index
            b.group_failures[g] = b.group_failures.get(g, 0) + 1
        for i in b.schedule.finish(run.index):
            nxt = b.runs[i]
            if not nxt.sv_closed:
                self.ready.append(nxt)
        self._announce_groups(b)
        if b.stop_on_error and not b.stopped and result is not None and result.status != "ok":
            b.stopped = True
            reason = f"batch stopped: call {run.call.id} ('{run.call.name}') ended {result.status}"
            for other in b.runs:
                self._cancel_run(other, ErrorCode.ABORTED, reason, only_unstarted=True)
        if b.remaining == 0:
            self._batch_done(b)

    def _announce_groups(self, b: BatchRun) -> None:
        assert b.schedule is not None
        transitions = b.schedule.transitions
        if not transitions:
            return
        em = self.emitter
        now = _now()
        for what, g in transitions:
            if not g.read_only:
                continue
            if what == "open":
                b.group_started[g.index] = now
                if em.wants(sig.PARALLEL_START):
                    em.emit(sig.PARALLEL_START, ParallelStart(b.batch_id, g.index, g.size))
            elif g.index in b.group_started and em.wants(sig.PARALLEL_COMPLETE):
                fails = b.group_failures.get(g.index, 0)
                em.emit(
                    sig.PARALLEL_COMPLETE,
                    ParallelComplete(
                        b.batch_id,
                        g.index,
                        g.size,
                        g.size - fails,
                        fails,
                        now - b.group_started[g.index],
                    ),
                )
        transitions.clear()

    def _batch_done(self, b: BatchRun) -> None:
        if self.emitter.wants(sig.BATCH_COMPLETE):
            ok = sum(1 for r in b.runs if r.result is not None and r.result.status == "ok")
            self.emitter.emit(
                sig.BATCH_COMPLETE,
                BatchComplete(b.batch_id, len(b.runs), ok, len(b.runs) - ok, _now() - b.started),
            )
        if b.waiter is not None:
            b.waiter.release(b)

    # -- status and shutdown ------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        return {
            **self.counters,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "queued": len(self.ready) + sum(len(p.waiting) for p in self.pools.values()),
            "abandoned_workers": len(self.detached),
            "live_workers": sum(len(p.idle) + p.busy for p in self.pools.values()),
            "pools": {
                p.tool.name: {"idle": len(p.idle), "busy": p.busy, "in_flight": p.in_flight}
                for p in self.pools.values()
            },
            "timers": len(self.timers),
        }

    def _on_close(self, msg: Close) -> bool:
        self.closed = True
        for run in list(self.runs_open):
            self._cancel_run(run, ErrorCode.CANCELLED, msg.reason, only_unstarted=False)
        for run in list(self.runs_open):
            # The worker holds the outcome but is still in its hooks: do not wait.
            self._detach(run)
            self._finish_here(run, "cancelled", ErrorCode.CANCELLED, msg.reason)
        for pool in self.pools.values():
            for w in pool.idle:
                w.ref.stop(block=False)
            pool.idle.clear()
        return True


_now = time.monotonic
