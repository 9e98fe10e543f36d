"""The concurrency slots of one tool (owned by the supervisor).

Slots count calls, not threads: a worker stuck in a timed-out call is detached
by its backend (abandoned) and no longer counts here, so its call's slot can be
used by a fresh attempt while the stuck thread lingers.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..pipeline import Run
    from ..tools import Tool

__all__ = ["Pool"]


class Pool:
    """Calls in flight and calls waiting for one tool."""

    __slots__ = ("in_flight", "limit", "tool", "waiting")

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.limit = tool.max_concurrency
        self.in_flight = 0
        self.waiting: deque[Run] = deque()

    @property
    def has_room(self) -> bool:
        return self.limit is None or self.in_flight < self.limit

    def __repr__(self) -> str:
        return f"pool {self.tool.name!r}"
