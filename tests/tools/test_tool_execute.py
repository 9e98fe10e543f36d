"""`Tool.execute`/`aexecute` without an executor: `SystemExit` and other
`BaseException`s a tool raises become error results; `KeyboardInterrupt` and
cancellation pass through to the caller (and into the tool).

Pins a defect found outside the repo: a `SystemExit` raised by a tool must
not end the caller's process.
"""

from __future__ import annotations

import asyncio

import pytest

from toolbus import (
    ErrorCode,
    tool,
)

# -- 4. Tool.execute contains SystemExit; interrupts and cancellation pass through --------


class Stop(BaseException):
    pass


@pytest.mark.parametrize("error", [SystemExit(3), Stop("stop"), GeneratorExit()])
def test_execute_turns_base_exceptions_into_error_results(error: BaseException) -> None:
    def sync_tool() -> None:
        raise error

    async def async_tool() -> None:
        raise error

    for fn in (sync_tool, async_tool):
        r = tool(fn).execute({})
        assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
        assert r.error is not None and type(error).__name__ in r.error


@pytest.mark.parametrize("error", [SystemExit(3), Stop("stop")])
async def test_aexecute_turns_base_exceptions_into_error_results(error: BaseException) -> None:
    def sync_tool() -> None:
        raise error

    async def async_tool() -> None:
        raise error

    for fn in (sync_tool, async_tool):
        r = await tool(fn).aexecute({})
        assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)


def test_execute_lets_keyboard_interrupt_through() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tool(interrupted).execute({})


async def test_aexecute_propagates_cancellation_into_the_tool() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool
    async def waits() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.ensure_future(waits.aexecute({}))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()
