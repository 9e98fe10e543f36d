"""Scenario 9: many async calls in flight.

10 000 calls of an async tool that does `await asyncio.sleep(0.05)`, at most
1 000 at a time: toolbus (one `aexecute_batch` of all of them; `asyncio.gather`
of one `aexecute` per call) against the floor, `asyncio.gather` of the same
coroutines through an `asyncio.Semaphore(1000)`, on the same event loop. The
ideal wall time is waves times sleep (10 000 / 1 000 * 50 ms = 0.5 s); efficiency is
ideal / wall.

Threads: the peak count of the process's OS threads during each run, sampled
every few milliseconds by a thread of its own (not counted). Each toolbus case
gets a fresh executor every round, started and warmed (one call per slot, so it
has what a long-lived executor has) before the clock starts and closed after it
stops: its threads are never alive while another case runs. Every case starts
its round after a `gc.collect()`, so none pays for the garbage of the one before.
"""

from __future__ import annotations

import asyncio
import gc
import math
import threading
import time
from collections.abc import Awaitable, Callable
from types import TracebackType

from toolbus import Executor, ToolCall, ToolRegistry

from ._common import Ctx, async_sleeper, os_threads
from ._harness import (
    Case,
    Ratio,
    Runner,
    Stat,
    clock,
    fmt_count,
    fmt_us,
    interleave,
    paired_ratio,
)
from ._report import Table

FLOOR = "asyncio.gather + Semaphore({}) of the same coroutines"
TB_BATCH = "toolbus await aexecute_batch (all calls)"
TB_GATHER = "toolbus asyncio.gather of aexecute"
GOAL_EFFICIENCY = 0.90  # of gather + semaphore's, round by round (the stretch goal)


class PeakThreads:
    """The most threads the process had while inside the `with` block, the sampler not counted."""

    def __init__(self, interval: float = 0.005) -> None:
        self.peak = 0
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-threads", daemon=True)

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, os_threads() - 1)
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> PeakThreads:
        self.peak = os_threads()
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.peak = max(self.peak, os_threads() - 1)  # the sampler is still alive here
        self._stop.set()
        self._thread.join()


class _Fresh:
    """A warmed executor for one round (`start` before it, `stop` after it)."""

    def __init__(
        self,
        registry: ToolRegistry,
        par: int,
        warm: list[ToolCall],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.registry, self.par, self.warm, self.loop = registry, par, warm, loop
        self.ex: Executor | None = None
        self._before: set[threading.Thread] = set()

    def start(self) -> None:
        self._before = set(threading.enumerate())
        ex = Executor(self.registry, max_parallel=self.par, timeout=60)
        ok = self.loop.run_until_complete(ex.aexecute_batch(self.warm)).summary.succeeded
        if ok != len(self.warm):
            raise RuntimeError(f"benchmark setup is broken: {len(self.warm) - ok} warm-ups failed")
        self.ex = ex
        gc.collect()  # a run of 10 000 calls leaves garbage: no case pays for another's

    def stop(self) -> None:
        """Close the executor and wait for its threads to end: the next case counts threads."""
        if self.ex is None:
            return
        self.ex.close()
        self.ex = None
        deadline = time.monotonic() + 30
        for t in set(threading.enumerate()) - self._before:
            t.join(max(0.0, deadline - time.monotonic()))


def run(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    n, par, nap = s.many_calls, s.many_parallel, s.many_sleep
    waves = math.ceil(n / par)
    ideal = waves * nap
    anap = async_sleeper(nap)
    registry = ToolRegistry()
    registry.tool(name="anap", read_only=True)(anap)
    calls = [ToolCall(name="anap", arguments={"i": i}) for i in range(n)]
    loop = asyncio.new_event_loop()
    fresh = _Fresh(registry, par, calls[:par], loop)
    peaks: dict[str, list[int]] = {}
    floor = FLOOR.format(par)
    threads_before = os_threads()

    def timed(name: str, go: Callable[[], Awaitable[int]]) -> Runner:
        def run_(count: int) -> list[float]:
            with PeakThreads() as peak:
                t0 = clock()
                ok = loop.run_until_complete(go())
                dt = clock() - t0
            if ok != n:
                raise RuntimeError(f"benchmark setup is broken: {name}: {n - ok} calls not ok")
            peaks.setdefault(name, []).append(peak.peak)
            return [dt / n]

        return run_

    async def gathered() -> int:
        sem = asyncio.Semaphore(par)

        async def one(i: int) -> int:
            async with sem:
                return await anap(i)

        out = await asyncio.gather(*(one(i) for i in range(n)))
        return sum(r == i for i, r in enumerate(out))

    async def tb_batch() -> int:
        assert fresh.ex is not None
        return (await fresh.ex.aexecute_batch(calls)).summary.succeeded

    async def tb_gather() -> int:
        ex = fresh.ex
        assert ex is not None
        out = await asyncio.gather(*(ex.aexecute(c) for c in calls))
        return sum(r.status == "ok" for r in out)

    cases = [
        Case(floor, timed(floor, gathered), before=gc.collect),
        Case(TB_BATCH, timed(TB_BATCH, tb_batch), before=fresh.start, after=fresh.stop),
        Case(TB_GATHER, timed(TB_GATHER, tb_gather), before=fresh.start, after=fresh.stop),
    ]
    try:
        stats = interleave(
            cases,
            rounds=s.many_rounds,
            budget_ms=0,
            fixed_ops={c.name: n for c in cases},
            warmed=peaks.clear,
        )
    finally:
        fresh.stop()
        loop.close()

    t = Table(
        f"{n:,} async calls that sleep {nap * 1000:.0f} ms, max_parallel={par}: "
        f"ideal {ideal * 1000:.0f} ms ({waves} waves)",
        [
            "case",
            "wall ms (median)",
            "best ms",
            "efficiency (ideal / wall)",
            "efficiency vs gather (IQR)",
            "CPU µs/call",
            "csw/call",
            "CPU vs gather (IQR)",
            "peak threads",
        ],
    )
    base = stats[floor]
    for name, st in stats.items():
        wall = st.median * n / 1e9
        eff = paired_ratio(base, st)
        t.add(
            name,
            f"{wall * 1000:.1f}",
            f"{min(st.samples) * n / 1e6:.1f}",
            f"{ideal / wall:.1%}",
            _pct(eff),
            fmt_us(st.cpu),
            fmt_count(st.csw),
            paired_ratio(st, base, "cpu"),
            max(peaks[name]),
        )
        rep.figure(
            "async10k",
            name,
            {
                **st.summary(),
                "wall_s_median": wall,
                "efficiency": ideal / wall,
                "efficiency_vs_floor": eff.as_dict(),
                "cpu_vs_floor": paired_ratio(st, base, "cpu").as_dict(),
                "peak_threads": peaks[name],
            },
        )
    rep.figure("async10k", "ideal_s", ideal)
    rep.figure("async10k", "threads_before", threads_before)
    t.notes.append(
        f"peak threads: the process's OS threads, the most seen in any round ({s.many_rounds}); "
        f"{threads_before} before the scenario started"
    )
    rep.table(t)
    _goals(ctx, stats, peaks, floor, ideal, n)


def _pct(r: Ratio) -> str:
    return f"{r.value:.1%} ({r.lo:.0%}–{r.hi:.0%})" if not math.isnan(r.value) else "–"


def _goals(
    ctx: Ctx, stats: dict[str, Stat], peaks: dict[str, list[int]], floor: str, ideal: float, n: int
) -> None:
    rep, base = ctx.report, stats[floor]
    base_eff = ideal / (base.median * n / 1e9)
    for key, name in (("many_async_batch", TB_BATCH), ("many_async_gather", TB_GATHER)):
        r = paired_ratio(base, stats[name])
        eff = ideal / (stats[name].median * n / 1e9)
        rep.goal(key).set(
            r.value,
            f"{r.value:.1%} (toolbus {eff:.1%}, gather {base_eff:.1%} of ideal)",
            r.value >= GOAL_EFFICIENCY,
        )
    floor_peak = max(peaks[floor])
    worst = max(*peaks[TB_BATCH], *peaks[TB_GATHER])
    rep.goal("many_async_threads").set(
        worst - floor_peak,
        f"{worst - floor_peak:+,} (toolbus {worst:,}, gather {floor_peak:,})",
        worst - floor_peak <= 10,
    )
