"""Who may start now: named capacity groups, the ready queue and the waiting queues.

Every attempt needs a slot of the executor's `max_parallel` and of each of its
*groups*: its batch (the batch's limit), its tool (`max_concurrency`), and any
named group it belongs to (several tools sharing one limit, such as one MCP
server's connection or a database pool: `Executor(groups={"db": 4})` with
`@tool(groups=["db"])`). A run that is ready but blocked by a group waits in
that group's queue; when a slot there frees, the first live run of the queue
goes back to the front of the ready queue. Room is never left unused: a run
that is let out of one queue and then blocked by another group (or closed
before it starts) hands its room on.

A call never overtakes queued calls of its priority or higher: a new call
joins the end of its priority class in the ready queue and starts only when
everything ahead of it could not. Every queue orders runs the same way
(`_queue.py`: higher priority first, first come first served within one).
Nested calls (made by a running tool or hook of the same executor) are the
exception, since their callers hold slots while they wait for them: they run on
their caller's share of `max_parallel`, go ahead of other calls in every queue
whatever the priorities, and a nested call that would wait for a group whose
every slot is held by calls waiting, directly or through calls of their own, on
its callers is refused at once (`refused`): that wait would never end. A
nested call that *shares* its caller's slot (a sequence's step:
`Run.shares_slot`) takes no room of `max_parallel` at all: it may start
whenever its caller holds a slot, and does not count against the limit
(`shared`), only against its own groups.

A run put at the front (a retry whose backoff is over, a run let out of a
waiting queue) goes ahead of its priority class, not of higher ones; should it
have to wait again before it starts (a higher-priority run took the room it
was let out for), it waits at the front of its class there too, so it keeps
its turn (`run.ticket.ahead`).

Backpressure (`Executor(max_queued=N)`, a named group's `max_queued`) is
decided here too, once a pump is over and what still waits is known
(`next_to_shed`): while the ready queue (the runs waiting for a slot of
`max_parallel`) or a group's waiting queue holds more live runs than its
bound, the run that would start last goes (the newest of the lowest priority
class; never a nested one: if only nested runs are over the bound, they
wait). Only runs waiting for capacity count: a batch's calls held back by
its order are in no queue, nor is a run waiting out a policy's delay. And
`waits` says which runs began to wait since the last pump, where, and where
they stand (for `tool:queued`), without looking at the runs that waited
before: queues of 10k runs cost nothing per pump.

Pure bookkeeping, owned by whoever holds the scheduler's lock; no threads here.
It is one piece past 400 lines: every decision to start, park, let out or
shed a run reads the same counts and queues, and split apart, the reasoning
that room is never left unused would be too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..pipeline import Run
from ._queue import RunQueue
from ._ticket import PARKED, READY

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["MAX_PARALLEL", "THREADS", "Capacity", "Group", "ToolGroup", "Wait"]


# The ready queue's name in `tool:queued` and `stats().queues`: its runs wait
# for a slot of the executor's max_parallel.
MAX_PARALLEL = "max_parallel"
# ... and the thread budget's (`_budget.py`): its runs wait for a thread.
THREADS = "threads"

# One wait to announce: the run, the queue's name, the run's place (1: next)
# and how many runs wait there.
Wait = tuple[Run, str, int, int]


class Group:
    """A named limit on attempts in flight (None: unlimited), and who waits for
    it: at most `max_queued` runs (None: no bound)."""

    __slots__ = ("in_flight", "limit", "max_queued", "name", "waiting")

    def __init__(self, name: str, limit: int | None, max_queued: int | None = None) -> None:
        self.name = name
        self.limit = limit
        self.max_queued = max_queued
        self.in_flight = 0
        self.waiting = RunQueue()

    @property
    def has_room(self) -> bool:
        return self.limit is None or self.in_flight < self.limit

    def __repr__(self) -> str:
        return f"<group {self.name!r} {self.in_flight}/{self.limit}>"


class Capacity:
    """The scheduler's admission control over `max_parallel` and each run's groups
    (`run.ticket.groups`)."""

    __slots__ = (
        "deadlock", "fresh", "in_flight", "listen", "max_parallel", "max_queued", "overfull",
        "parked", "peak", "ready", "refused", "shared",
    )  # fmt: skip

    def __init__(
        self,
        max_parallel: int,
        deadlock: Callable[[Run, Group], str | None] | None = None,
        *,
        max_queued: int | None = None,
    ) -> None:
        self.max_parallel = max_parallel
        # At most this many live runs in `ready` once a pump is over (None: no bound).
        self.max_queued = max_queued
        self.in_flight = 0  # every attempt holding a slot, shared ones too (stats)
        self.shared = 0  # ... of which run on their caller's slot: not counted
        self.peak = 0
        self.ready = RunQueue()
        # Asked before a nested run waits for a group: why that wait would
        # never end, or None. Runs refused so are left in `refused`.
        self.deadlock = deadlock
        self.refused: list[tuple[Run, str]] = []
        # Groups a run was parked on beyond their `max_queued`: `next_to_shed` looks.
        self.overfull: list[Group] = []
        # Truthy while someone listens to `tool:queued` (the scheduler sets it
        # to the emitter's live entry for that signal): only then are the runs
        # queued since the last pump (`fresh`) and the runs parked with their
        # place (`parked`: the group, None for the thread budget) noted.
        self.listen: Any = ()
        self.fresh: list[Run] = []
        self.parked: list[tuple[Run, Group | None, int]] = []

    def enqueue(self, run: Run, *, front: bool = False) -> None:
        """Make a run eligible to start (retries and let-out runs go to the front
        of their priority class; nested runs ahead of every class)."""
        t = run.ticket
        if t.queued or t.closed:
            return
        t.queued = READY
        t.ahead = front
        if self.listen:
            self.fresh.append(run)
        ready = self.ready
        if run.parent is not None or run.priority:
            ready.push(run, front=front)
            return
        # RunQueue.push inlined for the common run (priority 0, not nested): the
        # ready queue is on every call's path, and a method call would double it.
        ready.size += 1
        if front:
            ready.default.appendleft(run)
        else:
            ready.default.append(run)

    def next_startable(self) -> Run | None:
        """The next run that may start now, parking those that must wait; None if none."""
        ready = self.ready
        while ready.size:
            if self.in_flight - self.shared < self.max_parallel:
                if ready.others:
                    run = ready.pop()
                else:  # only runs of priority 0 queued: RunQueue.pop inlined
                    run = ready.default.popleft()
                    ready.size -= 1
                run.ticket.borrowed = False
            else:
                # Full: a nested call, wherever it is, may run on its caller's
                # share, one at a time per caller (so fan-out stays bounded).
                found = self._pop_nested()
                if found is None:
                    return None
                run = found
                run.ticket.borrowed = True
            t = run.ticket
            t.queued = 0
            if t.closed:
                if ready.dead:
                    ready.dead -= 1
                continue
            groups: tuple[Group, ...] = t.groups
            full = None
            for g in groups:  # the first without room (`has_room`, inlined)
                if g.limit is not None and g.in_flight >= g.limit:
                    full = g
                    break
            if full is None:
                return run
            t.borrowed = False
            if run.parent is not None and self.deadlock is not None:
                why = self.deadlock(run, full)
                if why is not None:
                    self.refused.append((run, why))
                    continue
            self._park(full, run)
            # It may have been let out of another group's queue: pass that room on.
            for g in groups:
                if g is not full and g.has_room:
                    self._unpark_one(g.waiting)
        return None

    def has_room_for(self, run: Run) -> bool:
        """Room for `run` now, on its own share: in `max_parallel` and each of
        its groups (what `next_startable` asks of a run it takes)."""
        if self.in_flight - self.shared >= self.max_parallel:
            return False
        for g in run.ticket.groups:  # noqa: SIM110 (a loop: no Python call per group)
            if g.limit is not None and g.in_flight >= g.limit:
                return False
        return True

    def _pop_nested(self) -> Run | None:
        """The first nested run whose caller has not lent its share yet."""
        for run in self.ready.nested:
            parent = run.parent
            if run.ticket.closed or (
                # A caller lends only a share it holds: not once it has ended,
                # nor while it waits out a backoff. One that shares it (a
                # sequence's step) needs no loan: its caller waits for it.
                parent is not None
                and parent.ticket.slot
                and (parent.ticket.lent == 0 or run.shares_slot)
            ):
                self.ready.remove(run)
                return run
        return None

    def take(self, run: Run) -> None:
        """`run` starts an attempt: it holds a slot of `max_parallel` and of each group."""
        t = run.ticket
        t.slot = True
        parent = run.parent
        if run.shares_slot and parent is not None and parent.ticket.slot:
            # On its caller's slot: no loan, and no room of max_parallel taken.
            t.borrowed = False
            t.shared = True
            self.shared += 1
        elif t.borrowed and parent is not None:
            parent.ticket.lent += 1
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        for g in t.groups:
            g.in_flight += 1

    def release(self, run: Run) -> None:
        """`run` gives its slots back (finished, or backing off before a retry)."""
        t = run.ticket
        if not t.slot:
            return
        t.slot = False
        if t.shared:
            t.shared = False
            self.shared -= 1
        elif t.borrowed and run.parent is not None:
            run.parent.ticket.lent -= 1
            t.borrowed = False
        self.in_flight -= 1
        for g in t.groups:
            g.in_flight -= 1
            if g.waiting.size:
                self._unpark_one(g.waiting)

    def closed(self, run: Run) -> None:
        """`run` ended while queued: it stays in its queue until it comes out
        there (counted in its `dead`). If it sat in the ready queue it may have
        been let out of a waiting queue for room it will now never use: hand
        that room on."""
        self.release(run)
        t = run.ticket
        if t.queued == PARKED:
            if t.waiting_on is not None:  # (the thread budget's: `Completion` counts)
                t.waiting_on.waiting.dead += 1
            return
        if t.queued != READY:
            return
        self.ready.dead += 1
        self._left(run)

    def _left(self, run: Run) -> None:
        """`run` left the ready queue for good: hand on the room of the groups
        it may have been let out of."""
        for g in run.ticket.groups:
            if g.has_room:
                self._unpark_one(g.waiting)

    def _unpark_one(self, queue: RunQueue) -> None:
        """Move the first live run of a waiting queue to the front of its class in
        the ready queue."""
        while queue.size:
            run = queue.pop()
            t = run.ticket
            t.queued = 0
            t.waiting_on = None
            if not t.closed:
                self.enqueue(run, front=True)
                return
            if queue.dead:
                queue.dead -= 1

    def _park(self, group: Group, run: Run) -> None:
        t = run.ticket
        t.queued = PARKED
        t.waiting_on = group
        # A nested run goes first (its callers hold slots while it waits); a run
        # that was at the front of its class keeps its turn.
        waiting = group.waiting
        waiting.push(run, front=t.ahead)
        if group.max_queued is not None and waiting.size - waiting.dead > group.max_queued:
            self.overfull.append(group)
        if self.listen:
            self.parked.append((run, group, waiting.place(run, front=t.ahead)))

    # -- backpressure ----------------------------------------------------------------

    def next_to_shed(self) -> Run | None:
        """The next run to refuse (OVERLOADED) because a queue holds more live
        runs than its bound, taken out of its queue (its room handed on); None
        when every queue is within its bound, or holds only nested runs beyond
        it. Ask once a pump is over: only then does the ready queue hold just
        the runs that must wait for a slot of `max_parallel`."""
        ready = self.ready
        if self.max_queued is not None and ready.size - ready.dead > self.max_queued:
            run = ready.pop_last()
            if run is not None:
                self._left(run)
                return run
        overfull = self.overfull
        while overfull:
            group = overfull[-1]
            waiting = group.waiting
            assert group.max_queued is not None
            if waiting.size - waiting.dead > group.max_queued:
                run = waiting.pop_last()
                if run is not None:
                    run.ticket.waiting_on = None
                    return run
            overfull.pop()
        return None

    def waits(self, threads: RunQueue | None = None) -> list[Wait]:
        """The waits that began since the last call, for `tool:queued`, and
        forget them: runs queued in `ready` that are still there (a pump is
        over: they wait for a slot of `max_parallel`), and runs parked on a
        group (or on the thread budget, whose queue is `threads`) still parked
        there. Each with its place (1: next), counted for a run of the ready
        queue from where the runs queued after it stand (no scan of the
        queue), and how many live runs wait there now."""
        out: list[Wait] = []
        if self.parked:
            latest = {id(run): (run, group, place) for run, group, place in self.parked}
            self.parked.clear()
            for run, group, place in latest.values():
                t = run.ticket
                if t.closed or t.queued != PARKED or t.waiting_on is not group:
                    continue
                if group is None:
                    if threads is None:
                        continue
                    name, length = THREADS, threads.size - threads.dead
                else:
                    name, length = group.name, group.waiting.size - group.waiting.dead
                out.append((run, name, min(place, length), length))
        if self.fresh:
            out.extend(self._ready_waits())
        return out

    def _ready_waits(self) -> list[Wait]:
        # Each run's latest queueing, in order (one let out of a group and
        # queued again within the pump counts where it went last).
        latest: dict[int, Run] = {}
        for run in self.fresh:
            latest.pop(id(run), None)
            latest[id(run)] = run
        self.fresh.clear()
        ready = self.ready
        length = ready.size - ready.dead
        if not length:
            return []
        # Newest first: a run's place is counted from the runs of its class
        # queued at the same end after it (still in the queue, ended or not).
        after: dict[tuple[int, bool], int] = {}
        found: list[Wait] = []
        for run in reversed(latest.values()):
            t = run.ticket
            if t.queued != READY:
                continue
            later = 0
            if run.parent is None:  # (a nested run's place is looked up)
                end = (run.priority, t.ahead)
                later = after.get(end, 0)
                after[end] = later + 1
            if not t.closed:
                place = ready.place(run, front=t.ahead, later=later)
                found.append((run, MAX_PARALLEL, min(place, length), length))
        found.reverse()
        return found


class ToolGroup(Group):
    """A tool's own group: its `max_concurrency`."""

    __slots__ = ("tool",)

    def __init__(self, tool: Tool) -> None:
        super().__init__(f"tool:{tool.name}", tool.max_concurrency)
        self.tool = tool
