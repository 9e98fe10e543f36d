"""The tasks an MCP server keeps: a call run as a task outlives the request
that made it, and its client comes back for its state and result.

Bookkeeping only, on an injected clock, so it is tested without a server or a
loop: `_server_tasks.py` runs the calls and answers the methods of each
protocol version from here.

- An id is 128 random bits: on 2026-07-28 over HTTP with no token, knowing
  it is all that tells its client apart.
- A task belongs to its owner (the token's subject, else the session; None:
  whoever knows its id). Another owner's task is unknown to a caller, as an
  unknown or expired one is: the answers do not tell them apart.
- A task is kept for its ttl from its creation (the client's, capped at
  `max_ttl_ms`; the cap without one), then dropped whatever its state: the
  server cancels its call if it still runs (`expired`, on a timer of the
  server's). At most `per_owner` are kept for one owner (nobody's are
  bounded in all only) and `max_tasks` in all: beyond either, the owner's
  (then anyone's) oldest that has ended goes, and with none ended a new one
  is refused.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = ["TERMINAL", "ServedTask", "TaskStatus", "TaskTable"]

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

_order = itertools.count(1)


@dataclass(eq=False)
class ServedTask:
    """One task: its state as its client reads it, and its call's outcome."""

    id: str
    owner: str | None
    tool: str
    created: float
    ttl_ms: int
    status: TaskStatus = "working"
    message: str | None = None
    updated: float = 0.0
    # The call's result as sent (a CallToolResult's wire form), once it has
    # one; and, where it failed on the server's side, the error said instead.
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    # The server's own: what runs the call, what is set at its end and at
    # each change, the version it speaks, the tool's questions by key.
    run: Any = None
    ended: Any = None
    changed: Any = None
    timer: Any = None
    peer: Any = None
    modern: bool = False
    questions: dict[str, Any] = field(default_factory=dict)
    asked: set[str] = field(default_factory=set)  # the questions sent (2025-11-25)
    call_id: str = ""  # its call's (the call's events carry it)
    order: int = field(default_factory=lambda: next(_order))

    @property
    def expires(self) -> float:
        return self.created + self.ttl_ms / 1000

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def fields(self) -> dict[str, Any]:
        """Its state as both versions name it but for the lifetimes: `taskId`,
        `status`, `statusMessage` (when there is one) and the two timestamps."""
        out: dict[str, Any] = {
            "taskId": self.id,
            "status": self.status,
            "createdAt": _iso(self.created),
            "lastUpdatedAt": _iso(self.updated or self.created),
        }
        if self.message is not None:
            out["statusMessage"] = self.message
        return out


class TaskTable:
    """The tasks of one server (not thread-safe: the server's loop owns it)."""

    def __init__(
        self,
        *,
        max_tasks: int = 1000,
        per_owner: int = 100,
        max_ttl_ms: int = 3_600_000,
        poll_interval_ms: int = 1000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.max_tasks = max_tasks
        self.per_owner = per_owner
        self.max_ttl_ms = max_ttl_ms
        self.poll_interval_ms = poll_interval_ms
        self._clock = clock if clock is not None else time.time
        self._tasks: dict[str, ServedTask] = {}
        # Told of each ended task let go for room (the server's timers).
        self.evicted: Callable[[ServedTask], None] | None = None

    def create(self, owner: str | None, tool: str, ttl_ms: object = None) -> ServedTask | None:
        """A new task of `owner` for a call of `tool`, kept `ttl_ms` (the cap
        if None, or more than the cap; at least a second); None if the table
        is full of tasks still running."""
        now = self._clock()
        # (Nobody's tasks, 2026-07-28 without a token, are bounded in all only:
        # one such client would otherwise take every other's room.)
        mine = [t for t in self._tasks.values() if t.owner == owner] if owner is not None else []
        if len(mine) >= self.per_owner and not self._drop_ended(mine):
            return None
        if len(self._tasks) >= self.max_tasks and not self._drop_ended(self._tasks.values()):
            return None
        ttl = self.max_ttl_ms
        if isinstance(ttl_ms, int) and not isinstance(ttl_ms, bool):
            ttl = max(1000, min(ttl_ms, ttl))
        task = ServedTask(secrets.token_urlsafe(16), owner, tool, now, ttl, updated=now)
        self._tasks[task.id] = task
        return task

    def _drop_ended(self, tasks: Iterable[ServedTask]) -> bool:
        """Drop the oldest of `tasks` that has ended; False if none has."""
        ended = next((t for t in tasks if t.terminal), None)
        if ended is None:
            return False
        del self._tasks[ended.id]
        if self.evicted is not None:
            self.evicted(ended)
        return True

    def find(self, task_id: object, owner: str | None) -> ServedTask | None:
        """`owner`'s task `task_id`; None if it is unknown, expired or another's."""
        if not isinstance(task_id, str):
            return None
        task = self._tasks.get(task_id)
        if task is None or task.owner != owner or task.expires <= self._clock():
            return None  # (an expired one is dropped by `expired`, its call cancelled)
        return task

    def page(
        self, owner: str | None, cursor: object = None, size: int = 100
    ) -> tuple[list[ServedTask], str | None]:
        """`owner`'s tasks after `cursor` (None: from the first), oldest
        first, at most `size`, and the cursor of the next page (None: no
        more). A cursor this table did not give raises `ValueError`."""
        after = 0
        if cursor is not None:
            if not isinstance(cursor, str) or not (cursor.isascii() and cursor.isdigit()):
                raise ValueError(f"not a cursor of this server: {cursor!r}")
            after = int(cursor)
        now = self._clock()
        mine = [
            t
            for t in self._tasks.values()
            if t.owner == owner and t.order > after and t.expires > now
        ]
        if len(mine) <= size:
            return mine, None
        return mine[:size], str(mine[size - 1].order)

    def settle(self, task: ServedTask, status: TaskStatus, message: str | None = None) -> bool:
        """Move `task` to `status` (with `message`); False if it has ended
        already (a cancelled task stays cancelled, whatever its call does)."""
        if task.terminal:
            return False
        task.status = status
        task.message = message
        task.updated = self._clock()
        return True

    def expired(self, now: float | None = None) -> list[ServedTask]:
        """Drop the tasks past their ttl; returns them (their calls to cancel)."""
        now = self._clock() if now is None else now
        gone = [t for t in self._tasks.values() if t.expires <= now]
        for task in gone:
            del self._tasks[task.id]
        return gone

    def forget(self, task: ServedTask) -> None:
        """Drop `task` (its call was answered without it)."""
        self._tasks.pop(task.id, None)

    def all(self) -> list[ServedTask]:
        return list(self._tasks.values())


def _iso(when: float) -> str:
    return (
        datetime.fromtimestamp(when, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
