"""python -m benchmarks [--smoke] [--only KEY[,KEY]] [--json PATH] [--plots DIR] [--markdown PATH]

Runs every scenario (or those named with --only), prints a table per scenario
and a final goals table. --smoke runs everything with tiny counts and never fails
on a goal (CI runs it so the suite never rots); a scenario that crashes fails
the run in either mode. --strict makes a missed goal fail a full run.
--save-reference records the run's figures as today's engine, which later runs
compare against (--reference, default benchmarks/reference.json).
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import sys
import time
import traceback
from pathlib import Path

from . import _reference
from ._common import Ctx, Scale, require_quiet_bus
from ._report import Report, load_average
from ._suite import SCENARIOS, goals


def parse(argv: list[str] | None) -> argparse.Namespace:
    keys = [k for k, _, _ in SCENARIOS]
    width = max(len(k) for k in keys)
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="toolbus against its baselines and peers, interleaved in the same run:\n"
        "wall time, process CPU time and context switches per call.",
        epilog="scenarios (--only KEYS):\n"
        + "\n".join(f"  {k:<{width}}  {h.partition(': ')[2]}" for k, h, _ in SCENARIOS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--smoke", action="store_true", help="tiny counts; goals are not enforced")
    ap.add_argument(
        "--only", action="append", default=[], metavar="KEYS", help="comma-separated scenarios"
    )
    ap.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    ap.add_argument("--plots", type=Path, metavar="DIR", help="write PNG plots into DIR")
    ap.add_argument(
        "--markdown",
        type=Path,
        metavar="PATH",
        help="write the results section (replaced between its markers if PATH has them)",
    )
    ap.add_argument("--strict", action="store_true", help="exit 1 if a goal is missed")
    ap.add_argument(
        "--reference",
        type=Path,
        default=_reference.DEFAULT,
        metavar="PATH",
        help="today's engine's figures, for goals stated against it "
        "(default: benchmarks/reference.json)",
    )
    ap.add_argument(
        "--save-reference",
        type=Path,
        metavar="PATH",
        help="record this run's figures as today's engine (full runs only)",
    )
    args = ap.parse_args(argv)
    if args.save_reference and args.smoke:
        ap.error("--save-reference needs a full run: smoke counts are too small to compare with")
    only = [k.strip() for group in args.only for k in group.split(",") if k.strip()]
    unknown = sorted(set(only) - set(keys))
    if unknown:
        ap.error(f"unknown scenario(s): {', '.join(unknown)}; choose from {', '.join(keys)}")
    args.only = only
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    scale = Scale.small() if args.smoke else Scale.full()
    report = Report(smoke=args.smoke, goals=goals())
    ctx = Ctx(scale, report, _reference.load(args.reference))
    m = report.meta
    report.note(
        f"toolbus benchmarks, {m['mode']} mode: {m['cpus']} CPUs, Python {m['python']}, "
        f"toolbus {m['toolbus']} at {m['commit']}, load average {m['load_start']}",
        indent="",
    )
    print("Read the ratios (measured back to back, round by round), not the absolute times.")
    started = time.monotonic()
    crashed: list[str] = []
    for key, header, fn in SCENARIOS:
        if args.only and key not in args.only:
            continue
        section = report.begin(key, header)
        t0 = time.monotonic()
        # A hang is a finding: after the limit, print every thread's stack and exit 1.
        faulthandler.dump_traceback_later(scale.scenario_limit_s, exit=True)
        try:
            require_quiet_bus()  # "no subscriber" must mean none: nothing left from before
            fn(ctx)
        except Exception:
            traceback.print_exc()
            print(f"!! {key} crashed", flush=True)
            crashed.append(key)
        faulthandler.cancel_dump_traceback_later()
        section.seconds = round(time.monotonic() - t0, 2)
        report.note(f"({section.seconds:.1f} s)")
        gc.collect()
    report.meta["seconds"] = time.monotonic() - started
    report.meta["load_end"] = load_average()
    print()
    print(report.goals_table().text(), flush=True)
    print(f"\n{report.meta['seconds']:.1f} s in all; load average now {report.meta['load_end']}")

    plots: list[Path] = []
    if args.plots:
        from .plots import write_plots

        plots = write_plots(report, args.plots)
        print("plots: " + ", ".join(str(p) for p in plots))
    if args.json:
        report.write_json(args.json)
        print(f"json: {args.json}")
    if args.markdown:
        report.write_markdown(args.markdown, plots)
        print(f"markdown: {args.markdown}")
    if args.save_reference:
        _reference.save(report, args.save_reference)
        print(f"reference: {args.save_reference}")

    if crashed:
        print(f"FAILED: scenario(s) crashed: {', '.join(crashed)}")
        return 1
    misses = report.misses()
    if misses and args.strict and not args.smoke:
        print(f"FAILED: {len(misses)} goal(s) missed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
