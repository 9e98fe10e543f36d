"""Scenario 12: the process backend: a warm call, a timeout's release, the replacement worker.

1. **A warm call.** `execute` of a process tool (`backend="process"`) whose body
   is `benchmarks._common.noop`, against a bare `ProcessPoolExecutor(1)`
   (forkserver context, warmed) doing `submit(noop, i).result()` with that very
   function, in interleaved rounds; beside them `await aexecute` of the same
   process tool and `execute` of the same noop on the thread backend. Wall time
   per call, this process's CPU per call (every thread), and its child
   processes' CPU per call: read from `/proc/<pid>/task/*/schedstat` for every
   live descendant before and after each round, since toolbus's workers are
   the zygote's children, not ours, and `getrusage(RUSAGE_CHILDREN)` counts
   only children that have been waited for.
2. **Timeout release.** A process tool that hangs (tool timeout T): the
   caller's `time.monotonic()` when `execute` returned, minus the attempt's
   deadline as the tool read it (`ToolContext.deadline`, written to a file
   before it hangs; CLOCK_MONOTONIC is one clock for every process on Linux).
   Also the `tool:killed` and `tool:timeout` events' timestamps against the
   same deadline, and the caller's return against submission + T.
3. **Replacement ready.** The tool has `max_concurrency=1`, so its pool has one
   worker: the call submitted as soon as the timed-out one returns must run in
   the replacement. When it starts running there (the tool's own clock), minus
   the deadline at which its predecessor was killed; and its latency minus that
   of the call after it (the same worker, warm).
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolbus import Executor, RetryPolicy, ToolCall, ToolRegistry, bus

from ._common import Ctx, noop
from ._harness import (
    Case,
    Ratio,
    Stat,
    async_per_op,
    fmt_count,
    fmt_ratio,
    fmt_us,
    interleave,
    paired_ratio,
    per_op,
    percentile,
    usage,
)
from ._proc_tools import stall
from ._report import Table

PPE = "ProcessPoolExecutor(1) submit+result"
TB_PROC = "toolbus execute, process tool"
TB_PROC_ASYNC = "toolbus await aexecute, process tool"
TB_THREAD = "toolbus execute, thread tool (same noop)"


# -- child processes' CPU ----------------------------------------------------------


def _ppid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants() -> list[int] | None:
    """Every live process below this one (children, their children, ...); None without /proc."""
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    for name in entries:
        parent = _ppid(name)
        if parent is not None:
            children.setdefault(parent, []).append(int(name))
    out, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            out.append(child)
            todo.append(child)
    return out


def _cpu_ns(pid: int) -> int | None:
    """CPU time a live process has used, ns: the sum over its threads' schedstat."""
    total = 0
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            with open(f"{task.path}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def descendants_cpu() -> dict[int, int] | None:
    """CPU ns so far of every live descendant, by pid (None: not measurable here)."""
    pids = descendants()
    if pids is None:
        return None
    out = {}
    for pid in pids:
        ns = _cpu_ns(pid)
        if ns is not None:
            out[pid] = ns
    return out


def spent_between(start: dict[int, int] | None, end: dict[int, int] | None) -> float:
    """CPU ns the descendants spent from `start` to `end`: the processes alive at the
    end (those started meanwhile count whole); those that died meanwhile are lost."""
    if start is None or end is None:
        return math.nan
    return float(sum(ns - start.get(pid, 0) for pid, ns in end.items()))


@dataclass
class ChildCPU:
    """One case's child processes' CPU ns, per round (hooked as `before`/`after`)."""

    rounds: list[float] = field(default_factory=list)
    _start: dict[int, int] | None = None

    def before(self) -> None:
        self._start = descendants_cpu()

    def after(self) -> None:
        self.rounds.append(spent_between(self._start, descendants_cpu()))

    def per_op(self, ops: int) -> list[float]:
        return [x / ops for x in self.rounds if not math.isnan(x)]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def _total_ratio(a: Stat, ka: list[float], b: Stat, kb: list[float]) -> Ratio:
    """Parent + children CPU per op of `a` over `b`'s, round by round."""
    pairs = [
        (pa + ca) / (pb + cb)
        for pa, ca, pb, cb in zip(a.cpu_rounds, ka, b.cpu_rounds, kb, strict=False)
        if pb + cb > 0
    ]
    if not pairs:
        return Ratio(math.nan, math.nan, math.nan)
    return Ratio(statistics.median(pairs), percentile(pairs, 25), percentile(pairs, 75))


# -- 1. a warm call ----------------------------------------------------------------


def _start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def warm(ctx: Ctx) -> None:
    s = ctx.scale
    reg = ToolRegistry()
    reg.tool(read_only=True)(noop)
    reg.tool(name="noop_process", read_only=True, backend="process")(noop)
    method = _start_method()
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(method))
    loop = asyncio.new_event_loop()
    proc_call = ToolCall(name="noop_process", arguments={"i": 1})
    thread_call = ToolCall(name="noop", arguments={"i": 1})
    kids = {name: ChildCPU() for name in (PPE, TB_PROC, TB_PROC_ASYNC, TB_THREAD)}
    try:
        with Executor(reg, max_parallel=4, timeout=30) as ex:
            t0 = time.monotonic()
            first = ex.execute(proc_call)  # the zygote starts, imports the module, forks
            cold = time.monotonic() - t0
            if first.status != "ok" or first.output != 1:
                raise RuntimeError(f"benchmark setup is broken: the process tool gave {first}")
            if pool.submit(noop, 1).result() != 1:
                raise RuntimeError("benchmark setup is broken: the pool's noop")
            runs = {
                PPE: per_op(lambda i: pool.submit(noop, i).result()),
                TB_PROC: per_op(lambda i: ex.execute(proc_call)),
                TB_PROC_ASYNC: async_per_op(loop, lambda i: ex.aexecute(proc_call)),
                TB_THREAD: per_op(lambda i: ex.execute(thread_call)),
            }
            cases = [
                Case(
                    name,
                    run,
                    per_op=True,
                    before=kids[name].before,
                    after=kids[name].after,
                )
                for name, run in runs.items()
            ]

            def warmed() -> None:
                for k in kids.values():
                    k.rounds.clear()

            stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms * 2, warmed=warmed)
            procs = len(descendants() or [])
    finally:
        pool.shutdown()
        loop.close()
    _warm_report(ctx, stats, kids, method, procs, cold)


def _warm_report(
    ctx: Ctx,
    stats: dict[str, Stat],
    kids: dict[str, ChildCPU],
    method: str,
    procs: int,
    cold: float,
) -> None:
    rep = ctx.report
    base = stats[PPE]
    t = Table(
        "a warm call, one at a time, µs per call (the same noop everywhere)",
        [
            "case",
            "median",
            "p90",
            "p99",
            "vs ProcessPoolExecutor (IQR)",
            "CPU µs (this process)",
            "CPU µs (child processes)",
            "CPU µs (both)",
            "CPU (both) vs ProcessPoolExecutor (IQR)",
            "csw",
        ],
    )
    per_round = {name: kids[name].per_op(st.ops) for name, st in stats.items()}
    for name, st in stats.items():
        child = _median(per_round[name])
        total = _median([p + c for p, c in zip(st.cpu_rounds, per_round[name], strict=False)])
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(90)),
            fmt_us(st.pct(99)),
            paired_ratio(st, base),
            fmt_us(st.cpu),
            fmt_us(child),
            fmt_us(total),
            _total_ratio(st, per_round[name], base, per_round[PPE]),
            fmt_count(st.csw),
        )
        rep.figure(
            "process",
            name,
            {
                **st.summary(),
                "vs_baseline": paired_ratio(st, base).as_dict(),
                "cpu_vs_baseline": paired_ratio(st, base, "cpu").as_dict(),
                "children_cpu_ns_per_op": child,
                "total_cpu_ns_per_op": total,
                "total_cpu_vs_baseline": _total_ratio(
                    st, per_round[name], base, per_round[PPE]
                ).as_dict(),
            },
        )
    rep.figure("process", "baseline", base.name)
    rep.figure("process", "start_method", method)
    rep.figure("process", "cold_first_call_ms", cold * 1000)
    t.notes += [
        f"ProcessPoolExecutor: {method} context, one worker, warmed; toolbus: the process "
        "tool's pool (one worker serves calls made one at a time); processes under this one "
        f"during the rounds: {procs} (the zygote and the tool's worker; the {method} pool's "
        "worker, its server if any and multiprocessing's resource tracker)",
        f"the process tool's first call (a cold start: the zygote starts and imports toolbus "
        f"and the tool's module, then forks a worker): {cold * 1000:.0f} ms",
        "CPU µs (this process): the process CPU clock over the round, every thread; "
        "(child processes): /proc/<pid>/task/*/schedstat of every live descendant "
        "(the pool's workers, the zygote or forkserver), read around each round; csw: "
        "this process's context switches per call",
    ]
    rep.table(t)
    tb = stats[TB_PROC]
    r = paired_ratio(tb, base)
    cpu = paired_ratio(tb, base, "cpu")
    rep.goal("process_warm_vs_ppe").set(
        r.value,
        f"{fmt_ratio(r.value)} ({fmt_us(tb.median)} vs {fmt_us(base.median)} µs; "
        f"this process's CPU {fmt_ratio(cpu.value)}: {fmt_us(tb.cpu)} vs {fmt_us(base.cpu)} µs)",
        r.value <= 1.5,
    )


# -- 2 and 3. a timeout's release, the replacement -----------------------------------


@dataclass
class _Cycle:
    """One hung call and the two calls after it, in seconds (monotonic clock)."""

    call_id: str  # the hung call's
    deadline: float
    submitted: float
    freed: float  # the caller had its timeout result
    killed_at: float  # tool:killed's timestamp
    timeout_at: float  # tool:timeout's timestamp
    started: float  # the next call started running in the replacement worker
    next_s: float  # the next call's latency
    warm_s: float  # the call after it (the same worker, warm)
    cpu_hung_ns: int  # this process's CPU over the hung call
    cpu_next_ns: int  # ... over the next call
    children_ns: float  # child processes' CPU over the cycle (kill, fork, two calls)
    hung_state: str  # the killed worker in /proc once the next call returned


def _state(pid: int) -> str:
    """The process's state letter (Z: zombie), or "gone"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return stat.rsplit(")", 1)[1].split()[0]


class _Events:
    """tool:killed and tool:timeout, by call id (on the announcer's thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.killed: dict[str, Any] = {}
        self.timeout: dict[str, Any] = {}

    def __call__(self, sender: object, *, event: Any, signal: str) -> None:
        with self.lock:
            (self.killed if signal == bus.KILLED else self.timeout)[event.call_id] = event


def timeouts(ctx: Ctx) -> None:
    s = ctx.scale
    t_out = s.proc_timeout_s
    reg = ToolRegistry()
    reg.tool(
        read_only=True,
        backend="process",
        timeout=t_out,
        max_concurrency=1,
        retry=RetryPolicy(max_retries=0),
    )(stall)
    # The same function under the executor's timeout, to start the backend (a zygote
    # that imports toolbus and this module: up to a second on a busy machine) first.
    reg.tool(name="stall_warmup", read_only=True, backend="process")(stall)
    events = _Events()
    cycles: list[_Cycle] = []
    problems: list[str] = []
    hung_pids: list[int] = []
    seen_pids: set[int] = set()
    offset = time.time() - time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="toolbus-bench-") as tmp,
        Executor(reg, max_parallel=4, timeout=30, retry=RetryPolicy(max_retries=0)) as ex,
        bus.subscribe(events, bus.KILLED, bus.TIMEOUT, sender=ex),
    ):
        nxt = ToolCall(name="stall", arguments={"hang": False, "note": ""})
        warmup = ex.execute(ToolCall(name="stall_warmup", arguments={"hang": False, "note": ""}))
        if not warmup.ok:
            raise RuntimeError(f"benchmark setup is broken: stall_warmup gave {warmup}")
        # The first call of `stall` forks its worker within its own deadline: on a
        # busy machine that may take longer than T; try again.
        for _ in range(5):
            first = ex.execute(nxt)
            if first.ok:
                break
        if not first.ok:
            raise RuntimeError(f"benchmark setup is broken: stall gave {first}")
        seen_pids.add(first.output["pid"])
        for i in range(s.proc_timeouts):
            note = Path(tmp) / f"hung-{i}"
            hung = ToolCall(name="stall", arguments={"hang": True, "note": str(note)})
            c0 = descendants_cpu()
            u0, t0 = usage(), time.monotonic()
            r = ex.execute(hung)
            t1, u1 = time.monotonic(), usage()
            r2 = ex.execute(nxt)
            t2, u2 = time.monotonic(), usage()
            hung_pid, deadline = _read_note(note)
            state = _state(hung_pid) if hung_pid else "?"
            r3 = ex.execute(nxt)
            t3 = time.monotonic()
            children = spent_between(c0, descendants_cpu())
            if r.status != "timeout" or not r2.ok or not r3.ok:
                problems.append(f"cycle {i}: {r.status}, {r2.status}, {r3.status}")
                continue
            fresh, again = r2.output["pid"], r3.output["pid"]
            if fresh == hung_pid or fresh in seen_pids or again != fresh:
                problems.append(
                    f"cycle {i}: hung pid {hung_pid}, next call's {fresh}, then {again}"
                )
            seen_pids.update((fresh, again))
            hung_pids.append(hung_pid)
            cycles.append(
                _Cycle(
                    r.call_id, deadline, t0, t1, math.nan, math.nan, r2.output["started"],
                    t2 - t1, t3 - t2, u1.cpu_ns - u0.cpu_ns, u2.cpu_ns - u1.cpu_ns,
                    children, state,
                )
            )  # fmt: skip
        ex.drain_events(timeout=10)
        stats = ex.stats()
        for c in cycles:
            k, to = events.killed.get(c.call_id), events.timeout.get(c.call_id)
            if k is not None:
                c.killed_at = k.timestamp - offset
                if k.reason != "timeout":
                    problems.append(f"{c.call_id}: tool:killed with reason {k.reason!r}")
            if to is not None:
                c.timeout_at = to.timestamp - offset
    left = _wait_gone(hung_pids, 2.0)
    _timeouts_report(ctx, t_out, cycles, stats.killed_workers, problems, left)


def _read_note(note: Path) -> tuple[int, float]:
    try:
        pid, deadline = note.read_text().split()
        return int(pid), float(deadline)
    except (OSError, ValueError):
        return 0, math.nan


def _wait_gone(pids: list[int], limit: float) -> list[str]:
    """The killed workers still in the process table after `limit` s: "pid:state"."""
    end = time.monotonic() + limit
    while True:
        left = [f"{p}:{st}" for p in pids if (st := _state(p)) != "gone"]
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


def _ms(seconds: float) -> str:
    return "–" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def _dist(xs: list[float]) -> dict[str, float | int]:
    xs = [x for x in xs if not math.isnan(x)]
    return {
        "count": len(xs),
        "p50_ms": percentile(xs, 50) * 1000,
        "p95_ms": percentile(xs, 95) * 1000,
        "max_ms": percentile(xs, 100) * 1000,
    }


def _timeouts_report(
    ctx: Ctx,
    t_out: float,
    cycles: list[_Cycle],
    killed: int,
    problems: list[str],
    left: list[str],
) -> None:
    rep = ctx.report
    n = len(cycles)
    rows = {
        "caller freed (the caller's clock)": [c.freed - c.deadline for c in cycles],
        "tool:killed (event timestamp)": [c.killed_at - c.deadline for c in cycles],
        "tool:timeout (event timestamp)": [c.timeout_at - c.deadline for c in cycles],
        "caller freed, after submission + T": [c.freed - c.submitted - t_out for c in cycles],
    }
    t = Table(
        f"a hung process tool, timeout {t_out:g} s: ms after the attempt's deadline, "
        f"{n} timeouts one after another",
        ["when", "p50", "p95", "max"],
    )
    for name, xs in rows.items():
        t.add(name, *(_ms(percentile(xs, q)) for q in (50, 95, 100)))
    cpu_hung = _median([c.cpu_hung_ns for c in cycles])
    t.notes += [
        "the deadline: ToolContext.deadline as the tool read it in its worker (the "
        "attempt's deadline, rebased there: at most the IPC latency late)",
        f"this process's CPU per timed-out call: {fmt_us(cpu_hung)} µs (median); "
        f"killed_workers: {killed}; killed workers still in the process table 2 s after "
        f"the last: {len(left)}" + (f" ({', '.join(left[:5])})" if left else ""),
    ]
    states = sorted({c.hung_state for c in cycles})
    t.notes.append(
        "the killed worker in /proc when the next call returned: "
        + ", ".join(f"{st} {sum(c.hung_state == st for c in cycles)}" for st in states)
    )
    rep.table(t)

    rows = {
        "next call running in the replacement, after the deadline": [
            c.started - c.deadline for c in cycles
        ],
        "... after its caller was freed (it was submitted then)": [
            c.started - c.freed for c in cycles
        ],
        "next call's latency": [c.next_s for c in cycles],
        "the call after it (the same worker, warm)": [c.warm_s for c in cycles],
        "next call minus the warm one": [c.next_s - c.warm_s for c in cycles],
    }
    t = Table(
        "the replacement worker (max_concurrency=1: a pool of one), ms",
        ["what", "p50", "p95", "max"],
    )
    for name, xs in rows.items():
        t.add(name, *(_ms(percentile(xs, q)) for q in (50, 95, 100)))
    t.notes += [
        f"this process's CPU for the next call: {fmt_us(_median([c.cpu_next_ns for c in cycles]))}"
        f" µs (median); child processes' CPU per cycle (kill, the zygote's fork, the new "
        f"worker's two calls): {fmt_us(_median([c.children_ns for c in cycles]))} µs",
    ]
    t.notes += [f"problem: {p}" for p in problems[:10]]
    rep.table(t)

    release = [c.freed - c.deadline for c in cycles]
    ready = [c.started - c.deadline for c in cycles]
    for name, xs in (
        ("release", release),
        ("killed_event", [c.killed_at - c.deadline for c in cycles]),
        ("timeout_event", [c.timeout_at - c.deadline for c in cycles]),
        ("release_vs_submit", [c.freed - c.submitted - t_out for c in cycles]),
        ("replacement_running", ready),
        ("next_minus_warm", [c.next_s - c.warm_s for c in cycles]),
        ("next_latency", [c.next_s for c in cycles]),
        ("warm_latency", [c.warm_s for c in cycles]),
    ):
        rep.figure("process", f"timeout_{name}", _dist(xs))
    rep.figure("process", "timeout_s", t_out)
    rep.figure("process", "timeouts", n)
    rep.figure("process", "killed_workers", killed)
    rep.figure("process", "killed_left", left)
    rep.figure(
        "process",
        "killed_worker_at_next_return",
        {st: sum(c.hung_state == st for c in cycles) for st in states},
    )
    rep.figure("process", "problems", problems)
    rep.figure("process", "cpu_ns_per_timed_out_call", cpu_hung)
    rep.figure("process", "load", _load())
    if problems:
        raise RuntimeError("process backend: " + "; ".join(problems[:5]))
    if not cycles:
        for key in ("process_timeout_release", "process_replacement"):
            rep.goal(key).skip("no cycle ran")
        return
    p95 = percentile(release, 95) * 1000
    rep.goal("process_timeout_release").set(
        p95,
        f"{p95:.1f} ms p95, {percentile(release, 50) * 1000:.1f} p50 over {n} (load {_load()})",
        p95 <= 50,
    )
    p95 = percentile(ready, 95) * 1000
    rep.goal("process_replacement").set(
        p95, f"{p95:.1f} ms p95, {percentile(ready, 50) * 1000:.1f} p50 over {n}", p95 <= 500
    )


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except (OSError, AttributeError):
        return "?"


def run(ctx: Ctx) -> None:
    warm(ctx)
    timeouts(ctx)
