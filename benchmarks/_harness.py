"""Timing: interleaved rounds, medians, percentiles and paired ratios.

Every scenario builds `Case`s and hands them to `interleave`, which warms each
case up, sizes its rounds to a time budget, then runs round after round with the
cases in rotating order (baseline, toolbus, baseline, ...). A noisy neighbour
then slows every case of a round alike, and `paired_ratio` compares the cases
round by round: the median of per-round ratios is what survives the noise of a
shared machine; absolute times do not.
"""

from __future__ import annotations

import asyncio
import gc
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

clock = time.perf_counter_ns

Runner = Callable[[int], list[float]]
"""Runs `n` operations; returns samples in nanoseconds per operation."""


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

    def add_round(self, samples: Sequence[float]) -> None:
        self.samples.extend(samples)
        self.rounds.append(statistics.median(samples))

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def pct(self, q: float) -> float | None:
        return percentile(self.samples, q) if self.per_op else None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "median_ns": self.median,
            "rounds": len(self.rounds),
            "ops_per_round": self.ops,
            "samples": len(self.samples),
            "round_medians_ns": [round(x, 1) for x in self.rounds],
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


def paired_ratio(a: Stat, b: Stat) -> Ratio:
    """How many times `a` costs `b`, compared round by round (both ran back to back)."""
    pairs = [x / y for x, y in zip(a.rounds, b.rounds, strict=False) if y > 0]
    if not pairs:
        return Ratio(math.nan, math.nan, math.nan)
    return Ratio(statistics.median(pairs), percentile(pairs, 25), percentile(pairs, 75))


# -- runners --------------------------------------------------------------------


def per_op(fn: Callable[[int], object], unit: int = 1) -> Runner:
    """Time each call of `fn(i)` on its own; `unit` operations per call."""

    def run(n: int) -> list[float]:
        out = [0.0] * n
        for i in range(n):
            t0 = clock()
            fn(i)
            out[i] = (clock() - t0) / unit
        return out

    return run


def block(fn: Callable[[int], object], unit: int = 1) -> Runner:
    """Time n calls of `fn(i)` together; one sample, the mean per operation."""

    def run(n: int) -> list[float]:
        t0 = clock()
        for i in range(n):
            fn(i)
        return [(clock() - t0) / (n * unit)]

    return run


def once(fn: Callable[[int], object]) -> Runner:
    """`fn(n)` does n operations itself (threads, gather, a batch); one sample per round."""

    def run(n: int) -> list[float]:
        t0 = clock()
        fn(n)
        return [(clock() - t0) / n]

    return run


def async_per_op(
    loop: asyncio.AbstractEventLoop, fn: Callable[[int], Awaitable[object]], unit: int = 1
) -> Runner:
    """Like `per_op`, for a coroutine function, awaited one at a time on `loop`."""

    async def many(n: int) -> list[float]:
        out = [0.0] * n
        for i in range(n):
            t0 = clock()
            await fn(i)
            out[i] = (clock() - t0) / unit
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
    for r in range(rounds):
        k = r % len(cases)
        for c in (*cases[k:], *cases[:k]):
            if c.before:
                c.before()
            samples = c.run(ops[c.name])
            if c.after:
                c.after()
            stats[c.name].add_round(samples)
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


def fmt_rate(per_s: float) -> str:
    return f"{per_s:,.0f}"


def per_second(ns_per_op: float) -> float:
    return 1e9 / ns_per_op if ns_per_op > 0 else math.nan


def paired_diff(a: Stat, b: Stat) -> float:
    """How much more `a` costs than `b` per operation (ns), compared round by round."""
    diffs = [x - y for x, y in zip(a.rounds, b.rounds, strict=False)]
    return statistics.median(diffs) if diffs else math.nan
