"""What watching an executor costs (toolbus.observe), measured on one blocking noop call.

    python -m benchmarks.observe_cost [--rounds N] [--calls N] [--baseline PYTHONPATH]
                                      [--attached-only] [--only LABEL,...]

Two views, each interleaved round by round (see `_harness.py`):

1. Nothing attached: the same workload in fresh processes, one that never
   imports `toolbus.observe`, one that does (and attaches nothing), and a twin
   of the first (how far apart two identical processes land by chance); rounds
   alternate between them. With `--baseline PATH` another process runs the
   same workload on another checkout (say, the engine before `Executor.on_submit`).
   Goal: at most 1.02x.
2. Subscribers attached, in one process: none, each surface alone
   (`instrument_otel` with the SDK and a batch span processor, `instrument_prometheus`,
   `log_json` to a file; `serve_status` with no client, `live` drawing to a terminal
   in memory), the three exporters together, and every surface at once; then none,
   all three and every surface again with a tool that waits 1 ms. The caller-visible
   p50 against none (goal: at most 1.3x), and the subscribers' CPU per call: the
   whole process's CPU per call minus that of the run with none, round by round
   (event building, queueing, delivery, the exporters' own threads).

   None, all three and every surface also run with every thread of the process
   on one CPU ("..., one CPU", compared with "none, one CPU" in the same rounds):
   on a 2-core VM an executor's threads sometimes settle on the other core than
   the caller's, which makes calls 1.5-6 times as costly for reasons of
   placement, not of code (`policies_cost.one_cpu`). Pinning is per round
   (`_pin_all`: each thread's affinity, new threads inherit it), so pinned and
   unpinned rounds interleave in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._harness import Case, interleave, paired_diff, paired_ratio, per_op

ROOT = Path(__file__).resolve().parent.parent
CHILD = Path(__file__).resolve().parent / "_observe_child.py"


# -- 1. nothing attached: a process with toolbus.observe imported vs one without -------
# (each process is a `_observe_child.py`)


class _Worker:
    def __init__(self, variant: str, pythonpath: str) -> None:
        self.variant = variant
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), variant],
            cwd=tempfile.gettempdir(),
            env={**os.environ, "PYTHONPATH": pythonpath},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self._readline())
        assert ready["observe"] == (variant == "observe"), ready
        assert ready["toolbus"].startswith(str(Path(pythonpath).resolve())), ready

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


def idle_cost(rounds: int, calls: int, baseline: str | None) -> dict[str, Any]:
    # "twin" runs exactly what "plain" runs: how far apart two processes land by chance.
    variants = [("plain", str(ROOT)), ("observe", str(ROOT)), ("twin", str(ROOT))]
    if baseline:
        variants.append(("baseline", baseline))
    workers = [_Worker("observe" if v == "observe" else "plain", p) for v, p in variants]
    names = [v for v, _ in variants]
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    try:
        for r in range(rounds):
            order = list(range(len(workers)))
            order = order[r % len(order) :] + order[: r % len(order)]  # rotate who goes first
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
        name: {f: statistics.median(x[f] for x in figures[name]) for f in ("p50", "mean", "cpu")}
        for name in names
    }
    for field in ("p50", "mean", "cpu"):
        out[f"observe_vs_plain_{field}"] = ratio("observe", "plain", field)
        out[f"twin_vs_plain_{field}"] = ratio("twin", "plain", field)
        if baseline:
            out[f"plain_vs_baseline_{field}"] = ratio("plain", "baseline", field)
    return out


# -- 2. subscribers attached ------------------------------------------------------------


def _pin_all(cpus: set[int]) -> None:
    """Every thread of this process on `cpus` (Linux); threads started later inherit it."""
    pin = getattr(os, "sched_setaffinity", None)
    if pin is None:
        return
    for tid in os.listdir("/proc/self/task"):
        try:
            pin(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def attached_cost(
    rounds: int, budget_ms: float, only: tuple[str, ...] | None = None
) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from prometheus_client import CollectorRegistry
    from rich.console import Console

    from toolbus import Executor, ToolCall, ToolRegistry
    from toolbus.observe import (
        instrument_otel,
        instrument_prometheus,
        live,
        log_json,
        serve_status,
    )

    class Discard(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    prom = CollectorRegistry()
    tmp = tempfile.TemporaryDirectory()
    log_path = Path(tmp.name) / "events.jsonl"

    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def noop(i: int) -> int:
        return i

    @registry.tool(read_only=True)
    def io_1ms(i: int) -> int:
        time.sleep(0.001)  # an I/O-bound tool: the GIL is free while it waits
        return i

    call = ToolCall(name="noop", arguments={"i": 1})
    io_call = ToolCall(name="io_1ms", arguments={"i": 1})
    ex = Executor(registry, max_parallel=16, timeout=30, name="bench")

    class Live:
        """`live(ex)` drawing to a terminal in memory, closed like a handle."""

        def __init__(self) -> None:
            self.stack = contextlib.ExitStack()
            screen = Console(file=io.StringIO(), force_terminal=True, width=160, height=50)
            self.stack.enter_context(live(ex, console=screen))

        def close(self) -> None:
            self.stack.close()

    exporters: dict[str, Callable[[], Any]] = {
        "otel": lambda: instrument_otel(ex, tracer_provider, meter_provider),
        "prometheus": lambda: instrument_prometheus(ex, prom),
        "log_json": lambda: log_json(ex, log_path, max_bytes=50_000_000, backups=1),
    }
    # The live views: a status server nobody is reading (its feed keeps the state
    # and the event ring; /metrics is its own instrument_prometheus), and the
    # terminal dashboard redrawn 4 times a second.
    surfaces: dict[str, Callable[[], Any]] = {
        **exporters,
        "serve_status": lambda: serve_status(ex),
        "live": Live,
    }
    configs: dict[str, tuple[str, ...]] = {
        "none": (),
        **{name: (name,) for name in surfaces},
        "all three": tuple(exporters),
        "every surface": tuple(surfaces),
    }
    goals = ("none", "all three", "every surface")  # also pinned, and with the 1 ms tool

    affinity = getattr(os, "sched_getaffinity", None)
    every_cpu = affinity(0) if affinity is not None else None
    one = {max(every_cpu)} if every_cpu is not None and len(every_cpu) > 1 else None

    class Attach:
        def __init__(self, names: tuple[str, ...], pinned: bool = False) -> None:
            self.names = names
            self.pinned = pinned
            self.handles: list[Any] = []

        def on(self) -> None:
            if self.pinned and one is not None:
                _pin_all(one)  # before attaching: the surfaces' threads start pinned
            self.handles = [surfaces[n]() for n in self.names]

        def off(self) -> None:
            ex.drain_events()
            for h in self.handles:
                h.close()
            self.handles = []
            if self.pinned and every_cpu is not None:
                _pin_all(every_cpu)

    def timed(c: Any) -> Callable[[int], list[float]]:
        """Each call timed on its own; the round's CPU also covers delivering its
        events (drain_events at its end), lingering included."""
        calls = per_op(lambda i: ex.execute(c))

        def run(n: int) -> list[float]:
            samples = calls(n)
            ex.drain_events()
            return samples

        return run

    cases = []
    for label, names in configs.items():
        if only is None or label in only or label == "none":
            a = Attach(names)
            cases.append(Case(label, timed(call), per_op=True, before=a.on, after=a.off))
    for label in goals:
        if only is not None and label not in only and label != "none":
            continue
        if one is not None:  # every thread on one CPU
            a = Attach(configs[label], pinned=True)
            cases.append(
                Case(f"{label}, one CPU", timed(call), per_op=True, before=a.on, after=a.off)
            )
        a = Attach(configs[label])  # the same with a tool that waits 1 ms
        cases.append(
            Case(f"{label}, 1 ms tool", timed(io_call), per_op=True, before=a.on, after=a.off)
        )
    try:
        stats = interleave(cases, rounds=rounds, budget_ms=budget_ms)
    finally:
        ex.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()
        tmp.cleanup()
    out: dict[str, Any] = {}
    for label, st in stats.items():
        suffix = label.partition(", ")[2]
        base = stats[f"none, {suffix}" if suffix else "none"]
        out[label] = {
            "p50_us": st.median / 1000,
            "p99_us": (st.pct(99) or 0) / 1000,
            "cpu_us_per_call": st.cpu / 1000,
            "p50_vs_none": paired_ratio(st, base).as_dict(),
            "cpu_vs_none": paired_ratio(st, base, "cpu").as_dict(),
            "subscribers_cpu_us_per_call": paired_diff(st, base, "cpu") / 1000,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.observe_cost")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000, help="calls per round (nothing attached)")
    ap.add_argument("--budget-ms", type=float, default=200, help="time per case per round")
    ap.add_argument("--baseline", metavar="PYTHONPATH", help="another checkout to compare with")
    ap.add_argument(
        "--attached-only", action="store_true", help="view 2 only (subscribers attached)"
    )
    ap.add_argument(
        "--only",
        metavar="LABELS",
        help="view 2: only these configurations, comma-separated (none always runs), "
        'e.g. "all three,every surface"',
    )
    ap.add_argument("--json", type=Path, metavar="PATH")
    args = ap.parse_args(argv)
    idle: dict[str, Any] = {}
    if not args.attached_only:
        idle = idle_cost(args.rounds, args.calls, args.baseline)
        print("nothing attached (separate processes, interleaved rounds):")
        for name in ("plain", "observe", "twin", "baseline"):
            if name in idle:
                f = idle[name]
                print(
                    f"  {name:<9} p50 {f['p50'] / 1000:7.1f} µs  mean {f['mean'] / 1000:7.1f} µs  "
                    f"CPU {f['cpu'] / 1000:7.1f} µs/call"
                )
        for key in sorted(k for k in idle if "_vs_" in k):
            r = idle[key]
            print(f"  {key}: {r['ratio']:.3f} ({r['q1']:.3f}-{r['q3']:.3f})")
    only = tuple(x.strip() for x in args.only.split(",")) if args.only else None
    attached = attached_cost(args.rounds, args.budget_ms, only)
    print("subscribers attached (one process, interleaved rounds; '..., one CPU': every")
    print("thread on one CPU, against 'none, one CPU'):")
    for label, f in attached.items():
        print(
            f"  {label:<26} p50 {f['p50_us']:6.1f} µs  p99 {f['p99_us']:7.1f} µs  "
            f"CPU {f['cpu_us_per_call']:6.1f} µs/call  "
            f"p50 vs none {f['p50_vs_none']['ratio']:.3f} "
            f"({f['p50_vs_none']['q1']:.3f}-{f['p50_vs_none']['q3']:.3f})  "
            f"subscribers' CPU {f['subscribers_cpu_us_per_call']:6.1f} µs/call"
        )
    if args.json:
        args.json.write_text(json.dumps({"idle": idle, "attached": attached}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
