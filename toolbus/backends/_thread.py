"""The thread backend: sync tools' attempts on worker actors, one call at a time each.

Each tool has its own pool (`ToolPool`, `_thread_pool.py`): one queue of jobs,
the tool's mailbox, and the `ToolWorker` pykka actors (a thread and an inbox
each) that take jobs from it, started lazily and reused. `submit` queues the
job and wakes one worker only if none is already looking at the queue; a
worker that takes a job and leaves more queued wakes one more (a cascade: a
burst of slow calls gets a thread each quickly, a burst of quick calls is
served by a few threads). A worker carries a `Job` to the pipeline inside the
caller's captured `contextvars` and always reports back, whatever happened, so
the supervisor never loses track of a worker or a call; then it takes the
next job, or sleeps.

A worker idle for `idle_timeout` seconds (default 60, `Executor(worker_idle_timeout=)`)
ends, down to one idle worker kept per tool, so a tool used before stays warm;
its inbox wakes it for that check, no timer thread is involved.

A thread stuck in a sync tool cannot be stopped (`can_kill` is False). When
its job is cancelled it is detached from its pool and counted as abandoned; a
fresh worker takes the tool's next calls. If it ever returns, it rejoins the
pool. A job cancelled while still queued is not abandoned: it is run, finds
its attempt over, and reports it lost at once.
"""

from __future__ import annotations

import itertools
import logging
import threading
import traceback
from typing import TYPE_CHECKING, Any

import pykka

from .._options import positive_number
from ..models import ErrorCode
from ..pipeline import LOST, Outcome, Services, attempt, drive_sync, end_call
from ._protocol import ContextSpec, Host, Job
from ._quick_asks import QuickAsks
from ._thread_pool import IDLE_CHECK, WAKE, IdleInbox, PoolWorker, ToolPool, WorkerHandle

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["ThreadBackend", "ToolWorker", "WorkerHandle", "contain"]

log = logging.getLogger("toolbus.backends")

_seq = itertools.count(1)  # workers' numbers, over every backend (next() is atomic)


def contain(job: Job, error: BaseException, services: Services) -> Outcome:
    """A backend's last line: an internal error while running `job` still ends the call."""
    run = job.run
    log.error(
        "internal error running call %s:\n%s",
        run.call.id,
        run.scrubber.text("".join(traceback.format_exception(error))),
    )
    try:
        return end_call(
            run, services, "error", ErrorCode.TOOL_ERROR, f"internal error: {type(error).__name__}"
        )
    except BaseException:
        return LOST


class ToolWorker(pykka.ThreadingActor):
    """Runs its pool's jobs one at a time: tools and hooks, never the supervisor's
    bookkeeping. Its first message is its handle (`PoolWorker`); then `WAKE` (look at
    the queue) and `IDLE_CHECK` (idle for a while: retire?).

    Daemon thread: a tool stuck forever must not keep the process alive.
    """

    use_daemon_thread = True
    # C SimpleQueue, not queue.Queue, whose `get` gives up after idle_timeout.
    _create_actor_inbox = staticmethod(IdleInbox)

    def __init__(self, host: Host) -> None:
        super().__init__()
        self.host = host
        self.handle: PoolWorker | None = None

    def on_receive(self, message: Any) -> Any:
        """Serve the pool's queue until it is empty (WAKE, or the handle that
        starts the worker), or check whether to retire (IDLE_CHECK)."""
        # Never let anything escape a tell handler: pykka would stop this actor,
        # and a BaseException would make pykka stop every actor in the process.
        try:
            if message is not WAKE and not self._control(message):
                return None
            # The serving loop, inline: one Python call less per wake-up.
            w = self.handle
            assert w is not None
            pool, host = w.pool, self.host
            while True:
                job = pool.take(w)
                if job is None:
                    if w.gone:
                        self.stop()
                    return None
                services = host.services
                try:
                    run = job.run
                    if job.timed_out_in is not None:
                        steps = job.steps(services)
                    elif w.asking:
                        # Asking its policies first: it wakes nobody until they
                        # let the call through (`_passes`; see _thread_pool.py).
                        steps = attempt(run, job.attempt, services, hand_on=self._passes)
                    else:
                        steps = attempt(run, job.attempt, services)
                    outcome = run.context.copy().run(drive_sync, steps, run, host.loop)
                except BaseException as e:
                    outcome = contain(job, e, services)
                # Counted as searching before the report, which may hand this
                # tool its next call on this thread: that call is then ours.
                searching = pool.finished(w, job)
                if not host.report(job, outcome, w):
                    # The executor closed while this worker was stuck: nobody will reuse it.
                    if searching:
                        pool.leave(w)
                    self.stop()
                    return None
                if not searching:
                    return None  # detached: `release` lets it rejoin
        except BaseException as e:
            log.error("thread worker failed:\n%s", "".join(traceback.format_exception(e)))
        return None

    def _passes(self) -> None:
        """Its call passed its policies: its pool may wake another worker now
        (a job taken to ask them first woke nobody)."""
        w = self.handle
        assert w is not None
        w.pool.passes(w)

    def _control(self, message: Any) -> bool:
        """A message other than WAKE; True if the worker is to serve now."""
        w = self.handle
        if message is IDLE_CHECK:
            if w is not None and w.pool.retire(w):
                self.stop()
            return False
        if isinstance(message, PoolWorker) and w is None:
            self.handle = message
            inbox: Any = self.actor_inbox
            inbox.idle_timeout = min(message.pool.idle_timeout, threading.TIMEOUT_MAX)
            return True  # started as a searching worker
        return False


def _spawn(host: Host, pool: ToolPool) -> PoolWorker:
    """Start a worker for `pool` (counted there as searching already)."""
    ref = ToolWorker.start(host)
    try:
        w = PoolWorker(ref, pool, next(_seq))
        ref.tell(w)
    except BaseException:  # (a signal's, say) it never gets its pool: it ends
        ref.stop(block=False)
        raise
    return w


class ThreadBackend:
    """Runs each attempt on a worker thread of its tool's pool (sync tools).

    `idle_timeout`: seconds a worker may sit idle before its thread ends (one
    idle worker per tool is kept); a finite number > 0."""

    name = "thread"
    can_kill = False
    uses_threads = True
    carries_context: ContextSpec = "all"

    def __init__(self, idle_timeout: float = 60.0) -> None:
        self.idle_timeout = positive_number(idle_timeout, "idle_timeout", "ThreadBackend")
        self._host: Host | None = None
        self._pools: dict[int, ToolPool] = {}
        self._busy = 0
        self._abandoned = 0
        self._stopped = False

    def check(self, tool: Tool) -> None:
        return None  # an async tool's coroutine is awaited on the loop thread

    def start(self, host: Host) -> None:
        if self._host is not None and self._host is not host:
            raise RuntimeError("this ThreadBackend already serves another executor")
        self._host = host

    def _new_pool(self, tool: Tool) -> ToolPool:
        host = self._host
        assert host is not None

        def spawn(p: ToolPool) -> PoolWorker:
            return _spawn(host, p)

        # Keyed by id: the pool holds the tool, so the id is not reused.
        pool = self._pools[id(tool)] = ToolPool(
            tool, self.idle_timeout, spawn, QuickAsks(tool, host.services)
        )
        pool.stopped = self._stopped
        return pool

    def submit(self, job: Job) -> None:
        tool = job.run.tool
        assert tool is not None
        pool = self._pools.get(id(tool))
        if pool is None:
            pool = self._new_pool(tool)
        pool.add(job)  # raises BackendUnavailable
        self._busy += 1

    def release(self, job: Job, worker: Any) -> None:
        w: PoolWorker | None = worker
        if w is None:
            return
        if w.detached is not job:
            self._busy -= 1
            w.pool.busy -= 1
            return
        self._abandoned -= 1
        w.pool.rejoin(w)  # an abandoned worker came back: healthy again, it serves

    def cancel(self, job: Job) -> None:
        tool = job.run.tool
        pool = self._pools.get(id(tool))
        if pool is not None and pool.cancel(job):
            self._busy -= 1
            self._abandoned += 1

    def kill(self, job: Job) -> bool:
        return False

    def busy(self, tool: Tool | None = None) -> int:
        if tool is None:
            return self._busy
        pool = self._pools.get(id(tool))
        return pool.busy if pool is not None else 0

    def abandoned(self, tool: Tool | None = None) -> int:
        if tool is None:
            return self._abandoned
        pool = self._pools.get(id(tool))
        return pool.abandoned if pool is not None else 0

    def idle(self, tool: Tool) -> int:
        """Workers of `tool` asleep, waiting for its next call."""
        pool = self._pools.get(id(tool))
        return len(pool.idle) if pool is not None else 0

    @property
    def live_workers(self) -> int:
        """Worker threads alive in the pools, idle or serving (abandoned ones
        excluded: `abandoned()` counts them)."""
        return sum(p.workers for p in list(self._pools.values()))

    @property
    def started(self) -> int:
        """Worker threads ever started (for `ExecutorStats.workers_started`)."""
        return sum(p.started for p in list(self._pools.values()))

    def stop(self) -> None:
        self._stopped = True
        for pool in list(self._pools.values()):
            pool.stop()
