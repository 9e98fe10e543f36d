"""Scenario 14: the Ray backend: a warm call, and many async calls in flight.

Both against raw Ray in the same run, on one local Ray (`ray.init(num_cpus=2)`,
started here unless this process has one), which toolbus then uses as it is.

1. **A warm call, from a sync caller.** `execute` of a sync tool on a
   `RayBackend` (its pool of one warm actor) whose body is
   `benchmarks._common.noop`, against `ray.get(actor.noop.remote(i))` on a
   plain Ray actor doing the same; beside them an async tool on Ray against a
   raw async actor, and `await aexecute`. Wall time per call, this process's
   CPU per call (every thread), and the CPU of every process below this one
   (Ray's raylet, GCS and workers: the actors' share and Ray's own) per call.
2. **Many async calls in flight.** N calls of an async tool that sleeps
   (1 000 calls of 50 ms at `max_parallel=200`; its actor's `max_concurrency` 200),
   one `execute_batch`, against `asyncio.gather` of the same calls on a raw
   async actor with `max_concurrency=200`. Efficiency: raw wall / toolbus wall.

Skipped (goals marked so) when Ray is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import os
import statistics
import time
from typing import Any

from toolbus import Executor, ToolCall, ToolRegistry

from ._common import Ctx, async_sleeper, noop
from ._harness import (
    Case,
    Stat,
    async_per_op,
    fmt_count,
    fmt_ratio,
    fmt_us,
    interleave,
    once,
    paired_ratio,
    per_op,
)
from ._report import Table
from .process import ChildCPU

RAW = "ray.get(actor.noop.remote(i))"
TB = "toolbus execute, sync tool on Ray"
RAW_ASYNC = "ray.get(async actor.noop.remote(i))"
TB_ASYNC = "toolbus execute, async tool on Ray"
TB_AWAIT = "toolbus await aexecute, sync tool on Ray"
RAW_GATHER = "asyncio.gather of raw async-actor calls"
RAW_SEM = "the same, at most 200 in flight (a semaphore)"
TB_BATCH = "toolbus execute_batch, async tool on Ray"


async def _anoop(i: int) -> int:
    """Return i (async)."""
    return i


class RawNoop:
    """The raw baseline: a plain actor doing what the tool does."""

    def noop(self, i: int) -> int:
        return noop(i)


class RawAsync:
    async def noop(self, i: int) -> int:
        return i

    async def nap(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds


def run(ctx: Ctx) -> None:
    rep = ctx.report
    if importlib.util.find_spec("ray") is None:
        for key in ("ray_call_vs_raw", "ray_async_vs_gather"):
            rep.goal(key).skip("Ray is not installed (pip install 'toolbus[ray]')")
        rep.note("skipped: Ray is not installed")
        return
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = not ray.is_initialized()
    t0 = time.monotonic()
    if started:
        # Quiet: Ray's own INFO lines would break the report's tables.
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    rep.figure("ray", "ray_start_s", time.monotonic() - t0)
    try:
        warm(ctx, ray)
        many(ctx, ray)
    finally:
        if started:
            ray.shutdown()


def _options() -> dict[str, Any]:
    # As toolbus makes its actors: no restarts, no task retries.
    return {"max_restarts": 0, "max_task_retries": 0}


def warm(ctx: Ctx, ray: Any) -> None:
    from toolbus.backends import RayBackend

    s = ctx.scale
    reg = ToolRegistry()
    backend = RayBackend()
    reg.tool(read_only=True, backend=backend)(noop)
    reg.tool(name="anoop", read_only=True, backend=backend)(_anoop)
    raw = ray.remote(RawNoop).options(**_options()).remote()
    raw_async = ray.remote(RawAsync).options(**_options()).remote()
    call = ToolCall(name="noop", arguments={"i": 1})
    acall = ToolCall(name="anoop", arguments={"i": 1})
    loop = asyncio.new_event_loop()
    names = (RAW, TB, RAW_ASYNC, TB_ASYNC, TB_AWAIT)
    kids = {name: ChildCPU() for name in names}
    try:
        with Executor(reg, max_parallel=4, timeout=60) as ex:
            t0 = time.monotonic()
            first = ex.execute(call)  # the actor starts: a worker process imports the tool
            cold = time.monotonic() - t0
            if first.output != 1 or ex.execute(acall).output != 1:
                raise RuntimeError(f"benchmark setup is broken: the Ray tool gave {first}")
            if ray.get(raw.noop.remote(1)) != 1 or ray.get(raw_async.noop.remote(1)) != 1:
                raise RuntimeError("benchmark setup is broken: the raw actors")
            runs = {
                RAW: per_op(lambda i: ray.get(raw.noop.remote(i))),
                TB: per_op(lambda i: ex.execute(call)),
                RAW_ASYNC: per_op(lambda i: ray.get(raw_async.noop.remote(i))),
                TB_ASYNC: per_op(lambda i: ex.execute(acall)),
                TB_AWAIT: async_per_op(loop, lambda i: ex.aexecute(call)),
            }
            cases = [
                Case(n, r, per_op=True, before=kids[n].before, after=kids[n].after)
                for n, r in runs.items()
            ]

            def warmed() -> None:
                for k in kids.values():
                    k.rounds.clear()

            stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms * 5, warmed=warmed)
    finally:
        loop.close()
        ray.kill(raw)
        ray.kill(raw_async)
    _warm_report(ctx, stats, kids, cold)


def _warm_report(ctx: Ctx, stats: dict[str, Stat], kids: dict[str, ChildCPU], cold: float) -> None:
    rep = ctx.report
    t = Table(
        "a warm call, one at a time from a sync caller, µs per call (the same noop everywhere)",
        [
            "case",
            "median",
            "p90",
            "vs raw Ray (IQR)",
            "CPU µs (this process)",
            "CPU µs (Ray's processes)",
            "csw",
        ],
    )
    for name, st in stats.items():
        base = stats[RAW_ASYNC] if name == TB_ASYNC else stats[RAW]
        child = kids[name].per_op(st.ops)
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(90)),
            paired_ratio(st, base),
            fmt_us(st.cpu),
            fmt_us(statistics.median(child) if child else math.nan),
            fmt_count(st.csw),
        )
        rep.figure(
            "ray",
            name,
            {
                **st.summary(),
                "vs_baseline": paired_ratio(st, base).as_dict(),
                "cpu_vs_baseline": paired_ratio(st, base, "cpu").as_dict(),
                "children_cpu_ns_per_op": statistics.median(child) if child else math.nan,
            },
        )
    rep.figure("ray", "cold_first_call_ms", cold * 1000)
    t.notes += [
        "the async tool is compared with the raw async actor, every other case with the "
        "raw (sync) actor; the toolbus cases run the pipeline here (validation, events, "
        "the result) and await the ObjectRef on the executor's loop",
        "CPU (Ray's processes): /proc/<pid>/task/*/schedstat of every process below this "
        "one, read around each round: the actor's worker and Ray's raylet and GCS",
        f"the tool's first call (an actor starts and loads the tool): {cold * 1000:.0f} ms",
    ]
    rep.table(t)
    r = paired_ratio(stats[TB], stats[RAW])
    cpu = paired_ratio(stats[TB], stats[RAW], "cpu")
    rep.goal("ray_call_vs_raw").set(
        r.value,
        f"{fmt_ratio(r.value)} ({fmt_us(stats[TB].median)} vs {fmt_us(stats[RAW].median)} µs; "
        f"this process's CPU {fmt_ratio(cpu.value)}: {fmt_us(stats[TB].cpu)} vs "
        f"{fmt_us(stats[RAW].cpu)} µs)",
        r.value <= 1.5,
    )


def many(ctx: Ctx, ray: Any) -> None:
    from toolbus.backends import RayBackend

    s, rep = ctx.scale, ctx.report
    n, par, nap = s.ray_calls, s.ray_parallel, s.ray_sleep
    ideal = math.ceil(n / par) * nap
    reg = ToolRegistry()
    reg.tool(name="anap", read_only=True, backend=RayBackend())(async_sleeper(nap))
    raw = ray.remote(RawAsync).options(max_concurrency=par, **_options()).remote()
    calls = [ToolCall(name="anap", arguments={"i": i}) for i in range(n)]
    loop = asyncio.new_event_loop()

    def gather(count: int) -> None:
        async def go() -> None:
            await asyncio.gather(*(raw.nap.remote(nap) for _ in range(count)))

        loop.run_until_complete(go())

    def limited(count: int) -> None:
        async def one(sem: asyncio.Semaphore) -> None:
            async with sem:
                await raw.nap.remote(nap)

        async def go() -> None:
            sem = asyncio.Semaphore(par)
            await asyncio.gather(*(one(sem) for _ in range(count)))

        loop.run_until_complete(go())

    try:
        with Executor(reg, max_parallel=par, timeout=60) as ex:
            ok = ex.execute_batch(calls).summary.succeeded
            if ok != n:
                raise RuntimeError(f"benchmark setup is broken: {n - ok} Ray calls failed")
            gather(n)
            cases = [
                Case(RAW_GATHER, once(gather)),
                Case(TB_BATCH, once(lambda c: ex.execute_batch(calls))),
                Case(RAW_SEM.replace("200", str(par)), once(limited)),
            ]
            stats = interleave(
                cases, rounds=s.ray_rounds, budget_ms=0, fixed_ops={c.name: n for c in cases}
            )
    finally:
        loop.close()
        ray.kill(raw)
    t = Table(
        f"{n} async calls that sleep {nap * 1000:.0f} ms on Ray, {par} at a time: "
        f"ideal {ideal * 1000:.0f} ms",
        ["case", "wall ms (median)", "efficiency (ideal / wall)", "vs raw gather", "CPU µs/call"],
    )
    base = stats[RAW_GATHER]
    for name, st in stats.items():
        wall = st.median * n / 1e9
        eff = paired_ratio(base, st)
        t.add(name, f"{wall * 1000:.0f}", f"{ideal / wall:.1%}", f"{eff.value:.1%}", fmt_us(st.cpu))
        rep.figure(
            "ray",
            f"many: {name}",
            {**st.summary(), "wall_s": wall, "efficiency": ideal / wall, "vs_raw": eff.as_dict()},
        )
    t.notes.append(
        f"the raw gather submits every call at once (the actor runs {par} at a time); "
        "toolbus sends a call as a slot frees (max_parallel), each through the local "
        "pipeline, as the semaphore case does with raw calls"
    )
    rep.table(t)
    eff = paired_ratio(base, stats[TB_BATCH])
    rep.goal("ray_async_vs_gather").set(
        eff.value,
        f"{eff.value:.1%} of raw Ray ({stats[TB_BATCH].median * n / 1e6:.0f} vs "
        f"{base.median * n / 1e6:.0f} ms; CPU/call {fmt_us(stats[TB_BATCH].cpu)} vs "
        f"{fmt_us(base.cpu)} µs)",
        eff.value >= 0.9,
    )
