"""The dashboard's policy tables: per tool, its breaker (and its circuits per
key), the calls its rate limits throttled and how long they waited, cache
hits and calls awaiting approval; on a narrow terminal, the breakers and the
rest in two tables, so that every count stays whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ._cells import BREAKER_STYLE, cut, cut_str, duration, label, safe, titled

__all__ = ["policy_tables"]

_MAX_KEYS = 6  # rows of a breaker per key's circuits (open ones first)
_MAX_WAITING = 3  # calls awaiting approval named under the policies


def policy_tables(snapshot: Mapping[str, Any], now: float, narrow: bool) -> list[Table]:
    """Breakers, throttled calls, cache hits and calls awaiting approval, per
    tool: one table, or (narrow) the breakers and the rest in two; none
    while no policy did anything."""
    pol: Mapping[str, Any] = snapshot.get("policies") or {}
    tools: Sequence[Mapping[str, Any]] = pol.get("tools") or ()
    if not tools:
        return []
    t = pol.get("totals") or {}
    title = (
        f"Policies: throttled {t.get('throttled', 0)} · cache hits {t.get('cache_hits', 0)}"
        f" · awaiting approval {t.get('waiting', 0)} · breakers open {t.get('open', 0)}"
        f", half-open {t.get('half-open', 0)}"
    )
    name_width = 20 if narrow else 40
    labels = ("failures", "for", "opened", "throttled", "waited", "cache hits")
    columns = ["breaker", *labels, "awaiting approval"]
    breakers: Sequence[Mapping[str, Any]] = pol.get("breakers") or ()
    own = {b.get("tool"): b for b in breakers if b.get("key") is None}
    keyed = [b for b in breakers if b.get("key") is not None]
    keyed.sort(key=lambda k: (k.get("state") == "closed", -float(k.get("since") or 0.0)))
    # A circuit per key: a row of its breaker's cells under its tool's row,
    # named by its key alone (a long tool name left no room for the key).
    under: dict[Any, list[Mapping[str, Any]]] = {}
    for k in keyed[:_MAX_KEYS]:
        under.setdefault(k.get("tool"), []).append(k)
    rows: list[list[str | Text]] = []  # a tool's: its name and a cell per column
    key_rows: list[list[list[str | Text]]] = []  # the rows of its keys' circuits
    for row in tools:
        tool = row.get("tool")
        keys = sum(k.get("tool") == tool for k in keyed)
        state = str(row.get("breaker") or "")
        shown = state + (f" ({keys} keys)" if keys else "")
        hits = f"{row.get('cache_hits', 0)}"
        if row.get("shared"):
            hits += f" ({row['shared']})" if narrow else f" ({row['shared']} shared)"
        rows.append(
            [
                cut(tool, name_width),
                cut(shown or "-", 40, BREAKER_STYLE.get(state, "dim")),
                *_circuit_cells(now, own.get(tool)),
                cut(row.get("throttled", 0), 20),
                duration(row.get("throttle_wait")) if row.get("throttled") else "",
                hits,
                cut(row.get("waiting", 0), 20),
            ]
        )
        key_rows.append([_key_row(now, k, "", name_width) for k in under.pop(tool, [])])
    for lost in under.values():  # a key's circuit whose tool has no row (not expected)
        key_rows[-1].extend(_key_row(now, k, safe(k.get("tool")), name_width) for k in lost)
    more: list[list[str | Text]] = []
    if len(keyed) > _MAX_KEYS:
        more.append([Text(f"+{len(keyed) - _MAX_KEYS} more keys", style="dim")])
    # Narrow: the breakers (name and 4 cells) over the rest (name and 4 cells).
    parts = (
        [(title, 0, 4), ("Policies: waits, cache, approvals", 4, 8)] if narrow else [(title, 0, 8)]
    )
    tables = []
    for heading, first, last in parts:
        table = titled(heading, narrow)
        table.add_column("tool", no_wrap=True, max_width=name_width)
        for name in columns[first:last]:
            table.add_column(
                label(name, narrow),
                justify="left" if name == "breaker" else "right",
                no_wrap=True,
                style="blue" if name == "awaiting approval" else "",
            )
        for cells, circuits in zip(rows, key_rows, strict=True):
            table.add_row(cells[0], *cells[1 + first : 1 + last])
            for circuit in circuits if first == 0 else ():
                table.add_row(*circuit)
        for cells in more if first == 0 else ():
            table.add_row(*cells)
        tables.append(table)
    waiting: Sequence[Mapping[str, Any]] = pol.get("waiting") or ()
    if waiting:
        last_table = tables[-1]
        last_table.caption = Text(  # literal: call ids and tool names are not markup
            "awaiting approval, newest first: "
            + " · ".join(
                f"{cut_str(w.get('call_id'), 24)} {cut_str(w.get('tool'), 22)} "
                f"({duration(max(0.0, now - float(w.get('timestamp') or now)))})"
                for w in waiting[:_MAX_WAITING]
            )
        )
        last_table.caption_justify = "left"
    return tables


def _key_row(now: float, k: Mapping[str, Any], tool: str, width: int) -> list[str | Text]:
    """A circuit per key's row: its key (indented under its tool's row, or
    after `tool`'s name), its state and its circuit's cells."""
    state = str(k.get("state", ""))
    head = (f"{tool} · " if tool else "  ") + "key "
    key = safe(k.get("key"))  # (safe strips)
    room = width - len(head)
    if len(key) > room > 2:
        # Cut in the middle: keys that differ at their end ("...-west-1",
        # "...-west-2", a URL's path) stay told apart.
        tail = (room - 1) // 2
        key = key[: room - 1 - tail] + "…" + key[len(key) - tail :]
    name = head + key
    return [
        Text(name if len(name) <= width else name[: width - 1] + "…", style="dim"),
        cut(state, 20, BREAKER_STYLE.get(state, "")),
        *_circuit_cells(now, k),
    ]


def _circuit_cells(now: float, b: Mapping[str, Any] | None) -> tuple[Text, Text, Text]:
    """failures, since (how long it has been in its state), opened."""
    if b is None:
        return Text(), Text(), Text()
    since = b.get("since")
    ago = "" if since is None else duration(max(0.0, now - float(since)))
    return cut(b.get("failures", 0), 20), Text(ago), cut(b.get("opened", 0), 20)
