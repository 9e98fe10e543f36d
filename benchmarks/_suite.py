"""The scenarios, in order, and the goals of the issue they are measured against."""

from __future__ import annotations

from collections.abc import Callable

from . import bus_cost, latency, longrun, memory, scaling, throughput
from ._common import Ctx
from ._report import Goal

Scenario = tuple[str, str, Callable[[Ctx], None]]

SCENARIOS: list[Scenario] = [
    ("single", "Scenario 1: one blocking call through the whole pipeline", latency.single),
    ("batch", "Scenario 2: a ten-call read-only batch", latency.batch),
    ("pipelined", "Scenario 3: pipelined throughput", throughput.pipelined),
    ("io", "Scenario 4: I/O-bound efficiency", throughput.io_bound),
    ("bus", "Scenario 5: the bus", bus_cost.run),
    ("scaling", "Scenario 6: scaling with max_parallel and registry size", scaling.run),
    ("longrun", "Scenario 7: long run (RSS and threads)", longrun.run),
    ("memory", "Scenario 8: memory per idle tool actor", memory.run),
]


def goals() -> list[Goal]:
    return [
        Goal("single_vs_tpe", "one call vs a ThreadPoolExecutor round trip", "≤ 2×", "single"),
        Goal("vs_toolnode_1", "cheaper than LangGraph ToolNode, one call", "≥ 10×", "single"),
        Goal("vs_toolnode_10", "cheaper than LangGraph ToolNode, ten calls", "≥ 10×", "batch"),
        Goal(
            "pipelined_sync",
            "pipelined noop calls/s, execute from threads",
            "≥ 50,000/s",
            "pipelined",
        ),
        Goal(
            "pipelined_async",
            "pipelined noop calls/s, gather of aexecute",
            "≥ 50,000/s",
            "pipelined",
        ),
        Goal("io_efficiency", "I/O-bound batch vs ideal (waves × sleep)", "≥ 97%", "io"),
        Goal("rss_growth", "RSS growth over the long run", "≤ 5 MB", "longrun"),
        Goal("threads_flat", "thread count over the long run", "flat", "longrun"),
        Goal("bus_idle", "bus work per lifecycle step, no subscriber", "< 0.1 µs", "bus"),
    ]
