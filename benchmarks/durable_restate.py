"""Scenario 19: a toolbus call inside a Restate handler, against a bare `ctx.run`.

The real Restate server from .cache/npm (tests/integrations/restate_support.py
starts it); the service is served in a thread of this process, so this
process's CPU is the service's (the HTTP request that starts each round is
spread over its n operations). One operation is one call made by a handler
that makes n of them, three ways in interleaved rounds:

- a bare `ctx.run` of the noop function (sync: the SDK runs it in its pool);
- a read-only toolbus call through `durable(executor).aexecute`: one run;
- a mutating toolbus call: its intent's run, then its result's.

Reported: CPU per operation in the service over the bare run's, wall time
beside it, and the Restate server's own CPU per operation (each run is a
journal entry and its result stored). The issue sets no goal: its closing
note lists these. Needs the `restate` extra and the server; without them
the scenario says so and skips.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from toolbus import Executor, ToolCall, ToolRegistry

from ._common import Ctx
from ._harness import Case, interleave, once, paired_ratio
from ._report import Table

_TICK = os.sysconf("SC_CLK_TCK")


def noop(i: int) -> int:
    """Return i."""
    return i


def _cpu_of(pid: int) -> float:
    """A process's CPU seconds (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def run(ctx: Ctx) -> None:
    if importlib.util.find_spec("restate") is None:
        ctx.report.note("restate-sdk is not installed (the restate extra): scenario skipped")
        return
    from tests.integrations.restate_support import BINARY, Served, server

    if not BINARY.exists():
        ctx.report.note("the Restate server is not in .cache/npm: scenario skipped")
        return
    import restate

    from toolbus.integrations.restate import durable

    reg = ToolRegistry()
    reg.tool(name="lookup", read_only=True)(noop)
    reg.tool(name="charge")(noop)
    executor = Executor(reg)
    tools = durable(executor)
    service = restate.Service("ToolbusBench")

    @service.handler()
    async def ops(ctx_: Any, job: dict[str, Any]) -> None:  # (annotations: module names)
        how, n = job["how"], job["n"]
        for i in range(n):
            if how == "bare":
                await ctx_.run_typed("noop", noop, restate.RunOptions(), i)
            else:
                made = ToolCall(id=f"c{i}", name=how, arguments={"i": i})
                await tools.aexecute(made)

    server_cpu: dict[str, list[float]] = {}
    with server() as srv, Served(service) as served:
        srv.register(served.uri)
        assert srv.proc is not None
        pid = srv.proc.pid

        def driven(name: str, how: str) -> Any:
            def go(n: int) -> None:
                before = _cpu_of(pid)
                answer = srv.call("ToolbusBench/ops", {"how": how, "n": n})
                server_cpu.setdefault(name, []).append((_cpu_of(pid) - before) / n)
                assert answer.status_code == 200, answer.text

            return once(go)

        try:
            cases = [
                Case("bare ctx.run", driven("bare ctx.run", "bare"), min_ops=4, max_ops=2000),
                Case(
                    "toolbus read-only call",
                    driven("toolbus read-only call", "lookup"),
                    min_ops=4,
                    max_ops=2000,
                ),
                Case(
                    "toolbus mutating call",
                    driven("toolbus mutating call", "charge"),
                    min_ops=4,
                    max_ops=2000,
                ),
            ]
            rounds = 3 if ctx.scale.smoke else 9
            stats = interleave(cases, rounds=rounds, budget_ms=ctx.scale.budget_ms * 5)
        finally:
            executor.close()
    base = stats["bare ctx.run"]
    t = Table(
        "one call inside a Restate handler (h2c, the real server), per operation",
        ["case", "wall µs", "CPU µs", "CPU vs a bare run", "wall vs a bare run", "server CPU µs"],
    )
    for name, st in stats.items():
        cpu = paired_ratio(st, base, "cpu")
        wall = paired_ratio(st, base, "wall")
        spent = sorted(server_cpu.get(name, [0.0]))
        median = spent[len(spent) // 2] * 1e6
        t.add(
            name,
            f"{st.median / 1000:.0f}",
            f"{st.cpu / 1000:.0f}",
            str(cpu),
            str(wall),
            f"{median:.0f}",
        )
        ctx.report.figure(
            "durable_restate",
            name,
            {**st.summary(), "cpu_ratio": cpu.as_dict(), "server_us": median},
        )
    t.notes.append(
        "a handler making n calls per round (n sized to the round's budget); a mutating "
        "call is two runs (its intent, then its result); the server's CPU is read from "
        "/proc in 10 ms ticks, so a few rounds' median"
    )
    ctx.report.table(t)
