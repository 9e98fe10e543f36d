"""Scenarios 1 and 2: one blocking call, and a ten-call read-only batch.

The toolbus cases go through the whole pipeline: registry lookup, JSON parsing
(raw-argument case), validation, masking, events with no subscriber, and the
actor hops caller → supervisor → worker → caller.
"""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor

from toolbus import Executor, ToolCall

from ._common import Ctx, noop, noop_call, noop_registry
from ._harness import Case, Stat, async_per_op, fmt_ratio, fmt_us, interleave, paired_ratio, per_op
from ._report import Table
from .baselines import Baselines, toolnode

TPE = "ThreadPoolExecutor submit+result"
TB_ONE = "toolbus execute (dict arguments)"
TN_ONE = "LangGraph ToolNode.invoke (1 call)"
TPE_10 = "ThreadPoolExecutor(10): submit 10, gather"
TB_10 = "toolbus execute_batch (10 calls)"
TN_10 = "LangGraph ToolNode.invoke (10 calls)"


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"benchmark setup is broken: {what}")


def single(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    base = Baselines()
    loop = asyncio.new_event_loop()
    raw = ToolCall(name="noop", arguments='{"i": 1}')
    call = noop_call()
    try:
        with Executor(noop_registry(), max_parallel=16, timeout=30) as ex:
            _check(ex.execute(call).status == "ok", "noop did not return ok")
            cases = [base.direct(), base.thread_pool(), base.queue_handoff(), base.pykka_ask()]
            invoke, why = toolnode(1)
            if invoke is not None:
                cases.append(Case(TN_ONE, per_op(invoke), per_op=True))
            cases += [
                Case(TB_ONE, per_op(lambda i: ex.execute(call)), per_op=True),
                Case(
                    "toolbus execute (raw JSON arguments)",
                    per_op(lambda i: ex.execute(raw)),
                    per_op=True,
                ),
                Case(
                    "toolbus await aexecute (dict arguments)",
                    async_per_op(loop, lambda i: ex.aexecute(call)),
                    per_op=True,
                ),
            ]
            stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms)
    finally:
        base.close()
        loop.close()

    t = Table(
        "one call at a time, µs per call",
        ["case", "median", "p90", "p99", "vs ThreadPoolExecutor (IQR)", "samples"],
    )
    tpe = stats[TPE]
    for name, st in stats.items():
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(90)),
            fmt_us(st.pct(99)),
            paired_ratio(st, tpe),
            len(st.samples),
        )
    if invoke is None:
        t.add(TN_ONE, why, "", "", "", "")
    t.notes.append(
        "direct call is timed in blocks (a per-call clock would cost more than the call): no p99"
    )
    tb = stats[TB_ONE]
    vs_tpe = paired_ratio(tb, tpe)
    rep.goal("single_vs_tpe").set(
        vs_tpe.value, f"{fmt_ratio(vs_tpe.value)} ({fmt_us(tb.median)} µs)", vs_tpe.value <= 2
    )
    if invoke is not None:
        vs_tn = paired_ratio(stats[TN_ONE], tb)
        t.notes.append(f"LangGraph ToolNode (1 call) costs {vs_tn} toolbus execute")
        rep.goal("vs_toolnode_1").set(
            vs_tn.value, f"{fmt_ratio(vs_tn.value)} cheaper", vs_tn.value >= 10
        )
    else:
        rep.goal("vs_toolnode_1").skip(why)
    rep.table(t)
    _record(ctx, "single", stats, tpe)
    rep.series["single"] = {name: _subsample(st.samples) for name, st in stats.items() if st.per_op}


def batch(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(10, thread_name_prefix="bench-tpe10")
    calls = [noop_call(i) for i in range(10)]

    def tpe10(i: int) -> object:
        return [f.result() for f in [pool.submit(noop, k) for k in range(10)]]

    def one_by_one(i: int) -> object:
        return [ex.execute(c) for c in calls]

    try:
        with Executor(noop_registry(), max_parallel=16, timeout=30) as ex:
            _check(ex.execute_batch(calls).summary.succeeded == 10, "batch did not succeed")
            cases = [Case(TPE_10, per_op(tpe10), per_op=True)]
            invoke, why = toolnode(10)
            if invoke is not None:
                cases.append(Case(TN_10, per_op(invoke), per_op=True))
            cases += [
                Case(TB_10, per_op(lambda i: ex.execute_batch(calls)), per_op=True),
                Case(
                    "toolbus await aexecute_batch (10 calls)",
                    async_per_op(loop, lambda i: ex.aexecute_batch(calls)),
                    per_op=True,
                ),
                Case("toolbus 10 × execute, one after another", per_op(one_by_one), per_op=True),
            ]
            stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms * 2)
    finally:
        pool.shutdown()
        loop.close()

    t = Table(
        "ten read-only calls, µs",
        ["case", "median per batch", "p99 per batch", "per call", "vs ThreadPoolExecutor (IQR)"],
    )
    tpe = stats[TPE_10]
    for name, st in stats.items():
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(99)),
            fmt_us(st.median / 10),
            paired_ratio(st, tpe),
        )
    if invoke is None:
        t.add(TN_10, why, "", "", "")
    if invoke is not None:
        vs_tn = paired_ratio(stats[TN_10], stats[TB_10])
        t.notes.append(f"LangGraph ToolNode (10 calls) costs {vs_tn} toolbus execute_batch")
        rep.goal("vs_toolnode_10").set(
            vs_tn.value, f"{fmt_ratio(vs_tn.value)} cheaper", vs_tn.value >= 10
        )
    else:
        rep.goal("vs_toolnode_10").skip(why)
    rep.table(t)
    _record(ctx, "batch", stats, tpe)


def _record(ctx: Ctx, key: str, stats: dict[str, Stat], base: Stat) -> None:
    for name, st in stats.items():
        ctx.report.figure(
            key, name, {**st.summary(), "vs_baseline": paired_ratio(st, base).as_dict()}
        )
    ctx.report.figure(key, "baseline", base.name)


def _subsample(xs: list[float], k: int = 4000) -> list[float]:
    return xs if len(xs) <= k else random.Random(0).sample(xs, k)
