"""Scenario 7: a million calls in one process; RSS and threads sampled over the run.

Runs in a fresh process (`_probe.py`), so earlier scenarios leave no threads or
heap behind. Three callers at once: `execute` one at a time, `execute_batch` of
20, and `asyncio.gather` of 50 `aexecute`. RSS is VmRSS from /proc/self/status,
threads are `threading.active_count()` (and the OS count); the baseline is taken
after a warm-up (2 % of the calls, at least 2 000). CPU and context switches
per call are the whole process's from the baseline to the end, over the calls
made meanwhile.
"""

from __future__ import annotations

from ._common import Ctx
from ._harness import fmt_rate
from ._report import Table
from ._sub import probe

RSS_LIMIT_MB = 5.0


def run(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    out = probe(
        "longrun",
        str(s.longrun_calls),
        "0.05" if s.smoke else "0.25",
        timeout=s.scenario_limit_s - 40,
    )
    mb = 1 / 1024
    base, end = out["base"], out["end"]
    growth = out["rss_growth_kb"] * mb
    split = ", ".join(f"{k} {v:,}" for k, v in out["split"].items())
    t = Table(
        f"{out['calls']:,} calls in one process after {out['warmup_calls']:,} warm-up calls",
        ["measure", "value"],
    )
    t.add("seconds, calls/s", f"{out['seconds']:.1f} s, {fmt_rate(out['calls_per_s'])}/s")
    t.add(
        "CPU µs per call, context switches per call",
        f"{out['cpu_us_per_call']:.1f} µs, {out['csw_per_call']:.2f}",
    )
    t.add("calls by API (incl. warm-up)", split)
    t.add("results not ok", out["not_ok"])
    t.add("RSS after warm-up → end", f"{base['rss_kb'] * mb:.1f} → {end['rss_kb'] * mb:.1f} MB")
    t.add("RSS growth (peak over the run)", f"{growth:+.2f} MB ({out['rss_peak_kb'] * mb:.1f} MB)")
    t.add("threads during the run, min–max", f"{out['threads_min']}–{out['threads_max']}")
    t.add("OS threads during the run, min–max", f"{out['os_threads_min']}–{out['os_threads_max']}")
    t.add("tool workers alive at the end", out["live_workers"])
    t.add("threads just after close()", out["after_close"]["threads"])
    t.notes.append(
        f"{len(out['samples'])} samples, from the warm-up to the end; thread counts leave out "
        "the 3 caller threads"
    )
    rep.table(t)
    rep.figure("longrun", "result", {k: v for k, v in out.items() if k != "samples"})
    rep.figure(
        "longrun",
        "per call",
        {"cpu_ns_per_op": out["cpu_us_per_call"] * 1000, "csw_per_op": out["csw_per_call"]},
    )
    rep.series["longrun"] = {"samples": out["samples"], "warmup_calls": out["warmup_calls"]}
    label = f"over {out['calls']:,} calls"
    rep.goal("rss_growth").set(
        growth, f"{growth:+.2f} MB {label}", growth <= RSS_LIMIT_MB and out["not_ok"] == 0
    )
    spread = out["threads_max"] - out["threads_min"]
    rep.goal("threads_flat").set(
        spread,
        f"{out['threads_min']}–{out['threads_max']} {label}",
        spread == 0,
    )
