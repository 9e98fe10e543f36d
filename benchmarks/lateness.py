"""Scenario 16: callers freed at their deadline beside a CPU-bound thread.

One pure-Python thread spins for the whole scenario (a tool's or the agent's
own CPU-bound code), so every thread that wakes must first win the GIL from it
(CPython hands it over every `sys.getswitchinterval()`, 5 ms). In interleaved
rounds, the same caller thread:

- waits on a plain `threading.Event().wait(T)` that nobody sets (the
  baseline: the least lateness any waiter can have here);
- calls `execute` on a sync tool that waits until it is cancelled, with
  `timeout=T`, and is freed with its `timeout` result;
- awaits `aexecute` of the same tool on an event loop of its own (one
  `asyncio.run` for all its rounds).

Lateness is the time a caller got control back minus the moment it asked
plus T (so a toolbus call's includes its dispatch, some tens of µs). The goal
is p99 within 1.5x the plain wait's p99, measured in the same run, over at
least 200 samples each: reachable only when the caller wakes by its own
timed wait and finishes its result itself (toolbus/actors/_backstop.py).
Beside it, the caller thread's CPU per call.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from toolbus import Executor, ToolContext, ToolRegistry

from ._common import Ctx
from ._report import Table

TIMEOUT = 0.02  # T: each wait's and each call's timeout, seconds
GOAL = 1.5  # p99 lateness vs the plain wait's, at most


class _Spinner:
    """A thread running pure-Python code until stopped: it holds the GIL
    whenever nobody else asks for it."""

    def __init__(self) -> None:
        self.running = True
        self.spins = 0
        self.thread = threading.Thread(target=self._spin, name="bench-cpu-bound", daemon=True)

    def _spin(self) -> None:
        n = 0
        while self.running:
            n += 1
        self.spins = n

    def __enter__(self) -> _Spinner:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.running = False
        self.thread.join()


def _registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def stall(ctx: ToolContext) -> None:
        # Returns once cancelled: its thread is back in the pool at once.
        ctx.wait_cancelled(30)

    return registry


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    samples = 30 if s.smoke else 300
    plain: list[float] = []
    sync: list[float] = []
    loop: list[float] = []
    cpu = {"plain": 0, "sync": 0, "async": 0}
    statuses: set[str] = set()
    call = {"name": "stall", "arguments": {}}
    with Executor(_registry(), timeout=TIMEOUT) as ex:
        ex.execute(call)  # a warm worker: the first call starts one

        async def awaited() -> None:
            for _ in range(samples):
                c0, t0 = time.thread_time_ns(), time.monotonic()
                r = await ex.aexecute(call)
                loop.append(time.monotonic() - t0 - TIMEOUT)
                cpu["async"] += time.thread_time_ns() - c0
                statuses.add(r.status)

        with _Spinner() as spinner:
            for _ in range(samples):
                ev = threading.Event()
                c0, t0 = time.thread_time_ns(), time.monotonic()
                ev.wait(TIMEOUT)
                plain.append(time.monotonic() - t0 - TIMEOUT)
                cpu["plain"] += time.thread_time_ns() - c0
                c0, t0 = time.thread_time_ns(), time.monotonic()
                r = ex.execute(call)
                sync.append(time.monotonic() - t0 - TIMEOUT)
                cpu["sync"] += time.thread_time_ns() - c0
                statuses.add(r.status)
            asyncio.run(awaited())
        stats = ex.stats()
    if statuses != {"timeout"}:
        raise RuntimeError(f"benchmark setup is broken: calls ended {sorted(statuses)}")

    base99 = _quantile(plain, 0.99)
    t = Table(
        f"{samples} waits of T = {TIMEOUT * 1000:.0f} ms each beside a CPU-bound thread "
        f"(switch interval {sys.getswitchinterval() * 1000:.0f} ms)",
        ["waiter", "late p50 ms", "late p99 ms", "late max ms", "p99 vs plain", "caller CPU µs"],
    )
    figures: dict[str, object] = {"samples": samples, "timeout_s": TIMEOUT}
    for name, key, values in (
        ("threading.Event().wait(T), nobody sets it", "plain", plain),
        ("toolbus execute, timeout=T", "sync", sync),
        ("toolbus await aexecute, timeout=T", "async", loop),
    ):
        p50, p99, worst = _quantile(values, 0.5), _quantile(values, 0.99), max(values)
        ratio = p99 / base99 if base99 > 0 else float("nan")
        t.add(
            name,
            f"{p50 * 1000:.2f}",
            f"{p99 * 1000:.2f}",
            f"{worst * 1000:.2f}",
            "1" if key == "plain" else f"{ratio:.2f}×",
            f"{cpu[key] / samples / 1000:.0f}",
        )
        figures[key] = {
            "p50_ms": p50 * 1000,
            "p99_ms": p99 * 1000,
            "max_ms": worst * 1000,
            "p99_vs_plain": ratio,
            "caller_cpu_us": cpu[key] / samples / 1000,
        }
    t.notes.append(
        f"rounds interleaved; the CPU-bound thread spun {spinner.spins:,} times; "
        f"{stats.timeouts} timeouts, {stats.late_results} late results, "
        f"{stats.workers_started} workers started"
    )
    rep.table(t)
    rep.figure("lateness", "result", figures)
    worst_ratio = max(_quantile(sync, 0.99), _quantile(loop, 0.99)) / base99
    rep.goal("lateness_vs_event").set(
        worst_ratio,
        f"{worst_ratio:.2f}× (p99: plain {base99 * 1000:.2f} ms, execute "
        f"{_quantile(sync, 0.99) * 1000:.2f} ms, aexecute {_quantile(loop, 0.99) * 1000:.2f} ms)",
        worst_ratio <= GOAL,
    )
