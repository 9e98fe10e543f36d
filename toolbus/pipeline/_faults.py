"""How a backend tells the steps that the tool's runner itself failed.

A tool raising is a tool error. These are different: the process running it
died (`ToolCrashed`), or toolbus killed it because the call's outcome was no
longer wanted (`WorkerKilled`). The steps turn the first into `TOOL_CRASHED`,
which is retried only for read-only or idempotent tools, and drop the second:
whoever killed it has already settled the call.
"""

from __future__ import annotations

__all__ = ["ToolCrashed", "WorkerKilled"]


class ToolCrashed(Exception):
    """The process running the attempt died; the message says how (exit code,
    signal, or the limit it went over)."""


class WorkerKilled(BaseException):
    """The attempt's process was killed by toolbus (deadline, cancellation).

    A BaseException so that no `except Exception` on the way mistakes it for
    the tool's own failure."""
