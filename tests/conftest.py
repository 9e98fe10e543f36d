"""Shared fixtures: executors that are always closed, and a few standard tools."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from toolbus import Executor, ToolRegistry, bus

T = TypeVar("T")

MakeExecutor = Callable[..., Executor]

HANG_TIMEOUT = 1.0
"""The deadline of a call a test wants to see time out *inside its tool*.

A call's deadline runs from its dispatch, through admission and its policies,
to the tool. On an oversubscribed machine that first stretch alone can take
longer than 0.05–0.5 s, and the call then times out before its tool starts:
no worker is abandoned, no start is counted, no cancellation reaches the tool.
A test whose assertions need the tool to have started uses this (or more, for
a subprocess or a server); a test of how soon a deadline fires is a benchmark.
"""


# The slow tier's longest files, with about how many seconds each takes in
# all (its tests' durations; measured on a busy 2-core machine, so only their
# order means much). They run first, the longest first: the slow tier hands
# whole files to its two workers in the order collected
# (`--no-loadscope-reorder`, scripts/run.py), and a long file handed out last
# (xdist's own order puts the files with fewest tests last: the benchmark
# smoke run, one test of a minute, ran last) is a tail one worker runs alone
# while the other has nothing left. Only an order: a figure that is off, or a
# file missing here, makes no test fail.
LONGEST: dict[str, float] = {
    "tests/integrations/test_dbos_recovery.py": 250,
    "tests/mcp/test_conformance.py": 200,
    "tests/backends/test_ray.py": 110,
    "tests/mcp/test_elicitation.py": 95,
    "tests/mcp/test_client_spec.py": 90,
    "tests/examples/test_examples.py": 90,
    "tests/benchmarks/test_smoke.py": 70,
    "tests/backends/test_process.py": 60,
    "tests/integrations/test_restate_recovery.py": 60,
    "tests/mcp/test_server_input_wire.py": 50,
    "tests/mcp/test_sampling.py": 50,
    "tests/docs/test_samples.py": 48,
    "tests/mcp/test_client.py": 40,
    "tests/mcp/test_resources.py": 35,
    "tests/tools/test_command_tool.py": 32,
    "tests/cli/test_commands.py": 30,
}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With xdist's own order of files off (`--no-loadscope-reorder`: the
    slow tier's), the files of `LONGEST` first, the longest first; the others
    after them, in the order pytest-randomly gave them (a stable sort: a
    file's tests stay together, in their order)."""
    if config.getoption("loadscopereorder", True) is False:
        items.sort(key=lambda item: -LONGEST.get(item.nodeid.partition("::")[0], 0.0))


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at teardown: tools that hang wait on it, so no test leaves threads blocked forever."""
    ev = threading.Event()
    yield ev
    ev.set()


@pytest.fixture
def make_executor() -> Iterator[MakeExecutor]:
    made: list[Executor] = []

    def make(registry: ToolRegistry, **options: Any) -> Executor:
        ex = Executor(registry, **options)
        made.append(ex)
        return ex

    yield make
    for ex in made:
        ex.close()


@pytest.fixture
def recorder() -> Iterator[bus.Recorder]:
    with bus.Recorder() as rec:
        yield rec


def wait_until(
    predicate: Callable[[], bool], timeout: float = 30.0, what: str = "", *, every: float = 0.002
) -> None:
    """Wait for a state the test expects (e.g. "one call queued"), polling it
    `every` so often (longer for a costly look, such as a tmux screen).

    Used where the state has no event to wait on; fails after `timeout`, a
    hang guard (generous: an oversubscribed machine is slow), not a claim.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(every)  # poll interval of the wait, not a stand-in for it


def at_once(n: int, work: Callable[[int], T], timeout: float = 60.0) -> list[T]:
    """`work(i)` for i in range(n), each on a thread of its own, all released
    together (a barrier); what they returned, in the order they finished."""
    start = threading.Barrier(n)
    results: list[T] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        start.wait()
        got = work(i)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results


async def wait_until_async(
    check: Callable[[], Coroutine[Any, Any, bool]], timeout: float = 30.0, what: str = ""
) -> None:
    """`wait_until` for a state only this event loop can read (e.g. through an
    async client): the polling runs in a thread, each `check()` on this loop,
    which stays free meanwhile."""
    loop = asyncio.get_running_loop()

    def predicate() -> bool:
        return asyncio.run_coroutine_threadsafe(check(), loop).result(timeout)

    await asyncio.to_thread(wait_until, predicate, timeout, what)
