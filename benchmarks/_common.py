"""What every scenario shares: the run's scale (smoke or full), the report, the tools."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from toolbus import ToolCall, ToolRegistry, bus

from ._report import Report


@dataclass(frozen=True)
class Scale:
    """Counts for one run. `smoke` keeps every scenario, with tiny counts."""

    smoke: bool
    rounds: int  # interleaved rounds of the latency scenarios
    budget_ms: float  # time per case per round (the ops per round are sized to it)
    pipe_rounds: int
    pipe_budget_ms: float
    pipe_threads: int
    io_calls: int
    io_sleep: float
    io_parallel: int
    io_rounds: int
    many_calls: int  # the many-async-calls scenario: calls, max_parallel, sleep, rounds
    many_parallel: int
    many_sleep: float
    many_rounds: int
    parallel_levels: tuple[int, ...]
    registry_sizes: tuple[int, ...]
    longrun_calls: int
    memory_actors: int
    memory_reps: int
    chaos_calls: int  # the chaos scenario: calls in all, and how long its agents may take
    chaos_limit_s: float
    proc_timeouts: int  # the process backend: hung calls timed out, one after another
    proc_timeout_s: float  # ... and their tool's timeout
    ray_calls: int  # the Ray backend: async calls in flight, max_parallel, sleep, rounds
    ray_parallel: int
    ray_sleep: float
    ray_rounds: int
    wait_rate: str  # the waiting scenario's rate limit (60 calls from 6 threads, max_parallel=64)
    scenario_limit_s: float  # a scenario still running after this is hung: stacks, exit 1

    @classmethod
    def full(cls) -> Scale:
        return cls(
            smoke=False,
            rounds=15,
            budget_ms=40,
            pipe_rounds=9,
            pipe_budget_ms=300,
            pipe_threads=8,
            io_calls=1000,
            io_sleep=0.05,
            io_parallel=100,
            io_rounds=5,
            many_calls=10_000,
            many_parallel=1000,
            many_sleep=0.05,
            many_rounds=3,
            parallel_levels=(1, 4, 16, 64),
            registry_sizes=(1, 10, 100, 1000),
            longrun_calls=1_000_000,
            memory_actors=500,
            memory_reps=3,
            chaos_calls=10_000,
            chaos_limit_s=300,
            proc_timeouts=40,
            proc_timeout_s=0.2,
            ray_calls=1000,
            ray_parallel=200,
            ray_sleep=0.05,
            ray_rounds=5,
            wait_rate="5/second",
            scenario_limit_s=1200,
        )

    @classmethod
    def small(cls) -> Scale:
        return cls(
            smoke=True,
            rounds=3,
            budget_ms=4,
            pipe_rounds=2,
            pipe_budget_ms=20,
            pipe_threads=4,
            io_calls=200,
            io_sleep=0.02,
            io_parallel=100,
            io_rounds=1,
            many_calls=500,
            many_parallel=50,
            many_sleep=0.01,
            many_rounds=1,
            parallel_levels=(1, 4, 16, 64),
            registry_sizes=(1, 10, 100, 1000),
            longrun_calls=20_000,
            memory_actors=50,
            memory_reps=1,
            chaos_calls=500,
            chaos_limit_s=60,
            proc_timeouts=3,
            # Long enough that a call on a loaded CI machine finishes inside it:
            # the smoke run checks the scenario works, not how fast.
            proc_timeout_s=0.5,
            ray_calls=100,
            ray_parallel=50,
            ray_sleep=0.01,
            ray_rounds=1,
            # The same 60 calls, admitted ten times as fast: about a second.
            wait_rate="50/second",
            # A hang guard: Ray's first actor alone takes a minute on an
            # oversubscribed machine (`scripts/run.py test --stress`).
            scenario_limit_s=600,
        )


@dataclass
class Ctx:
    scale: Scale
    report: Report
    reference: dict[str, Any] | None = None  # today's engine (`_reference.py`), if recorded


def noop(i: int) -> int:
    """Return i."""
    return i


async def anoop(i: int) -> int:
    """Return i (an async tool: no thread)."""
    return i


def noop_registry(tools: int = 1) -> ToolRegistry:
    """`noop` (read-only), plus `noop_1` ... `noop_{tools-1}` with the same body."""
    reg = ToolRegistry()
    reg.tool(read_only=True)(noop)
    for k in range(1, tools):
        reg.tool(name=f"noop_{k}", read_only=True)(_numbered())
    return reg


def _numbered() -> Callable[[int], int]:
    def fn(i: int) -> int:
        """Return i."""
        return i

    return fn


def sleep_registry(seconds: float) -> ToolRegistry:
    """`nap` (sync, time.sleep) and `anap` (async, asyncio.sleep), both read-only."""
    reg = ToolRegistry()

    @reg.tool(name="nap", read_only=True)
    def nap(i: int) -> int:
        """Sleep, then return i."""
        time.sleep(seconds)
        return i

    reg.tool(name="anap", read_only=True)(async_sleeper(seconds))
    return reg


def async_sleeper(seconds: float) -> Callable[[int], Awaitable[int]]:
    """An async tool body that sleeps `seconds` without a thread, then returns i."""

    async def anap(i: int) -> int:
        """Sleep without a thread, then return i."""
        await asyncio.sleep(seconds)
        return i

    return anap


def os_threads() -> int:
    """The process's threads now: the OS count (/proc), else Python's own count."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return threading.active_count()


def noop_call(i: int = 1, name: str = "noop") -> ToolCall:
    return ToolCall(name=name, arguments={"i": i})


def require_quiet_bus() -> None:
    """Fail loudly if any bus signal has a receiver: "no subscriber" must mean none."""
    busy = [n for n in bus.ALL_SIGNALS if bus.signal(n).receivers]
    if busy:
        raise RuntimeError(f"benchmark setup is broken: signals with receivers: {busy}")
