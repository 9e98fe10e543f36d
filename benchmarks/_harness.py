"""Timing: interleaved rounds, medians, percentiles and paired ratios.

Every scenario builds `Case`s and hands them to `interleave`, which warms each
case up, sizes its rounds to a time budget, then runs round after round with the
cases in rotating order (baseline, toolbus, baseline, ...). A noisy neighbour
then slows every case of a round alike, and `paired_ratio` compares the cases
round by round: the median of per-round ratios is what survives the noise of a
shared machine; absolute times do not.

Beside wall time, every round records what the whole process spent on it: CPU
time and context switches, summed over every thread (toolbus's work is spread
over its supervisor, workers and timer; a baseline's over its pool), so the
cost of a hand-off shows even when an idle core hides it from the wall clock.

The heap that exists when the rounds begin (modules, the peers' libraries, the
cases' executors and pools) is frozen out of garbage collection for them
(`gc.freeze`), as in the chaos run. Otherwise a full collection, due whenever
the cases together have promoted enough objects, lands in whichever round
crosses the line and charges that case for scanning every library the suite
imported: a gather of `aexecute` measured 50 µs per call with the heap frozen
and 83-380 µs without (LangGraph, pydantic-ai and the Agents SDK imported).
Each case still pays for collecting what it allocates itself.
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

clock = time.perf_counter_ns

Runner = Callable[[int], list[float]]
"""Runs `n` operations; returns samples in nanoseconds per operation."""

Metric = Literal["wall", "cpu", "csw"]
"""What a ratio compares: wall time, the process's CPU time, or its context switches."""


@dataclass(frozen=True)
class Usage:
    """What the whole process has spent so far: CPU ns and context switches, every thread."""

    cpu_ns: int
    switches: int


def usage() -> Usage:
    """The process's CPU time and context switches (voluntary + involuntary) until now.

    Both count every thread, ended ones included: CPU from the process CPU clock,
    switches from `getrusage(RUSAGE_SELF)`, which on Linux sums them over the
    thread group. On Windows (no `resource` module) switches read 0.
    """
    cpu = time.process_time_ns()
    if sys.platform == "win32":
        return Usage(cpu, 0)
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(cpu, ru.ru_nvcsw + ru.ru_nivcsw)


@dataclass
class Case:
    """One thing to time. `run(n)` does n operations and returns ns-per-op samples.

    `per_op` says the samples are single operations (so percentiles mean
    something); otherwise `run` returns one sample, the mean over the block.
    `before`/`after` run around every round, outside the timed region.
    """

    name: str
    run: Runner
    per_op: bool = False
    before: Callable[[], object] | None = None
    after: Callable[[], object] | None = None
    min_ops: int = 1
    max_ops: int = 1_000_000


@dataclass
class Stat:
    """The samples of one case across all rounds, in ns per operation."""

    name: str
    per_op: bool
    samples: list[float] = field(default_factory=list)
    rounds: list[float] = field(default_factory=list)  # one median per round
    ops: int = 0
    cpu_rounds: list[float] = field(default_factory=list)  # process CPU ns per op, per round
    csw_rounds: list[float] = field(default_factory=list)  # context switches per op, per round

    def add_round(self, samples: Sequence[float], spent: Usage | None = None) -> None:
        """Record one round; `spent` is what the process spent on its `ops` operations."""
        self.samples.extend(samples)
        self.rounds.append(statistics.median(samples))
        if spent is not None and self.ops > 0:
            self.cpu_rounds.append(spent.cpu_ns / self.ops)
            self.csw_rounds.append(spent.switches / self.ops)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu(self) -> float:
        """Process CPU ns per operation, median over rounds (NaN if not measured)."""
        return statistics.median(self.cpu_rounds) if self.cpu_rounds else math.nan

    @property
    def csw(self) -> float:
        """Context switches per operation, median over rounds (NaN if not measured)."""
        return statistics.median(self.csw_rounds) if self.csw_rounds else math.nan

    def of(self, metric: Metric) -> list[float]:
        """The per-round values of `metric`: "wall", "cpu" or "csw"."""
        return {"wall": self.rounds, "cpu": self.cpu_rounds, "csw": self.csw_rounds}[metric]

    def pct(self, q: float) -> float | None:
        return percentile(self.samples, q) if self.per_op else None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "median_ns": self.median,
            "rounds": len(self.rounds),
            "ops_per_round": self.ops,
            "samples": len(self.samples),
            "round_medians_ns": [round(x, 1) for x in self.rounds],
            "cpu_ns_per_op": self.cpu,
            "csw_per_op": self.csw,
            "cpu_round_ns": [round(x, 1) for x in self.cpu_rounds],
            "csw_rounds": [round(x, 3) for x in self.csw_rounds],
        }
        if self.per_op:
            out["p90_ns"] = self.pct(90)
            out["p99_ns"] = self.pct(99)
            out["min_ns"] = min(self.samples)
        return out


def percentile(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks."""
    s = sorted(xs)
    if not s:
        return math.nan
    k = (len(s) - 1) * q / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass(frozen=True)
class Ratio:
    """`a` over `b`, the median of per-round ratios, with their interquartile range."""

    value: float
    lo: float
    hi: float

    def __str__(self) -> str:
        return f"{fmt_ratio(self.value)} ({fmt_ratio(self.lo)}–{fmt_ratio(self.hi)})"

    def as_dict(self) -> dict[str, float]:
        return {"ratio": self.value, "q1": self.lo, "q3": self.hi}


def paired_ratio(a: Stat, b: Stat, of: Metric = "wall") -> Ratio:
    """How many times `a` costs `b`, compared round by round (both ran back to back).

    `of` picks what is compared: "wall" time, process "cpu" time or context
    switches ("csw"), each per operation.
    """
    pairs = [x / y for x, y in zip(a.of(of), b.of(of), strict=False) if y > 0]
    if not pairs:
        return Ratio(math.nan, math.nan, math.nan)
    return Ratio(statistics.median(pairs), percentile(pairs, 25), percentile(pairs, 75))


# -- runners --------------------------------------------------------------------


def per_op(fn: Callable[[int], object]) -> Runner:
    """Time each call of `fn(i)` on its own."""

    def run(n: int) -> list[float]:
        out = [0.0] * n
        for i in range(n):
            t0 = clock()
            fn(i)
            out[i] = clock() - t0
        return out

    return run


def block(fn: Callable[[int], object]) -> Runner:
    """Time n calls of `fn(i)` together; one sample, the mean per operation."""

    def run(n: int) -> list[float]:
        t0 = clock()
        for i in range(n):
            fn(i)
        return [(clock() - t0) / n]

    return run


def once(fn: Callable[[int], object]) -> Runner:
    """`fn(n)` does n operations itself (threads, gather, a batch); one sample per round."""

    def run(n: int) -> list[float]:
        t0 = clock()
        fn(n)
        return [(clock() - t0) / n]

    return run


def async_per_op(loop: asyncio.AbstractEventLoop, fn: Callable[[int], Awaitable[object]]) -> Runner:
    """Like `per_op`, for a coroutine function, awaited one at a time on `loop`."""

    async def many(n: int) -> list[float]:
        out = [0.0] * n
        for i in range(n):
            t0 = clock()
            await fn(i)
            out[i] = clock() - t0
        return out

    def run(n: int) -> list[float]:
        return loop.run_until_complete(many(n))

    return run


# -- the loop -------------------------------------------------------------------


def calibrate(case: Case, budget_ns: float) -> int:
    """Warm the case up and pick how many operations fill `budget_ns` per round."""
    n = max(1, case.min_ops // 8)
    spent = 0.0
    while True:
        if case.before:
            case.before()
        t0 = clock()
        case.run(n)
        dt = clock() - t0
        if case.after:
            case.after()
        spent += dt
        if (dt >= budget_ns / 4 and spent >= budget_ns) or n >= case.max_ops:
            break
        n = min(case.max_ops, n * 4 if dt < budget_ns / 16 else n * 2)
    per = dt / n
    return max(case.min_ops, min(case.max_ops, int(budget_ns / per) if per > 0 else n))


def interleave(
    cases: Sequence[Case],
    *,
    rounds: int,
    budget_ms: float,
    fixed_ops: dict[str, int] | None = None,
    warmed: Callable[[], object] | None = None,
) -> dict[str, Stat]:
    """Warm up every case, then run `rounds` rounds, each case once per round.

    The order rotates every round so no case always runs right after the same
    neighbour. `fixed_ops` pins the operations per round of some cases;
    `warmed` is called once warm-up is over, before the first measured round.
    Each round also records the process's CPU time and context switches spent
    in `run` (not in `before`/`after`), per operation.
    """
    budget_ns = budget_ms * 1e6
    ops: dict[str, int] = {}
    for c in cases:
        if fixed_ops and c.name in fixed_ops:
            if c.before:
                c.before()
            c.run(fixed_ops[c.name])  # warm-up round, not recorded
            if c.after:
                c.after()
            ops[c.name] = fixed_ops[c.name]
        else:
            ops[c.name] = calibrate(c, budget_ns)
    stats = {c.name: Stat(c.name, c.per_op, ops=ops[c.name]) for c in cases}
    if warmed:
        warmed()
    gc.collect()
    gc.freeze()
    try:
        for r in range(rounds):
            k = r % len(cases)
            for c in (*cases[k:], *cases[:k]):
                if c.before:
                    c.before()
                u0 = usage()
                samples = c.run(ops[c.name])
                u1 = usage()
                if c.after:
                    c.after()
                spent = Usage(u1.cpu_ns - u0.cpu_ns, u1.switches - u0.switches)
                stats[c.name].add_round(samples, spent)
    finally:
        gc.unfreeze()
    return stats


# -- formatting -------------------------------------------------------------------


def fmt_us(ns: float | None) -> str:
    """Nanoseconds as microseconds, with sensible precision."""
    if ns is None or math.isnan(ns):
        return "–"
    us = ns / 1000
    if us < 1:
        return f"{us:.3f}"
    if us < 100:
        return f"{us:.1f}"
    return f"{us:,.0f}"


def fmt_ratio(x: float) -> str:
    if math.isnan(x):
        return "–"
    if x < 0.1:
        return f"{x:.2g}×"
    if x < 10:
        return f"{x:.2f}×"
    return f"{x:.1f}×"


def fmt_count(x: float | None) -> str:
    """A count per operation (context switches): a few significant digits."""
    if x is None or math.isnan(x):
        return "–"
    if x < 10:
        return f"{x:.2g}" if x < 0.1 else f"{x:.2f}"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def fmt_rate(per_s: float) -> str:
    return f"{per_s:,.0f}"


def per_second(ns_per_op: float) -> float:
    return 1e9 / ns_per_op if ns_per_op > 0 else math.nan


def paired_diff(a: Stat, b: Stat, of: Metric = "wall") -> float:
    """How much more `a` costs than `b` per operation, compared round by round."""
    diffs = [x - y for x, y in zip(a.of(of), b.of(of), strict=False)]
    return statistics.median(diffs) if diffs else math.nan


def paired_net_ratio(a: Stat, b: Stat, c: Stat, of: Metric = "wall") -> Ratio:
    """How many times `c` the difference `a - b` costs, compared round by round."""
    pairs = [(x - y) / z for x, y, z in zip(a.of(of), b.of(of), c.of(of), strict=False) if z > 0]
    if not pairs:
        return Ratio(math.nan, math.nan, math.nan)
    return Ratio(statistics.median(pairs), percentile(pairs, 25), percentile(pairs, 75))


def usage_cells(st: Stat, base: Stat | None = None, per: int = 1) -> list[str]:
    """Table cells: CPU µs and context switches per call (`per` calls per operation),
    and the CPU ratio to `base` round by round, if given."""
    cells = [fmt_us(st.cpu / per), fmt_count(st.csw / per)]
    if base is not None:
        cells.append(str(paired_ratio(st, base, "cpu")))
    return cells
