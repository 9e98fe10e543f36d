"""Scenario 10: chaos with deadlines.

10 000 calls (500 in smoke mode) from 8 agents at once: 4 threads (`execute`
one call at a time, `execute_batch`, some with `stop_on_error`) and 4 asyncio
tasks on one loop thread (`aexecute`, `aexecute_batch`; 15 % of their steps
cancel the awaiting task mid-flight). A seeded mix of calls that succeed, raise,
hang past a 50 ms timeout (a sync tool blocked on an Event, an async one
awaiting), fail 40 % of their attempts (retried twice), name an unknown tool,
carry malformed or invalid arguments, or come torn (a mapping whose arguments
are a list); and a mutating tool. A subscriber that raises on every event, a
slow one (1 ms per `tool:executing` and `tool:finished`), and a recorder of
`tool:finished` watch the executor.

Exactly once: every call gets one `tool:finished` and one result returned to
its caller (unless its awaiting task was cancelled). Lateness: for each call
that ended `timeout` because a hanging tool overran, when its caller was freed
minus its final attempt's deadline (`ToolContext.deadline`, read by the tool):
the caller's `time.monotonic()` right after a single `execute`/`aexecute`
returned; for batch members (and the rare single whose task was cancelled after
the result was made) the `tool:finished` event's `timestamp`, moved onto the
monotonic clock with an offset read at the start.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass

from toolbus import Executor, ExecutorStats, bus

from . import _chaos_load as load
from ._common import Ctx
from ._harness import Usage, fmt_count, fmt_us, percentile, usage
from ._report import Table

AGENTS_SYNC = 4
AGENTS_ASYNC = 4
PARALLEL = 16
STATUSES = ("ok", "error", "timeout", "rejected", "cancelled")


def _raising(sender: object, **_: object) -> None:
    raise RuntimeError("a faulty observer")


def _slow(sender: object, **_: object) -> None:
    time.sleep(0.001)  # the load: an observer that takes 1 ms per event


@dataclass
class _Run:
    """What one chaos run left behind, for the tables, the figures and the goals."""

    total: int
    kinds: dict[str, str]
    probe: load.Probe
    stats: ExecutorStats
    pauses: load.Pauses
    logs: Counter[str]
    offset: float  # time.time() - time.monotonic() at the start
    start: float
    wall: float
    spent: Usage
    all_in: bool
    drain_s: float
    drained: bool
    dropped: int
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]


def run(ctx: Ctx) -> None:
    s = ctx.scale
    total, agents = s.chaos_calls, AGENTS_SYNC + AGENTS_ASYNC
    kinds: dict[str, str] = {}
    steps = [
        load.plan(
            a, total // agents + (a < total % agents), asynchronous=a >= AGENTS_SYNC, kinds=kinds
        )
        for a in range(agents)
    ]
    probe = load.Probe()
    release = threading.Event()
    reg = load.registry(release, probe)
    load_start = _loadavg()
    with load.counted_logs("toolbus", "pykka") as logs, load.watched_gc() as pauses:
        # Room for every hanging sync call to stay stuck until the end: none is refused.
        ex = Executor(
            reg,
            max_parallel=PARALLEL,
            timeout=5,
            max_abandoned_workers=total,
            max_abandoned_per_tool=total,
        )
        try:
            with (
                bus.subscribe(probe.on_finished, bus.FINISHED, sender=ex),
                bus.subscribe(_raising, sender=ex),
                bus.subscribe(_slow, bus.EXECUTING, bus.FINISHED, sender=ex),
            ):
                offset = time.time() - time.monotonic()
                u0, t0 = usage(), time.monotonic()
                hung = _run_agents(ex, steps, probe, s.chaos_limit_s)
                all_in = probe.wait_finished(total, timeout=30)
                u1, wall = usage(), time.monotonic() - t0
                stats = ex.stats()
                t1 = time.monotonic()
                drained = ex.drain_events(timeout=s.chaos_limit_s / 4)
                drain_s = time.monotonic() - t1
        finally:
            release.set()
            ex.close(timeout=10)
        dropped = ex.stats().events_dropped
    if hung:
        raise RuntimeError(f"chaos: {hung} agent(s) still waiting after {s.chaos_limit_s:.0f} s")
    spent = Usage(u1.cpu_ns - u0.cpu_ns, u1.switches - u0.switches)
    r = _Run(
        total, kinds, probe, stats, pauses, logs, offset, t0, wall, spent, all_in,
        drain_s, drained, dropped, load_start, _loadavg(),
    )  # fmt: skip
    _report(ctx, r)


def _report(ctx: Ctx, r: _Run) -> None:
    rep = ctx.report
    lost, dup, checks = _exactly_once(r)
    late, no_deadline = _lateness(r)
    singles = [x for cid, _, x in late if cid in r.probe.freed_at]
    batched = [x for cid, _, x in late if cid not in r.probe.freed_at]
    every = singles + batched
    rep.series["chaos"] = {  # seconds from the start: each late caller's deadline, each pause
        "late": [(d - r.start, x, r.kinds[cid]) for cid, d, x in late],
        "gc": [(a - r.start, d, g) for a, d, g in r.pauses.items],
    }
    by_kind = _statuses(r)

    t = Table(
        f"{r.total:,} calls from {AGENTS_SYNC + AGENTS_ASYNC} agents ({AGENTS_SYNC} threads, "
        f"{AGENTS_ASYNC} asyncio tasks), max_parallel={PARALLEL}, hanging tools time out after "
        f"{load.HANG_TIMEOUT * 1000:.0f} ms: final status by kind",
        ["kind", "calls", *STATUSES, "unexpected"],
    )
    for kind, row in by_kind.items():
        t.add(kind, row["calls"], *(row[st] for st in STATUSES), row["unexpected"])
    t.notes.append(
        "cancelled: a batch stopped on an error, or an awaiting task was cancelled; "
        "unexpected: any other status than the kind's own"
    )
    rep.table(t)

    t = Table(
        "exactly once: each call's tool:finished events and results returned to its caller",
        ["check", "lost", "duplicated"],
    )
    for name, (lo, du) in checks.items():
        t.add(name, lo, du)
    t.notes.append(
        f"{len(r.probe.unreturned):,} calls belonged to a cancelled awaiting task: "
        "no result is returned for them, their tool:finished still counts"
    )
    rep.table(t)

    t = Table(
        "callers freed after their deadline, ms (calls that timed out in a hanging tool)",
        ["calls that timed out", "count", "p50", "p99", "max"],
    )
    groups = {
        "single calls (the caller's clock)": singles,
        "batch members (tool:finished timestamp)": batched,
        "all": every,
    }
    for name, xs in groups.items():
        t.add(name, len(xs), *(_ms(percentile(xs, q)) for q in (50, 99, 100)))
    full = [d for _, d, g in r.pauses.items if g == 2]
    over = [(d, x) for _, d, x in late if x > 0.05]
    in_gc = sum(r.pauses.overlapping(d, d + x, 0.01) for d, x in over)
    logs = ", ".join(f"{n} {level}" for level, n in sorted(r.logs.items())) or "none"
    t.notes += [
        f"load average {_load(r.load_start)} at the start, {_load(r.load_end)} at the end; "
        f"{os.cpu_count()} CPUs",
        f"{r.wall:.1f} s, {r.total / r.wall:,.0f} calls/s; the whole process's CPU "
        f"{fmt_us(r.spent.cpu_ns / r.total)} µs/call, "
        f"{fmt_count(r.spent.switches / r.total)} context switches/call",
        f"garbage collections: {len(r.pauses.items)}, {len(full)} full (longest "
        f"{max(full, default=0) * 1000:.0f} ms); {len(over)} callers freed over 50 ms late, "
        f"{in_gc} of them while a collection of 10 ms or more ran past their deadline",
        f"the slow subscriber caught up {r.drain_s:.1f} s after the last call"
        + ("" if r.drained else " (not by the end of the wait)")
        + f"; events dropped: {r.dropped}; toolbus log records: {logs}",
    ]
    if no_deadline:
        t.notes.append(f"{no_deadline} timed-out hanging calls recorded no deadline: left out")
    rep.table(t)

    figures: dict[str, object] = {
        "calls": r.total,
        "agents": {"threads": AGENTS_SYNC, "asyncio_tasks": AGENTS_ASYNC},
        "lost": lost,
        "duplicated": dup,
        "checks": {k: {"lost": v[0], "duplicated": v[1]} for k, v in checks.items()},
        "unexpected_status": sum(row["unexpected"] for row in by_kind.values()),
        "all_finished_in_time": r.all_in,
        "cancelled_tasks_calls": len(r.probe.unreturned),
        "by_kind": by_kind,
        "lateness_ms": {
            name: _dist(xs)
            for name, xs in (("singles", singles), ("batch", batched), ("all", every))
        },
        "no_deadline": no_deadline,
        "load_start": list(r.load_start),
        "load_end": list(r.load_end),
        "wall_s": r.wall,
        "cpu_ns_per_call": r.spent.cpu_ns / r.total,
        "csw_per_call": r.spent.switches / r.total,
        "gc": {
            "collections": len(r.pauses.items),
            "full": len(full),
            "longest_full_ms": max(full, default=0) * 1000,
            "total_ms": sum(d for _, d, _ in r.pauses.items) * 1000,
            "late_over_50ms": len(over),
            "late_over_50ms_in_gc": in_gc,
        },
        "slow_subscriber_drain_s": r.drain_s,
        "events_dropped": r.dropped,
        "log_records": dict(r.logs),
        "stats": r.stats.model_dump(exclude={"pools"}),
    }
    for name, value in figures.items():
        rep.figure("chaos", name, value)
    _goals(ctx, lost, dup, every, r, f"{len(over)} over 50 ms, {in_gc} of them in a GC pause")


def _run_agents(ex: Executor, steps: list[list[load.Step]], probe: load.Probe, limit: float) -> int:
    """Run every agent at once; return how many were still running after `limit` seconds."""
    sync_steps, async_steps = steps[:AGENTS_SYNC], steps[AGENTS_SYNC:]

    async def async_side() -> None:
        await asyncio.gather(*(load.async_agent(ex, st, probe) for st in async_steps))

    threads = [
        threading.Thread(target=load.sync_agent, args=(ex, st, probe), daemon=True)
        for st in sync_steps
    ]
    threads.append(threading.Thread(target=asyncio.run, args=(async_side(),), daemon=True))
    for th in threads:
        th.start()
    end = time.monotonic() + limit
    for th in threads:
        th.join(max(0.0, end - time.monotonic()))
    return sum(th.is_alive() for th in threads)


def _exactly_once(r: _Run) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """(lost, duplicated, per check): tool:finished per call, results returned per call,
    and the executor's own counters."""
    fin, ret, kinds = r.probe.finishes, r.probe.returns, r.kinds
    strays = (set(fin) | set(ret)) - set(kinds)
    st = r.stats
    terminal = st.ok + st.error + st.timeout + st.cancelled + st.rejected
    same = r.probe.finished
    checks = {
        "tool:finished, one per call": (
            sum(not fin[c] for c in kinds),
            sum(max(0, fin[c] - 1) for c in kinds),
        ),
        "result returned to the caller": (
            sum(not ret[c] for c in kinds if c not in r.probe.unreturned),
            sum(max(0, ret[c] - 1) for c in kinds),
        ),
        "returned result differs from tool:finished's": (
            sum(p != same[c][1] for c, p in r.probe.returned.items() if c in same),
            0,
        ),
        "results or events for unknown call ids": (0, len(strays)),
        "executor stats: terminal results vs calls": (
            max(0, r.total - terminal),
            max(0, terminal - r.total),
        ),
    }
    return sum(v[0] for v in checks.values()), sum(v[1] for v in checks.values()), checks


def _lateness(r: _Run) -> tuple[list[tuple[str, float, float]], int]:
    """(call id, deadline, seconds late) of each call that timed out in a hanging tool,
    and how many of those recorded no deadline. Single calls that returned to their
    caller are timed by the caller's clock, the others by their `tool:finished`."""
    late: list[tuple[str, float, float]] = []
    missing = 0
    for cid, kind in r.kinds.items():
        finished = r.probe.finished.get(cid)
        if kind not in load.HANGS or finished is None or finished[1][1] != "timeout":
            continue
        seen = r.probe.deadlines.get(cid)
        if seen is None:
            missing += 1
            continue
        deadline = seen[1]
        freed = r.probe.freed_at.get(cid, finished[0] - r.offset)
        late.append((cid, deadline, freed - deadline))
    return late, missing


def _statuses(r: _Run) -> dict[str, dict[str, int]]:
    """Per kind of call: how many, how many ended in each status, how many unexpectedly."""
    out = {k: {"calls": 0, "unexpected": 0, **dict.fromkeys(STATUSES, 0)} for k in load.KINDS}
    for cid, kind in r.kinds.items():
        row = out[kind]
        row["calls"] += 1
        finished = r.probe.finished.get(cid)
        if finished is None:
            continue
        status = finished[1][1]
        row[status] = row.get(status, 0) + 1
        if status != "cancelled" and status not in load.EXPECTED[kind]:
            row["unexpected"] += 1
    return out


def _ms(seconds: float) -> str:
    return "–" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def _dist(xs: list[float]) -> dict[str, float | int]:
    return {
        "count": len(xs),
        "p50": percentile(xs, 50) * 1000,
        "p99": percentile(xs, 99) * 1000,
        "max": percentile(xs, 100) * 1000,
    }


def _loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except (OSError, AttributeError):  # not on this platform
        return (math.nan, math.nan, math.nan)


def _load(avg: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.2f}" for x in avg)


def _goals(ctx: Ctx, lost: int, dup: int, late: list[float], r: _Run, why: str) -> None:
    rep = ctx.report
    rep.goal("chaos_lost").set(
        lost + dup, f"{lost + dup} ({lost} lost, {dup} duplicated)", lost + dup == 0
    )
    if not late:
        for key in ("chaos_late_p99", "chaos_late_max"):
            rep.goal(key).skip("no call timed out")
        return
    p99, worst = percentile(late, 99) * 1000, max(late) * 1000
    rep.goal("chaos_late_p99").set(
        p99, f"{p99:.1f} ms over {len(late):,} timeouts ({why})", p99 <= 50
    )
    rep.goal("chaos_late_max").set(
        worst,
        f"{worst:.1f} ms (load {r.load_start[0]:.2f} → {r.load_end[0]:.2f}; idle target ≤ 50 ms)",
        worst <= 250,
    )
