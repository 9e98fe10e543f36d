"""Scenario 18: a toolbus call inside a DBOS workflow, against a bare DBOS step.

DBOS on SQLite, in a temporary directory. One operation is one step of a
workflow that runs n of them (so the workflow's own start and end are spread
over n), three ways in interleaved rounds:

- a bare DBOS step calling the noop function (`DBOS.run_step`);
- a read-only toolbus call through `durable(executor).execute`: one step;
- a mutating toolbus call: its intent step, then its result step.

The goals are the CPU per operation of the toolbus calls over the bare
step's (at most 1.3 times read-only, 2.3 times mutating), wall time beside them.
Needs the `dbos` extra; without it the scenario says so and skips.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

from toolbus import Executor, ToolCall, ToolRegistry

from ._common import Ctx
from ._harness import Case, interleave, once, paired_ratio
from ._report import Table


def noop(i: int) -> int:
    """Return i."""
    return i


def run(ctx: Ctx) -> None:
    if importlib.util.find_spec("dbos") is None:
        ctx.report.note("dbos is not installed (the dbos extra): scenario skipped")
        return
    from dbos import DBOS

    from toolbus.integrations.dbos import durable

    workdir = Path(tempfile.mkdtemp(prefix="toolbus-bench-dbos-"))
    reg = ToolRegistry()
    reg.tool(name="lookup", read_only=True)(noop)
    reg.tool(name="charge")(noop)
    executor = Executor(reg)
    tools = durable(executor)

    @DBOS.workflow(name="toolbus_bench_bare")
    def bare(n: int) -> None:
        for i in range(n):
            DBOS.run_step({"name": "noop"}, noop, i)

    @DBOS.workflow(name="toolbus_bench_read_only")
    def read_only(n: int) -> None:
        for i in range(n):
            tools.execute(ToolCall(id=f"c{i}", name="lookup", arguments={"i": i}))

    @DBOS.workflow(name="toolbus_bench_mutating")
    def mutating(n: int) -> None:
        for i in range(n):
            tools.execute(ToolCall(id=f"c{i}", name="charge", arguments={"i": i}))

    DBOS.destroy(destroy_registry=False)
    DBOS(
        config={
            "name": "toolbus-bench",
            "system_database_url": f"sqlite:///{workdir / 'dbos.sqlite'}",
            "log_level": "ERROR",
        }
    )
    DBOS.launch()
    try:
        cases = [
            Case("bare DBOS step", once(bare), min_ops=4, max_ops=2000),
            Case("toolbus read-only call", once(read_only), min_ops=4, max_ops=2000),
            Case("toolbus mutating call", once(mutating), min_ops=4, max_ops=2000),
        ]
        rounds = 3 if ctx.scale.smoke else 9
        stats = interleave(cases, rounds=rounds, budget_ms=ctx.scale.budget_ms)
    finally:
        executor.close()
        DBOS.destroy(destroy_registry=True)
        shutil.rmtree(workdir, ignore_errors=True)
    base = stats["bare DBOS step"]
    t = Table(
        "one step of a DBOS workflow on SQLite, per operation",
        ["case", "wall µs", "CPU µs", "CPU vs a bare step", "wall vs a bare step"],
    )
    ratios: dict[str, Any] = {}
    for name, st in stats.items():
        cpu = paired_ratio(st, base, "cpu")
        wall = paired_ratio(st, base, "wall")
        ratios[name] = cpu
        t.add(name, f"{st.median / 1000:.0f}", f"{st.cpu / 1000:.0f}", str(cpu), str(wall))
        ctx.report.figure("durable", name, {**st.summary(), "cpu_ratio": cpu.as_dict()})
    t.notes.append(
        "a workflow of n steps per round: its own start and end spread over them; "
        "a mutating call is two steps (its intent, then its result)"
    )
    ctx.report.table(t)
    ro = ratios["toolbus read-only call"]
    ctx.report.goal("durable_read_only_cpu").set(ro.value, str(ro), ro.value <= 1.3)
    mu = ratios["toolbus mutating call"]
    ctx.report.goal("durable_mutating_cpu").set(mu.value, str(mu), mu.value <= 2.3)
