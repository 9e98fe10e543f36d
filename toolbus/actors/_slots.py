"""Who may start now: the ready queue, the waiting queues and the slots in use.

Three limits apply to every attempt: the executor's `max_parallel`, its batch's
limit, and its tool's `max_concurrency`. A run that is ready but blocked by a
batch or tool limit waits in that batch's or pool's queue; when a slot there
frees, the first live run of the queue goes back to the front of the ready
queue. Room is never left unused: a run that is let out of one queue and then
blocked by the other limit (or closed before it starts) hands its room on.

Pure bookkeeping, owned by the supervisor's thread; no threads here.
"""

from __future__ import annotations

from collections import deque

from ..pipeline import PARKED, READY, Run
from ._pool import Pool

__all__ = ["Slots"]


class Slots:
    """The supervisor's admission control."""

    __slots__ = ("in_flight", "max_parallel", "peak", "ready")

    def __init__(self, max_parallel: int) -> None:
        self.max_parallel = max_parallel
        self.in_flight = 0
        self.peak = 0
        self.ready: deque[Run] = deque()

    def enqueue(self, run: Run, *, front: bool = False) -> None:
        """Make a run eligible to start (retries and let-out runs go to the front)."""
        if run.sv_queued or run.sv_closed:
            return
        run.sv_queued = READY
        if front:
            self.ready.appendleft(run)
        else:
            self.ready.append(run)

    def next_startable(self) -> Run | None:
        """The next run that may start now, parking those that must wait; None if none."""
        ready = self.ready
        while ready:
            # A nested call (made by a tool of this executor) runs on its
            # caller's share: waiting for the slot its caller holds would deadlock.
            if self.in_flight >= self.max_parallel and ready[0].parent is None:
                return None
            run = ready.popleft()
            run.sv_queued = 0
            if run.sv_closed:
                continue
            pool: Pool = run.sv_pool
            b = run.batch
            if not pool.has_room:
                _park(pool.waiting, run)
                # It may have been let out of its batch's queue: pass that room on.
                if b is not None and b.in_flight < b.limit:
                    self._unpark_one(b.waiting)
                continue
            if b is not None and b.in_flight >= b.limit:
                _park(b.waiting, run)
                self._unpark_one(pool.waiting)
                continue
            return run
        return None

    def take(self, run: Run) -> None:
        """`run` starts an attempt: it holds a slot of every limit."""
        run.sv_slot = True
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        run.sv_pool.in_flight += 1
        if run.batch is not None:
            run.batch.in_flight += 1

    def release(self, run: Run) -> None:
        """`run` gives its slots back (finished, or backing off before a retry)."""
        if not run.sv_slot:
            return
        run.sv_slot = False
        self.in_flight -= 1
        pool: Pool = run.sv_pool
        pool.in_flight -= 1
        self._unpark_one(pool.waiting)
        b = run.batch
        if b is not None:
            b.in_flight -= 1
            self._unpark_one(b.waiting)

    def closed(self, run: Run) -> None:
        """`run` ended; if it sat in the ready queue it may have been let out of a
        waiting queue for room it will now never use: hand that room on."""
        self.release(run)
        if run.sv_queued != READY or run.sv_pool is None:
            return
        pool: Pool = run.sv_pool
        if pool.has_room:
            self._unpark_one(pool.waiting)
        b = run.batch
        if b is not None and b.in_flight < b.limit:
            self._unpark_one(b.waiting)

    def _unpark_one(self, queue: deque[Run]) -> None:
        """Move the first live run of a waiting queue to the front of the ready queue."""
        while queue:
            run = queue.popleft()
            run.sv_queued = 0
            if not run.sv_closed:
                self.enqueue(run, front=True)
                return


def _park(queue: deque[Run], run: Run) -> None:
    run.sv_queued = PARKED
    queue.append(run)
