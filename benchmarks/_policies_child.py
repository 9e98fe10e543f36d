"""A worker for benchmarks/policies_cost.py: runs noop calls in rounds, on request.

Run by path (`python benchmarks/_policies_child.py unused|elsewhere|guarded [CPU]`)
with the checkout under test on PYTHONPATH: it imports nothing from
`benchmarks`, and `unused` nothing from `toolbus.policies` either, so it also
runs on a checkout from before policies existed.

- unused: an executor without policies, its two tools without any;
- elsewhere: the other tool guarded by its own policy, and an executor's
  policy whose `applies_to` is false for the noop;
- guarded: the noop guarded by a policy that admits every call.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

HEAVY = ("toolbus.policies", "limits", "cachetools", "redis")


def main(variant: str, cpu: str = "") -> None:
    if cpu:  # every thread on one core, as in the suite's scenario (policies_cost.one_cpu)
        os.sched_setaffinity(0, {int(cpu)})
    import toolbus

    imported = [m for m in HEAVY if m in sys.modules]  # what `import toolbus` brought in
    from toolbus import Executor, ToolCall, ToolRegistry

    def noop(i: int) -> int:
        """Return i."""
        return i

    mine: list[Any] = []
    other: list[Any] = []
    policies: list[Any] = []
    if variant != "unused":
        from toolbus.policies import BasePolicy

        class Only(BasePolicy):
            def applies_to(self, tool: Any) -> bool:
                return bool(tool.name == "other")

        if variant == "elsewhere":
            other, policies = [BasePolicy()], [Only()]
        elif variant == "guarded":
            mine = [BasePolicy()]
        else:
            raise SystemExit(f"unknown variant {variant!r}")
    registry = ToolRegistry()

    # Only the options a checkout from before policies knows, when there are none.
    def options(chosen: list[Any]) -> dict[str, Any]:
        return {"policies": chosen} if chosen else {}

    registry.tool(read_only=True, **options(mine))(noop)
    registry.tool(name="other", read_only=True, **options(other))(noop)
    extra = options(policies)

    call = ToolCall(name="noop", arguments={"i": 1})
    clock = time.perf_counter_ns
    with Executor(registry, max_parallel=16, timeout=30, **extra) as ex:
        for _ in range(3000):
            ex.execute(call)
        ready = {"variant": variant, "imported": imported, "toolbus": toolbus.__file__}
        print(json.dumps(ready), flush=True)
        for line in sys.stdin:
            n = int(line)
            samples = [0.0] * n
            cpu0 = time.process_time_ns()
            for i in range(n):
                t0 = clock()
                ex.execute(call)
                samples[i] = clock() - t0
            spent = (time.process_time_ns() - cpu0) / n
            answer = {"p50": statistics.median(samples), "mean": sum(samples) / n, "cpu": spent}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
