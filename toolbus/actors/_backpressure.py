"""Backpressure: bounded queues, shedding, `tool:queued`, and producers that wait for room.

Where it is decided: at the end of every pump (`Scheduler._pump`), once the
runs that may start have started, the ready queue holds only runs waiting for
a slot of `max_parallel`, and each capacity group's queue only runs waiting
for that group. Then:

- a queue beyond its bound (`Executor(max_queued=N)` for the ready queue, a
  named group's `max_queued`) sheds, one run at a time, the run that would
  start last: the newest of the lowest priority class, never a nested one
  (`Capacity.next_to_shed`). It ends `rejected` with `OVERLOADED`, holding
  nothing (a queued run has no slot; one let out of a group hands that room
  on). After each, the pump runs again: a shed batch call may let the next
  of its batch start;
- the runs that began to wait during the pump are announced (`tool:queued`,
  `Capacity.waits`), when anyone listens;
- producers blocked for room (`on_full="wait"`, `_executor/_backpressure.py`)
  are woken when a bounded queue got shorter or a slot came free.

A waiting producer submits with `SubmitIfRoom` (handled under the lock, as
`stats()` is): its calls are taken only if `_has_room` says they fit,
counting the free slots they would take at once (a queue holding a call of a
lower priority than theirs counts as room: they would shed it). Checked and
queued in one step, so producers woken together cannot all take the same
room: the first takes it, the others wait again.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..bus import _signals as sig
from ..bus._events import CallQueued
from ..models import ErrorCode
from ..pipeline import Run
from ._capacity import Capacity, Group
from ._completion import Completion
from ._messages import Close, Submit
from ._queue import RunQueue

if TYPE_CHECKING:
    from ._budget import ThreadBudget

__all__ = ["Backpressure", "overloaded"]


def overloaded(run: Run) -> str:
    """What the model reads when its call is refused for a full queue."""
    return f"Tool '{run.call.name}' is overloaded: too many calls are waiting; try again later"


def _live(queue: RunQueue) -> int:
    return queue.size - queue.dead


def _fits(
    queue: RunQueue, bound: int, free: int, calls: int, priority: int, ahead: int = 0
) -> bool:
    """Would `calls` new runs of `priority` fit in `queue` (bounded by `bound`),
    `free` of them starting at once, behind `ahead` runs bound for it too? At
    most `bound` of them may have to wait (more could never fit: then the
    queue must be empty). A queue holding a run of a lower priority is room
    too: the newcomers would shed it."""
    need = min(calls - free, bound)
    short = need - (bound - _live(queue) - ahead)
    if need <= 0 or short <= 0:
        return True
    # As many live runs of a lower priority as it is short of room: each
    # newcomer sheds one (a single one is room for one newcomer, not a batch).
    return queue.live_below(priority, short) >= short


class Backpressure(Completion):
    """The scheduler's bounded queues (a part of `Scheduler`)."""

    slots: Capacity
    groups: dict[str, Group]
    budget: ThreadBudget
    closed: bool
    # Producers blocked for room (`on_full="wait"`) wait on `room`, counted in
    # `blocked`; `room_gen` moves on each time they are woken. `bounded`: some
    # queue has a bound (else nobody ever waits).
    bounded: bool
    room: threading.Condition
    room_lock: threading.Lock  # (`room`'s, entered bare: see `toolbus/_sync.py`)
    blocked: int
    room_gen: int
    # The bounded queues' lengths and slots in use when last looked at for
    # the blocked producers (None: look again and wake them).
    room_seen: tuple[int, ...] | None

    if TYPE_CHECKING:

        def _on_submit(self, msg: Submit) -> None: ...  # (Admission's)

    def _shed_one(self) -> bool:
        """Refuse the next run a queue sheds (see the module's doc); False if none."""
        run = self.slots.next_to_shed()
        if run is None:
            return False
        self._finish_here(run, "rejected", ErrorCode.OVERLOADED, overloaded(run))
        return True

    def _submit_if_room(self, submit: Submit) -> bool:
        """`SubmitIfRoom`: take `submit` if its runs fit (`_has_room`); whether it did."""
        if not self._has_room(submit.runs):
            return False
        self._on_submit(submit)
        return True

    def _close_and_wake(self, msg: Close) -> bool:
        """`Close`, then wake the producers waiting for room: their calls end now."""
        closed = self._on_close(msg)
        if self.blocked:
            self._wake_producers()
        return closed

    def _park_for_thread(self, run: Run) -> None:
        """`run` waits for a thread of the budget (noted for `tool:queued`)."""
        self.budget.park(run)
        if self.slots.listen:
            place = self.budget.waiting.place(run, front=run.ticket.ahead)
            self.slots.parked.append((run, None, place))

    def _announce_waits(self) -> None:
        """`tool:queued` for each run that began to wait since the last pump."""
        waits = self.slots.waits(self.budget.waiting)
        em = self.emitter
        if not waits or not em.listening[sig.QUEUED]:
            return
        for run, group, position, length in waits:
            em.emit(
                sig.QUEUED,
                CallQueued(
                    run.call.id,
                    run.call.name,
                    run.batch_id,
                    run.attempt + 1,
                    group,
                    position,
                    length,
                    parent_call_id=run.parent_call_id,
                    _run=run.token,
                ),
            )

    def _bounded(self) -> tuple[int, ...]:
        """What a blocked producer's room depends on: each bounded queue's live
        length and the slots in use it may start in."""
        slots = self.slots
        seen: list[int] = []
        if slots.max_queued is not None:
            seen += (_live(slots.ready), slots.in_flight - slots.shared)
        # (Not the calls of a group still in the ready queue, which `_has_room`
        # counts: looking for them at every pump would cost a scan of the
        # ready queue each time. One that ends there wakes the producers
        # itself, `Completion._closed_run`; one that starts moves the slots.)
        for g in self.groups.values():
            if g.max_queued is not None:
                seen += (_live(g.waiting), g.in_flight)
        return tuple(seen)

    def _room_changed(self) -> None:
        """Wake the blocked producers if a bounded queue got shorter or a slot
        came free since the last look (they look again themselves)."""
        now = self._bounded()
        before, self.room_seen = self.room_seen, now
        if before is not None and not any(a < b for a, b in zip(now, before, strict=False)):
            return
        self._wake_producers()

    def _wake_producers(self) -> None:
        self.room_gen += 1
        with self.room_lock:  # (the bare lock: see `_sync.py`)
            self.room.notify_all()

    def _has_room(self, runs: Sequence[Run]) -> bool:
        """Would `runs` (one call, or a batch's) fit in the bounded queues they
        may join? Also True once the executor is closed (they end there)."""
        if self.closed:
            return True
        queueing = [r for r in runs if r.tool is not None and r.refusal is None]
        if not queueing:
            return True
        priority = queueing[0].priority
        slots = self.slots
        if slots.max_queued is not None:
            free = max(0, slots.max_parallel - (slots.in_flight - slots.shared))
            if not _fits(slots.ready, slots.max_queued, free, len(queueing), priority):
                return False
        counts: dict[str, int] = {}
        for run in queueing:
            tool = run.tool
            assert tool is not None
            for name in tool.groups:
                g = self.groups.get(name)
                if g is not None and g.max_queued is not None:
                    counts[name] = counts.get(name, 0) + 1
        if not counts:
            return True
        # Calls of those groups still in the ready queue (waiting for a slot
        # of max_parallel) reach their group before the newcomers: they take
        # its free slots first, and queue there first.
        ahead = self._ready_in_groups(counts)
        for name, calls in counts.items():
            g = self.groups[name]
            assert g.max_queued is not None
            free = calls if g.limit is None else max(0, g.limit - g.in_flight)
            before = ahead.get(name, 0)
            if g.limit is not None:
                free, before = max(0, free - before), max(0, before - free)
            if not _fits(g.waiting, g.max_queued, free, calls, priority, before):
                return False
        return True

    def _ready_in_groups(self, names: Mapping[str, int]) -> dict[str, int]:
        """How many live runs of the ready queue need each named group."""
        found: dict[str, int] = {}
        for run in self.slots.ready:
            if run.ticket.closed or run.tool is None:
                continue
            for name in run.tool.groups:
                if name in names:
                    found[name] = found.get(name, 0) + 1
        return found
