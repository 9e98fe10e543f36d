"""The dashboard drawn with rich: one function of plain data, shared by `live()`
(in process) and `toolbus top` (from a status server).

Everything it draws comes from `describe_executor` (configuration),
`ExecutorStats` (the executor's counters) and `LiveState.snapshot` (calls in
flight, recent results, per-tool latencies, what the policies did): JSON
data, the same in both places.

Every text the data holds may come from a model or a tool (a call id, a tool
name, an error quoting a web page, a progress message) or, for `top`, from
another process: it is drawn through `cut`/`cut_str`/`safe` (`_cells.py`) (whitespace
collapsed, control characters written as `\\xNN` by `for_terminal`), so no
escape sequence in it reaches the terminal, and never read as rich markup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..bus._signals import ALL_SIGNALS
from ._board_policies import policy_tables
from ._cells import (
    STATE_STYLE,
    STATUS_STYLE,
    clock,
    cut,
    cut_str,
    duration,
    label,
    safe,
    titled,
)
from ._policy_state import POLICY_SIGNALS

__all__ = ["Board", "duration"]

_UNBOUNDED = 100_000  # a width no table reaches: to measure one whole
_MAX_IN_FLIGHT = 12
_MAX_RECENT = 8
_MAX_ERRORS = 5
_SIDE_BY_SIDE = 140  # columns from which in-flight and recent sit side by side


def _fits(console: Console, options: ConsoleOptions, tables: list[Table]) -> bool:
    """Whether each of `tables` fits the width with every cell whole."""
    unbounded = options.update_width(_UNBOUNDED)
    return all(Measurement.get(console, unbounded, t).maximum <= options.max_width for t in tables)


def _share(needs: list[int], room: int) -> list[int]:
    """Widths for columns that need `needs` within `room`: a column gets what it
    needs when that is no more than an equal share of what the others leave;
    the rest share equally."""
    widths = [0] * len(needs)
    left = room
    for done, i in enumerate(sorted(range(len(needs)), key=needs.__getitem__)):
        widths[i] = min(needs[i], left // (len(needs) - done))
        left -= widths[i]
    return widths


@dataclass(frozen=True)
class Board:
    """One frame of the dashboard.

    `config`: `describe_executor(...)`; `state`: `LiveState.snapshot(now)`;
    `stats`: `ExecutorStats.model_dump()` (None: not known, e.g. a top client
    before its first answer); `source`: where the data comes from; `status`:
    "live", or why it is not (shown in red).
    """

    config: Mapping[str, Any]
    state: Mapping[str, Any]
    stats: Mapping[str, Any] | None = None
    source: str = "in process"
    status: str = "live"
    now: float = 0.0

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self._header()
        yield from self._counters(options.max_width)
        in_flight, recent = self._in_flight(), self._recent()
        if options.max_width >= _SIDE_BY_SIDE:
            pair = Table.grid(padding=(0, 2), expand=True)
            pair.add_column(ratio=1)
            pair.add_column(ratio=1)
            pair.add_row(in_flight, recent)
            yield pair
        else:
            yield in_flight
            yield recent
        # The per-tool and policy tables whole when they fit, else (a narrow
        # terminal, or many digits) with short labels, in more tables (and the
        # per-tool counts in two when they still do not fit).
        tools = self._tools(False)
        if not _fits(console, options, tools):
            tools = self._tools(True)
        if not _fits(console, options, tools):
            tools = self._tools(True, split=True)
        yield from tools
        policies = policy_tables(self.state, self.now, False)
        if not _fits(console, options, policies):
            policies = policy_tables(self.state, self.now, True)
        yield from policies
        yield self._errors(options.max_width)
        extra = self._signals()
        if extra is not None:
            yield extra

    # -- parts --------------------------------------------------------------------

    def _header(self) -> Text:
        c = self.config
        retry = c.get("retry") or {}
        tools = c.get("tools") or ()
        timeout = c.get("timeout")
        head = Text()
        head.append("toolbus ", style="bold")
        head.append(safe(c.get("name", "executor")), style="bold cyan")
        head.append(
            f"  max_parallel {c.get('max_parallel', '?')} · timeout "
            f"{'none' if timeout is None else f'{timeout:g} s'} · retries "
            f"{retry.get('max_retries', 0)} · {len(tools)} tools",
            style="dim",
        )
        head.append(f"  {safe(self.source)} · ", style="dim")
        head.append(safe(self.status), style="green" if self.status == "live" else "bold red")
        head.append(f" · seq {self.state.get('seq', 0)} · {clock(self.now)[:8]}", style="dim")
        return head

    def _counters(self, width: int) -> list[Table]:
        s = self.stats
        totals = self.state.get("totals") or {}
        if s is not None:
            cells: list[tuple[str, Any, str]] = [
                ("submitted", s.get("submitted"), "bold"),
                ("in flight", s.get("in_flight"), "cyan"),
                ("queued", s.get("queued"), "cyan"),
                ("ok", s.get("ok"), "green"),
                ("error", s.get("error"), "red"),
                ("timeout", s.get("timeout"), "magenta"),
                ("rejected", s.get("rejected"), "yellow"),
                ("cancelled", s.get("cancelled"), "dim"),
                ("deferred", s.get("deferred"), "blue"),
                ("retries", s.get("retries"), "yellow"),
                ("timeouts", s.get("timeouts"), "magenta"),
                ("abandoned", f"{s.get('abandoned_workers')}/{s.get('abandoned_total')}", "red"),
                ("killed", s.get("killed_workers"), "red"),
                ("late", s.get("late_results"), "magenta"),
                ("dropped", s.get("events_dropped"), "red"),
            ]
        else:
            cells = [
                ("finished", totals.get("finished"), "bold"),
                ("in flight", len(self.state.get("in_flight") or ()), "cyan"),
                *((k, totals.get(k), STATUS_STYLE[k]) for k in STATUS_STYLE),
                ("retries", totals.get("retries"), "yellow"),
                ("timeouts", totals.get("timeouts"), "magenta"),
                ("killed", totals.get("killed"), "red"),
                ("late", totals.get("late_results"), "magenta"),
            ]
        # As many counters to a row as fit the width: a narrow terminal gets
        # more rows, never labels cut to "submi…" or a count lost off the edge.
        shown = [(label, safe(v if v is not None else "-"), style) for label, v, style in cells]
        rows: list[list[tuple[str, str, str]]] = [[]]
        used = 0
        for cell in shown:
            need = max(len(cell[0]), len(cell[1])) + 2  # (one space each side)
            if rows[-1] and used + need > width:
                rows.append([])
                used = 0
            rows[-1].append(cell)
            used += need
        grids = []
        for row in rows:
            grid = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1))
            for name, _, style in row:
                grid.add_column(
                    name, justify="right", header_style="dim", style=style, no_wrap=True
                )
            grid.add_row(*(Text(value) for _, value, _ in row))  # data: never markup
            grids.append(grid)
        return grids

    def _in_flight(self) -> Table:
        calls: Sequence[Mapping[str, Any]] = self.state.get("in_flight") or ()
        # What waits for capacity, and for what: the executor's own count when
        # known, else what the events said (`tool:queued`).
        if self.stats is not None:
            queued, queues = self.stats.get("queued"), self.stats.get("queues") or {}
        else:
            queues = self.state.get("queues") or {}
            queued = sum(int(n) for n in queues.values())
        title = f"In flight: {len(calls)}"
        if queued:
            title += f" · queued: {queued}"
            shown = [f"{cut_str(name, 24)} {n}" for name, n in queues.items() if n]
            if shown:
                title += f" ({', '.join(shown[:4])}{', …' if len(shown) > 4 else ''})"
        table = Table(title=Text(title), title_justify="left", expand=True)  # (names: not markup)
        # As in the recent results: names and detail share what the numbers leave.
        table.add_column("call", no_wrap=True, ratio=2)
        table.add_column("tool", no_wrap=True, ratio=2)
        table.add_column("try", justify="right", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("elapsed", justify="right", no_wrap=True)
        table.add_column("detail", overflow="ellipsis", no_wrap=True, ratio=2)
        for c in calls[:_MAX_IN_FLIGHT]:
            state = str(c.get("state", ""))
            elapsed = max(0.0, self.now - float(c.get("started") or self.now))
            detail = cut_str(c.get("detail"), 60)
            if c.get("fraction") is not None:
                detail = f"{float(c['fraction']):.0%} {detail}"
            table.add_row(
                cut(c.get("call_id"), 24),
                cut(c.get("tool"), 22),
                cut(c.get("attempt", ""), 8),
                cut(state, 20, STATE_STYLE.get(state, "")),
                duration(elapsed),
                Text(detail, style="dim"),
            )
        if len(calls) > _MAX_IN_FLIGHT:
            table.add_row("", f"+{len(calls) - _MAX_IN_FLIGHT} more", "", "", "", "")
        return table

    def _recent(self) -> Table:
        recent: Sequence[Mapping[str, Any]] = self.state.get("recent") or ()
        table = Table(title="Recent results", title_justify="left", expand=True)
        table.add_column("at", no_wrap=True, style="dim")
        # The names share what the numbers leave (ratios): a narrow board cuts
        # a name, never a time down to "0.30 …".
        table.add_column("call", no_wrap=True, ratio=2)
        table.add_column("tool", no_wrap=True, ratio=2)
        table.add_column("status", no_wrap=True, ratio=3)
        table.add_column("tries", justify="right", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        for r in recent[:_MAX_RECENT]:
            status = str(r.get("status", ""))
            label = status + (f" {r['error_code']}" if r.get("error_code") else "")
            table.add_row(
                clock(r.get("timestamp"))[:12],
                cut(r.get("call_id"), 24),
                cut(r.get("tool"), 22),
                cut(label, 40, STATUS_STYLE.get(status, "")),
                cut(r.get("attempts", ""), 8),
                duration(r.get("duration")),
            )
        return table

    def _tools(self, narrow: bool, split: bool = False) -> list[Table]:
        """Calls per tool by status and their latencies: one table, or (narrow)
        two with short labels, or (split, a narrower terminal still) the counts
        in two tables, then the latencies."""
        title = "Per tool (since watching)"
        narrow = narrow or split
        name_width = 20 if narrow else 28
        # One column per status, in order, then running and retries.
        columns = [(name, "") for name in ("calls", *STATUS_STYLE, "running")]
        columns.append(("retries", "yellow"))
        parts = [columns[:5], columns[5:]] if split else [columns]
        tables = []
        for i, part in enumerate(parts):
            heading = title if i == 0 else "Per tool, continued"
            table = titled(heading, narrow)
            table.add_column("tool", no_wrap=True, max_width=name_width)
            for name, style in part:
                table.add_column(label(name, narrow), justify="right", no_wrap=True, style=style)
            tables.append(table)
        times = tables[0]
        if narrow:
            times = titled("Per tool: time per call", True)
            times.add_column("tool", no_wrap=True, max_width=name_width)
        for name in ("p50", "p95", "p99", "max"):
            times.add_column(name, justify="right", no_wrap=True)
        for t in self.state.get("tools") or ():
            tool = cut(t.get("tool"), name_width)
            numbers: list[str | Text] = [
                cut(t.get("calls", 0), 20),
                *(
                    cut(t.get(s, 0), 20, STATUS_STYLE[s] if t.get(s) else "dim")
                    for s in STATUS_STYLE
                ),
                cut(t.get("in_flight", 0), 20),
                cut(t.get("retries", 0), 20),
            ]
            latencies = [duration(t.get(q)) for q in ("p50", "p95", "p99", "max")]
            if narrow:
                first = 0
                for table, part in zip(tables, parts, strict=True):
                    table.add_row(tool.copy(), *numbers[first : first + len(part)])
                    first += len(part)
                times.add_row(tool.copy(), *latencies)
            else:
                tables[0].add_row(tool, *numbers, *latencies)
        return [*tables, times] if narrow else tables

    def _errors(self, width: int) -> Table:
        errors: Sequence[Mapping[str, Any]] = self.state.get("errors") or ()
        rows: list[list[Text]] = []  # at, call, tool, status, error
        for e in errors[:_MAX_ERRORS]:
            status = str(e.get("status", ""))
            label = status + (f" {e['error_code']}" if e.get("error_code") else "")
            rows.append(
                [
                    Text(clock(e.get("timestamp"))[:12]),
                    cut(e.get("call_id"), 24),
                    cut(e.get("tool"), 22),
                    cut(label, 40, STATUS_STYLE.get(status, "")),
                    cut(e.get("error"), 200),
                ]
            )
        # The time whole; the error keeps at least half of what is left (why a
        # call failed matters more than its whole id); the names share the rest.
        names = ("call", "tool", "status")
        needs = [max([len(n), *(r[i].cell_len for r in rows)]) + 2 for i, n in enumerate(names, 1)]
        room = width - (len(names) + 3) - 14  # borders, the time and its padding
        error_needs = max([5, *(r[4].cell_len for r in rows)]) + 2
        widths = _share(needs, max(room // 2, room - error_needs))
        table = Table(title="Recent failures", title_justify="left", expand=True)
        table.add_column("at", no_wrap=True, style="dim")
        for name, w in zip(names, widths, strict=True):
            table.add_column(name, no_wrap=True, width=max(1, w - 2))
        table.add_column("error", overflow="ellipsis", no_wrap=True, ratio=1)
        for cells in rows:
            table.add_row(*cells)
        return table

    def _signals(self) -> Text | None:
        """Events of signals defined outside toolbus's own and the policies' (yours), if any."""
        own = {*ALL_SIGNALS, *POLICY_SIGNALS}
        counts = {k: v for k, v in (self.state.get("signals") or {}).items() if k not in own}
        if not counts:
            return None
        text = Text("Other signals: ", style="bold")
        text.append("  ".join(f"{safe(k)} {safe(v)}" for k, v in counts.items()))
        return text
