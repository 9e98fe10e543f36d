"""Scenario 8: memory per idle tool actor, against an idle pykka actor and a bare thread.

Each measurement is a fresh process (`_probe.py`): RSS before and after starting
N of them, divided by N. For toolbus, N tools are registered and the executor
warmed before the baseline; then one call to each tool starts its pool's worker,
which stays idle. Runs alternate between the kinds.
"""

from __future__ import annotations

import statistics

from ._common import Ctx
from ._report import Table
from ._sub import probe

KINDS = {
    "bare thread blocked on an Event": "thread",
    "idle pykka actor (ThreadingActor)": "pykka",
    "idle toolbus tool worker (one per tool)": "toolbus",
}


def run(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    n = s.memory_actors
    per: dict[str, list[float]] = {k: [] for k in KINDS.values()}
    extra: dict[str, dict[str, object]] = {}
    names = list(KINDS.values())
    for r in range(s.memory_reps):
        for kind in names[r % 3 :] + names[: r % 3]:
            out = probe("memory", kind, str(n), timeout=60 if s.smoke else 300)
            per[kind].append((out["rss_after_kb"] - out["rss_before_kb"]) / n)
            extra[kind] = out
    pykka_kb = statistics.median(per["pykka"])
    t = Table(
        f"RSS per idle actor, {n} started, KB (median of {s.memory_reps} processes)",
        ["kind", "KB each", "vs pykka actor", "runs (KB)"],
    )
    for label, kind in KINDS.items():
        kb = statistics.median(per[kind])
        t.add(
            label,
            f"{kb:.1f}",
            f"{kb / pykka_kb:.2f}×" if pykka_kb > 0 else "–",
            " ".join(f"{x:.1f}" for x in per[kind]),
        )
        rep.figure("memory", kind, {"kb_each": kb, "runs_kb": per[kind], "last": extra[kind]})
    live = extra["toolbus"].get("live_workers")
    t.notes.append(f"toolbus workers alive after the calls: {live} (N + the warm-up tool's)")
    rep.table(t)
