"""One tool's pool of worker threads: its queue of jobs, who takes them, who sleeps.

The `ThreadBackend` (`_thread.py`) keeps one `ToolPool` per tool. The pool is
the tool's mailbox: `add` queues a job, and its workers (`ToolWorker` actors)
take jobs from it one at a time. A worker is in one of three states:

- *searching*: woken, or just done with a job, and about to look at the
  queue. `searching` counts them.
- *running* a job it took (`serving` maps the job's run to it).
- *idle*: in `idle`, asleep on its inbox until nudged (a `WAKE` envelope).

Wake-one: `add` wakes a worker only if nobody is searching (the newest idle
one, or a new worker if none is idle); a searching worker will find the job.
A worker that takes a job and leaves more behind with nobody searching wakes
one more before it runs its job: a burst of slow calls cascades up to one
thread each quickly, while quick calls are served by the few threads that
come back for the next job before a new one would have started. So: while
jobs are queued, somebody is searching (unless a thread could not start, and
then a running worker comes back for them).

A worker done with a job counts as searching *before* it reports: the report
runs the scheduler inline, which may hand this tool its next call (`add`, on
this very thread), and that call is then this worker's, with nobody woken.

Asking first: a job whose call has policies left to ask (a rate limit) may
well end there, told to wait, without running the tool. When nothing on the
way to the policies' answer can block (`asks_quickly`, `_quick_asks.py`: no
code of the user's before it, policies that never block), a worker that
takes one is *asking* (`asking` counts them): it wakes nobody when it takes
it, and `add` wakes nobody while it asks, since it comes back for the queue
as soon as the policies have answered. Only when they let the call through
(`passes`) does it wake one more for the jobs left behind. So calls that end
up waiting start no thread: sixty calls on a 5/second limit run on at most
one worker per call the window lets through, and one more that asks the
others in turn.

Counting: `busy` (jobs added and not yet released, abandoned ones excluded)
and `abandoned` change only on the scheduler's thread (`add`, `cancel`,
`rejoin` and the backend's `release`), which calls the backend one method at
a time; what workers touch from their own threads is under `lock`. A running
job that is cancelled *detaches* its worker: counted abandoned, out of the
pool until the backend's `release` says it returned, when it rejoins. A job
still queued when cancelled is not abandoned: the worker that takes it runs
its steps, which find the attempt settled and report it lost at once, so
every job is reported exactly once. When the pool stops, idle workers end at
once and the others once the queue is empty.

One piece: every count here (searching, asking, idle, busy, abandoned) is
read and written under the pool's one lock, and each decision to wake or
start a worker reads several of them at once; split across modules, the
reasoning that no queued job is ever stranded would be too.

Retirement: a worker's inbox (`IdleInbox`) hands it `IDLE_CHECK` after
`idle_timeout` seconds without a message; if it is still idle and another
worker of the pool is idle too, it leaves (`retire`) and its thread ends. One
idle worker stays per tool that has run, so a tool used before stays warm.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pykka
from pykka._envelope import Envelope

from ._protocol import BackendUnavailable, Job

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool

__all__ = ["IDLE_CHECK", "WAKE", "IdleInbox", "PoolWorker", "ToolPool", "WorkerHandle"]

log = logging.getLogger("toolbus.backends")


class _Signal:
    """A message a worker gets from its pool (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


WAKE = _Signal("wake")  # look at the queue: you are counted as searching
IDLE_CHECK = _Signal("idle check")  # no message for idle_timeout seconds
# One envelope, reused: a nudge is put straight in the inbox (no reply, no
# ActorRef.tell round of Python calls on the caller's thread).
_WAKE_ENVELOPE: Envelope[Any] = Envelope(WAKE)
_IDLE_ENVELOPE: Envelope[Any] = Envelope(IDLE_CHECK)


class IdleInbox(queue.SimpleQueue[Envelope[Any]]):
    """A worker's inbox (C `SimpleQueue`) whose `get` waits at most
    `idle_timeout` seconds, then returns an `IDLE_CHECK` envelope: how an idle
    worker learns it may retire, with no timer thread. None: wait for ever."""

    __slots__ = ("idle_timeout",)

    def __init__(self) -> None:
        super().__init__()
        self.idle_timeout: float | None = None

    def get(self, block: bool = True, timeout: float | None = None) -> Envelope[Any]:
        try:  # (`SimpleQueue.get` itself: `super()` would cost every wake a lookup)
            return _get(self, block, self.idle_timeout if timeout is None else timeout)
        except queue.Empty:
            return _IDLE_ENVELOPE


_get = queue.SimpleQueue.get


class WorkerHandle:
    """The backend's name for a worker: its actor and the tool it serves."""

    __slots__ = ("ref", "seq", "tool")

    def __init__(self, ref: pykka.ActorRef[Any], tool: Tool, seq: int) -> None:
        self.ref = ref
        self.tool = tool
        self.seq = seq

    def __repr__(self) -> str:
        return f"<worker {self.seq} of {self.tool.name!r}>"


class PoolWorker(WorkerHandle):
    """A worker as its pool knows it (the token its reports carry).

    `job`: the job it runs (None between jobs); `detached`: the job it was
    abandoned in, until the backend's `release` hands that job back."""

    __slots__ = ("asking", "detached", "gone", "job", "pool")

    def __init__(self, ref: pykka.ActorRef[Any], pool: ToolPool, seq: int) -> None:
        super().__init__(ref, pool.tool, seq)
        self.pool = pool
        self.job: Job | None = None
        self.detached: Job | None = None
        self.gone = False  # left its pool: its thread is to end
        self.asking = False  # its job's policies are being asked (see the module's docstring)


# Starts a worker for a pool, counted as searching: its actor's first message
# is its handle. Raises if no thread could be started.
Spawn = Callable[["ToolPool"], PoolWorker]


def _nudge(w: PoolWorker) -> None:
    w.ref.actor_inbox.put(_WAKE_ENVELOPE)


def _stop(w: PoolWorker) -> None:
    try:
        w.ref.stop(block=False)
    except pykka.ActorDeadError:
        pass


class ToolPool:
    """One tool's queue of jobs and its workers (see the module's docstring)."""

    __slots__ = (
        "abandoned",
        "asking",
        "asks_quickly",
        "busy",
        "idle",
        "idle_timeout",
        "jobs",
        "lock",
        "searching",
        "serving",
        "spawn",
        "started",
        "stopped",
        "tool",
        "workers",
    )

    def __init__(
        self,
        tool: Tool,
        idle_timeout: float,
        spawn: Spawn,
        asks_quickly: Callable[[Run], bool] | None = None,
    ) -> None:
        self.tool = tool
        self.idle_timeout = idle_timeout
        self.spawn = spawn
        # Whether a call's policies answer with nothing on the way that can
        # block (None: never assumed; see the module's docstring).
        self.asks_quickly = asks_quickly
        self.lock = threading.Lock()
        self.jobs: deque[Job] = deque()
        self.idle: list[PoolWorker] = []  # a stack: the newest idle is woken first
        self.serving: dict[Run, PoolWorker] = {}
        self.searching = 0
        self.asking = 0  # workers whose job's policies are being asked
        self.workers = 0  # alive and in the pool: searching, running or idle
        self.started = 0
        self.stopped = False
        # The scheduler's thread only (see the module's docstring).
        self.busy = 0
        self.abandoned = 0

    # -- the scheduler's thread ------------------------------------------------------

    def add(self, job: Job) -> None:
        """Queue `job`; wake a worker if nobody is searching. `BackendUnavailable`
        if no worker could be started and none is left to take it."""
        with self.lock:
            self.jobs.append(job)
            if self.searching or self.asking:  # (an asking worker comes back for it)
                self.busy += 1
                return
            self.searching = 1
            w = self.idle.pop() if self.idle else None
            if w is None:
                self.workers += 1
                self.started += 1
        if w is not None:
            w.ref.actor_inbox.put(_WAKE_ENVELOPE)  # _nudge, inline: the hot path
        else:
            try:
                self.spawn(self)
            except BaseException as e:  # e.g. "can't start new thread"; a signal's too
                taken_back = self._not_started(job, e)
                if not isinstance(e, Exception):
                    raise  # (counted out first: else nobody would ever serve the queue)
                if taken_back:
                    raise BackendUnavailable(
                        f"Tool '{self.tool.name}' is unavailable: no worker thread could "
                        f"be started ({e})"
                    ) from None
        self.busy += 1

    def cancel(self, job: Job) -> bool:
        """`job`'s outcome is not wanted: if a worker runs it, detach that worker
        (True: it counts as abandoned now). A queued job stays queued."""
        with self.lock:
            w = self.serving.pop(job.run, None)
            if w is None:
                return False
            w.detached = w.job
            self.workers -= 1
            self.busy -= 1
            self.abandoned += 1
            if w.asking:  # (it will not come back for the queue now)
                w.asking = False
                self.asking -= 1
            # Queued work with nobody to look for it: a fresh worker.
            idle = self.jobs and not self.searching and not self.asking
            w2, spawn = self._wake_one() if idle else (None, False)
        self._wake(w2, spawn)
        return True

    def rejoin(self, w: PoolWorker) -> None:
        """The scheduler read the report of the job `w` was abandoned in: `w`
        rejoins the pool (or ends, if the pool stopped). A job `w` was not
        abandoned in needs nothing of the pool: the backend uncounts it."""
        with self.lock:
            w.detached = None
            self.abandoned -= 1
            if self.stopped:
                w.gone = True
            else:
                self.workers += 1
                if not self.jobs or self.searching or self.asking:
                    self.idle.append(w)
                    return
                self.searching += 1
        if w.gone:
            _stop(w)
        else:
            _nudge(w)

    def stop(self) -> None:
        """No more jobs: idle workers end now, the others when they are done."""
        with self.lock:
            self.stopped = True
            idle, self.idle = self.idle, []
            self.workers -= len(idle)
        for w in idle:
            w.gone = True
            _stop(w)

    # -- a worker's thread -----------------------------------------------------------------

    def take(self, w: PoolWorker) -> Job | None:
        """The next job for `w`, which is searching; None: `w` went idle (or,
        if `w.gone`, left the stopped pool). Wakes one more worker first if
        jobs are left and nobody else is searching (the cascade)."""
        with self.lock:
            jobs = self.jobs
            if not jobs:
                self.searching -= 1
                if self.stopped:
                    self.workers -= 1
                    w.gone = True
                else:
                    self.idle.append(w)
                return None
            job = jobs.popleft()
            self.serving[job.run] = w
            w.job = job
            run = job.run
            if (
                run.policy_at < len(run.policies)
                and job.timed_out_in is None
                and self.asks_quickly is not None
                and self.asks_quickly(run)
            ):
                # Its policies first, quickly: no cascade (see the module's docstring).
                self.searching -= 1
                w.asking = True
                self.asking += 1
                return job
            if not jobs or self.searching > 1:
                self.searching -= 1
                return job
            # Hand the search on: the count stays, another worker carries it.
            w2 = self.idle.pop() if self.idle else None
            if w2 is None:
                self.workers += 1
                self.started += 1
        self._wake(w2, w2 is None)
        return job

    def finished(self, w: PoolWorker, job: Job) -> bool:
        """`w` ran `job`. True: it searches again (counted before it reports);
        False: it was detached, and waits for `release` to rejoin."""
        with self.lock:
            w.job = None
            if w.asking:  # its policies did not let the call through
                w.asking = False
                self.asking -= 1
            if w.detached is job:
                return False
            if self.serving.get(job.run) is w:
                del self.serving[job.run]
            self.searching += 1
            return True

    def passes(self, w: PoolWorker) -> None:
        """`w`'s call passed its policies, and what follows (the journal, the
        tool) may take long: if jobs are queued with nobody searching or
        asking, wake one."""
        with self.lock:
            if not w.asking:
                return  # (detached meanwhile: `cancel` saw to the queue)
            w.asking = False
            self.asking -= 1
            if not self.jobs or self.searching or self.asking:
                return
            w2, spawn = self._wake_one()
        self._wake(w2, spawn)

    def leave(self, w: PoolWorker) -> None:
        """`w`, searching, leaves the pool (its host is gone)."""
        with self.lock:
            self.searching -= 1
            self.workers -= 1
            w.gone = True

    def retire(self, w: PoolWorker) -> bool:
        """`w` has been idle for `idle_timeout`: True if it leaves the pool (it
        is idle, and not the pool's last idle worker)."""
        with self.lock:
            idle = self.idle
            if len(idle) < 2 or w not in idle:
                return False
            idle.remove(w)
            self.workers -= 1
            w.gone = True
            return True

    # -- waking ------------------------------------------------------------------------------

    def _wake_one(self) -> tuple[PoolWorker | None, bool]:
        """Under the lock: count one more searcher, the newest idle worker or
        (True) a new one."""
        self.searching += 1
        if self.idle:
            return self.idle.pop(), False
        self.workers += 1
        self.started += 1
        return None, True

    def _wake(self, w: PoolWorker | None, spawn: bool) -> None:
        """Outside the lock: nudge `w`, or start a worker if `spawn`."""
        if w is not None:
            _nudge(w)
        elif spawn:
            try:
                self.spawn(self)
            except BaseException as e:
                self._not_started(None, e)
                if not isinstance(e, Exception):
                    raise

    def _not_started(self, job: Job | None, error: BaseException) -> bool:
        """A worker counted as searching could not start: uncount it. True if
        `job` was taken back from the queue because no worker is left to take
        it; else the queued jobs wait for a running worker to come back."""
        with self.lock:
            self.searching -= 1
            self.workers -= 1
            self.started -= 1
            if job is not None and self.workers == 0:
                for i, queued in enumerate(self.jobs):
                    if queued is job:
                        del self.jobs[i]
                        return True
        log.warning(
            "tool %r: no worker thread could be started (%s); its queued calls wait for "
            "a running worker",
            self.tool.name,
            error,
        )
        return False
