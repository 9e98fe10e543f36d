"""How many worker threads a burst of quick sync calls starts: a cold executor, six callers.

Sixty calls of a noop tool, ten from each of six threads released at once, at
`max_parallel=64` (so capacity never makes a call wait), one `execute` after
another or (`--batch`) as one `execute_batch` of ten each: the thread backend
starts as many workers as it decides to, and `ExecutorStats.workers_started`
says how many. One worker per call is the worst case; a pool that lets
workers come back for queued calls starts far fewer. Reported over several
rounds (each a fresh executor), since thread scheduling decides the races:

    python -m benchmarks.worker_burst [--batch] [--rounds N] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
from typing import Any

__all__ = ["burst"]

CALLERS = 6
PER_CALLER = 10


def burst(batch: bool = False) -> dict[str, int]:
    """One round: calls made, workers started, workers alive after."""
    from toolbus import Executor, ToolCall, ToolRegistry

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def noop(i: int) -> int:
        return i

    ex = Executor(reg, max_parallel=64)
    go = threading.Barrier(CALLERS)
    statuses: list[str] = []
    lock = threading.Lock()

    def caller(k: int) -> None:
        calls = [
            ToolCall(id=f"c{k}-{i}", name="noop", arguments={"i": k * PER_CALLER + i})
            for i in range(PER_CALLER)
        ]
        go.wait()
        if batch:
            got = [r.status for r in ex.execute_batch(calls)]
        else:
            got = [ex.execute(c).status for c in calls]
        with lock:
            statuses.extend(got)

    try:
        threads = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = ex.stats()
    finally:
        ex.close()
    assert statuses.count("ok") == CALLERS * PER_CALLER, statuses
    return {"calls": len(statuses), "started": stats.workers_started, "live": stats.live_workers}


def main(argv: list[str]) -> int:
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 10
    batch = "--batch" in argv
    runs: list[dict[str, Any]] = [burst(batch) for _ in range(rounds)]
    started = [r["started"] for r in runs]
    summary = {
        "calls": runs[0]["calls"],
        "mode": "execute_batch" if batch else "execute",
        "rounds": rounds,
        "started_min": min(started),
        "started_median": statistics.median(started),
        "started_max": max(started),
        "started": started,
    }
    if "--json" in argv:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['calls']} calls ({summary['mode']}) from {CALLERS} threads, {rounds} "
            "rounds: workers started "
            f"min {min(started)}, median {summary['started_median']:g}, max {max(started)} "
            f"({started})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
