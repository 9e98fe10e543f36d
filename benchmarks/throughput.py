"""Scenarios 3 and 4: many calls in flight at once, and I/O-bound efficiency.

Scenario 3's goals are same-run ratios of calls/s, each toolbus case over its
yardstick at the same concurrency: `execute` of the sync noop from the scale's
caller threads over a `ThreadPoolExecutor(16)` driven by as many threads, each
doing submit + result one at a time; a gather of `aexecute` of the async noop
(`max_parallel=16`) over a gather of the bare coroutine under a `Semaphore(16)`.

Scenario 4 is the issue's "1 000 calls of 50 ms (sync) at max_parallel=100": toolbus
against `ThreadPoolExecutor(100)`, the goal stated as a share of the pool's own
efficiency in the same rounds.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from toolbus import Executor, ToolCall

from ._common import Ctx, anoop, noop, noop_call, noop_registry, sleep_registry
from ._harness import (
    Case,
    Stat,
    fmt_rate,
    fmt_ratio,
    fmt_us,
    interleave,
    once,
    paired_ratio,
    per_second,
    usage_cells,
)
from ._report import Table

TPE_BURST = "ThreadPoolExecutor(16): submit all, then gather"
TPE_THREADS = "ThreadPoolExecutor(16) from {} threads, submit+result each"
SEM_GATHER = "asyncio.gather + Semaphore(16) of the async noop"
# What any executor that frees a caller at its deadline pays on a loop at the
# least: the tool in a task of its own (a tool may ignore its cancellation and
# run on), its caller told through a future of its own. No validation, no
# result, no scheduling: the gather goal's floor, measured beside it.
FLOOR_GATHER = "the same, each noop in a task of its own, its caller told by a future"
SYNC_THREADS = "toolbus execute from {} threads"
ASYNC_GATHER = "toolbus asyncio.gather of aexecute (async noop)"
TB_BATCH = "toolbus one execute_batch of all the calls"
# The goals: toolbus's calls/s over its yardstick's, the same run, round by round.
GOAL_SYNC_VS_TPE = 0.6
GOAL_ASYNC_VS_GATHER = 0.8


class _Calls:
    """Distinct noop calls, `n` at a time, built outside the timed rounds once sized."""

    def __init__(self, name: str = "noop") -> None:
        self._name = name
        self._calls: list[ToolCall] = []

    def __call__(self, n: int) -> list[ToolCall]:
        if len(self._calls) != n:
            self._calls = [noop_call(i, name=self._name) for i in range(n)]
        return self._calls


def _on_threads(n: int, threads: int, work: Callable[[int, int], object]) -> None:
    """`work(k, count)` on `threads` threads at once, the n operations shared out."""
    share = [n // threads + (1 if k < n % threads else 0) for k in range(threads)]
    ts = [threading.Thread(target=work, args=(k, share[k])) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def pipelined(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(16, thread_name_prefix="bench-tpe16")
    calls, acalls = _Calls(), _Calls("anoop")
    threads = s.pipe_threads
    sync_name, tpe_threads = SYNC_THREADS.format(threads), TPE_THREADS.format(threads)
    registry = noop_registry()
    registry.tool(read_only=True)(anoop)
    ex = Executor(registry, max_parallel=16, timeout=30)

    def tpe_burst(n: int) -> None:
        for f in [pool.submit(noop, i) for i in range(n)]:
            f.result()

    def tpe_async(n: int) -> None:
        async def go() -> None:
            await asyncio.gather(*(loop.run_in_executor(pool, noop, i) for i in range(n)))

        loop.run_until_complete(go())

    def tpe_from_threads(n: int) -> None:
        def work(k: int, count: int) -> None:
            for _ in range(count):
                pool.submit(noop, k).result()

        _on_threads(n, threads, work)

    def sem_gather(n: int) -> None:
        async def go() -> None:
            sem = asyncio.Semaphore(16)

            async def one(i: int) -> int:
                async with sem:
                    return await anoop(i)

            await asyncio.gather(*(one(i) for i in range(n)))

        loop.run_until_complete(go())

    def floor_gather(n: int) -> None:
        async def go() -> None:
            sem = asyncio.Semaphore(16)
            running = asyncio.get_running_loop()

            def tell(done: asyncio.Future[int], task: asyncio.Task[int]) -> None:
                if not done.done():
                    done.set_result(task.result())

            async def one(i: int) -> int:
                async with sem:
                    done: asyncio.Future[int] = running.create_future()
                    running.create_task(anoop(i)).add_done_callback(functools.partial(tell, done))
                    return await done

            await asyncio.gather(*(one(i) for i in range(n)))

        loop.run_until_complete(go())

    def from_threads(n: int) -> None:
        def work(k: int, count: int) -> None:
            call = noop_call(k)
            for _ in range(count):
                ex.execute(call)

        _on_threads(n, threads, work)

    def gather(n: int) -> None:
        batch = acalls(n)

        async def go() -> None:
            await asyncio.gather(*(ex.aexecute(c) for c in batch))

        loop.run_until_complete(go())

    try:
        if ex.execute(noop_call(0, name="anoop")).status != "ok":
            raise RuntimeError("benchmark setup is broken: the async noop failed")
        cases = [
            Case(TPE_BURST, once(tpe_burst), min_ops=500),
            Case("asyncio.gather of run_in_executor (same pool)", once(tpe_async), min_ops=500),
            Case(tpe_threads, once(tpe_from_threads), min_ops=500),
            Case(SEM_GATHER, once(sem_gather), min_ops=500),
            Case(FLOOR_GATHER, once(floor_gather), min_ops=500),
            Case(sync_name, once(from_threads), min_ops=500),
            Case(ASYNC_GATHER, once(gather), min_ops=500),
            Case(TB_BATCH, once(lambda n: ex.execute_batch(calls(n))), min_ops=500),
        ]
        stats = interleave(cases, rounds=s.pipe_rounds, budget_ms=s.pipe_budget_ms)
        peak = ex.stats().peak_in_flight
    finally:
        ex.close()
        pool.shutdown()
        loop.close()

    # toolbus against its yardstick: the yardstick's time per call over toolbus's,
    # round by round, is toolbus's calls/s over the yardstick's.
    pairs = {sync_name: tpe_threads, ASYNC_GATHER: SEM_GATHER}
    vs = {tb: paired_ratio(stats[y], stats[tb]) for tb, y in pairs.items()}
    floor = paired_ratio(stats[SEM_GATHER], stats[FLOOR_GATHER])  # (not a goal: its ceiling)
    cpu_vs = {tb: paired_ratio(stats[tb], stats[y], "cpu") for tb, y in pairs.items()}
    t = Table(
        "noop calls in flight at once (max_parallel=16)",
        [
            "case",
            "calls/s",
            "µs per call",
            "CPU µs/call",
            "csw/call",
            "throughput vs TPE burst (IQR)",
            "CPU vs TPE burst (IQR)",
            "calls per round",
        ],
    )
    base = stats[TPE_BURST]
    for name, st in stats.items():
        cpu, csw, cpu_burst = usage_cells(st, base)
        t.add(
            name,
            fmt_rate(per_second(st.median)),
            fmt_us(st.median),
            cpu,
            csw,
            paired_ratio(base, st),
            cpu_burst,
            st.ops,
        )
        fig = {
            **st.summary(),
            "calls_per_s": per_second(st.median),
            "throughput_vs_tpe": paired_ratio(base, st).as_dict(),
            "cpu_vs_tpe": paired_ratio(st, base, "cpu").as_dict(),
        }
        if name == FLOOR_GATHER:
            fig["floor_vs_gather"] = floor.as_dict()
        if name in pairs:
            fig["yardstick"] = pairs[name]
            fig["throughput_vs_yardstick"] = vs[name].as_dict()
            fig["cpu_vs_yardstick"] = cpu_vs[name].as_dict()
        rep.figure("pipelined", name, fig)
    for tb, y in pairs.items():
        t.notes.append(f"{tb}: {vs[tb]} the calls/s of {y}; CPU per call {cpu_vs[tb]} its")
    t.notes.append(
        f"{FLOOR_GATHER}: {floor} the calls/s of {SEM_GATHER} (the least a caller freed at "
        f"its deadline costs; the goal asks toolbus for {fmt_ratio(GOAL_ASYNC_VS_GATHER)})"
    )
    t.notes.append(
        f"peak calls in flight in toolbus: {peak}; the async noop's calls run on the "
        "caller's loop, the sync noop's on tool workers"
    )
    rep.table(t)
    for key, tb, target, who in (
        ("pipelined_sync_vs_tpe", sync_name, GOAL_SYNC_VS_TPE, "pool"),
        ("pipelined_async_vs_gather", ASYNC_GATHER, GOAL_ASYNC_VS_GATHER, "gather"),
    ):
        r = vs[tb]
        rate, yard = per_second(stats[tb].median), per_second(stats[pairs[tb]].median)
        rep.goal(key).set(
            r.value,
            f"{fmt_ratio(r.value)} (toolbus {fmt_rate(rate)}, {who} {fmt_rate(yard)} calls/s; "
            f"CPU {fmt_ratio(cpu_vs[tb].value)})",
            r.value >= target,
        )


def io_bound(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    n, par, nap = s.io_calls, s.io_parallel, s.io_sleep
    ideal = math.ceil(n / par) * nap
    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(par, thread_name_prefix="bench-io")
    naps = [ToolCall(name="nap", arguments={"i": i}) for i in range(n)]
    anaps = [ToolCall(name="anap", arguments={"i": i}) for i in range(n)]

    def sleep(i: int) -> int:
        time.sleep(nap)
        return i

    def gather(count: int) -> None:
        async def go() -> None:
            await asyncio.gather(*(ex.aexecute(c) for c in naps))

        loop.run_until_complete(go())

    ex = Executor(sleep_registry(nap), max_parallel=par, timeout=30)
    try:
        ok = ex.execute_batch(naps).summary.succeeded + ex.execute_batch(anaps).summary.succeeded
        if ok != 2 * n:
            raise RuntimeError(f"benchmark setup is broken: {2 * n - ok} sleep calls failed")
        sync_batch = "toolbus execute_batch (sync tool, time.sleep)"
        cases = [
            Case(f"ThreadPoolExecutor({par}).map", once(lambda c: list(pool.map(sleep, range(c))))),
            Case(sync_batch, once(lambda c: ex.execute_batch(naps))),
            Case("toolbus asyncio.gather of aexecute (sync tool)", once(gather)),
            Case(
                "toolbus execute_batch (async tool, asyncio.sleep)",
                once(lambda c: ex.execute_batch(anaps)),
            ),
        ]
        stats = interleave(
            cases,
            rounds=s.io_rounds,
            budget_ms=0,
            fixed_ops={c.name: n for c in cases},
        )
        peak = ex.stats().peak_in_flight
    finally:
        ex.close()
        pool.shutdown()
        loop.close()

    t = Table(
        f"{n} calls that sleep {nap * 1000:.0f} ms, max_parallel={par}: "
        f"ideal {ideal * 1000:.0f} ms ({math.ceil(n / par)} waves)",
        [
            "case",
            "wall ms (median)",
            "best ms",
            "efficiency (ideal / wall)",
            "efficiency vs TPE (IQR)",
            "CPU µs/call",
            "csw/call",
            "CPU vs TPE (IQR)",
        ],
    )
    base = next(iter(stats.values()))
    for name, st in stats.items():
        wall = st.median * n / 1e9
        eff = paired_ratio(base, st)
        t.add(
            name,
            f"{wall * 1000:.1f}",
            f"{min(st.samples) * n / 1e6:.1f}",
            f"{ideal / wall:.1%}",
            f"{eff.value:.1%} ({eff.lo:.0%}–{eff.hi:.0%})",
            *usage_cells(st, base),
        )
        rep.figure(
            "io",
            name,
            {
                **st.summary(),
                **_wall(st, n),
                "efficiency": ideal / wall,
                "vs_tpe": paired_ratio(st, base).as_dict(),
                "efficiency_vs_tpe": eff.as_dict(),
                "cpu_vs_tpe": paired_ratio(st, base, "cpu").as_dict(),
            },
        )
    rep.figure("io", "ideal_s", ideal)
    t.notes.append(
        f"peak calls in flight in toolbus: {peak}; rounds: {s.io_rounds}; efficiency vs TPE: "
        "the pool's wall time over the case's, round by round"
    )
    rep.table(t)
    share = paired_ratio(base, stats[sync_batch])
    eff_tb, eff_tpe = ideal / (stats[sync_batch].median * n / 1e9), ideal / (base.median * n / 1e9)
    rep.goal("io_vs_tpe").set(
        share.value,
        f"{share.value:.1%} (toolbus {eff_tb:.1%}, pool {eff_tpe:.1%} of ideal)",
        share.value >= 0.98,
    )


def _wall(st: Stat, n: int) -> dict[str, float]:
    return {
        "wall_s_median": st.median * n / 1e9,
        "wall_s_best": min(st.samples) * n / 1e9,
        "rounds": len(st.rounds),
    }
