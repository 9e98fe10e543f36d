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

Pure bookkeeping, owned by whoever holds the scheduler's lock; no threads here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..pipeline import Run
from ._queue import RunQueue
from ._ticket import PARKED, READY

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["Capacity", "Group", "ToolGroup"]


class Group:
    """A named limit on attempts in flight (None: unlimited), and who waits for it."""

    __slots__ = ("in_flight", "limit", "name", "waiting")

    def __init__(self, name: str, limit: int | None) -> None:
        self.name = name
        self.limit = limit
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

    __slots__ = ("deadlock", "in_flight", "max_parallel", "peak", "ready", "refused", "shared")

    def __init__(
        self,
        max_parallel: int,
        deadlock: Callable[[Run, Group], str | None] | None = None,
    ) -> None:
        self.max_parallel = max_parallel
        self.in_flight = 0  # every attempt holding a slot, shared ones too (stats)
        self.shared = 0  # ... of which run on their caller's slot: not counted
        self.peak = 0
        self.ready = RunQueue()
        # Asked before a nested run waits for a group: why that wait would
        # never end, or None. Runs refused so are left in `refused`.
        self.deadlock = deadlock
        self.refused: list[tuple[Run, str]] = []

    def enqueue(self, run: Run, *, front: bool = False) -> None:
        """Make a run eligible to start (retries and let-out runs go to the front
        of their priority class; nested runs ahead of every class)."""
        t = run.ticket
        if t.queued or t.closed:
            return
        t.queued = READY
        t.ahead = front
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
            _park(full, run)
            # It may have been let out of another group's queue: pass that room on.
            for g in groups:
                if g is not full and g.has_room:
                    self._unpark_one(g.waiting)
        return None

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
        """`run` ended; if it sat in the ready queue it may have been let out of a
        waiting queue for room it will now never use: hand that room on."""
        self.release(run)
        if run.ticket.queued != READY:
            return
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


def _park(group: Group, run: Run) -> None:
    t = run.ticket
    t.queued = PARKED
    t.waiting_on = group
    # A nested run goes first (its callers hold slots while it waits); a run
    # that was at the front of its class keeps its turn.
    group.waiting.push(run, front=t.ahead)


class ToolGroup(Group):
    """A tool's own group: its `max_concurrency`."""

    __slots__ = ("tool",)

    def __init__(self, tool: Tool) -> None:
        super().__init__(f"tool:{tool.name}", tool.max_concurrency)
        self.tool = tool
