"""A worker for benchmarks/observe_cost.py: runs noop calls in rounds, on request.

Run by path (`python benchmarks/_observe_child.py plain|observe`) with the
checkout under test on PYTHONPATH: it imports nothing from `benchmarks`, so
the toolbus it measures is the one PYTHONPATH names.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main(variant: str) -> None:
    if variant == "observe":
        import toolbus.observe
    from toolbus import Executor, ToolCall, ToolRegistry

    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def noop(i: int) -> int:
        return i

    call = ToolCall(name="noop", arguments={"i": 1})
    clock = time.perf_counter_ns
    with Executor(registry, max_parallel=16, timeout=30) as ex:
        for _ in range(3000):
            ex.execute(call)
        import toolbus

        ready = {"observe": "toolbus.observe" in sys.modules, "toolbus": toolbus.__file__}
        print(json.dumps(ready), flush=True)
        for line in sys.stdin:
            n = int(line)
            samples = [0.0] * n
            cpu0 = time.process_time_ns()
            for i in range(n):
                t0 = clock()
                ex.execute(call)
                samples[i] = clock() - t0
            cpu = (time.process_time_ns() - cpu0) / n
            answer = {"p50": statistics.median(samples), "mean": sum(samples) / n, "cpu": cpu}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
