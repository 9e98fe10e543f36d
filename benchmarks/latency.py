"""Scenarios 1 and 2: one blocking call, and a ten-call read-only batch.

The toolbus cases go through the whole pipeline: registry lookup, JSON parsing
(raw-argument case), validation, masking, events with no subscriber, and the
actor hops. Beside them, in the same rounds: the bare baselines, and the peers'
own tool paths (LangGraph's `ToolNode`, pydantic-ai's net cost of one tool call,
the OpenAI Agents SDK's function tools, 10 gathered).
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from toolbus import Executor, ToolCall

from . import _reference
from ._common import Ctx, noop, noop_call, noop_registry
from ._harness import (
    Case,
    Metric,
    Ratio,
    Stat,
    async_per_op,
    fmt_count,
    fmt_ratio,
    fmt_us,
    interleave,
    paired_diff,
    paired_net_ratio,
    paired_ratio,
    per_op,
    usage_cells,
)
from ._report import Table
from .baselines import Baselines, toolbus_node, toolnode
from .peers import agents_gather, close_loop, pydantic_ai_turns

TPE = "ThreadPoolExecutor submit+result"
TB_ONE = "toolbus execute (dict arguments)"
TN_ONE = "LangGraph ToolNode.invoke (1 call)"
TBN_ONE = "toolbus ToolbusNode.invoke (1 call)"
PA_WITH = "pydantic-ai Agent.run, one tool call"
PA_WITHOUT = "pydantic-ai Agent.run, no tool call"
PA_NET = "pydantic-ai, net per tool call"
TPE_10 = "ThreadPoolExecutor(10): submit 10, gather"
TB_10 = "toolbus execute_batch (10 calls)"
TB_A10 = "toolbus await aexecute_batch (10 calls)"
TB_A10_ASYNC = "toolbus await aexecute_batch (10 calls of an async tool)"
TN_10 = "LangGraph ToolNode.invoke (10 calls)"
TBN_10 = "toolbus ToolbusNode.invoke (10 calls)"
TBN_10_RO = "toolbus ToolbusNode.invoke (10 calls, read_only=True)"
OA_SYNC = "OpenAI Agents SDK on_invoke_tool, sync function, 10 gathered"
OA_ASYNC = "OpenAI Agents SDK on_invoke_tool, async function, 10 gathered"


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"benchmark setup is broken: {what}")


def _cheaper(ctx: Ctx, key: str, peer: Stat, tb: Stat, of: Metric) -> Ratio:
    """Set goal `key` (the peer costs at least 10 times toolbus in `of`); return the ratio."""
    r = paired_ratio(peer, tb, of)
    ctx.report.goal(key).set(r.value, f"{fmt_ratio(r.value)} cheaper", r.value >= 10)
    return r


def _node_goal(ctx: Ctx, key: str, stats: dict[str, Stat], peer: str, tbn: str, why: str) -> str:
    """Goal `key`: ToolbusNode costs at most a fifth of ToolNode's CPU per call."""
    goal = ctx.report.goal(key)
    if peer not in stats or tbn not in stats:
        goal.skip(why or "LangGraph not installed")
        return ""
    r = paired_ratio(stats[peer], stats[tbn], "cpu")
    goal.set(r.value, f"{fmt_ratio(r.value)} less CPU", r.value >= 5)
    return f"ToolbusNode costs {r} less CPU than LangGraph's ToolNode on the same input"


def single(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    base = Baselines()
    loop = asyncio.new_event_loop()
    raw = ToolCall(name="noop", arguments='{"i": 1}')
    call = noop_call()
    node_invoke, close_node, node_why = toolbus_node(1)
    try:
        with Executor(noop_registry(), max_parallel=16, timeout=30) as ex:
            _check(ex.execute(call).status == "ok", "noop did not return ok")
            cases = [base.direct(), base.thread_pool(), base.queue_handoff(), base.pykka_ask()]
            invoke, why = toolnode(1)
            if invoke is not None:
                cases.append(Case(TN_ONE, per_op(invoke), per_op=True))
            if node_invoke is not None:
                cases.append(Case(TBN_ONE, per_op(node_invoke), per_op=True))
            turns, pa_why = pydantic_ai_turns(loop)
            if turns is not None:
                cases += [
                    Case(PA_WITH, per_op(turns[0]), per_op=True),
                    Case(PA_WITHOUT, per_op(turns[1]), per_op=True),
                ]
            else:
                rep.note(f"pydantic-ai {pa_why}")
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
        close_node()
        close_loop(loop)

    t = Table(
        "one call at a time, µs per call",
        [
            "case",
            "median",
            "p90",
            "p99",
            "CPU µs",
            "csw",
            "vs ThreadPoolExecutor (IQR)",
            "CPU vs ThreadPoolExecutor (IQR)",
            "samples",
        ],
    )
    tpe = stats[TPE]
    for name, st in stats.items():
        cpu, csw, cpu_vs = usage_cells(st, tpe)
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(90)),
            fmt_us(st.pct(99)),
            cpu,
            csw,
            paired_ratio(st, tpe),
            cpu_vs,
            len(st.samples),
        )
    tb = stats[TB_ONE]
    if turns is not None:
        w, o = stats[PA_WITH], stats[PA_WITHOUT]
        t.add(
            PA_NET + " (with − without)",
            fmt_us(paired_diff(w, o)),
            "",
            "",
            fmt_us(paired_diff(w, o, "cpu")),
            fmt_count(paired_diff(w, o, "csw")),
            paired_net_ratio(w, o, tpe),
            paired_net_ratio(w, o, tpe, "cpu"),
            "",
        )
        t.notes.append(
            f"pydantic-ai's net tool call costs {paired_net_ratio(w, o, tb)} toolbus execute "
            f"(wall), {paired_net_ratio(w, o, tb, 'cpu')} (CPU); it includes the model turn "
            "that hands the tool's result back"
        )
        ctx.report.figure(
            "single",
            PA_NET,
            {
                "wall_ns": paired_diff(w, o),
                "cpu_ns": paired_diff(w, o, "cpu"),
                "csw": paired_diff(w, o, "csw"),
                "vs_toolbus_execute": paired_net_ratio(w, o, tb).as_dict(),
                "cpu_vs_toolbus_execute": paired_net_ratio(w, o, tb, "cpu").as_dict(),
            },
        )
    else:
        t.add(PA_NET, pa_why, *[""] * 7)
    if invoke is None:
        t.add(TN_ONE, why, *[""] * 7)
    if node_invoke is None:
        t.add(TBN_ONE, node_why, *[""] * 7)
    note = _node_goal(ctx, "toolbusnode_1_cpu", stats, TN_ONE, TBN_ONE, why or node_why)
    if note:
        t.notes.append(note + " (one call)")
    t.notes.append(
        "direct call is timed in blocks (a per-call clock would cost more than the call): no p99"
    )
    t.notes.append(
        "CPU: the whole process's CPU time over the round (every thread), per call; "
        "csw: its context switches (voluntary + involuntary) per call"
    )
    vs_tpe = paired_ratio(tb, tpe)
    rep.goal("single_vs_tpe").set(
        vs_tpe.value, f"{fmt_ratio(vs_tpe.value)} ({fmt_us(tb.median)} µs)", vs_tpe.value <= 2
    )
    cpu_tpe = paired_ratio(tb, tpe, "cpu")
    rep.goal("single_cpu_vs_tpe").set(
        cpu_tpe.value,
        f"{fmt_ratio(cpu_tpe.value)} (toolbus {fmt_us(tb.cpu)}, pool {fmt_us(tpe.cpu)} µs)",
        cpu_tpe.value <= 2,
    )
    if invoke is not None:
        tn = stats[TN_ONE]
        vs_tn = _cheaper(ctx, "vs_toolnode_1", tn, tb, "wall")
        cpu_tn = _cheaper(ctx, "vs_toolnode_1_cpu", tn, tb, "cpu")
        t.notes.append(f"LangGraph ToolNode (1 call) costs {vs_tn} toolbus execute, CPU {cpu_tn}")
    else:
        rep.goal("vs_toolnode_1").skip(why)
        rep.goal("vs_toolnode_1_cpu").skip(why)
    rep.table(t)
    _record(ctx, "single", stats, tpe)
    rep.series["single"] = {name: _subsample(st.samples) for name, st in stats.items() if st.per_op}


def batch(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(10, thread_name_prefix="bench-tpe10")
    calls = [noop_call(i) for i in range(10)]
    acalls = [noop_call(i, name="anoop") for i in range(10)]
    registry = noop_registry()

    @registry.tool(read_only=True)
    async def anoop(i: int) -> int:
        """Return i (an async tool: no thread)."""
        return i

    def tpe10(i: int) -> object:
        return [f.result() for f in [pool.submit(noop, k) for k in range(10)]]

    def one_by_one(i: int) -> object:
        return [ex.execute(c) for c in calls]

    skipped: list[tuple[str, str]] = []
    closers: list[Callable[[], None]] = []
    try:
        with Executor(registry, max_parallel=16, timeout=30) as ex:
            _check(ex.execute_batch(calls).summary.succeeded == 10, "batch did not succeed")
            _check(ex.execute_batch(acalls).summary.succeeded == 10, "batch did not succeed")
            cases = [Case(TPE_10, per_op(tpe10), per_op=True)]
            peers = [
                (TN_10, toolnode(10)),
                (OA_SYNC, agents_gather(loop, 10, is_async=False)),
                (OA_ASYNC, agents_gather(loop, 10, is_async=True)),
            ]
            for read_only, name in ((False, TBN_10), (True, TBN_10_RO)):
                node_invoke, close_node, node_why = toolbus_node(10, read_only=read_only)
                closers.append(close_node)
                peers.append((name, (node_invoke, node_why)))
            for name, (invoke, why) in peers:
                if invoke is not None:
                    cases.append(Case(name, per_op(invoke), per_op=True))
                else:
                    skipped.append((name, why))
                    rep.note(f"{name}: {why}")
            cases += [
                Case(TB_10, per_op(lambda i: ex.execute_batch(calls)), per_op=True),
                Case(TB_A10, async_per_op(loop, lambda i: ex.aexecute_batch(calls)), per_op=True),
                Case(
                    TB_A10_ASYNC,
                    async_per_op(loop, lambda i: ex.aexecute_batch(acalls)),
                    per_op=True,
                ),
                Case("toolbus 10 × execute, one after another", per_op(one_by_one), per_op=True),
            ]
            stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms * 2)
    finally:
        pool.shutdown()
        for close in closers:
            close()
        close_loop(loop)

    t = Table(
        "ten read-only calls, µs",
        [
            "case",
            "median per batch",
            "p99 per batch",
            "per call",
            "CPU µs/call",
            "csw/call",
            "vs ThreadPoolExecutor (IQR)",
            "CPU vs ThreadPoolExecutor (IQR)",
        ],
    )
    tpe = stats[TPE_10]
    for name, st in stats.items():
        cpu, csw, cpu_vs = usage_cells(st, tpe, per=10)
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(99)),
            fmt_us(st.median / 10),
            cpu,
            csw,
            paired_ratio(st, tpe),
            cpu_vs,
        )
    for name, why in skipped:
        t.add(name, why, *[""] * 6)
    _batch_goals(ctx, stats, t)
    rep.table(t)
    _record(ctx, "batch", stats, tpe)


def _batch_goals(ctx: Ctx, stats: dict[str, Stat], t: Table) -> None:
    rep = ctx.report
    # The SDK's async path runs an async function: compare with toolbus's on one.
    tb, tba, tpe = stats[TB_10], stats[TB_A10_ASYNC], stats[TPE_10]
    if TN_10 in stats:
        vs_tn = _cheaper(ctx, "vs_toolnode_10", stats[TN_10], tb, "wall")
        cpu_tn = _cheaper(ctx, "vs_toolnode_10_cpu", stats[TN_10], tb, "cpu")
        t.notes.append(
            f"LangGraph ToolNode (10 calls) costs {vs_tn} toolbus execute_batch, CPU {cpu_tn}"
        )
    else:
        for key in ("vs_toolnode_10", "vs_toolnode_10_cpu"):
            rep.goal(key).skip("LangGraph not installed")
    note = _node_goal(ctx, "toolbusnode_10_cpu", stats, TN_10, TBN_10, "")
    if note:
        t.notes.append(note + " (ten calls of a mutating tool, run in order)")
    if TN_10 in stats and TBN_10_RO in stats:
        r = paired_ratio(stats[TN_10], stats[TBN_10_RO], "cpu")
        t.notes.append(f"read-only, in parallel: {r} less CPU than ToolNode")
    if OA_SYNC in stats:
        r = paired_ratio(stats[OA_SYNC], tb, "cpu")
        rep.goal("agents_sync_vs_batch_cpu").set(
            r.value,
            f"{fmt_ratio(r.value)} cheaper (toolbus {fmt_us(tb.cpu / 10)}, "
            f"SDK {fmt_us(stats[OA_SYNC].cpu / 10)} µs)",
            r.value >= 1.5,
        )
    else:
        rep.goal("agents_sync_vs_batch_cpu").skip("openai-agents not installed")
    if OA_ASYNC in stats:
        r = paired_ratio(tba, stats[OA_ASYNC], "cpu")
        rep.goal("async_batch_vs_agents_cpu").set(
            r.value,
            f"{fmt_ratio(r.value)} (toolbus {fmt_us(tba.cpu / 10)}, "
            f"SDK {fmt_us(stats[OA_ASYNC].cpu / 10)} µs)",
            r.value <= 1.5,
        )
    else:
        rep.goal("async_batch_vs_agents_cpu").skip("openai-agents not installed")
    ref = ctx.reference
    then = _reference.figure(ref, "batch", TB_10, "cpu_ns_per_op")
    then_tpe = _reference.figure(ref, "batch", TPE_10, "cpu_ns_per_op")
    # Each run's figure over its own pool's: load and machine move both alike
    # (over full runs here: ±22 % against ±30 % for the raw CPU per call).
    share = _reference.relative(tb.cpu, tpe.cpu, then, then_tpe)
    goal = rep.goal("batch_cpu_vs_reference")
    if math.isnan(share):
        goal.skip("no reference figure (benchmarks/reference.json)")
        return
    raw = tb.cpu / then
    commit = ref.get("engine_commit", "?") if ref else "?"
    goal.set(
        share,
        f"{share:.0%} of {commit}'s "
        f"(raw {raw:.0%}: now {fmt_us(tb.cpu / 10)}, then {fmt_us(then / 10)} µs)",
        share <= 0.40,
    )
    t.notes.append(
        f"toolbus execute_batch CPU per call over ThreadPoolExecutor(10)'s: {share:.0%} of the "
        f"same in benchmarks/reference.json ({commit}); raw CPU per call: {raw:.0%} of its"
    )


def _record(ctx: Ctx, key: str, stats: dict[str, Stat], base: Stat) -> None:
    for name, st in stats.items():
        ctx.report.figure(
            key,
            name,
            {
                **st.summary(),
                "vs_baseline": paired_ratio(st, base).as_dict(),
                "cpu_vs_baseline": paired_ratio(st, base, "cpu").as_dict(),
            },
        )
    ctx.report.figure(key, "baseline", base.name)


def _subsample(xs: list[float], k: int = 4000) -> list[float]:
    return xs if len(xs) <= k else random.Random(0).sample(xs, k)
