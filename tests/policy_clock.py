"""A fake clock for the policies' unit tests: every decision is made at a
time the test chose, on one thread, so the state machines are deterministic."""

from __future__ import annotations

from typing import Any

import limits.storage.memory
import pytest

from toolbus import ToolCall, ToolResult, tool
from toolbus.models import ErrorCode, Status


class FakeClock:
    """Callable like `time.monotonic` and, as `.time()`, like `time.time`: the
    same fake seconds, moved only by `advance` and `set`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now

    def set(self, at: float) -> float:
        self.now = at
        return self.now


def drive_limits_clock(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> None:
    """Make limits' in-memory storage read `clock` instead of `time.time()`
    (it stamps and expires admissions with the module's `time.time`)."""
    monkeypatch.setattr(limits.storage.memory, "time", clock)


@tool(read_only=True)
def probe(n: int = 0, user: str = "") -> int:
    """A tool for policies to be asked about (never run by the unit tests)."""
    return n


def call(n: int = 0, user: str = "", *, name: str = "probe", id: str | None = None) -> ToolCall:
    extra: dict[str, Any] = {"id": id} if id is not None else {}
    return ToolCall(name=name, arguments={"n": n, "user": user}, **extra)


def result(
    c: ToolCall, status: Status, *, attempts: int = 1, code: ErrorCode | None = None
) -> ToolResult:
    if code is None and status != "ok":
        code = {
            "error": ErrorCode.TOOL_ERROR,
            "timeout": ErrorCode.EXECUTION_TIMEOUT,
            "cancelled": ErrorCode.CANCELLED,
            "rejected": ErrorCode.TOOL_UNAVAILABLE,
            "deferred": ErrorCode.APPROVAL_REQUIRED,
        }[status]
    return ToolResult(
        call_id=c.id,
        name=c.name,
        status=status,
        output="x" if status == "ok" else None,
        error=None if status == "ok" else "failed",
        error_code=code,
        attempts=attempts,
    )
