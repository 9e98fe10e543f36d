"""Scenario 5: what the bus costs, with 0, 1 and 10 subscribers and an isolated one.

Two views:

- the emitting side of one lifecycle step, as the supervisor and workers do it:
  `Emitter.wants(name)`, and only if someone listens, build the event and
  `emit` it to the announcer. With no subscriber that is one `wants` check. The
  same loop with an empty body is measured alongside and subtracted ("net").
  Delivery runs on the announcer's thread; "emit + delivery" also waits for it
  (`drain_events`; for an isolated subscriber, until its mailbox has the events).
- a whole call, with subscribers on every signal vs none (and events turned off
  with `NullPublisher`).

CPU and context switches are the whole process's, so for the emitting side they
include the delivery (the round ends with `drain_events`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from toolbus import Executor, bus

from ._common import Ctx, noop_call, noop_registry, require_quiet_bus
from ._harness import (
    Case,
    clock,
    fmt_us,
    interleave,
    paired_diff,
    paired_ratio,
    per_op,
    usage_cells,
)
from ._report import Table

EMPTY = "empty loop (reference)"
NONE = "no subscriber"
NULL = "events off (NullPublisher)"
CONFIGS: dict[str, tuple[int, bool]] = {  # name: (subscribers, isolated)
    NONE: (0, False),
    "1 subscriber": (1, False),
    "10 subscribers": (10, False),
    "1 isolated subscriber (own mailbox)": (1, True),
}


def _receiver(sender: Any, *, event: Any, signal: str) -> None:
    return None


class _Subscribers:
    """Subscribes before a round and unsubscribes after it, outside the timing.

    Subscribed for any sender: only the executor under test emits meanwhile, and
    closing a sender-scoped subscription leaves its receiver in the signal's
    `receivers` (blinker's `disconnect(fn, sender)` keeps it), so `wants()` would
    stay true after the round.
    """

    def __init__(self, ex: Executor, count: int, isolated: bool, names: tuple[str, ...]) -> None:
        self.ex, self.count, self.isolated, self.names = ex, count, isolated, names
        self.subs: list[bus.Subscription] = []

    def on(self) -> None:
        if self.count == 0:
            require_quiet_bus()
        self.subs = [
            bus.subscribe(_receiver, *self.names, isolated=self.isolated) for _ in range(self.count)
        ]

    def off(self) -> None:
        self.ex.drain_events()
        for sub in self.subs:
            sub.close()
        self.subs = []


def run(ctx: Ctx) -> None:
    s = ctx.scale
    with (
        Executor(noop_registry(), max_parallel=16, timeout=30) as ex,
        Executor(noop_registry(), publisher=bus.NullPublisher()) as ex_null,
    ):
        _emit_side(ctx, ex, ex_null, s.rounds, s.budget_ms)
        _whole_call(ctx, ex, ex_null, s.rounds, s.budget_ms)


def _emit_side(ctx: Ctx, ex: Executor, ex_null: Executor, rounds: int, budget_ms: float) -> None:
    name = bus.EXECUTED
    delivered: dict[str, list[float]] = {}

    def empty(n: int) -> list[float]:
        t0 = clock()
        for _ in range(n):
            pass
        return [(clock() - t0) / n]

    def steps(label: str, ex: Executor) -> Callable[[int], list[float]]:
        em = ex._emitter

        def run(n: int) -> list[float]:
            wants, emit, event = em.wants, em.emit, bus.Executed
            t0 = clock()
            for _ in range(n):
                if wants(name):
                    emit(name, event("call_1", "noop", None, 1, 0.001))
            t1 = clock()
            ex.drain_events()
            delivered.setdefault(label, []).append((clock() - t0) / n)
            return [(t1 - t0) / n]

        return run

    cases = [Case(EMPTY, empty, min_ops=10_000)]
    for label, (count, isolated) in CONFIGS.items():
        subs = _Subscribers(ex, count, isolated, (name,))
        cases.append(Case(label, steps(label, ex), before=subs.on, after=subs.off, min_ops=1000))
    cases.append(Case(NULL, steps(NULL, ex_null), min_ops=1000))
    stats = interleave(cases, rounds=rounds, budget_ms=budget_ms / 2, warmed=delivered.clear)

    t = Table(
        "one lifecycle step on the emitting side (wants + event + emit), µs per step",
        [
            "case",
            "emit side",
            "net of the loop",
            "emit + delivery",
            "CPU incl. delivery",
            "csw",
            "vs no subscriber",
        ],
    )
    base = stats[NONE]
    for label, st in stats.items():
        net = paired_diff(st, stats[EMPTY])
        d = delivered.get(label)
        t.add(
            label,
            fmt_us(st.median),
            fmt_us(net) if label != EMPTY else "",
            fmt_us(statistics.median(d)) if d else "",
            *usage_cells(st),
            paired_ratio(st, base) if label != EMPTY else "",
        )
        ctx.report.figure("bus", f"emit: {label}", {**st.summary(), "net_ns": net})
    t.notes.append("net = the step minus the empty loop, round by round (median of differences)")
    ctx.report.table(t)
    idle = paired_diff(base, stats[EMPTY])
    ctx.report.goal("bus_idle").set(idle / 1000, f"{fmt_us(idle)} µs", idle < 100)


def _whole_call(ctx: Ctx, ex: Executor, ex_null: Executor, rounds: int, budget_ms: float) -> None:
    call = noop_call()
    cases: list[Case] = []
    for label, (count, isolated) in CONFIGS.items():
        subs = _Subscribers(ex, count, isolated, bus.ALL_SIGNALS)
        cases.append(
            Case(
                label + ("" if count == 0 else " (all signals)"),
                per_op(lambda i: ex.execute(call)),
                per_op=True,
                before=subs.on,
                after=subs.off,
            )
        )
    cases.append(Case(NULL, per_op(lambda i: ex_null.execute(call)), per_op=True))
    stats = interleave(cases, rounds=rounds, budget_ms=budget_ms)
    t = Table(
        "a whole call with subscribers attached, µs per call",
        [
            "case",
            "median",
            "p99",
            "CPU µs",
            "csw",
            "vs no subscriber (IQR)",
            "CPU vs no subscriber (IQR)",
        ],
    )
    base = stats[NONE]
    for label, st in stats.items():
        cpu, csw, cpu_vs = usage_cells(st, base)
        t.add(
            label, fmt_us(st.median), fmt_us(st.pct(99)), cpu, csw, paired_ratio(st, base), cpu_vs
        )
        ctx.report.figure(
            "bus",
            f"call: {label}",
            {
                **st.summary(),
                "vs_none": paired_ratio(st, base).as_dict(),
                "cpu_vs_none": paired_ratio(st, base, "cpu").as_dict(),
            },
        )
    ctx.report.table(t)
    ctx.report.series["bus"] = {label: st.median for label, st in stats.items()}
