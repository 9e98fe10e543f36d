"""The agent runs an executor halted, and how a halt reaches their calls.

A halt comes from `Executor.halt`, or from a policy that decides `Halt` (a
run limit, a guardrail's tripwire) about one of the run's calls. From then on
the run is halted for good: its unfinished calls end `cancelled`
(`ErrorCode.HALTED`, running ones interrupted as a cancellation does), and
its later calls end so at submission. A call with no agent run halts its
batch alone. The scheduler does the ending (`tell`: the executor wires it);
this keeps which runs are halted, and why.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cachetools import LRUCache

    from ._batch_run import BatchRun
    from ._run import Run

__all__ = ["Halts", "halt_reason", "halted_text"]

# How many halted runs an executor remembers: the most recently halted. A
# long-lived service halts a run now and then; a run forgotten after this many
# others were halted since would take calls again.
REMEMBERED = 65_536

# The scheduler's way to end a halted run's calls: (agent run, batch, reason,
# the run that decided the halt, which ends with its own result, and whether
# the run was not halted before: announced).
Tell = Callable[[str | None, "BatchRun | None", str, "Run | None", bool], Any]


def halted_text(reason: str) -> str:
    """What a halted run's calls end with (the model reads it): the halt's `reason`."""
    return f"Halted: the agent run was stopped ({reason}); no more tool calls run in this run"


class Halts:
    """The runs halted on one executor (thread-safe)."""

    __slots__ = ("_lock", "_reasons", "active", "dropped", "tell")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: LRUCache[str, str] | None = None  # made at the first halt
        # Set once anything was halted: until then submission looks no further.
        self.active = False
        self.tell: Tell | None = None
        # Told of each run halted, as it is: what else lets go of it (its
        # requests waiting for a decision).
        self.dropped: Callable[[str], None] | None = None

    def reason(self, agent_run: str | None) -> str | None:
        """Why `agent_run` was halted, or None (not halted, or no run)."""
        if agent_run is None or not self.active:
            return None
        with self._lock:
            return self._reasons.get(agent_run) if self._reasons is not None else None

    def record(self, agent_run: str | None, reason: str) -> bool:
        """Note `agent_run` as halted (before the scheduler hears of it); True
        if it was not already."""
        if agent_run is None:
            return False
        reason = halt_reason(reason)
        with self._lock:
            if self._reasons is None:
                from cachetools import LRUCache  # only once a run is halted: imports stay light

                self._reasons = LRUCache(REMEMBERED)
            if agent_run in self._reasons:
                return False
            self._reasons[agent_run] = reason
            self.active = True
        if self.dropped is not None:
            self.dropped(agent_run)
        return True

    def halt(
        self, agent_run: str | None, batch: BatchRun | None, reason: str, by: Run | None = None
    ) -> None:
        """Halt `agent_run` (or, without one, `batch`) for `reason`: its
        unfinished calls end but `by`'s, which decided it and ends as it does."""
        reason = halt_reason(reason)
        fresh = self.record(agent_run, reason) or agent_run is None
        tell = self.tell
        if tell is not None:
            tell(agent_run, batch, reason, by, fresh)


# A halt's reason is carried by every later call of the run: kept short.
_MOST = 500


def halt_reason(reason: object) -> str:
    """`reason` as a halt keeps it: text, never empty, at most `_MOST` characters."""
    text = reason if isinstance(reason, str) else "" if reason is None else str(reason)
    text = text or "halted"
    return text if len(text) <= _MOST else text[: _MOST - 1] + "…"
