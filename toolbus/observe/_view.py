"""The dashboard drawn with rich: one function of plain data, shared by `live()`
(in process) and `toolbus top` (from a status server).

Everything it draws comes from `describe_executor` (configuration),
`ExecutorStats` (the executor's counters) and `LiveState.snapshot` (calls in
flight, recent results, per-tool latencies, what the policies did): JSON
data, the same in both places.

Every text the data holds may come from a model or a tool (a call id, a tool
name, an error quoting a web page, a progress message) or, for `top`, from
another process: it is drawn through `_cut`/`_cut_str`/`_safe` (whitespace
collapsed, control characters written as `\\xNN` by `for_terminal`), so no
escape sequence in it reaches the terminal, and never read as rich markup.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from .._text import for_terminal
from ..bus._signals import ALL_SIGNALS
from ._policy_state import POLICY_SIGNALS

__all__ = ["Board", "duration"]

STATUS_STYLE = {
    "ok": "green",
    "error": "red",
    "timeout": "magenta",
    "rejected": "yellow",
    "cancelled": "dim",
    "deferred": "blue",
}
STATE_STYLE = {"running": "cyan", "retrying": "yellow", "failed": "red", "timed out": "magenta"}
BREAKER_STYLE = {"open": "bold red", "half-open": "yellow", "closed": "green"}

_MAX_IN_FLIGHT = 12
_MAX_RECENT = 8
_MAX_ERRORS = 5
_MAX_KEYS = 6  # rows of a breaker per key's circuits (open ones first)
_MAX_WAITING = 3  # calls awaiting approval named under the policies
_SIDE_BY_SIDE = 140  # columns from which in-flight and recent sit side by side


def duration(seconds: float | None) -> str:
    """ "0.4 ms", "12 ms", "1.50 s", "2m03s"; "" for None."""
    if seconds is None:
        return ""
    if seconds < 0.001:
        return f"{seconds * 1000:.2f} ms"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def _clock(ts: float | None) -> str:
    if not ts:
        return ""
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


def _safe(text: Any) -> str:
    """`text` on one line, safe for a terminal: whitespace (newlines, tabs)
    collapsed to single spaces, other control characters (ESC) as `\\xNN`."""
    return "" if text is None else for_terminal(" ".join(str(text).split()))


def _cut_str(text: Any, limit: int) -> str:
    s = _safe(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _cut(text: Any, limit: int, style: str = "") -> Text:
    """A cell of text the model or a tool wrote (a call id, a tool name, an
    error): a `Text`, drawn as it is, never read as rich markup (a `[/x]` in it
    would raise, a `[link=...]` would make a link), its escape sequences
    written out (`_safe`)."""
    return Text(_cut_str(text, limit), style=style)


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
        yield self._counters()
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
        yield self._tools()
        policies = self._policies()
        if policies is not None:
            yield policies
        yield self._errors()
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
        head.append(_safe(c.get("name", "executor")), style="bold cyan")
        head.append(
            f"  max_parallel {c.get('max_parallel', '?')} · timeout "
            f"{'none' if timeout is None else f'{timeout:g} s'} · retries "
            f"{retry.get('max_retries', 0)} · {len(tools)} tools",
            style="dim",
        )
        head.append(f"  {_safe(self.source)} · ", style="dim")
        head.append(_safe(self.status), style="green" if self.status == "live" else "bold red")
        head.append(f" · seq {self.state.get('seq', 0)} · {_clock(self.now)[:8]}", style="dim")
        return head

    def _counters(self) -> Table:
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
        grid = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 1))
        for label, _, style in cells:
            grid.add_column(label, justify="right", header_style="dim", style=style, no_wrap=True)
        grid.add_row(*(str(v if v is not None else "-") for _, v, _ in cells))
        return grid

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
            shown = [f"{_cut_str(name, 24)} {n}" for name, n in queues.items() if n]
            if shown:
                title += f" ({', '.join(shown[:4])}{', …' if len(shown) > 4 else ''})"
        table = Table(title=Text(title), title_justify="left", expand=True)  # (names: not markup)
        table.add_column("call", no_wrap=True, max_width=24)
        table.add_column("tool", no_wrap=True, max_width=22)
        table.add_column("try", justify="right", no_wrap=True)
        table.add_column("state", no_wrap=True)
        table.add_column("elapsed", justify="right", no_wrap=True)
        table.add_column("detail", overflow="ellipsis", no_wrap=True, ratio=1)
        for c in calls[:_MAX_IN_FLIGHT]:
            state = str(c.get("state", ""))
            elapsed = max(0.0, self.now - float(c.get("started") or self.now))
            detail = _cut_str(c.get("detail"), 60)
            if c.get("fraction") is not None:
                detail = f"{float(c['fraction']):.0%} {detail}"
            table.add_row(
                _cut(c.get("call_id"), 24),
                _cut(c.get("tool"), 22),
                str(c.get("attempt", "")),
                _cut(state, 20, STATE_STYLE.get(state, "")),
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
        table.add_column("call", no_wrap=True, max_width=24)
        table.add_column("tool", no_wrap=True, max_width=22)
        table.add_column("status", no_wrap=True)
        table.add_column("tries", justify="right", no_wrap=True)
        table.add_column("time", justify="right", no_wrap=True)
        for r in recent[:_MAX_RECENT]:
            status = str(r.get("status", ""))
            label = status + (f" {r['error_code']}" if r.get("error_code") else "")
            table.add_row(
                _clock(r.get("timestamp"))[:12],
                _cut(r.get("call_id"), 24),
                _cut(r.get("tool"), 22),
                _cut(label, 40, STATUS_STYLE.get(status, "")),
                str(r.get("attempts", "")),
                duration(r.get("duration")),
            )
        return table

    def _tools(self) -> Table:
        table = Table(title="Per tool (since watching)", title_justify="left")
        table.add_column("tool", no_wrap=True, max_width=28)
        for name in ("calls", *STATUS_STYLE, "running"):  # one column per status, in order
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("retries", justify="right", no_wrap=True, style="yellow")
        for name in ("p50", "p95", "p99", "max"):
            table.add_column(name, justify="right", no_wrap=True)
        for t in self.state.get("tools") or ():
            table.add_row(
                _cut(t.get("tool"), 28),
                str(t.get("calls", 0)),
                *(
                    Text(str(t.get(s, 0)), style=STATUS_STYLE[s] if t.get(s) else "dim")
                    for s in STATUS_STYLE
                ),
                str(t.get("in_flight", 0)),
                str(t.get("retries", 0)),
                *(duration(t.get(q)) for q in ("p50", "p95", "p99", "max")),
            )
        return table

    def _errors(self) -> Table:
        errors: Sequence[Mapping[str, Any]] = self.state.get("errors") or ()
        table = Table(title="Recent failures", title_justify="left", expand=True)
        table.add_column("at", no_wrap=True, style="dim")
        table.add_column("call", no_wrap=True, max_width=24)
        table.add_column("tool", no_wrap=True, max_width=22)
        table.add_column("status", no_wrap=True)
        table.add_column("error", overflow="ellipsis", no_wrap=True, ratio=1)
        for e in errors[:_MAX_ERRORS]:
            status = str(e.get("status", ""))
            label = status + (f" {e['error_code']}" if e.get("error_code") else "")
            table.add_row(
                _clock(e.get("timestamp"))[:12],
                _cut(e.get("call_id"), 24),
                _cut(e.get("tool"), 22),
                _cut(label, 40, STATUS_STYLE.get(status, "")),
                _cut(e.get("error"), 200),
            )
        return table

    def _policies(self) -> Table | None:
        """Breakers, throttled calls, cache hits and calls awaiting approval, per
        tool; None while no policy did anything."""
        pol: Mapping[str, Any] = self.state.get("policies") or {}
        tools: Sequence[Mapping[str, Any]] = pol.get("tools") or ()
        if not tools:
            return None
        t = pol.get("totals") or {}
        title = (
            f"Policies: throttled {t.get('throttled', 0)} · cache hits {t.get('cache_hits', 0)}"
            f" · awaiting approval {t.get('waiting', 0)} · breakers open {t.get('open', 0)}"
            f", half-open {t.get('half-open', 0)}"
        )
        table = Table(title=title, title_justify="left")
        table.add_column("tool", no_wrap=True, max_width=40)
        table.add_column("breaker", no_wrap=True)
        for name in ("failures", "for", "opened", "throttled", "waited", "cache hits"):
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("awaiting approval", justify="right", no_wrap=True, style="blue")
        breakers: Sequence[Mapping[str, Any]] = pol.get("breakers") or ()
        own = {b.get("tool"): b for b in breakers if b.get("key") is None}
        keyed = [b for b in breakers if b.get("key") is not None]
        for row in tools:
            tool = row.get("tool")
            b = own.get(tool)
            keys = sum(k.get("tool") == tool for k in keyed)
            state = str(row.get("breaker") or "")
            label = state + (f" ({keys} keys)" if keys else "")
            hits = f"{row.get('cache_hits', 0)}" + (
                f" ({row['shared']} shared)" if row.get("shared") else ""
            )
            table.add_row(
                _cut(tool, 40),
                _cut(label or "-", 40, BREAKER_STYLE.get(state, "dim")),
                *self._circuit_cells(b),
                str(row.get("throttled", 0)),
                duration(row.get("throttle_wait")) if row.get("throttled") else "",
                hits,
                str(row.get("waiting", 0)),
            )
        keyed.sort(key=lambda k: (k.get("state") == "closed", -float(k.get("since") or 0.0)))
        for k in keyed[:_MAX_KEYS]:
            state = str(k.get("state", ""))
            table.add_row(
                _cut(f"{k.get('tool')} · key {k.get('key')}", 40, "dim"),
                _cut(state, 20, BREAKER_STYLE.get(state, "")),
                *self._circuit_cells(k),
                "",
                "",
                "",
                "",
            )
        if len(keyed) > _MAX_KEYS:
            table.add_row(Text(f"+{len(keyed) - _MAX_KEYS} more keys", style="dim"))
        waiting: Sequence[Mapping[str, Any]] = pol.get("waiting") or ()
        if waiting:
            table.caption = Text(  # literal: call ids and tool names are not markup
                "awaiting approval, newest first: "
                + " · ".join(
                    f"{_cut_str(w.get('call_id'), 24)} {_cut_str(w.get('tool'), 22)} "
                    f"({duration(max(0.0, self.now - float(w.get('timestamp') or self.now)))})"
                    for w in waiting[:_MAX_WAITING]
                )
            )
            table.caption_justify = "left"
        return table

    def _circuit_cells(self, b: Mapping[str, Any] | None) -> tuple[str, str, str]:
        """failures, since (how long it has been in its state), opened."""
        if b is None:
            return "", "", ""
        since = b.get("since")
        ago = "" if since is None else duration(max(0.0, self.now - float(since)))
        return str(b.get("failures", 0)), ago, str(b.get("opened", 0))

    def _signals(self) -> Text | None:
        """Events of signals defined outside toolbus's own and the policies' (yours), if any."""
        own = {*ALL_SIGNALS, *POLICY_SIGNALS}
        counts = {k: v for k, v in (self.state.get("signals") or {}).items() if k not in own}
        if not counts:
            return None
        text = Text("Other signals: ", style="bold")
        text.append("  ".join(f"{_safe(k)} {_safe(v)}" for k, v in counts.items()))
        return text
