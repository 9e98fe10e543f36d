"""Async callers (`aexecute*`, `asyncio.run`): calls end when their loop ends,
stats are exact when an await returns, and nothing keeps a finished call or a
caller's loop alive."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry, bus


def test_stats_count_an_async_tools_call_before_execute_returns(
    make_executor: MakeExecutor,
) -> None:
    """stats() lagged behind: an async tool's call was not counted when execute returned
    (Engine v2 review)."""
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def aquick(i: int) -> int:
        return i

    ex = make_executor(reg)
    for i in range(300):
        ex.execute(ToolCall(name="aquick", arguments={"i": i}))
        s = ex.stats()
        assert (s.in_flight, s.ok) == (0, i + 1)


def test_async_callers_do_not_keep_finished_calls_alive(make_executor: MakeExecutor) -> None:
    """The async backstop held every call until its timeout (found by the long-run benchmark)
    (Engine v2 review)."""
    import gc

    from toolbus.pipeline import Run

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def noop(i: int) -> int:
        return i

    ex = make_executor(reg, timeout=30)
    loop = asyncio.new_event_loop()
    try:
        for i in range(300):
            loop.run_until_complete(ex.aexecute(ToolCall(name="noop", arguments={"i": i})))
        gc.collect()
        alive = sum(1 for o in gc.get_objects() if isinstance(o, Run))
    finally:
        loop.close()
    assert alive < 20, f"{alive} finished calls are still held"


def test_calls_in_flight_when_asyncio_run_ends_end_cancelled(make_executor: MakeExecutor) -> None:
    """Calls in flight when asyncio.run ended never ended (Engine v2 review)."""
    reg = ToolRegistry()
    started = threading.Event()

    @reg.tool(read_only=True)
    async def slow(i: int) -> int:
        started.set()
        await asyncio.Event().wait()
        return i

    ex = make_executor(reg, timeout=None, max_parallel=20)

    pending: list[asyncio.Future[Any]] = []

    async def main() -> None:
        for i in range(20):
            call = ToolCall(id=f"c{i}", name="slow", arguments={"i": i})
            pending.append(asyncio.ensure_future(ex.aexecute(call)))
        await asyncio.to_thread(started.wait, 10)
        await asyncio.sleep(0)  # then return, leaving the calls to asyncio.run's cleanup

    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        asyncio.run(main())
        rec.wait_for(bus.FINISHED, 20, timeout=10)
    assert {e.result.status for e in rec.of(bus.FINISHED)} == {"cancelled"}
    assert ex.stats().in_flight == 0


def test_event_loops_that_called_are_not_kept_alive(make_executor: MakeExecutor) -> None:
    """Event loops that had called aexecute were kept alive by the executor (Engine v2 review)."""
    import gc
    import weakref

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def quick() -> int:
        return 1

    ex = make_executor(reg)
    refs = []
    for _ in range(5):
        loop = asyncio.new_event_loop()
        loop.run_until_complete(ex.aexecute(ToolCall(name="quick")))
        loop.close()
        refs.append(weakref.ref(loop))
        del loop
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_asyncio_run_ending_in_an_async_post_call_hook_ends_cancelled(
    make_executor: MakeExecutor,
) -> None:
    """asyncio.run ending while an async post-call hook ran left the call never ending
    (Engine v2 review)."""
    reg = ToolRegistry()
    in_hook = threading.Event()

    @reg.tool(read_only=True)
    async def quick() -> str:
        return "done"

    async def post(call: ToolCall, result: Any) -> Any:
        in_hook.set()
        await asyncio.Event().wait()
        return result

    ex = make_executor(reg, timeout=None, post_call=[post])
    pending: list[asyncio.Future[Any]] = []

    async def main() -> None:
        pending.append(asyncio.ensure_future(ex.aexecute(ToolCall(id="q", name="quick"))))
        await asyncio.to_thread(in_hook.wait, 10)

    with bus.Recorder(bus.FINISHED, sender=ex) as rec:
        asyncio.run(main())
        (finished,) = rec.wait_for(bus.FINISHED, timeout=10)
    assert finished.result.status == "cancelled"
