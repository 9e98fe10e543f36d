"""Order of execution inside one batch: effects in the order the model wrote them.

Without resource keys (`BarrierSchedule`): a mutating call starts only after
every earlier call of the batch has finished, and no later call starts before it
has finished. Consecutive read-only calls form a *group* that may run in
parallel. This keeps the order the model wrote wherever order can matter, unlike
"all reads first, then all writes", which lets a read see data from before a
write that the model placed ahead of it.

With resource keys (`DependencySchedule`, a tool's `resource_keys`): a call
touches the resources its key arguments name, and waits only for the earlier
calls it conflicts with: those touching a resource it touches, where one of the
two is mutating. A call without keys may touch anything: a read-only one waits
for every earlier mutating call, a mutating one is a full barrier, as is a
keyed call whose key is missing or unparseable. For each resource, the order
of effects is the sequential (submitted) order.

Pure state machines, no threads: the supervisor feeds them "finished" facts and
starts what they say is eligible, as capacity allows.

One piece: the two schedules answer the same questions (what may start, what
finished, who waits for whom) over the same plan of groups, and sit side by
side so they stay in step.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

import orjson

from . import _json

__all__ = [
    "FULL_BARRIER",
    "BarrierSchedule",
    "DependencySchedule",
    "Group",
    "Resources",
    "Schedule",
    "call_resources",
    "make_schedule",
    "plan_dependencies",
    "plan_groups",
]

FULL_BARRIER: Final[Literal["full-barrier"]] = "full-barrier"
# What one call touches: None (its tool declares no keys: anything),
# FULL_BARRIER (its keys could not be read: everything, as a barrier), or the
# resources its key arguments name.
Resources: TypeAlias = tuple[Hashable, ...] | Literal["full-barrier"] | None


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


def _group_index(groups: list[Group], n: int) -> list[int]:
    """For each call, the index of its group."""
    group_of = [0] * n
    for g in groups:
        for i in range(g.start, g.stop):
            group_of[i] = g.index
    return group_of


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
        self._group_of = _group_index(self._groups, len(read_only))
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

    def finished(self, index: int) -> bool:
        """True once `finish(index)` was called."""
        return self._done[index]

    def finish(self, index: int) -> list[int]:
        """Record that call `index` finished; return calls that became eligible."""
        if self._done[index]:
            return []
        self._done[index] = True
        group = self._group_of[index]
        self._remaining[group] -= 1
        if group != self._current or self._remaining[group] > 0:
            return []  # (what `_advance` would say, without its call)
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
        """The later calls that wait, directly or through others, for call `index`:
        every call after its group."""
        return list(range(self.group_of(index).stop, len(self._done)))


def call_resources(keys: Sequence[str], arguments: Mapping[str, Any] | str) -> Resources:
    """The resources a call touches: the canonical JSON of each key argument's value.

    `arguments` are the model's, as submitted (a mapping or raw JSON text).
    Values are compared literally (`1` and `"1"` differ), whatever the
    parameter's name, so one tool's `path` and another's `file` meet when they
    name the same file. Without `keys`: None. Keys that cannot be read (text
    that is not a JSON object, a key absent, a value that is not JSON):
    `FULL_BARRIER`, since what the call touches is unknown.
    """
    if not keys:
        return None
    args: Any = arguments
    if isinstance(args, str):
        try:
            args = _json.loads(args) if args.strip() else {}
        except (ValueError, TypeError, RecursionError):
            return FULL_BARRIER
    if not isinstance(args, Mapping):
        return FULL_BARRIER
    touched: dict[bytes, None] = {}
    for key in keys:
        if key not in args:
            return FULL_BARRIER
        try:
            touched[_json.dumps(args[key], option=orjson.OPT_SORT_KEYS)] = None
        except (TypeError, RecursionError):  # orjson's JSONEncodeError is a TypeError
            return FULL_BARRIER
    return tuple(touched)


def plan_dependencies(read_only: Sequence[bool], resources: Sequence[Resources]) -> list[list[int]]:
    """For each call, the earlier nodes it waits for; then the *joins*.

    Call i conflicts with an earlier call j when they touch a common resource
    and one of them is mutating (a call touching "anything" touches every
    resource). The edges returned are fewer than the conflicts, but every
    conflict is a path, and every path is made of conflicts: waiting on them
    orders exactly what must be ordered. Nodes from `len(read_only)` on are
    joins: no call, only "all of these finished", so that many calls waiting on
    many others cost one edge each instead of one per pair. O(n * k) for k
    resources per call.
    """
    n = len(read_only)
    if len(resources) != n:
        raise ValueError("read_only and resources must have one entry per call")
    deps: list[list[int]] = []
    joins: list[list[int]] = []
    barrier: int | None = None  # the last full barrier: every later call waits on it
    since: list[int] = []  # every call after it: what the next one waits for
    last_write: dict[Hashable, int] = {}
    readers: dict[Hashable, list[int]] = {}  # keyed reads since that resource's last write
    any_reads: list[int] = []  # reads of anything (no keys), not yet in a join
    any_reads_join: int | None = None
    writes: list[int] = []  # keyed writes, not yet in a join
    writes_join: int | None = None

    def join(previous: int | None, members: list[int]) -> int:
        joins.append(members if previous is None else [previous, *members])
        return n + len(joins) - 1

    for i, res in enumerate(resources):
        if res == FULL_BARRIER or (res is None and not read_only[i]):
            deps.append(since if since else [barrier] if barrier is not None else [])
            barrier, since = i, []
            last_write, readers, any_reads, writes = {}, {}, [], []
            any_reads_join = writes_join = None
            continue
        mine: dict[int, None] = {}
        if res is None:  # read-only without keys: it may read what any write wrote
            if writes:
                writes_join, writes = join(writes_join, writes), []
            if writes_join is not None:
                mine[writes_join] = None
            any_reads.append(i)
        elif not res:
            raise ValueError(f"call {i}: resources must name at least one resource")
        elif read_only[i]:
            for r in dict.fromkeys(res):
                w = last_write.get(r)
                if w is not None:
                    mine[w] = None
                readers.setdefault(r, []).append(i)
        else:
            for r in dict.fromkeys(res):
                w = last_write.get(r)
                if w is not None:
                    mine[w] = None
                mine.update(dict.fromkeys(readers.pop(r, ())))
                last_write[r] = i
            if any_reads:
                any_reads_join, any_reads = join(any_reads_join, any_reads), []
            if any_reads_join is not None:
                mine[any_reads_join] = None
            writes.append(i)
        # Anything else it waits on waits on the barrier already.
        deps.append(list(mine) if mine else [barrier] if barrier is not None else [])
        since.append(i)
    return deps + joins


_WAITING, _OPEN, _CLOSED = 0, 1, 2


class DependencySchedule:
    """Which calls of a batch may start: each waits for the earlier calls it
    conflicts with (see `plan_dependencies`), not for every earlier write.

    The same interface as `BarrierSchedule`. Groups are the same spans; one
    *opens* when one of its calls first becomes eligible and *closes* when all
    of them have finished, so several may be open at once. Given no resources
    (every entry None) it behaves exactly as `BarrierSchedule`.

    A call that finished before it was eligible (cancelled, rejected up front)
    releases the calls waiting on it only once its own wait is over: waiting on
    it stands for waiting on what it waited for.
    """

    __slots__ = (
        "_dependents",
        "_done",
        "_group_left",
        "_group_of",
        "_group_state",
        "_groups",
        "_left",
        "_n",
        "_opened",
        "_unreleased",
        "transitions",
    )

    def __init__(self, read_only: Sequence[bool], resources: Sequence[Resources]) -> None:
        deps = plan_dependencies(read_only, resources)
        n = self._n = len(read_only)
        self._groups = plan_groups(read_only)
        self._group_of = _group_index(self._groups, n)
        self._group_left = [g.size for g in self._groups]
        self._group_state = [_WAITING] * len(self._groups)
        self._dependents: list[list[int]] = [[] for _ in deps]
        for i, waits_on in enumerate(deps):
            for j in waits_on:
                self._dependents[j].append(i)
        self._left = [len(waits_on) for waits_on in deps]
        self._done = [False] * n
        self._unreleased = n
        self._opened = False
        # ("open" | "close", group) in the order they happened; the owner drains it.
        self.transitions: list[tuple[str, Group]] = []

    @property
    def groups(self) -> list[Group]:
        return self._groups

    @property
    def current(self) -> Group | None:
        """The first open group, or None."""
        return next((g for g in self._groups if self._group_state[g.index] == _OPEN), None)

    @property
    def complete(self) -> bool:
        return self._opened and self._unreleased == 0

    def group_of(self, index: int) -> Group:
        return self._groups[self._group_of[index]]

    def is_open(self, index: int) -> bool:
        """True if call `index` belongs to an open group."""
        return self._group_state[self._group_of[index]] == _OPEN

    def open(self) -> list[int]:
        """Return the calls that may start now (those that wait for nothing)."""
        if self._opened:
            raise RuntimeError("schedule already opened")
        self._opened = True
        ready: list[int] = []
        finished: list[int] = []
        for i in range(self._n):
            if self._left[i] == 0:
                (finished if self._done[i] else ready).append(i)
        return self._release(finished, ready)

    def finished(self, index: int) -> bool:
        """True once `finish(index)` was called."""
        return self._done[index]

    def finish(self, index: int) -> list[int]:
        """Record that call `index` finished; return calls that became eligible."""
        if self._done[index]:
            return []
        self._done[index] = True
        g = self._group_of[index]
        self._group_left[g] -= 1
        if self._group_left[g] == 0 and self._group_state[g] == _OPEN:
            self._group_state[g] = _CLOSED
            self.transitions.append(("close", self._groups[g]))
        if not self._opened or self._left[index] > 0:
            return []  # its wait is not over: released when it is
        return self._release([index], [])

    def _release(self, stack: list[int], ready: list[int]) -> list[int]:
        n, left, done, dependents = self._n, self._left, self._done, self._dependents
        while stack:
            x = stack.pop()
            if x < n:
                self._unreleased -= 1
            for y in dependents[x]:
                left[y] -= 1
                if left[y] == 0:
                    if y >= n or done[y]:
                        stack.append(y)  # a join, or a call that ended before it was due
                    else:
                        ready.append(y)
        ready.sort()
        for i in ready:
            g = self._group_of[i]
            if self._group_state[g] == _WAITING:
                self._group_state[g] = _OPEN
                self.transitions.append(("open", self._groups[g]))
        return ready

    def waiters_of(self, index: int) -> list[int]:
        """The later calls that wait, directly or through others, for call `index`
        (whatever their state): those that never start if it never finishes."""
        n, seen = self._n, {index}
        stack = [index]
        while stack:
            for y in self._dependents[stack.pop()]:
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        seen.discard(index)
        return sorted(i for i in seen if i < n)


Schedule: TypeAlias = BarrierSchedule | DependencySchedule


def make_schedule(
    read_only: Sequence[bool], resources: Sequence[Resources] | None = None
) -> Schedule:
    """The schedule for a batch: `BarrierSchedule` unless some call names resources."""
    if resources is None or all(r is None for r in resources):
        return BarrierSchedule(read_only)
    return DependencySchedule(read_only, resources)
