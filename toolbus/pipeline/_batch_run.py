"""A batch's state: its calls, its schedule, its completion.

The executor makes it (`_executor/_plan.py`, `plan_batch`); the scheduler
keeps its books (`actors/_completion.py`) and ends it once every call has its
result (`actors/_batches.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..scheduling import Schedule
from ._waiters import Waiter

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["BatchRun"]


class BatchRun:
    """A batch: its calls, its schedule and its completion (supervisor-owned)."""

    __slots__ = (
        "batch_id",
        "done",
        "group_failures",
        "group_started",
        "halted",
        "limit",
        "on_done",
        "remaining",
        "runs",
        "schedule",
        "started",
        "stop_on_error",
        "stopped",
        "sv_busy",
        "sv_group",
        "waiter",
    )

    def __init__(
        self,
        batch_id: str,
        *,
        limit: int,
        stop_on_error: bool,
        waiter: Waiter | None,
        on_done: Callable[[BatchRun], None] | None = None,
    ) -> None:
        self.batch_id = batch_id
        self.runs: list[Run] = []
        self.limit = limit
        self.stop_on_error = stop_on_error
        self.waiter = waiter
        self.on_done = on_done
        self.schedule: Schedule | None = None
        self.remaining = 0
        self.sv_group: Any = None  # its capacity group (the scheduler's)
        # The supervisor is in the middle of the batch's bookkeeping (closing a
        # run that closes others in turn, say): its completion waits until
        # that is done, since its caller, once released, takes `runs` away.
        self.sv_busy = 0
        self.stopped = False
        # Why a halt (`_halts.py`) ended its calls, once one did: its calls
        # submitted with it end so too.
        self.halted: str | None = None
        self.done = False
        self.started = time.monotonic()
        self.group_started: dict[int, float] = {}
        self.group_failures: dict[int, int] = {}
