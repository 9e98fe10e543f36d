"""Scenario 11: what the framework adapters add to a bare `aexecute`.

One call at a time, awaited on one event loop, interleaved in the same rounds:

- `await executor.aexecute(call)` with dict arguments, and with the raw JSON
  text a model sends;
- pydantic-ai: `ToolbusToolset.call_tool(name, args, ctx, tool)`, what an
  agent calls for each tool call (its arguments arrive as a dict);
- the OpenAI Agents SDK: `function_tools(...)[i].on_invoke_tool(ctx, json)`,
  what its Runner calls for each tool call (its arguments arrive as JSON text);

each with a sync noop tool (on a worker) and an async one (on the caller's
loop). The goals compare each adapter with the bare call it wraps, on the same
input (pydantic-ai's with dict arguments, the SDK's with JSON text), by CPU
per call: the process's CPU over every thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from toolbus import Executor, ToolCall

from ._common import Ctx, noop_registry
from ._harness import (
    Case,
    Stat,
    async_per_op,
    fmt_ratio,
    fmt_us,
    interleave,
    paired_ratio,
    usage_cells,
)
from ._report import Table
from .peers import close_loop

BARE = "toolbus await aexecute (dict arguments)"
BARE_TEXT = "toolbus await aexecute (raw JSON arguments)"
PAI = "pydantic-ai ToolbusToolset.call_tool"
OAI = "Agents SDK function_tools on_invoke_tool"
ASYNC = ", async tool"

Invoke = Callable[[int], Awaitable[object]]


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"benchmark setup is broken: {what}")


def _pydantic_ai(loop: asyncio.AbstractEventLoop, ex: Executor, name: str) -> Invoke | str:
    """`call_tool` of a `ToolbusToolset` for tool `name`, as an agent calls it; or why not."""
    try:
        from pydantic_ai import RunContext
        from pydantic_ai.models.test import TestModel
        from pydantic_ai.usage import RunUsage

        from toolbus.integrations.pydantic_ai import ToolbusToolset
    except ImportError:
        return "skipped (pydantic-ai-slim not installed: install .[pydantic-ai])"
    toolset = ToolbusToolset(ex.registry, ex)
    ctx: RunContext[Any] = RunContext(
        deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="call_1"
    )
    tool = loop.run_until_complete(toolset.get_tools(ctx))[name]
    args = {"i": 1}

    def invoke(i: int) -> Awaitable[object]:
        return toolset.call_tool(name, args, ctx, tool)

    _check(loop.run_until_complete(invoke(0)) == 1, f"call_tool({name}) did not return 1")
    return invoke


def _agents(loop: asyncio.AbstractEventLoop, ex: Executor, name: str) -> Invoke | str:
    """`on_invoke_tool` of the exported `FunctionTool` for `name`, as the Runner calls it."""
    try:
        from agents.tool_context import ToolContext

        from toolbus.integrations.openai_agents import function_tools
    except ImportError:
        return "skipped (openai-agents not installed: install .[openai-agents])"
    tool = next(t for t in function_tools(ex.registry, ex) if t.name == name)
    text = '{"i": 1}'
    # The Runner builds one per call; built once here, so only the adapter is timed.
    ctx = ToolContext(None, tool_name=name, tool_call_id="call_1", tool_arguments=text)

    def invoke(i: int) -> Awaitable[object]:
        return tool.on_invoke_tool(ctx, text)

    _check(loop.run_until_complete(invoke(0)) == "1", f"on_invoke_tool({name}) did not return 1")
    return invoke


def run(ctx: Ctx) -> None:
    s, rep = ctx.scale, ctx.report
    registry = noop_registry()

    @registry.tool(read_only=True)
    async def anoop(i: int) -> int:
        """Return i (an async tool: no thread)."""
        return i

    loop = asyncio.new_event_loop()
    skipped: dict[str, str] = {}
    try:
        with Executor(registry, max_parallel=16, timeout=30) as ex:
            cases: list[Case] = []
            for tool, suffix in (("noop", ""), ("anoop", ASYNC)):
                # A bare call builds its ToolCall, as every caller (and adapter) does.
                def bare(i: int, tool: str = tool) -> Awaitable[object]:
                    return ex.aexecute(ToolCall(id="call_1", name=tool, arguments={"i": 1}))

                def bare_text(i: int, tool: str = tool) -> Awaitable[object]:
                    return ex.aexecute(ToolCall(id="call_1", name=tool, arguments='{"i": 1}'))

                for f in (bare, bare_text):
                    _check(getattr(loop.run_until_complete(f(0)), "ok", False), f"{tool} failed")
                cases += [
                    Case(BARE + suffix, async_per_op(loop, bare), per_op=True),
                    Case(BARE_TEXT + suffix, async_per_op(loop, bare_text), per_op=True),
                ]
                for label, make in ((PAI, _pydantic_ai), (OAI, _agents)):
                    made = make(loop, ex, tool)
                    if isinstance(made, str):
                        skipped[label + suffix] = made
                    else:
                        cases.append(Case(label + suffix, async_per_op(loop, made), per_op=True))
            stats = interleave(cases, rounds=s.rounds, budget_ms=s.budget_ms)
    finally:
        close_loop(loop)

    t = Table(
        "one call at a time through each adapter, µs per call",
        ["case", "median", "p99", "CPU µs", "csw", "CPU vs the bare aexecute it wraps (IQR)"],
    )
    for name, st in stats.items():
        base = _base_of(name, stats)
        cpu, csw, cpu_vs = usage_cells(st, base)
        t.add(name, fmt_us(st.median), fmt_us(st.pct(99)), cpu, csw, cpu_vs)
        ctx.report.figure(
            "adapters",
            name,
            {
                **st.summary(),
                "baseline": base.name,
                "cpu_vs_baseline": paired_ratio(st, base, "cpu").as_dict(),
                "vs_baseline": paired_ratio(st, base).as_dict(),
            },
        )
    for name, why in skipped.items():
        t.add(name, why, "", "", "", "")
    t.notes.append(
        "each adapter against the bare aexecute on the same input: pydantic-ai hands the "
        "toolset a dict, the Agents SDK hands its tool JSON text"
    )
    t.notes.append("CPU: the whole process's CPU time over the round (every thread), per call")
    for key, label in (("pai_toolset_cpu_vs_aexecute", PAI), ("agents_tool_cpu_vs_aexecute", OAI)):
        goal = rep.goal(key)
        if label not in stats:
            goal.skip(skipped.get(label, "not measured"))
            continue
        st = stats[label]
        base = _base_of(label, stats)
        r = paired_ratio(st, base, "cpu")
        worst = r.value
        shown = f"{fmt_ratio(r.value)} (median CPU {fmt_us(st.cpu)} vs {fmt_us(base.cpu)} µs)"
        if label + ASYNC in stats:
            ra = paired_ratio(stats[label + ASYNC], _base_of(label + ASYNC, stats), "cpu")
            worst = max(worst, ra.value)
            shown += f"; async tool {fmt_ratio(ra.value)}"
        goal.set(worst, shown, worst <= 1.2)
    rep.table(t)


def _base_of(name: str, stats: dict[str, Stat]) -> Stat:
    """The bare call an adapter case wraps (a bare case is its own)."""
    suffix = ASYNC if name.endswith(ASYNC) else ""
    base = BARE_TEXT if name.startswith(OAI) or name.startswith(BARE_TEXT) else BARE
    return stats[base + suffix]
