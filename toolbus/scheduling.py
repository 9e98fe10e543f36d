"""Order of execution inside one batch: read-only calls in parallel, mutating calls as barriers.

A mutating call starts only after every earlier call of the batch has finished,
and no later call starts before it has finished. Consecutive read-only calls
form a *group* that may run in parallel. This keeps the order the model wrote
wherever order can matter, unlike "all reads first, then all writes", which lets
a read see data from before a write that the model placed ahead of it.

Pure state machine, no threads: the supervisor feeds it "finished" facts and
starts what it says is eligible, as capacity allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BarrierSchedule", "Group", "plan_groups"]


@dataclass(frozen=True, slots=True)
class Group:
    """A run of calls that may run together: read-only calls, or one mutating call."""

    index: int
    start: int
    stop: int
    read_only: bool

    @property
    def size(self) -> int:
        return self.stop - self.start


def plan_groups(read_only: Sequence[bool]) -> list[Group]:
    """Split a batch into consecutive groups (each read-only run, each mutating call)."""
    groups: list[Group] = []
    i, n = 0, len(read_only)
    while i < n:
        if read_only[i]:
            j = i
            while j < n and read_only[j]:
                j += 1
            groups.append(Group(len(groups), i, j, True))
            i = j
        else:
            groups.append(Group(len(groups), i, i + 1, False))
            i += 1
    return groups


class BarrierSchedule:
    """Which calls of a batch may start, given which have finished.

    `open()` opens the first group and returns its calls; `finish(i)` records that
    call `i` finished and returns the calls of the next group when `i` was the
    last of its group. Calls can also be finished before they start (cancelled,
    rejected up front); the schedule then simply moves past them.
    """

    __slots__ = ("_current", "_done", "_group_of", "_groups", "_remaining", "transitions")

    def __init__(self, read_only: Sequence[bool]) -> None:
        self._groups = plan_groups(read_only)
        self._group_of: list[int] = [0] * len(read_only)
        for g in self._groups:
            for i in range(g.start, g.stop):
                self._group_of[i] = g.index
        self._remaining = [g.size for g in self._groups]
        self._done = [False] * len(read_only)
        self._current = -1
        # ("open" | "close", group) in the order they happened; the owner drains it.
        self.transitions: list[tuple[str, Group]] = []

    @property
    def groups(self) -> list[Group]:
        return self._groups

    @property
    def current(self) -> Group | None:
        """The open group, or None before `open()` and after the last group."""
        if 0 <= self._current < len(self._groups):
            return self._groups[self._current]
        return None

    @property
    def complete(self) -> bool:
        return self._current >= len(self._groups)

    def group_of(self, index: int) -> Group:
        return self._groups[self._group_of[index]]

    def open(self) -> list[int]:
        """Open the first group; return the calls that may start now."""
        if self._current != -1:
            raise RuntimeError("schedule already opened")
        return self._advance()

    def finish(self, index: int) -> list[int]:
        """Record that call `index` finished; return calls that became eligible."""
        if self._done[index]:
            return []
        self._done[index] = True
        self._remaining[self._group_of[index]] -= 1
        if self._group_of[index] != self._current:
            return []
        return self._advance()

    def _advance(self) -> list[int]:
        if self._current >= 0:
            if self._remaining[self._current] > 0:
                return []
            self.transitions.append(("close", self._groups[self._current]))
        self._current += 1
        while self._current < len(self._groups):
            g = self._groups[self._current]
            if self._remaining[g.index] > 0:
                self.transitions.append(("open", g))
                return [i for i in range(g.start, g.stop) if not self._done[i]]
            self._current += 1
        return []

    def is_open(self, index: int) -> bool:
        """True if call `index` belongs to the open group."""
        return self._group_of[index] == self._current

    def waiters_of(self, index: int) -> list[int]:
        """The later calls that wait for call `index` to finish: every call of
        the groups after its own."""
        after = self._groups[self._group_of[index]].stop
        return list(range(after, len(self._group_of)))
