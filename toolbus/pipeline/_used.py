"""The single-use approval decisions an executor has let through.

Remembered until they expire (a decision past its `expires_at` is refused as
expired anyway), and, with a journal, recorded there, so another process on
the same journal, or this one after a restart, cannot use one again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["UsedDecisions"]


class UsedDecisions:
    """The single-use decisions used on one executor (thread-safe)."""

    __slots__ = ("_lock", "_used", "record")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: dict[str, float] = {}  # decision id -> when it may be forgotten
        # With a journal: record a use there; False if it was recorded before.
        self.record: Callable[[str, float | None], bool] | None = None

    def use(self, decision_id: str, expires_at: float | None) -> bool:
        """Use `decision_id` once: True the first time, False after."""
        now = time.time()
        with self._lock:
            if decision_id in self._used:
                return False
            if self.record is not None and not self.record(decision_id, expires_at):
                return False
            # Kept until it expires (then it is refused as expired anyway); one
            # that never expires is kept for the executor's life.
            self._used[decision_id] = expires_at if expires_at is not None else float("inf")
            if len(self._used) > 4096:
                self._used = {k: t for k, t in self._used.items() if t > now}
            return True
