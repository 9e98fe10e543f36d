"""The thread budget: how many threads of this process sync tools may hold.

A thread stuck in a sync tool cannot be stopped, so stuck threads are a budget
(`Executor(max_abandoned_workers=N, max_abandoned_per_tool=M)`), and so are the
running ones, since any of them may get stuck:

- an attempt (or what follows its timeout) starts on a thread only while stuck
  plus running threads stay under N, and those of its tool under M;
- when stuck threads alone fill N, or a tool's fill M, calls that need a thread
  (of that tool) are refused with `TOOL_UNAVAILABLE`: nothing but a stuck
  thread returning could make room, and waiting for it would be a hang;
- otherwise calls wait, in order (by priority, higher first, then first come
  first served: `_queue.py`), for a thread to come free.

So at most N threads are ever stuck, at most M of them in one tool, and one
stuck tool leaves room for the others. Decisions read the backends' counts
(`busy`, `abandoned`) and keep no state of their own but the waiting queue.
"""

from __future__ import annotations

import logging
from typing import Literal

from ..backends import Backend
from ..pipeline import Run
from ._queue import RunQueue
from ._ticket import PARKED

__all__ = ["ThreadBudget"]

log = logging.getLogger("toolbus.actors")

Room = Literal["start", "wait"] | str  # or why the run is refused


class ThreadBudget:
    """The budget over every backend whose jobs hold threads of this process."""

    __slots__ = ("_stuck_seen", "backends", "least", "limit", "per_tool", "waiting")

    def __init__(self, limit: int, per_tool: int) -> None:
        self.limit = limit
        self.per_tool = per_tool
        self.least = min(limit, per_tool)
        self.backends: list[Backend] = []
        self.waiting = RunQueue()  # runs waiting for a thread, in order
        # The stuck threads counted when no waiting run was last found to be
        # refused (-1: not since one was). Refusals depend on stuck counts alone.
        self._stuck_seen = -1

    def totals(self) -> tuple[int, int]:
        """(threads running jobs, threads stuck in abandoned jobs), over all backends."""
        busy = stuck = 0
        for b in self.backends:
            try:
                busy += b.busy()
                stuck += b.abandoned()
            except Exception as e:  # a custom backend's bug must not lose calls
                log.error("backend %r failed to count its threads: %s", b.name, e)
        return busy, stuck

    def _counts(self, run: Run) -> tuple[int, int, int, int]:
        """`totals()`, then (busy, stuck) of the run's tool."""
        busy, stuck = self.totals()
        try:
            tool_busy, tool_stuck = run.backend.busy(run.tool), run.backend.abandoned(run.tool)
        except Exception as e:  # a custom backend's bug must not lose calls
            log.error("backend %r failed to count its threads: %s", run.backend.name, e)
            tool_busy = tool_stuck = 0
        return busy, stuck, tool_busy, tool_stuck

    def room(self, run: Run) -> Room:
        """May `run` take a thread now ("start"), later ("wait"), or never (why)?"""
        busy, stuck, tool_busy, tool_stuck = self._counts(run)
        if tool_stuck >= self.per_tool:
            return (
                f"Tool '{run.call.name}' is unavailable: {tool_stuck} of its calls are stuck "
                f"after timing out (limit {self.per_tool} per tool)"
            )
        if stuck >= self.limit:
            return (
                f"Tool '{run.call.name}' is unavailable: {stuck} worker threads are "
                f"stuck in calls that timed out (limit {self.limit})"
            )
        if busy + stuck >= self.limit or tool_busy + tool_stuck >= self.per_tool:
            return "wait"
        return "start"

    def park(self, run: Run) -> None:
        run.ticket.queued = PARKED
        self.waiting.push(run, front=run.ticket.ahead)  # a retry keeps its turn

    def next_ready(self) -> tuple[Run, Room] | None:
        """The first waiting run that may start now, or must be refused, taken
        off the queue with its verdict; None if every one must go on waiting."""
        busy, stuck = self.totals()
        waiting = self.waiting
        if busy + stuck >= self.limit and stuck == self._stuck_seen and not waiting.dead:
            # Nobody may start while every thread of the budget is held, and
            # nobody is refused: no tool has more stuck threads than when no
            # waiting run was last found refused (and a run parked since was
            # looked at then). Nor has any ended, to be taken out. Without this,
            # a queue of n runs cost a pass over all n each time a thread came free.
            return None
        ended: list[Run] = []
        found: tuple[Run, Room] | None = None
        waits: set[tuple[int, int]] = set()  # (backend, tool) found to wait in this look
        for run in waiting:  # (in order, not copied: taken out after the look)
            if run.ticket.closed:
                ended.append(run)
                continue
            key = (id(run.backend), id(run.tool))
            if key in waits:
                continue  # (a tool's runs all wait when its first does)
            room = self.room(run)
            if room != "wait":
                found = (run, room)
                break
            waits.add(key)
        waiting.dead -= len(ended)  # (each counted when it ended: `Completion`)
        for run in ended if found is None else [*ended, found[0]]:
            waiting.remove(run)
            run.ticket.queued = 0
        if found is not None:
            if found[1] != "start":
                self._stuck_seen = -1  # refused: others may be, at these counts
            return found
        self._stuck_seen = stuck
        return None
