"""How a backend tells the steps that the tool's runner itself failed.

A tool raising is a tool error. These are different: the process running it
died (`ToolCrashed`), or toolbus killed it because the call's outcome was no
longer wanted (`WorkerKilled`). The steps turn the first into `TOOL_CRASHED`,
which is retried only for read-only or idempotent tools, and drop the second:
whoever killed it has already settled the call.
"""

from __future__ import annotations

from ..models import ErrorCode
from ..tools import ToolFailure

__all__ = ["ToolCrashed", "WorkerKilled"]


class ToolCrashed(ToolFailure):
    """The process running the attempt died; the message says how (exit code,
    signal, or the limit it went over).

    Worth another attempt (by the retry policy, and only for a tool that is
    read-only or idempotent), unless `retry=False`: over a limit it would go
    over again, so that ends the call whatever a hook says."""

    def __init__(self, message: str, *, retry: bool = True) -> None:
        super().__init__(message, code=ErrorCode.TOOL_CRASHED, retry=retry)
        # A crash is transient: the policy's `retry_on` need not name it.
        self.retryable = bool(retry)


class WorkerKilled(BaseException):
    """The attempt's process was killed by toolbus (deadline, cancellation).

    A BaseException so that no `except Exception` on the way mistakes it for
    the tool's own failure."""
