"""The order runs wait in: nested calls first, then by priority, FIFO within one.

Every queue a run waits in (the ready queue, each capacity group's waiting
queue, the thread budget's) is a `RunQueue`, and they all keep one order:

- nested calls (made by a running tool or hook of the same executor) go ahead
  of everything, whatever the priorities: their callers hold slots while they
  wait for them, and the deadlock protection counts on them being served
  first. Among themselves: higher priority first, then newest first (a call
  nested deeper is newer, and its chain of callers holds more slots);
- then the other runs by priority, higher first (`execute*(..., priority=N)`,
  default 0; strict, with no ageing: a steady stream of higher-priority calls
  keeps lower ones waiting);
- within a priority, first come, first served. A run put at the `front` (a
  retry whose backoff is over, a run let out of a waiting queue) goes ahead of
  its own priority class, never ahead of a higher one.

Why a deque per priority level rather than a heap: nearly every run has the
default priority 0 and is not nested, and while the queue holds only such
runs (`others == 0`) a push and a pop are a deque's `append` and `popleft`
with a counter, as before priorities existed (`Capacity` inlines that case
for the ready queue, which every call passes through); a heap would cost a
tuple and a log-n sift per call. Levels are few (the priorities in use), kept in a list,
highest first; level 0 stays, and empty others are dropped only when there
are many, so a level that comes and goes is not rebuilt every time.

A run that ends while it waits stays in its queue until it comes out at the
front (taking it out of the middle would cost O(n) per run, O(n²) when
`close()` cancels 10k queued calls): `dead` counts those entries, so
`size - dead` is how many runs really wait (what `max_queued` bounds).
`pop_last` takes the run that would start last (what shedding drops) and
`place` says where a run just queued stands: both cost no more than the
priority levels in use.

Pure bookkeeping, owned by whoever holds the scheduler's lock; no threads here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterator

from ..pipeline import Run

__all__ = ["RunQueue"]

# Making a level when this many exist drops the empty ones first.
MAX_LEVELS = 8


class RunQueue:
    """Runs waiting, in the order they are to go (see the module's docstring)."""

    __slots__ = ("_keys", "_levels", "_queues", "dead", "default", "nested", "others", "size")

    def __init__(self) -> None:
        self.size = 0  # every run in it (read on the hot path: cheaper than len())
        # ... of which runs that ended while in it (their owner counts them here
        # when they end, and takes one off when such a run comes out).
        self.dead = 0
        self.others = 0  # runs in it that are nested or of a priority other than 0
        self.default: deque[Run] = deque()  # level 0: runs of the default priority
        self.nested: deque[Run] = deque()  # nested runs, in order
        self._levels: dict[int, deque[Run]] = {0: self.default}  # priority -> its runs
        # The levels' queues highest priority first, and their keys (negated
        # priorities, ascending, for bisect) in the same order.
        self._queues: list[deque[Run]] = [self.default]
        self._keys: list[int] = [0]

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Run]:
        """The runs in the order they would be popped."""
        yield from self.nested
        for queue in self._queues:
            yield from queue

    def push(self, run: Run, *, front: bool = False) -> None:
        """Queue `run` at the end of its priority class (`front`: at its start)."""
        self.size += 1
        if run.parent is not None:
            self.others += 1
            self._push_nested(run)
            return
        if run.priority:
            self.others += 1
            found = self._levels.get(run.priority)
            queue = found if found is not None else self._level(run.priority)
        else:
            queue = self.default
        if front:
            queue.appendleft(run)
        else:
            queue.append(run)

    def pop(self) -> Run:
        """Take the first run; IndexError if there is none."""
        if not self.others:
            run = self.default.popleft()
            self.size -= 1
            return run
        if self.nested:
            run = self.nested.popleft()
        else:
            for queue in self._queues:  # (a loop: cheaper than next() of a generator)
                if queue:
                    run = queue.popleft()
                    break
            else:
                raise AssertionError("RunQueue.others counts runs it does not hold")
        self.size -= 1
        if run.parent is not None or run.priority:
            self.others -= 1
        return run

    def remove(self, run: Run) -> None:
        """Take `run` out from wherever it is; ValueError if it is not here."""
        queue = self.nested if run.parent is not None else self._levels.get(run.priority)
        if queue is None:
            raise ValueError("run not in the queue")
        queue.remove(run)
        self.size -= 1
        if run.parent is not None or run.priority:
            self.others -= 1

    def pop_last(self) -> Run | None:
        """Take the run that would start last but for nested ones: the newest
        of the lowest priority class (one queued at the `front` of its class
        is the last of it taken here), its ticket marked not queued.
        Entries of runs that ended on the way are dropped (and uncounted from
        `dead`). None if only nested runs (never shed: their callers hold
        slots) are left."""
        for queue in reversed(self._queues):
            while queue:
                run = queue.pop()
                self.size -= 1
                if run.priority:
                    self.others -= 1
                t = run.ticket
                t.queued = 0
                if t.closed:
                    if self.dead:
                        self.dead -= 1
                    continue
                return run
        return None

    def lowest(self) -> int | None:
        """The priority of the lowest class holding live runs, nested ones
        aside (the class `pop_last` takes from), or None. Entries of runs that
        ended, found at the back of a class on the way, are dropped: a class
        of only those holds nobody to shed."""
        for key, queue in zip(reversed(self._keys), reversed(self._queues), strict=True):
            while queue and queue[-1].ticket.closed:
                run = queue.pop()
                run.ticket.queued = 0
                self.size -= 1
                if run.priority:
                    self.others -= 1
                if self.dead:
                    self.dead -= 1
            if queue:
                return -key
        return None

    def live_below(self, priority: int, enough: int) -> int:
        """How many live runs of a priority below `priority` it holds, nested
        ones aside, counted up to `enough` (the count stops there)."""
        found = 0
        for key, queue in zip(reversed(self._keys), reversed(self._queues), strict=True):
            if -key >= priority:
                break
            for run in reversed(queue):
                if not run.ticket.closed:
                    found += 1
                    if found >= enough:
                        return found
        return found

    def place(self, run: Run, *, front: bool, later: int = 0) -> int:
        """Where `run` stands in the queue (1: next to go), for a run queued at
        the `front` or the end of its class with `later` runs of its class
        queued at the same end after it and still here. Entries of runs that
        ended count as places (`dead`: rare, and dropping them would cost a
        scan). Costs the priority levels in use, or the nested runs for a
        nested one."""
        if run.parent is not None:
            return self.nested.index(run) + 1 if run in self.nested else len(self.nested)
        ahead = len(self.nested)
        priority = run.priority
        level: deque[Run] | None = None
        for key, queue in zip(self._keys, self._queues, strict=True):
            if -key == priority:
                level = queue
                break
            ahead += len(queue)
        if level is None:
            return ahead
        return ahead + (later if front else len(level) - later - 1) + 1

    def recount(self) -> None:
        """Count again what it holds: `size`, `others` and `dead` from its
        queues (a signal's exception may land after a `popleft` returned,
        before its count went down: `_lost.py`). Not on any call's path."""
        size = others = dead = 0
        for run in self:
            size += 1
            if run.parent is not None or run.priority:
                others += 1
            if run.ticket.closed:
                dead += 1
        self.size, self.others, self.dead = size, others, dead

    def _push_nested(self, run: Run) -> None:
        # Ahead of every nested run of its priority or lower. Nested runs
        # queued at once are few (one chain per caller in flight), and with no
        # priorities in use this is index 0: an appendleft.
        nested = self.nested
        priority = run.priority
        i = 0
        for other in nested:
            if other.priority <= priority:
                break
            i += 1
        nested.insert(i, run)

    def _level(self, priority: int) -> deque[Run]:
        """Make the level of `priority` (a priority not seen lately)."""
        if len(self._queues) >= MAX_LEVELS:
            self._prune()
        queue: deque[Run] = deque()
        i = bisect_left(self._keys, -priority)
        self._keys.insert(i, -priority)
        self._queues.insert(i, queue)
        self._levels[priority] = queue
        return queue

    def _prune(self) -> None:
        """Drop the empty levels, so they stay few whatever priorities come and go."""
        kept = [(k, q) for k, q in zip(self._keys, self._queues, strict=True) if q or k == 0]
        self._keys = [k for k, _ in kept]
        self._queues = [q for _, q in kept]
        self._levels = {-k: q for k, q in kept}
