"""The scenarios, in order, and the goals of the issue they are measured against.

Every goal is a ratio measured in the same run (or, against today's engine, a
same-run ratio compared with the recorded one), except the few that are counts
by nature (MB, threads, the bus's idle cost, and the chaos run's lost
calls and how many milliseconds past their deadline callers were freed).
"""

from __future__ import annotations

from collections.abc import Callable

from . import (
    adapters,
    bus_cost,
    chaos,
    durable,
    durable_restate,
    latency,
    lateness,
    longrun,
    many_async,
    memory,
    policies_cost,
    process,
    ray_backend,
    scaling,
    scanning,
    throughput,
    waiting,
)
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
    ("async10k", "Scenario 9: many async calls in flight", many_async.run),
    ("chaos", "Scenario 10: chaos with deadlines", chaos.run),
    ("adapters", "Scenario 11: framework adapters over a bare aexecute", adapters.run),
    (
        "process",
        "Scenario 12: the process backend (a warm call, a timeout, the replacement)",
        process.run,
    ),
    ("policies", "Scenario 13: what policies cost a call", policies_cost.run),
    (
        "ray",
        "Scenario 14: the Ray backend (a warm call, many async calls in flight)",
        ray_backend.run,
    ),
    ("waiting", "Scenario 15: calls waiting on a rate limit (threads)", waiting.run),
    (
        "lateness",
        "Scenario 16: callers freed at their deadline beside a CPU-bound thread",
        lateness.run,
    ),
    ("scanning", "Scenario 17: the content scanner, per KB of text", scanning.run),
    ("durable", "Scenario 18: a call inside a DBOS workflow, against a bare step", durable.run),
    (
        "durable_restate",
        "Scenario 19: a call inside a Restate handler, against a bare ctx.run",
        durable_restate.run,
    ),
]


def goals() -> list[Goal]:
    return [
        Goal("single_vs_tpe", "one call vs a ThreadPoolExecutor round trip", "≤ 2×", "single"),
        Goal(
            "single_cpu_vs_tpe",
            "one call's CPU vs a ThreadPoolExecutor round trip's",
            "≤ 2×",
            "single",
        ),
        Goal("vs_toolnode_1", "cheaper than LangGraph ToolNode, one call", "≥ 10×", "single"),
        Goal(
            "vs_toolnode_1_cpu", "cheaper than LangGraph ToolNode, one call, CPU", "≥ 10×", "single"
        ),
        Goal("vs_toolnode_10", "cheaper than LangGraph ToolNode, ten calls", "≥ 10×", "batch"),
        Goal(
            "vs_toolnode_10_cpu",
            "cheaper than LangGraph ToolNode, ten calls, CPU",
            "≥ 10×",
            "batch",
        ),
        Goal(
            "toolbusnode_1_cpu",
            "ToolbusNode: less CPU per call than LangGraph's ToolNode, one call",
            "≥ 5×",
            "single",
        ),
        Goal(
            "toolbusnode_10_cpu",
            "ToolbusNode: less CPU per call than LangGraph's ToolNode, ten calls",
            "≥ 5×",
            "batch",
        ),
        Goal(
            "batch_cpu_vs_reference",
            "ten-call batch CPU per call vs today's engine (reference.json)",
            "≤ 40%",
            "batch",
        ),
        Goal(
            "agents_sync_vs_batch_cpu",
            "cheaper than the OpenAI Agents SDK, sync tool, 10 calls, CPU",
            "≥ 1.5×",
            "batch",
        ),
        Goal(
            "async_batch_vs_agents_cpu",
            "aexecute_batch(10) CPU vs the Agents SDK's async tool path",
            "≤ 1.5×",
            "batch",
        ),
        Goal(
            "pipelined_sync_vs_tpe",
            "pipelined noop calls/s, execute from threads, vs a ThreadPoolExecutor(16) "
            "from as many threads",
            "≥ 0.6×",
            "pipelined",
        ),
        Goal(
            "pipelined_async_vs_gather",
            "pipelined noop calls/s, gather of aexecute (async noop), vs gather+Semaphore(16)",
            "≥ 0.8×",
            "pipelined",
        ),
        Goal(
            "io_vs_tpe",
            "sync I/O batch efficiency vs ThreadPoolExecutor's",
            "≥ 98%",
            "io",
        ),
        Goal(
            "many_async_batch",
            "many async calls, aexecute_batch: efficiency vs gather+semaphore (stretch goal)",
            "≥ 90%",
            "async10k",
        ),
        Goal(
            "many_async_gather",
            "many async calls, gather of aexecute: efficiency vs gather+semaphore (stretch goal)",
            "≥ 90%",
            "async10k",
        ),
        Goal(
            "many_async_threads",
            "many async calls: peak threads vs gather+semaphore",
            "≤ +10",
            "async10k",
        ),
        Goal(
            "waiting_threads",
            "60 calls waiting on a rate limit, max_parallel=64: peak threads over the "
            "baseline (6 callers and the sampler counted in it)",
            "≤ +8",
            "waiting",
        ),
        Goal("rss_growth", "RSS growth over the long run", "≤ 5 MB", "longrun"),
        Goal("threads_flat", "thread count over the long run", "flat", "longrun"),
        Goal("bus_idle", "bus work per lifecycle step, no subscriber", "< 0.1 µs", "bus"),
        Goal(
            "scan_per_kb",
            "content scanner, fast matcher: CPU per KB scanned (µs: a count, not a ratio)",
            "≤ 20 µs",
            "scanning",
        ),
        Goal(
            "durable_read_only_cpu",
            "a read-only call inside a DBOS workflow: CPU vs a bare DBOS step",
            "≤ 1.3×",
            "durable",
        ),
        Goal(
            "durable_mutating_cpu",
            "a mutating call inside a DBOS workflow (intent and result): CPU vs a bare step",
            "≤ 2.3×",
            "durable",
        ),
        Goal("chaos_lost", "chaos: lost + duplicated calls", "0", "chaos"),
        Goal(
            "chaos_late_p99",
            "chaos: callers freed after their deadline, p99 (ms: a count, not a ratio)",
            "≤ 50 ms",
            "chaos",
        ),
        Goal(
            "chaos_late_max",
            "chaos: callers freed after their deadline, max (ms: a count, not a ratio)",
            "≤ 250 ms",
            "chaos",
        ),
        Goal(
            "pai_toolset_cpu_vs_aexecute",
            "pydantic-ai ToolbusToolset.call_tool CPU vs a bare aexecute",
            "≤ 1.2×",
            "adapters",
        ),
        Goal(
            "agents_tool_cpu_vs_aexecute",
            "Agents SDK exported on_invoke_tool CPU vs a bare aexecute",
            "≤ 1.2×",
            "adapters",
        ),
        Goal(
            "process_warm_vs_ppe",
            "a warm process-tool call vs a ProcessPoolExecutor round trip",
            "≤ 1.5×",
            "process",
        ),
        Goal(
            "process_timeout_release",
            "a timed-out process tool frees its caller after the deadline, p95 (ms)",
            "≤ 50 ms",
            "process",
        ),
        Goal(
            "process_replacement",
            "the next call runs in the replacement worker after the deadline, p95 (ms)",
            "≤ 500 ms",
            "process",
        ),
        Goal(
            "policy_free_vs_unused",
            "a tool without policies vs policies unused",
            "≤ 1.02×",
            "policies",
        ),
        Goal(
            "ray_call_vs_raw",
            "a warm Ray-tool call vs a raw Ray actor method call (sync caller)",
            "≤ 1.5×",
            "ray",
        ),
        Goal(
            "ray_async_vs_gather",
            "1 000 × 50 ms async Ray calls at max_parallel=200 vs a raw Ray asyncio.gather",
            "≥ 90%",
            "ray",
        ),
        Goal(
            "lateness_vs_event",
            "callers freed at a deadline beside a CPU-bound thread: p99 lateness, "
            "execute and aexecute, vs a plain Event.wait's",
            "≤ 1.5×",
            "lateness",
        ),
    ]
