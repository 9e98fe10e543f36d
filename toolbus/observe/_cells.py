"""How one cell of the dashboard is drawn: durations and clock times, text a
model or a tool wrote (cut, on one line, escape sequences written out, never
read as markup), the short labels and light tables of a narrow terminal, and
the styles of statuses, states and breakers."""

from __future__ import annotations

import time
from typing import Any

from rich.table import Table
from rich.text import Text

from .._text import for_terminal

__all__ = [
    "BREAKER_STYLE",
    "STATE_STYLE",
    "STATUS_STYLE",
    "clock",
    "cut",
    "cut_str",
    "duration",
    "label",
    "safe",
    "titled",
]

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

# The short labels of the per-tool and policy tables when their whole form
# does not fit the terminal (an 80-column one, or many digits).
_SHORT = {
    "calls": "calls",
    "ok": "ok",
    "error": "err",
    "timeout": "t/o",
    "rejected": "rej",
    "cancelled": "canc",
    "deferred": "def",
    "running": "run",
    "retries": "retry",
    "failures": "fails",
    "for": "for",
    "opened": "opened",
    "throttled": "thrott",
    "waited": "waited",
    "cache hits": "hits",
    "awaiting approval": "approval",
}


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


def clock(ts: float | None) -> str:
    if not ts:
        return ""
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


def safe(text: Any) -> str:
    """`text` on one line, safe for a terminal: whitespace (newlines, tabs)
    collapsed to single spaces, other control characters (ESC) as `\\xNN`."""
    return "" if text is None else for_terminal(" ".join(str(text).split()))


def cut_str(text: Any, limit: int) -> str:
    s = safe(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def cut(text: Any, limit: int, style: str = "") -> Text:
    """A cell of text the model or a tool wrote (a call id, a tool name, an
    error): a `Text`, drawn as it is, never read as rich markup (a `[/x]` in it
    would raise, a `[link=...]` would make a link), its escape sequences
    written out (`safe`)."""
    return Text(cut_str(text, limit), style=style)


def label(name: str, narrow: bool) -> str:
    return _SHORT.get(name, name) if narrow else name


def titled(title: str, narrow: bool) -> Table:
    """A titled table: boxed, or (narrow) with only a rule under its header."""
    if narrow:
        return Table(
            title=title,
            title_justify="left",
            box=None,
            pad_edge=False,
            padding=(0, 1),
            collapse_padding=True,
            show_header=True,
            header_style="dim",
        )
    return Table(title=title, title_justify="left")
