"""Scenario 6: cost as `max_parallel` grows, and as the registry grows.

- `max_parallel` 1, 4, 16, 64: one call at a time (latency must stay flat), and
  a closed loop of `max_parallel` asyncio tasks each awaiting one `aexecute`
  after another (so exactly `max_parallel` calls are in flight): noop calls
  (calls/s, and each call's latency under that load) and 1 ms sleeping calls
  (calls/s against the ideal `max_parallel` * 1 000/s).
- 1 → 1 000 registered tools: one call at a time to the last tool registered
  (must stay flat), and a call to an unknown tool (the error path suggests close
  names, so it scans the registry: it is expected to grow).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from toolbus import Executor, ToolCall, ToolRegistry

from ._common import Ctx, noop_call, noop_registry
from ._harness import (
    Case,
    Runner,
    clock,
    fmt_count,
    fmt_rate,
    fmt_us,
    interleave,
    paired_ratio,
    per_op,
    per_second,
    percentile,
)
from ._report import Table

NAP = 0.001


def _registry() -> ToolRegistry:
    reg = noop_registry()

    @reg.tool(name="nap", read_only=True)
    def nap(i: int) -> int:
        """Sleep 1 ms, then return i."""
        time.sleep(NAP)
        return i

    return reg


async def _all(coros: Iterable[Coroutine[Any, Any, None]]) -> None:
    await asyncio.gather(*coros)


def _clear(lists: dict[int, list[float]]) -> None:
    for xs in lists.values():
        xs.clear()


def _slashed(fmt: Callable[[float], str], *xs: float) -> str:
    return " / ".join(fmt(x) for x in xs)


def _execute(ex: Executor, call: ToolCall) -> Runner:
    return per_op(lambda i: ex.execute(call))


def run(ctx: Ctx) -> None:
    _parallel(ctx)
    _registry_size(ctx)


def _parallel(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    loop = asyncio.new_event_loop()
    levels = s.parallel_levels
    executors = {p: Executor(_registry(), max_parallel=p, timeout=30) for p in levels}
    loaded: dict[int, list[float]] = {p: [] for p in levels}  # per-call latency under load
    call = noop_call()

    def closed_loop(ex: Executor, name: str, conc: int, record: list[float] | None) -> Runner:
        """`conc` tasks, each awaiting one call after another: `conc` calls always in flight."""

        async def caller(k: int, count: int) -> None:
            c = ToolCall(name=name, arguments={"i": k})
            for _ in range(count):
                t0 = clock()
                await ex.aexecute(c)
                if record is not None:
                    record.append(clock() - t0)

        def go(n: int) -> list[float]:
            # exactly n calls, so that the round's CPU divides by the calls made
            share = [n // conc + (1 if k < n % conc else 0) for k in range(conc)]
            t0 = clock()
            loop.run_until_complete(_all(caller(k, share[k]) for k in range(conc)))
            return [(clock() - t0) / n]

        return go

    cases: list[Case] = []
    for p, ex in executors.items():
        cases += [
            Case(f"single p={p}", _execute(ex, call), per_op=True),
            Case(f"noop p={p}", closed_loop(ex, "noop", p, loaded[p]), min_ops=max(200, 8 * p)),
            Case(f"nap p={p}", closed_loop(ex, "nap", p, None), min_ops=max(20, 4 * p)),
        ]
    try:
        stats = interleave(
            cases,
            rounds=s.rounds,
            budget_ms=s.budget_ms * 2,
            warmed=lambda: _clear(loaded),
        )
    finally:
        for ex in executors.values():
            ex.close()
        loop.close()

    t = Table(
        "max_parallel: latency of one call, pipelined throughput",
        [
            "max_parallel",
            "one call µs",
            "p99 µs",
            "vs p=1",
            "noop calls/s",
            "loaded latency p50/p99 µs",
            "1 ms sleeps/s",
            "of ideal",
            "CPU µs/call: one / noop / nap",
            "csw/call: one / noop / nap",
        ],
    )
    first = levels[0]
    series: dict[str, list[float]] = {
        "levels": list(levels),
        "single_us": [],
        "noop": [],
        "nap": [],
    }
    for p in levels:
        one, noop, nap = stats[f"single p={p}"], stats[f"noop p={p}"], stats[f"nap p={p}"]
        lat = loaded[p]
        nap_rate = per_second(nap.median)
        ideal = p / NAP
        t.add(
            p,
            fmt_us(one.median),
            fmt_us(one.pct(99)),
            paired_ratio(one, stats[f"single p={first}"]),
            fmt_rate(per_second(noop.median)),
            f"{fmt_us(percentile(lat, 50))} / {fmt_us(percentile(lat, 99))}",
            fmt_rate(nap_rate),
            f"{nap_rate / ideal:.0%}",
            _slashed(fmt_us, one.cpu, noop.cpu, nap.cpu),
            _slashed(fmt_count, one.csw, noop.csw, nap.csw),
        )
        series["single_us"].append(one.median / 1000)
        series["noop"].append(per_second(noop.median))
        series["nap"].append(nap_rate)
        rep.figure(
            "scaling",
            f"max_parallel={p}",
            {
                "single": one.summary(),
                "noop_calls_per_s": per_second(noop.median),
                "noop_latency_under_load_ns": {
                    "p50": percentile(lat, 50),
                    "p99": percentile(lat, 99),
                },
                "nap_calls_per_s": nap_rate,
                "nap_ideal_per_s": ideal,
                "noop": noop.summary(),
                "nap": nap.summary(),
            },
        )
    t.notes.append(
        "pipelined: max_parallel asyncio tasks each await one aexecute after another, so "
        "max_parallel calls are always in flight; loaded latency is each of those calls"
    )
    rep.table(t)
    rep.series["parallel"] = series


def _registry_size(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    sizes = s.registry_sizes
    executors: dict[int, Executor] = {}
    cases: list[Case] = []
    for n in sizes:
        ex = executors[n] = Executor(noop_registry(n), max_parallel=16, timeout=30)
        last = noop_call(1, "noop" if n == 1 else f"noop_{n - 1}")
        unknown = noop_call(1, "noop_unknown_tool")
        if ex.execute(last).status != "ok":
            raise RuntimeError("benchmark setup is broken: the last tool did not return ok")
        cases += [
            Case(f"tools={n}", _execute(ex, last), per_op=True),
            Case(f"unknown tools={n}", _execute(ex, unknown), per_op=True),
        ]
    try:
        stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms)
    finally:
        for ex in executors.values():
            ex.close()

    t = Table(
        "registered tools: one call at a time, µs per call",
        [
            "tools",
            "call median",
            "p99",
            "vs 1 tool",
            "unknown tool median",
            "vs 1 tool",
            "CPU µs: call / unknown",
            "csw: call / unknown",
        ],
    )
    one, unk = stats[f"tools={sizes[0]}"], stats[f"unknown tools={sizes[0]}"]
    series: dict[str, list[float]] = {"sizes": list(sizes), "call_us": [], "unknown_us": []}
    for n in sizes:
        st, su = stats[f"tools={n}"], stats[f"unknown tools={n}"]
        t.add(
            n,
            fmt_us(st.median),
            fmt_us(st.pct(99)),
            paired_ratio(st, one),
            fmt_us(su.median),
            paired_ratio(su, unk),
            _slashed(fmt_us, st.cpu, su.cpu),
            _slashed(fmt_count, st.csw, su.csw),
        )
        series["call_us"].append(st.median / 1000)
        series["unknown_us"].append(su.median / 1000)
        rep.figure(
            "scaling",
            f"tools={n}",
            {
                "call": st.summary(),
                "call_vs_1": paired_ratio(st, one).as_dict(),
                "unknown_tool": su.summary(),
                "unknown_vs_1": paired_ratio(su, unk).as_dict(),
            },
        )
    t.notes.append("the call goes to the tool registered last; unknown tools get close-name hints")
    rep.table(t)
    rep.series["registry"] = series
