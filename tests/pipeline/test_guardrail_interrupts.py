"""An output guardrail cut short by its call's own end, or by the user.

The call's task cancelled while it awaits an async guard (the caller's loop
shutting down: `asyncio.run`'s end) ends the call `cancelled`, not withheld as
if the guard had failed; a guard raising CancelledError of its own while
nothing cancels its call still fails closed. Ctrl-C in a sync guard run on the
caller's loop (the main thread) reaches the caller, as it does elsewhere.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, ToolCall, ToolRegistry, ToolResult, bus
from toolbus.policies import guardrail


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def aecho(text: str) -> str:
        return text

    return reg


def test_the_callers_loop_ending_while_a_guard_is_awaited_cancels_the_call(
    make_executor: MakeExecutor, recorder: bus.Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    started = asyncio.Event()

    async def check(call: ToolCall, result: ToolResult) -> Any:
        started.set()
        await asyncio.Event().wait()  # until its task is cancelled

    ex = make_executor(
        _registry(), policies=[guardrail(check, stage="output", name="slow")], hook_grace=60
    )

    async def main() -> None:
        asyncio.get_running_loop().create_task(
            ex.aexecute(ToolCall(id="c", name="aecho", arguments={"text": "hi"}))
        )
        await asyncio.wait_for(started.wait(), 30)
        # Returns with the call's task pending: asyncio.run cancels it.

    with caplog.at_level(logging.ERROR, logger="toolbus"):
        asyncio.run(main())
        [finished] = recorder.wait_for(bus.FINISHED, 1, timeout=30)
    r = finished.result
    assert (r.status, r.error_code) == ("cancelled", ErrorCode.CANCELLED), r
    assert "slow" in (r.error or "")
    assert "failed" not in caplog.text and "Traceback" not in caplog.text


def test_a_guard_raising_cancelled_error_on_the_callers_loop_still_fails_closed(
    make_executor: MakeExecutor,
) -> None:
    async def check(call: ToolCall, result: ToolResult) -> Any:
        await asyncio.sleep(0)
        raise asyncio.CancelledError("its own")

    ex = make_executor(_registry(), policies=[guardrail(check, stage="output", name="shaky")])
    r = asyncio.run(ex.aexecute(ToolCall(name="aecho", arguments={"text": "hi"})))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.CONTENT_BLOCKED), r
    assert "shaky" in (r.error or "")


def test_ctrl_c_in_a_sync_guard_on_the_callers_loop_reaches_the_caller(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    assert threading.current_thread() is threading.main_thread()

    def check(call: ToolCall, result: ToolResult) -> Any:
        raise KeyboardInterrupt  # as a signal's handler raises it, on the main thread

    ex = make_executor(_registry(), policies=[guardrail(check, stage="output", name="slow")])
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(ex.aexecute(ToolCall(name="aecho", arguments={"text": "hi"})))
    finally:
        loop.close()
    # The task the interrupt went through ends with it, never retrieved: the
    # interrupt's traceback (the loop's frames) keeps the task until the
    # collector frees them, and asyncio then logs "Task exception was never
    # retrieved". Collected here, that log is this test's, not a later test's
    # that reads its own logs (seen in a fresh clone, tests in random order).
    gc.collect()
    [finished] = recorder.wait_for(bus.FINISHED, 1, timeout=30)
    r = finished.result
    assert (r.status, r.error_code) == ("cancelled", ErrorCode.CANCELLED), r
    assert ex.stats().in_flight == 0
