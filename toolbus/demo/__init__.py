"""`toolbus demo`: one scripted agent turn, every lifecycle signal shown as it happens;
then one hung sync tool, abandoned on a thread and killed in a process; then the
built-in policies: a throttled call, a cache hit, an open breaker, an approval
given with an edit, and a guardrail halting an agent run; last, a plain thread
cancelling a running batch through its handle.

from rich.console import Console
from toolbus.demo import run_demo
exit_code = run_demo(Console(), plain=True)
"""

from __future__ import annotations

from collections import Counter

from rich.columns import Columns
from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .. import bus
from ..formatting import format_result_for_context
from ..models import ToolResult
from ._cancel import cancel_part
from ._hung import HANG_FOR, HUNG_SKU, PROCESS_TOOL, THREAD_TOOL, HungOutcome, available, play_hung
from ._policies import policies_part
from ._tools import HANG_TIMEOUT, World, build_registry
from ._turn import DEMO_TOKEN, MAX_PARALLEL, SCRIPT, Outcome, play
from ._view import STATUS_STYLE, Board, checks_grid, event_line, script_table, short

__all__ = ["DEMO_TOKEN", "SCRIPT", "run_demo"]

_INTRO = (
    "A model answered with the {n} tool calls below, in one turn. The agent runs them as "
    "one batch (max_parallel={p}): consecutive reads run together, a write waits for "
    "everything before it and holds back everything after it. A pre-call hook injects "
    "the agent's bearer token, taken from a ContextVar, into the calls that need it; "
    "the token is never printed."
)

_HUNG_INTRO = (
    "The same sync client, legacy_lookup, registered twice with a {t:g} s timeout: "
    '{thread} runs it on a worker thread (backend="thread"), {process} in a worker '
    'process (backend="process"). Both are called at once with SKU {sku}, on which it '
    "stalls for {h:g} s. A thread cannot be stopped: at the deadline it is abandoned and runs "
    "on. A process can: toolbus kills it with its process group and starts a fresh worker."
)

# Below this many columns, event lines drop the tool name and the results table
# its text column, which would otherwise be squeezed to nothing.
_WIDE = 100

_STATS = (
    "submitted",
    "ok",
    "error",
    "timeout",
    "rejected",
    "retries",
    "timeouts",
    "late_results",
    "peak_in_flight",
    "abandoned_total",
    "workers_started",
)


def run_demo(console: Console, *, plain: bool = False) -> int:
    """Play the scripted turn on `console`; return the exit code.

    Non-zero only if the bearer token leaked into an event or a result, a call
    ended other than the script expects, or a part's checks failed (a policy
    did not throttle, answer from its cache, open and refuse, or defer).
    `plain` (forced when the console is not a terminal) prints event lines
    only, without the live board.
    """
    console.rule("[bold]toolbus demo[/]: one agent turn")
    console.print(_INTRO.format(n=len(SCRIPT), p=MAX_PARALLEL))
    console.print()
    console.print(script_table(SCRIPT, build_registry(World())))
    console.print()
    console.rule("[bold]Live events[/] (ms since the batch was submitted)")
    outcome = _live(console) if console.is_terminal and not plain else _plain(console)
    console.print()
    console.rule("[bold]Summary[/]")
    code = _summary(console, outcome)
    if available():
        code = max(code, _hung_part(console))
    wide = console.width >= _WIDE
    code = max(code, policies_part(console, wide=wide))
    return max(code, cancel_part(console, wide=wide))


def _plain(console: Console) -> Outcome:
    for item in play():
        if isinstance(item, Outcome):
            return item
        console.print(event_line(item, wide=console.width >= _WIDE))
    raise AssertionError("the turn ended without an outcome")


def _live(console: Console) -> Outcome:
    board = Board(SCRIPT)
    # Event lines print above the board; the board goes when the turn is over,
    # since the summary says the same, only better.
    with Live(
        console=console, get_renderable=board.render, refresh_per_second=12, transient=True
    ) as live:
        for item in play():
            if isinstance(item, Outcome):
                return item
            board.update(item)
            live.console.print(event_line(item, wide=console.width >= _WIDE))
    raise AssertionError("the turn ended without an outcome")


def _summary(console: Console, outcome: Outcome) -> int:
    batch = outcome.batch
    wide = console.width >= _WIDE
    mismatches = sum(r.status != s.expect for s, r in zip(SCRIPT, batch, strict=True))
    console.print(_results_table(batch.results, wide=wide))
    if not wide:
        outputs = Table(title="Outputs and errors", title_justify="left")
        outputs.add_column("id", no_wrap=True)
        outputs.add_column("output / error")
        for r in batch:
            outputs.add_row(r.call_id, _text(r))
        console.print(outputs)

    s = batch.summary
    summary = _pairs(
        "BatchSummary",
        total=s.total,
        executed=s.executed,
        succeeded=s.succeeded,
        failed=s.failed,
        read_only=s.read_only,
        mutating=s.mutating,
        duration=f"{s.duration * 1000:.0f} ms",
    )
    counters = _pairs("executor.stats()", **{k: getattr(outcome.stats, k) for k in _STATS})
    seen = Counter(e.signal for e in outcome.events)
    signals = Table(title=f"Signals: {len(seen)} of {len(bus.ALL_SIGNALS)} fired")
    signals.add_column("signal", no_wrap=True)
    signals.add_column("times", justify="right")
    for name in bus.ALL_SIGNALS:
        signals.add_row(name, str(seen[name]) if seen[name] else Text("–", style="dim"))
    console.print(Columns([summary, counters, signals]))

    model_texts = [format_result_for_context(r) for r in batch]
    console.print(_token_panel(outcome, model_texts))
    return _verdicts(console, outcome, model_texts, mismatches)


def _verdicts(console: Console, outcome: Outcome, model_texts: list[str], mismatches: int) -> int:
    """Print the demo's own checks; return the exit code they call for."""
    texts = [repr(e.event) for e in outcome.events]
    texts += [r.model_dump_json() for r in outcome.batch]
    texts += model_texts
    leaks = sum(DEMO_TOKEN in t for t in texts)
    checks = [
        (leaks == 0, f"bearer token found in {leaks} of {len(texts)} events, results and texts"),
        (mismatches == 0, f"{len(SCRIPT) - mismatches} of {len(SCRIPT)} calls ended as scripted"),
        (
            outcome.late_result_seen,
            "the abandoned legacy_inventory thread came back late; its result was discarded",
        ),
    ]
    console.print(checks_grid(checks))
    return 0 if leaks == 0 and mismatches == 0 else 1


def _hung_part(console: Console) -> int:
    """Play the hung-tool part; print its events, results and checks; its exit code."""
    console.print()
    console.rule("[bold]A hung tool[/]: abandoned on a thread, killed in a process")
    console.print(
        _HUNG_INTRO.format(
            t=HANG_TIMEOUT, thread=THREAD_TOOL, process=PROCESS_TOOL, sku=HUNG_SKU, h=HANG_FOR
        )
    )
    console.print()
    wide = console.width >= _WIDE
    outcome: HungOutcome | None = None
    for item in play_hung():
        if isinstance(item, HungOutcome):
            outcome = item
            break
        console.print(event_line(item, wide=wide, killing={PROCESS_TOOL}))
    assert outcome is not None
    o = outcome
    console.print()
    late = (
        f"its thread ran on and answered at {o.late_result_s * 1000:.0f} ms; "
        "the answer was discarded (tool:late-result)"
        if o.late_result_s is not None
        else "its thread is still running"
    )
    killed = (
        f"killed at the deadline: worker pid {o.killed_pid} and its process group; "
        + ("gone from the process table" if o.gone else "STILL in the process table")
        if o.killed_pid is not None
        else "no tool:killed seen"
    )
    table = Table(title="The hung calls, and the next one", title_justify="left")
    for name in ("id", "tool", "backend", "status"):
        table.add_column(name, no_wrap=True)
    table.add_column("the attempt")
    rows = (
        (o.thread, "thread", f"abandoned: {late}"),
        (o.process, "process", killed),
        (o.after, "process", f"the next call: a fresh worker, pid {o.fresh_pid}"),
    )
    for r, backend, what in rows:
        status = Text(r.status, style=STATUS_STYLE[r.status])
        table.add_row(r.call_id, r.name, backend, status, what)
    console.print(table)
    counters = ("abandoned_total", "late_results", "killed_workers")
    console.print(_pairs("executor.stats()", **{k: getattr(o.stats, k) for k in counters}))
    console.print(
        Text(
            f"(The process backend started before these calls, in {o.warmup_s * 1000:.0f} ms: "
            "a zygote process imports the tool's module once, then forks warm workers.)",
            style="dim",
        )
    )
    killed_ok = (
        o.process.status == "timeout"
        and o.killed_pid is not None
        and o.killed_reason == "timeout"
        and o.gone
        and o.stats.killed_workers == 1
    )
    fresh_ok = o.after.ok and o.fresh_pid not in (None, o.killed_pid, o.host_pid)
    checks = [
        (
            o.thread.status == "timeout" and o.late_result_s is not None,
            f"{THREAD_TOOL}: abandoned at the deadline; its thread came back late, "
            "its result discarded",
            False,
        ),
        (
            killed_ok,
            f"{PROCESS_TOOL}: worker pid {o.killed_pid} killed at the deadline and gone "
            f"(tool:killed, killed_workers={o.stats.killed_workers}); nothing abandoned",
            True,
        ),
        (
            fresh_ok,
            f"the next call ran in a fresh worker (pid {o.fresh_pid}); this process "
            f"(pid {o.host_pid}) carried on",
            True,
        ),
    ]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for ok, text, _ in checks:
        grid.add_row(Text(" ✓" if ok else " ✗", style="green" if ok else "red"), text)
    console.print(grid)
    return 0 if all(ok for ok, _, enforced in checks if enforced) else 1


def _text(r: ToolResult) -> Text:
    # One line per call; the texts that matter are in full in the token panel.
    return Text(short(r.output if r.ok else r.error, 200), no_wrap=True, overflow="ellipsis")


def _results_table(results: tuple[ToolResult, ...], *, wide: bool) -> Table:
    table = Table(title="Results, in the order the model asked", title_justify="left")
    for name in ("id", "tool", "status", "error_code", "attempts", "ms"):
        table.add_column(
            name, no_wrap=True, justify="right" if name in ("attempts", "ms") else "left"
        )
    if wide:
        # Wrappable, so the only column that gives way when space runs short.
        table.add_column("output / error")
    table.add_column("✓", justify="center", no_wrap=True)
    for step, r in zip(SCRIPT, results, strict=True):
        cells: list[str | Text] = [
            r.call_id,
            r.name,
            Text(r.status, style=STATUS_STYLE[r.status]),
            r.error_code.value if r.error_code else "",
            str(r.attempts),
            f"{r.duration * 1000:.0f}",
        ]
        if wide:
            cells.append(_text(r))
        ok = r.status == step.expect
        cells.append(Text("✓", "green") if ok else Text(f"✗ wanted {step.expect}", "red"))
        table.add_row(*cells)
    return table


def _token_panel(outcome: Outcome, model_texts: list[str]) -> Panel:
    """The two calls whose tools echoed the token, as the caller and the model see them."""
    by_id = {r.call_id: (r, text) for r, text in zip(outcome.batch, model_texts, strict=True)}
    executing = next(
        (
            e.event
            for e in outcome.events
            if isinstance(e.event, bus.Executing) and e.event.call_id == "c10"
        ),
        None,
    )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    shown = short(executing.arguments, 200) if executing is not None else "(never ran)"
    grid.add_row("c10 tool:executing arguments", shown)
    grid.add_row("c10 output (the tool echoed it)", short(by_id["c10"][0].output, 200))
    grid.add_row("c11 what the model reads back", Text(by_id["c11"][1]))
    return Panel(
        grid,
        title="The bearer token: masked in events, scrubbed from outputs and errors",
        title_align="left",
    )


def _pairs(title: str, **values: object) -> Table:
    table = Table(title=title)
    table.add_column("name", no_wrap=True)
    table.add_column("value", justify="right")
    for key, value in values.items():
        table.add_row(key, str(value))
    return table
