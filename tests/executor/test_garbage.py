"""A finished call leaves nothing for the garbage collector to find.

Its records (the run, its batch, its waiter, the attempt's task) are freed by
reference counting as soon as nobody holds them. A cycle among them would make
every call garbage for the collector instead, and the collections that follow
cost every call more CPU the more the process holds (an async batch of ten
spent about a third of its CPU so). Counted, not timed: with the collector
off, whatever it would then find of these calls is a cycle.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from toolbus import Executor, RetryPolicy, ToolCall, ToolRegistry
from toolbus.pipeline import BatchRun, Run
from toolbus.policies import rate_limit

_ids = itertools.count()
_flips = itertools.count()


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def noop(i: int) -> int:
        return i

    @reg.tool(read_only=True)
    async def anoop(i: int) -> int:
        return i

    @reg.tool(read_only=True)
    def fails(i: int) -> int:
        raise ValueError("boom")

    @reg.tool(read_only=True)
    async def afails(i: int) -> int:
        raise ValueError("boom")

    @reg.tool(read_only=True)
    def flaky(i: int) -> int:
        if next(_flips) % 2 == 0:
            raise ConnectionError("transient")
        return i

    @reg.tool(read_only=True)
    async def aflaky(i: int) -> int:
        if next(_flips) % 2 == 0:
            raise ConnectionError("transient")
        return i

    @reg.tool(read_only=True, timeout=0.01)
    async def stuck(i: int) -> int:
        await asyncio.Event().wait()
        return i

    @reg.tool
    def write(i: int) -> int:
        return i

    return reg


def _call(name: str) -> ToolCall:
    return ToolCall(id=f"gc_{next(_ids)}", name=name, arguments={"i": 1})


def _since(run: Run, first: int) -> bool:
    """Whether `run` is of a call made here after call number `first`."""
    cid = run.origin.id
    return cid.startswith("gc_") and int(cid[3:]) > first


@pytest.fixture(scope="module")
def executor() -> Iterator[Executor]:
    ex = Executor(
        _registry(),
        max_parallel=8,
        retry=RetryPolicy(max_retries=1, backoff_base=0.0),
        policies=[rate_limit("1000000/second")],
    )
    yield ex
    ex.close()


def _async(make: Callable[[Executor], Any]) -> Callable[[Executor, asyncio.AbstractEventLoop], Any]:
    return lambda ex, loop: loop.run_until_complete(make(ex))


async def _awaited(handle: Any) -> Any:
    return await handle


async def _gather(ex: Executor) -> Any:
    return await asyncio.gather(*(ex.aexecute(_call("anoop")) for _ in range(5)))


SHAPES: dict[str, Callable[[Executor, asyncio.AbstractEventLoop], Any]] = {
    "execute": lambda ex, loop: ex.execute(_call("noop")),
    "execute of an async tool": lambda ex, loop: ex.execute(_call("anoop")),
    "execute_batch of mutating calls": lambda ex, loop: ex.execute_batch(
        [_call("write") for _ in range(3)]
    ),
    "execute, the tool failing": lambda ex, loop: ex.execute(_call("fails")),
    "execute, retried": lambda ex, loop: ex.execute(_call("flaky")),
    "aexecute": _async(lambda ex: ex.aexecute(_call("anoop"))),
    "aexecute of a sync tool": _async(lambda ex: ex.aexecute(_call("noop"))),
    "aexecute, the tool failing": _async(lambda ex: ex.aexecute(_call("afails"))),
    "aexecute, retried": _async(lambda ex: ex.aexecute(_call("aflaky"))),
    "aexecute, timed out": _async(lambda ex: ex.aexecute(_call("stuck"))),
    "aexecute_batch": _async(lambda ex: ex.aexecute_batch([_call("anoop") for _ in range(5)])),
    "aexecute_batch of a sync tool": _async(
        lambda ex: ex.aexecute_batch([_call("noop") for _ in range(3)])
    ),
    "a gather of aexecute": _async(_gather),
    "a handle's result": lambda ex, loop: ex.submit(_call("noop")).result(30),
    "a handle awaited": _async(lambda ex: _awaited(ex.submit(_call("anoop")))),
    "a batch handle awaited": _async(
        lambda ex: _awaited(ex.submit_batch([_call("anoop") for _ in range(3)]))
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_finished_call_leaves_no_cycle(executor: Executor, shape: str) -> None:
    run_one = SHAPES[shape]
    loop = asyncio.new_event_loop()
    try:
        for _ in range(3):  # warm: plans made, workers started
            run_one(executor, loop)
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            first = next(_ids)
            for _ in range(10):
                run_one(executor, loop)
            gc.collect()
            ours = [
                o
                for o in gc.garbage
                if (type(o) is Run and _since(o, first))
                or (type(o) is BatchRun and any(_since(r, first) for r in o.runs))
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert not ours, f"{len(ours)} records of these calls were in cycles"
    finally:
        loop.close()
