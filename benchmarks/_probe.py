"""Measurements that need a fresh process: RSS and threads are the whole process's.

    python -m benchmarks._probe longrun CALLS INTERVAL
    python -m benchmarks._probe memory {toolbus,pykka,thread} N

Prints one JSON object on its last line of output.
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pykka

from toolbus import Executor

from ._common import noop_call, noop_registry
from ._harness import usage


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def rss_kb() -> int:
    return _status("VmRSS")


def sample(t0: float, calls: float, drivers: int = 0) -> dict[str, float]:
    """RSS, thread counts, process CPU and context switches so far; `drivers` caller
    threads alive are not counted as threads."""
    spent = usage()
    return {
        "t": round(time.monotonic() - t0, 3),
        "calls": calls,
        "rss_kb": rss_kb(),
        "threads": threading.active_count() - drivers,
        "os_threads": _status("Threads") - drivers,
        "cpu_s": spent.cpu_ns / 1e9,
        "csw": spent.switches,
    }


# -- long run ------------------------------------------------------------------

STALL_S = 20.0


def _stalled(why: str) -> None:
    """A hang is a finding, not something to wait out: show every thread's stack, exit."""
    print(f"STALLED: {why}; every thread's stack follows", file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(3)


def _drivers(ex: Executor, target: list[int], counts: list[int]) -> list[threading.Thread]:
    """Three callers: single execute, execute_batch(20), asyncio.gather of 50 aexecute.

    They stop once `target[0]` calls are done (it may move while they run).
    """

    def done() -> bool:
        return sum(counts) >= target[0]

    def singles() -> None:
        call = noop_call(0)
        while not done():
            ex.execute(call)
            counts[0] += 1

    def batches() -> None:
        calls = [noop_call(i) for i in range(20)]
        while not done():
            ex.execute_batch(calls)
            counts[1] += 20

    def gathers() -> None:
        calls = [noop_call(i) for i in range(50)]
        loop = asyncio.new_event_loop()

        async def fifty() -> None:
            await asyncio.gather(*(ex.aexecute(c) for c in calls))

        while not done():
            loop.run_until_complete(fifty())
            counts[2] += 50
        loop.close()

    work: list[Callable[[], None]] = [singles, batches, gathers]
    return [threading.Thread(target=fn, name=f"driver-{fn.__name__}") for fn in work]


def longrun(calls: int, interval: float) -> dict[str, Any]:
    warm = max(2000, calls // 50)
    counts = [0, 0, 0]
    t0 = time.monotonic()
    samples: list[dict[str, float]] = []
    base: dict[str, float] | None = None
    base_t = t0
    ex = Executor(noop_registry(), max_parallel=16, timeout=30)
    target = [warm + calls]
    drivers = _drivers(ex, target, counts)
    for d in drivers:
        d.start()
    progress = (time.monotonic(), 0)
    while True:
        time.sleep(interval)
        alive = sum(d.is_alive() for d in drivers)
        if alive < len(drivers):
            break  # callers are finishing: thread counts would move for that reason
        done = sum(counts)
        if done != progress[1]:
            progress = (time.monotonic(), done)
        elif time.monotonic() - progress[0] > STALL_S:
            _stalled(f"no call completed for {STALL_S:.0f} s after {done:,} calls")
        if base is None and done >= warm:
            gc.collect()
            base = sample(t0, done, alive)
            base_t = time.monotonic()
            target[0] = int(base["calls"]) + calls  # exactly `calls` after the baseline
        samples.append(sample(t0, done, alive))
    for d in drivers:
        d.join()
    if base is None:  # finished before the first sample after warm-up: no warm-up then
        base = {**samples[0], "calls": 0} if samples else sample(t0, 0)
    elapsed = time.monotonic() - base_t
    gc.collect()
    end = sample(t0, sum(counts))
    stats = ex.stats()
    ex.close()
    gc.collect()
    closed = sample(t0, end["calls"])
    running = [base, *(s for s in samples if s["calls"] > base["calls"]), end]
    calls_done = max(1, end["calls"] - base["calls"])
    return {
        "calls": end["calls"] - base["calls"],
        "cpu_us_per_call": (end["cpu_s"] - base["cpu_s"]) * 1e6 / calls_done,
        "csw_per_call": (end["csw"] - base["csw"]) / calls_done,
        "warmup_calls": base["calls"],
        "seconds": elapsed,
        "calls_per_s": (end["calls"] - base["calls"]) / elapsed,
        "split": {"execute": counts[0], "execute_batch": counts[1], "aexecute": counts[2]},
        "base": base,
        "end": end,
        "after_close": closed,
        "rss_growth_kb": end["rss_kb"] - base["rss_kb"],
        "rss_peak_kb": max(s["rss_kb"] for s in running),
        "threads_min": min(s["threads"] for s in running),
        "threads_max": max(s["threads"] for s in running),
        "os_threads_min": min(s["os_threads"] for s in running),
        "os_threads_max": max(s["os_threads"] for s in running),
        "ok": stats.ok,
        "not_ok": stats.error + stats.timeout + stats.cancelled + stats.rejected,
        "live_workers": stats.live_workers,
        "samples": samples,
    }


# -- memory per idle actor --------------------------------------------------------


class _Idle(pykka.ThreadingActor):
    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        return None


def memory(kind: str, n: int) -> dict[str, Any]:
    if kind == "toolbus":
        ex = Executor(noop_registry(n + 1), max_parallel=16, timeout=30)
        ex.execute(noop_call())  # the first pool, the code paths: before the baseline
        calls = [noop_call(1, f"noop_{k}") for k in range(1, n + 1)]
        gc.collect()
        r0 = rss_kb()
        ok = sum(ex.execute(c).status == "ok" for c in calls)
        time.sleep(0.2)
        gc.collect()
        r1 = rss_kb()
        extra = {"ok": ok, "live_workers": ex.stats().live_workers}
        ex.close()
    elif kind == "pykka":
        gc.collect()
        r0 = rss_kb()
        refs = [_Idle.start() for _ in range(n)]
        for r in refs:
            r.ask(None)  # running, idle in its inbox
        time.sleep(0.2)
        gc.collect()
        r1 = rss_kb()
        extra = {"threads": threading.active_count()}
        for r in refs:
            r.stop(block=False)
    elif kind == "thread":
        gate = threading.Event()
        gc.collect()
        r0 = rss_kb()
        ts = [threading.Thread(target=gate.wait, daemon=True) for _ in range(n)]
        for t in ts:
            t.start()
        time.sleep(0.2)
        gc.collect()
        r1 = rss_kb()
        extra = {"threads": threading.active_count()}
        gate.set()
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    return {"kind": kind, "n": n, "rss_before_kb": r0, "rss_after_kb": r1, **extra}


def main(argv: list[str]) -> None:
    # Never outlive the suite: whatever hangs, this process ends (the parent may be gone).
    deadline = float(os.environ.get("BENCH_PROBE_DEADLINE", "1800"))
    watchdog = threading.Timer(deadline, _stalled, (f"deadline of {deadline:.0f} s passed",))
    watchdog.daemon = True
    watchdog.start()
    if argv[:1] == ["longrun"]:
        out = longrun(int(argv[1]), float(argv[2]))
    elif argv[:1] == ["memory"]:
        out = memory(argv[1], int(argv[2]))
    else:
        raise SystemExit(__doc__)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
