"""The workers and the concurrency slots of one tool (owned by the supervisor).

Slots count calls, not threads: a worker stuck in a timed-out call is detached
(abandoned) and no longer counts, so its call's slot can be used by a fresh
worker while the stuck thread lingers.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tools import Tool
    from ._run import Run
    from ._worker import WorkerHandle

__all__ = ["Pool"]


class Pool:
    """Idle workers, busy count, calls in flight and calls waiting for one tool."""

    __slots__ = ("busy", "idle", "in_flight", "limit", "started", "tool", "waiting")

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.limit = tool.max_concurrency
        self.idle: list[WorkerHandle] = []
        self.busy = 0
        self.in_flight = 0
        self.started = 0
        self.waiting: deque[Run] = deque()

    @property
    def has_room(self) -> bool:
        return self.limit is None or self.in_flight < self.limit

    def __repr__(self) -> str:
        return f"pool {self.tool.name!r}"
