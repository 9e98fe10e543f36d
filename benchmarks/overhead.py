"""Quick overhead check: one blocking call through toolbus vs. baselines, same run.

    .venv/bin/python benchmarks/overhead.py [--rounds N] [--calls N]

Rounds are interleaved (baseline, toolbus, baseline, ...) because the machine
is shared and noisy: compare the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from toolbus import Executor, ToolCall, ToolRegistry


def noop(i: int) -> int:
    return i


def per_call(fn, calls: int) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()

    reg = ToolRegistry()
    reg.tool(read_only=True)(noop)
    call_dict = ToolCall(name="noop", arguments={"i": 1})
    call_raw = ToolCall(name="noop", arguments='{"i": 1}')
    batch = [ToolCall(name="noop", arguments={"i": i}) for i in range(10)]
    pool = ThreadPoolExecutor(1)
    samples: dict[str, list[float]] = {}
    with Executor(reg, max_parallel=16) as ex:
        cases = {
            "direct call": lambda i: noop(i),
            "ThreadPoolExecutor submit+result": lambda i: pool.submit(noop, i).result(),
            "toolbus execute (dict args)": lambda i: ex.execute(call_dict),
            "toolbus execute (raw JSON args)": lambda i: ex.execute(call_raw),
            "toolbus execute_batch(10), per call": lambda i: ex.execute_batch(batch),
        }
        for name in cases:  # warm-up: start the pools
            per_call(cases[name], 200)
        for _ in range(args.rounds):
            for name, fn in cases.items():
                n = args.calls // 10 if "batch" in name else args.calls
                us = per_call(fn, n)
                samples.setdefault(name, []).append(us / 10 if "batch" in name else us)
    pool.shutdown()
    base = statistics.median(samples["ThreadPoolExecutor submit+result"])
    print(f"{'case':40} {'median µs':>10} {'× TPE':>7}")
    for name, xs in samples.items():
        m = statistics.median(xs)
        print(f"{name:40} {m:10.2f} {m / base:7.2f}")


if __name__ == "__main__":
    main()
