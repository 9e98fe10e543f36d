"""An attempt's steps, driven without an executor (`toolbus.pipeline`): what a
tool's return value past its deadline makes of the call."""

from __future__ import annotations

import contextvars
import time
from typing import Any

import pytest

from toolbus import ErrorCode, ToolCall, ToolContext
from toolbus.bus import Emitter, NullPublisher
from toolbus.pipeline import Run, Services, attempt, drive_sync

from ._hooks import DefaultHooks

# -- an attempt that returns after its deadline is a timeout ---------------------------------


class _NoLoop:
    def submit(self, coro: Any) -> Any:
        raise AssertionError("no awaitable expected")


@pytest.mark.parametrize(("read_only", "late_flag"), [(False, True), (True, False)])
def test_an_attempt_finishing_past_its_deadline_ends_as_timeout(
    read_only: bool, late_flag: bool
) -> None:
    from toolbus import RetryPolicy, tool

    @tool(read_only=read_only, timeout=0.01)
    def write(ctx: ToolContext) -> str:
        return "written"

    run = Run(
        ToolCall(name="write"),
        write,
        context=contextvars.copy_context(),
        timeout=0.01,
        policy=RetryPolicy(),
    )
    services = Services(
        emitter=Emitter(NullPublisher(), None),  # type: ignore[arg-type]
        hooks=DefaultHooks(),
        max_argument_bytes=1000,
    )
    run.begin_attempt(1)
    run.deadline = time.monotonic() - 1  # the tool will return a second too late
    outcome = drive_sync(attempt(run, 1, services), run, _NoLoop())
    assert (outcome.kind, outcome.timed_out) == ("done", True)
    assert outcome.late is not None and outcome.late.status == "ok"
    assert run.result is not None
    assert (run.result.status, run.result.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
    assert run.result.output is None  # the late value is never the result
    assert run.result.metadata.get("completed_late", False) is late_flag
