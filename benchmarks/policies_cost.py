"""What policies cost a call (toolbus.policies), measured on one blocking noop call.

    python -m benchmarks.policies_cost [--rounds N] [--calls N] [--baseline PYTHONPATH] [--no-pin]

Scenario 13 of the suite (`run`), one process, interleaved rounds (see `_harness.py`):

- *policies unused*: `execute` of the noop on an executor with no policies, its
  registry's two tools without any (the baseline);
- the same on a *twin* executor built the same way: how far apart two identical
  executors land by chance (the resolution of the comparison);
- *policies used elsewhere*: the noop on an executor whose registry's other
  tool is guarded by its own policy and whose `Executor(policies=[p])` has one
  whose `applies_to` is false for the noop: the goal, at most 1.02x the
  baseline's p50 (its CPU per call beside it);
- *one admitting policy on the tool*: the noop guarded by a policy that admits
  every call: what a policy costs per call (informational);
- `await aexecute` of the noop, policies unused and used elsewhere (rounds of
  their own);
- `Executor._make_run` alone on the same executors, timed in blocks: the step
  that looks a tool's policies up.

Every thread of the scenario runs on one CPU (`one_cpu` says why).

Run alone (`main`), the same workload in fresh processes instead, rounds
alternating between them, as `observe_cost.py` does (all on one CPU unless
`--no-pin`): one with policies unused, one with policies used elsewhere, a
twin of the first, one with the noop guarded, and with
`--baseline PATH` one on another checkout: the engine before policies existed
is a process that never imports `toolbus.policies` (toolbus's executor imports
it, so on this checkout every process does). Each child says which of
`toolbus.policies` and the heavy modules a built-in policy may use
(`limits`, `cachetools`, `redis`) `import toolbus` brought in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from toolbus import Executor, ToolRegistry
from toolbus.policies import BasePolicy

from ._common import Ctx, noop, noop_call
from ._harness import (
    Case,
    Stat,
    async_per_op,
    block,
    fmt_ratio,
    fmt_us,
    interleave,
    paired_diff,
    paired_ratio,
    per_op,
    usage_cells,
)
from ._report import Table

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "_policies_child.py"

UNUSED = "policies unused: execute"
TWIN = "policies unused, a twin executor: execute"
ELSEWHERE = "policies used elsewhere, none on this tool: execute"
GUARDED = "one admitting policy on the tool: execute"
A_UNUSED = "policies unused: await aexecute"
A_ELSEWHERE = "policies used elsewhere, none on this tool: await aexecute"
SYNC = (UNUSED, ELSEWHERE, TWIN, GUARDED)
MADE = {name: f"submission: {name.partition(':')[0]}" for name in SYNC}
GOAL = 1.02


class Only(BasePolicy):
    """An executor's policy that guards the tool named `tool` only, and admits."""

    name = "bench-only"

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.asked_about: list[str] = []  # applies_to is asked once per tool, not per call

    def applies_to(self, tool: Any) -> bool:
        self.asked_about.append(tool.name)
        return bool(tool.name == self.tool)


class Admitting(BasePolicy):
    """A tool's policy that admits every call (BasePolicy's defaults), counting them."""

    name = "bench-admit"

    def __init__(self) -> None:
        self.admitted = 0

    def admit(self, call: Any, tool: Any, now: float) -> Any:
        self.admitted += 1
        return super().admit(call, tool, now)


def registry(*, other: list[Any], mine: list[Any]) -> ToolRegistry:
    """`noop` (read-only, policies `mine`) and `other` (the same body, policies `other`)."""
    reg = ToolRegistry()
    reg.tool(read_only=True, policies=mine)(noop)
    reg.tool(name="other", read_only=True, policies=other)(noop)
    return reg


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"benchmark setup is broken: {what}")


@contextlib.contextmanager
def one_cpu() -> Iterator[int | None]:
    """Pin this thread, and every thread it starts, to one CPU (Linux); yield it.

    On a VM with 2 cores an executor's thread sometimes settles on the other
    core than its caller's and stays there: each hand-off then wakes an idle
    core, one context switch per thread per call instead of three, and the
    call costs 1.5-6 times as much for as long as it stays (not policies: an
    executor without any does it too). Two executors compared within 2 % must
    not be split that way by chance, so the scenario's threads share one core.
    """
    get = getattr(os, "sched_getaffinity", None)
    pin = getattr(os, "sched_setaffinity", None)
    if get is None or pin is None:
        yield None
        return
    before = get(0)
    cpu = max(before)
    pin(0, {cpu})
    try:
        yield cpu
    finally:
        pin(0, before)


def run(ctx: Ctx) -> None:
    with one_cpu() as pinned:
        stats, made, calls_b, asked = _measure(ctx)
    report(ctx, stats, calls_b, asked, pinned)
    report_submission(ctx, made)


def _measure(ctx: Ctx) -> tuple[dict[str, Stat], dict[str, Stat], int, int]:
    s = ctx.scale
    call = noop_call()
    only, guard_other, guard_noop = Only("other"), Admitting(), Admitting()
    opts: dict[str, Any] = {"max_parallel": 16, "timeout": 30}
    loop = asyncio.new_event_loop()
    executors = {
        UNUSED: Executor(registry(other=[], mine=[]), **opts),
        TWIN: Executor(registry(other=[], mine=[]), **opts),
        ELSEWHERE: Executor(registry(other=[guard_other], mine=[]), policies=[only], **opts),
        GUARDED: Executor(registry(other=[], mine=[guard_noop]), **opts),
    }
    try:
        ex_a, ex_b = executors[UNUSED], executors[ELSEWHERE]
        for name, ex in executors.items():
            _check(ex.execute(call).status == "ok", f"{name}: noop did not return ok")
        _check(ex_b.execute(noop_call(name="other")).status == "ok", "other did not return ok")
        _check(guard_other.admitted == 1, "the other tool's policy was not asked")
        _check(guard_noop.admitted == 1, "the noop's policy was not asked")
        for name in (UNUSED, ELSEWHERE):
            tool = executors[name].registry.get("noop")
            assert tool is not None
            # No policy resolved for the noop: its calls pay a lookup, nothing else.
            _check(executors[name]._policies.guard(tool) is None, f"{name}: noop is guarded")
        sync = [
            Case(UNUSED, per_op(lambda i: ex_a.execute(call)), per_op=True),
            Case(ELSEWHERE, per_op(lambda i: ex_b.execute(call)), per_op=True),
            Case(TWIN, per_op(lambda i: executors[TWIN].execute(call)), per_op=True),
            Case(GUARDED, per_op(lambda i: executors[GUARDED].execute(call)), per_op=True),
        ]
        asynchronous = [
            Case(A_UNUSED, async_per_op(loop, lambda i: ex_a.aexecute(call)), per_op=True),
            Case(A_ELSEWHERE, async_per_op(loop, lambda i: ex_b.aexecute(call)), per_op=True),
        ]
        # Many short rounds of the same size: the cases of a round run within
        # milliseconds of each other, and the goal is a 2 % band. The async
        # pair has rounds of its own: what an awaited call leaves behind (its
        # loop's wake-ups) lands on none of the goal's cases.
        rounds, ops, warm = (30, 10, 200) if s.smoke else (s.rounds * 10, 100, 2000)
        stats: dict[str, Stat] = {}
        for cases in (sync, asynchronous):
            for c in cases:
                c.run(warm)
            fixed = {c.name: ops for c in cases}
            stats |= interleave(cases, rounds=rounds, budget_ms=0, fixed_ops=fixed)
        calls_b = sum(len(st.samples) for n, st in stats.items() if n in (ELSEWHERE, A_ELSEWHERE))
        made = submission(executors, rounds, 50 if s.smoke else 2000)
    finally:
        for ex in executors.values():
            ex.close()
        loop.close()
    _check(guard_other.admitted == 1, "the other tool's policy was asked for the noop's calls")
    _check(only.asked_about.count("noop") == 1, "applies_to was asked more than once per tool")
    _check(guard_noop.admitted >= len(stats[GUARDED].samples), "the noop's policy was skipped")
    return stats, made, calls_b, len(only.asked_about)


def submission(executors: dict[str, Executor], rounds: int, ops: int) -> dict[str, Stat]:
    """`Executor._make_run` alone (timed in blocks): the one step of a call that
    looks its tool's policies up, without the hand-offs' noise."""
    call = noop_call()
    context = contextvars.copy_context()

    def make(ex: Executor) -> Callable[[int], object]:
        return lambda i: ex._make_run(call, context=context)

    cases = [Case(MADE[name], block(make(executors[name]))) for name in SYNC]
    return interleave(cases, rounds=rounds, budget_ms=0, fixed_ops={c.name: ops for c in cases})


def report_submission(ctx: Ctx, stats: dict[str, Stat]) -> None:
    t = Table(
        "the submission step alone (Executor._make_run, no run submitted), µs per call",
        ["case", "median", "vs policies unused (IQR)", "extra µs/call"],
    )
    base = stats[MADE[UNUSED]]
    for name, st in stats.items():
        t.add(
            name,
            f"{st.median / 1000:.3f}",
            paired_ratio(st, base),
            f"{paired_diff(st, base) / 1000:.3f}" if st is not base else "",
        )
        ctx.report.figure(
            "policies", name, {**st.summary(), "vs_baseline": paired_ratio(st, base).as_dict()}
        )
    t.notes.append(
        "where a call's policies are looked up (PolicySet.guard, a dict lookup per call) and "
        "its timeout asked of them; timed in blocks of calls, the same rounds as above"
    )
    ctx.report.table(t)


def report(ctx: Ctx, stats: dict[str, Stat], calls_b: int, asked: int, pinned: int | None) -> None:
    rep = ctx.report
    t = Table(
        "one noop call at a time, µs per call",
        [
            "case",
            "median",
            "p90",
            "p99",
            "CPU µs",
            "csw",
            "vs policies unused (IQR)",
            "CPU vs policies unused (IQR)",
            "extra CPU µs/call",
            "samples",
        ],
    )
    for name, st in stats.items():
        base = stats[A_UNUSED if name.endswith("aexecute") else UNUSED]
        cpu, csw, cpu_vs = usage_cells(st, base)
        t.add(
            name,
            fmt_us(st.median),
            fmt_us(st.pct(90)),
            fmt_us(st.pct(99)),
            cpu,
            csw,
            paired_ratio(st, base),
            cpu_vs,
            f"{paired_diff(st, base, 'cpu') / 1000:+.2f}" if st is not base else "",
            len(st.samples),
        )
        rep.figure(
            "policies",
            name,
            {
                **st.summary(),
                "vs_baseline": paired_ratio(st, base).as_dict(),
                "cpu_vs_baseline": paired_ratio(st, base, "cpu").as_dict(),
            },
        )
    rep.figure("policies", "baseline", UNUSED)
    rep.figure("policies", "pinned_cpu", pinned)
    a, b, twin, g = stats[UNUSED], stats[ELSEWHERE], stats[TWIN], stats[GUARDED]
    wall, cpu_r = paired_ratio(b, a), paired_ratio(b, a, "cpu")
    t.notes.append(
        f"policies used elsewhere: the noop's p50 is {wall} that of policies unused, its CPU "
        f"{cpu_r} (two identical executors: {paired_ratio(twin, a)}, CPU "
        f"{paired_ratio(twin, a, 'cpu')}); the executor's policy was asked whether it applies "
        f"{asked} times in all ({calls_b:,} calls of the noop), once per tool"
    )
    t.notes.append(
        f"one admitting policy costs {paired_diff(g, a) / 1000:+.1f} µs of p50 and "
        f"{paired_diff(g, a, 'cpu') / 1000:+.1f} µs of CPU per call (the pipeline asks it, "
        "then tells it the result)"
    )
    t.notes.append(
        f"every thread of the scenario runs on CPU {pinned} (see `one_cpu`): each hand-off "
        "shares that core"
        if pinned is not None
        else "threads not pinned to one CPU (no sched_setaffinity here)"
    )
    t.notes.append(
        "each executor is alive for the whole scenario (the async cases use the first two); "
        "ratios are medians of per-round ratios; the sync cases and the async pair run in "
        "rounds of their own (rounds rotate the cases' order)"
    )
    rep.goal("policy_free_vs_unused").set(
        wall.value,
        f"{fmt_ratio(wall.value)} (p50 {fmt_us(b.median)} vs {fmt_us(a.median)} µs; "
        f"CPU {fmt_ratio(cpu_r.value)}: {fmt_us(b.cpu)} vs {fmt_us(a.cpu)} µs/call; "
        f"a twin executor {fmt_ratio(paired_ratio(twin, a).value)})",
        wall.value <= GOAL,
    )
    rep.table(t)


# -- fresh processes (python -m benchmarks.policies_cost) ---------------------------------


class _Worker:
    """A `_policies_child.py` process: noop calls in rounds, on request."""

    def __init__(self, variant: str, pythonpath: str, cpu: int | None) -> None:
        self.variant = variant
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), variant, "" if cpu is None else str(cpu)],
            cwd=tempfile.gettempdir(),
            env={**os.environ, "PYTHONPATH": pythonpath},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ready: dict[str, Any] = json.loads(self._readline())
        if not self.ready["toolbus"].startswith(str(Path(pythonpath).resolve())):
            raise RuntimeError(f"worker {variant} imported {self.ready['toolbus']}")

    def _readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.variant} ended")
        return line

    def round(self, n: int) -> dict[str, float]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        answer: dict[str, float] = json.loads(self._readline())
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def processes(rounds: int, calls: int, baseline: str | None, pin: bool) -> dict[str, Any]:
    """Each variant in its own fresh process, rounds rotating who goes first;
    with `pin`, every process on the same one CPU (they take turns)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cpu = max(affinity(0)) if pin and affinity is not None else None
    variants = [
        ("unused", "unused", str(ROOT)),
        ("elsewhere", "elsewhere", str(ROOT)),
        ("twin", "unused", str(ROOT)),  # exactly what "unused" runs
        ("guarded", "guarded", str(ROOT)),
    ]
    if baseline:
        variants.append(("baseline", "unused", baseline))
    workers: list[_Worker] = []
    try:
        for _, variant, path in variants:
            workers.append(_Worker(variant, path, cpu))
        names = [name for name, _, _ in variants]
        figures: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for r in range(rounds):
            order = list(range(len(workers)))
            order = order[r % len(order) :] + order[: r % len(order)]
            for k in order:
                figures[names[k]].append(workers[k].round(calls))
    finally:
        for w in workers:
            w.close()

    def ratio(a: str, b: str, field: str) -> dict[str, float]:
        pairs = sorted(x[field] / y[field] for x, y in zip(figures[a], figures[b], strict=True))
        q = len(pairs) // 4
        return {"ratio": statistics.median(pairs), "q1": pairs[q], "q3": pairs[-1 - q]}

    out: dict[str, Any] = {
        name: {
            **{f: statistics.median(x[f] for x in figures[name]) for f in ("p50", "mean", "cpu")},
            "imported": w.ready["imported"],
        }
        for name, w in zip(names, workers, strict=True)
    }
    for field in ("p50", "cpu"):
        for name in ("elsewhere", "twin", "guarded"):
            out[f"{name}_vs_unused_{field}"] = ratio(name, "unused", field)
        if baseline:
            out[f"unused_vs_baseline_{field}"] = ratio("unused", "baseline", field)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.policies_cost")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000, help="calls per round per process")
    ap.add_argument(
        "--baseline",
        metavar="PYTHONPATH",
        help="another checkout to compare with (the engine before policies: a process "
        "that never imports toolbus.policies)",
    )
    ap.add_argument(
        "--no-pin",
        action="store_true",
        help="let the processes' threads run on any CPU (default: all on one, see one_cpu)",
    )
    ap.add_argument("--json", type=Path, metavar="PATH")
    args = ap.parse_args(argv)
    out = processes(args.rounds, args.calls, args.baseline, pin=not args.no_pin)
    where = "any CPU" if args.no_pin else "one CPU"
    print(f"fresh processes on {where}, {args.rounds} interleaved rounds of {args.calls} calls:")
    for name, f in out.items():
        if "_vs_" not in name:
            print(
                f"  {name:<10} p50 {f['p50'] / 1000:7.2f} µs  mean {f['mean'] / 1000:7.2f} µs  "
                f"CPU {f['cpu'] / 1000:7.2f} µs/call  after `import toolbus`: "
                f"{', '.join(f['imported']) or 'none of them'}"
            )
    for key in sorted(k for k in out if "_vs_" in k):
        r = out[key]
        print(f"  {key}: {r['ratio']:.3f} ({r['q1']:.3f}-{r['q3']:.3f})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
