"""PNG plots of a run (matplotlib, Agg backend): small files for docs/perf/."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._report import Report

SIZE = (7.0, 3.6)
DPI = 90


def write_plots(report: Report, out: Path) -> list[Path]:
    """Write every plot whose data the run has; return their paths."""
    try:
        import matplotlib
    except ImportError:
        print("plots skipped (install .[bench])")
        return []
    matplotlib.use("Agg")
    out.mkdir(parents=True, exist_ok=True)
    makers: list[tuple[str, str, Callable[[Any, Any], None]]] = [
        ("single", "latency.png", _latency),
        ("parallel", "scaling.png", _scaling),
        ("bus", "bus.png", _bus),
        ("longrun", "longrun.png", _longrun),
    ]
    written: list[Path] = []
    for key, name, make in makers:
        if key not in report.series:
            continue
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=SIZE, dpi=DPI)
        make(fig, report.series)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        written.append(path)
    return written


def _latency(fig: Any, series: dict[str, Any]) -> None:
    """Cumulative distribution of one call's latency, per case (log scale)."""
    ax = fig.add_subplot(1, 1, 1)
    for name, samples in series["single"].items():
        xs = sorted(s / 1000 for s in samples)
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.plot(xs, ys, label=name, linewidth=1.4)
    ax.set_xscale("log")
    ax.set_xlabel("µs per call (log)")
    ax.set_ylabel("fraction of calls ≤ x")
    ax.set_title("Scenario 1: latency of one call, same run")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def _scaling(fig: Any, series: dict[str, Any]) -> None:
    par = series["parallel"]
    ax = fig.add_subplot(1, 2, 1)
    levels = par["levels"]
    ax.plot(levels, par["noop"], "o-", label="noop calls/s")
    ax.plot(levels, par["nap"], "s-", label="1 ms sleeps/s")
    ax.plot(levels, [p * 1000 for p in levels], ":", color="grey", label="ideal for 1 ms sleeps")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("max_parallel")
    ax.set_ylabel("calls/s (log)")
    ax.set_title("pipelined throughput", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    reg = series.get("registry")
    ax2 = fig.add_subplot(1, 2, 2)
    if reg:
        ax2.plot(reg["sizes"], reg["call_us"], "o-", label="call to a registered tool")
        ax2.plot(reg["sizes"], reg["unknown_us"], "s--", label="call to an unknown tool")
        ax2.set_xscale("log")
        ax2.set_xlabel("tools registered (log)")
    else:
        ax2.plot(levels, par["single_us"], "o-", label="one call")
        ax2.set_xscale("log", base=2)
        ax2.set_xlabel("max_parallel")
    ax2.set_ylabel("µs per call (median)")
    ax2.set_ylim(bottom=0)
    ax2.set_title("latency of one call", fontsize=10)
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=7)


def _bus(fig: Any, series: dict[str, Any]) -> None:
    data = series["bus"]
    ax = fig.add_subplot(1, 1, 1)
    names = list(data)
    ax.barh(names, [data[n] / 1000 for n in names], color="tab:blue")
    ax.invert_yaxis()
    ax.set_xlabel("µs per call (median)")
    ax.set_title("Scenario 5: a whole call with subscribers attached")
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(True, axis="x", alpha=0.3)


def _longrun(fig: Any, series: dict[str, Any]) -> None:
    samples = series["longrun"]["samples"]
    calls = [s["calls"] for s in samples]
    ax = fig.add_subplot(1, 1, 1)
    ax.axvline(series["longrun"]["warmup_calls"], color="grey", linestyle=":", linewidth=1)
    ax.plot(calls, [s["rss_kb"] / 1024 for s in samples], color="tab:blue", label="RSS (MB)")
    ax.set_xlabel("calls completed")
    ax.set_ylabel("RSS (MB)", color="tab:blue")
    lo = min(s["rss_kb"] for s in samples) / 1024
    ax.set_ylim(max(0.0, lo - 10), lo + 20)
    ax2 = ax.twinx()
    ax2.plot(calls, [s["threads"] for s in samples], color="tab:orange", label="threads")
    ax2.set_ylabel("threads (callers not counted)", color="tab:orange")
    top = max(s["threads"] for s in samples)
    ax2.set_ylim(0, top * 1.5)
    ax.set_title("Scenario 7: RSS and threads over the long run (dotted: end of warm-up)")
    ax.grid(True, alpha=0.3)
