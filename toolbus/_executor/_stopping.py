"""How an executor's caller stops calls: cancelling some, halting an agent run.

`cancel` ends calls by id or batch; `halt` ends an agent run (`toolbus.agent_runs`):
its unfinished calls now, its later calls as they come (`pipeline/_halts.py`).
Both are messages to the scheduler, answered with how many calls they ended.
"""

from __future__ import annotations

from ..actors import Scheduler
from ..actors._messages import Cancel, HaltRun
from ..agent_runs import check_agent_run
from ..models import ErrorCode
from ..pipeline import BatchRun, Run, Services, halt_reason
from ._handles import cancel_where

__all__ = ["Stopping"]


class Stopping:
    """The part of `Executor` that stops calls."""

    _scheduler: Scheduler
    _services: Services

    def cancel(self, *, call_id: str | None = None, batch_id: str | None = None) -> int:
        """Cancel every unfinished call with `call_id` (a model may repeat an
        id: each is cancelled), or of the batch `batch_id`, or both at once;
        returns how many unfinished calls it stopped. Each ends `cancelled`,
        unless its attempt had already returned (its post-call hooks running):
        that one keeps the result they make."""
        count: int = self._scheduler.ask(cancel_where(call_id, batch_id))
        return count

    def halt(self, agent_run: str, reason: str = "the agent run was halted") -> int:
        """Halt the agent run `agent_run`: its unfinished calls end `cancelled`
        with `ErrorCode.HALTED` and `reason` (running ones interrupted as a
        cancellation does), its later calls end so as they are submitted, and
        `run_agent` stops it (`stop_reason="halted"`). For good: a halted run
        stays halted (the executor remembers the last 65 536 it halted).
        Returns how many unfinished calls it ended; announces `tool:run-halted`
        the first time."""
        check_agent_run(agent_run, "Executor.halt")
        if not isinstance(reason, str):
            raise TypeError(f"Executor.halt: reason must be a string, got {type(reason).__name__}")
        if not reason:
            raise ValueError("Executor.halt: reason must not be empty")
        reason = halt_reason(reason)  # (kept short: every later call of the run carries it)
        fresh = self._services.halts.record(agent_run, reason)
        count: int = self._scheduler.ask(HaltRun(agent_run, None, reason, None, fresh))
        return count

    def halted(self, agent_run: str) -> str | None:
        """Why `agent_run` was halted on this executor, or None if it was not."""
        return self._services.halts.reason(check_agent_run(agent_run, "Executor.halted"))

    def _stop(self, batch: BatchRun | None, run: Run | None) -> None:
        """A handle's cancel: end the run, or the batch's unfinished runs."""
        self._scheduler.post(Cancel(batch, run, ErrorCode.CANCELLED, "cancelled by its caller"))
