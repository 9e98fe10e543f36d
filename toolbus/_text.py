"""Text that UTF-8 can hold (lone surrogates written as U+FFFD), and text safe
to show on a terminal (control characters written visibly).

A Python `str` may hold a lone surrogate (a model's JSON `"\\ud800"`, a file
name decoded with `surrogateescape`), which no UTF-8 writer (orjson, pydantic,
a socket) accepts: one such character fails a whole log line, response or
message. `text_of` and `encodable` replace it (visibly, never dropped) for the
surfaces that write text out: the observability surfaces and the MCP server.

Text a model or a tool wrote (a call id, a tool name, an error quoting a web
page, an MCP server's tool description) may hold terminal control sequences:
ESC `[2J` clears the screen, OSC 52 writes the clipboard, C1 `\\x9b` starts a
sequence on its own. rich draws them as they are (it drops only a few control
characters). `for_terminal` makes such text safe to draw: the dashboard
(`live()`, `toolbus top`) and the CLI pass it every text they did not write.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["encodable", "for_terminal", "text_of"]

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 controls (ESC among them), DEL and C1 controls: what a terminal may act on.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# The same but tab and newline, for text shown on several lines.
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

# orjson's own recursion limit
_MAX_DEPTH = 254


def text_of(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate becomes U+FFFD (a pair of
    surrogates, the UTF-16 form of one character, becomes that character).
    `text` itself, at the cost of one scan, when it has none (the usual case)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _escaped(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def for_terminal(text: str, *, lines: bool = False) -> str:
    """`text` safe to write to a terminal: every control character (C0, ESC
    among them, DEL and C1) written visibly as `\\xNN` (ESC as the four
    characters `\\x1b`), so no sequence in it reaches the terminal, and a lone
    surrogate as U+FFFD (`text_of`). `lines`: tab and newline are kept (and
    CRLF becomes a newline), for text shown on several lines; otherwise they
    are escaped too. `text` itself when it has no such character (the usual
    case)."""
    text = text_of(text)
    if lines:
        if "\r" in text:
            text = text.replace("\r\n", "\n")
        return _CONTROL_BUT_LINES.sub(_escaped, text)
    return _CONTROL.sub(_escaped, text)


def encodable(value: Any, default: Callable[[Any], Any] | None = None, depth: int = 0) -> Any:
    """`value` with every string (and key) made writable (`text_of`): plain
    containers rebuilt, dataclasses and pydantic models as their data, what
    `default` turns an object into, anything else as it is."""
    if depth > _MAX_DEPTH:
        return value  # orjson refuses it for its depth anyway
    if isinstance(value, str):
        return text_of(value)
    if value is None or isinstance(value, bool | int | float | orjson.Fragment):
        return value
    if isinstance(value, dict):
        return {
            (text_of(k) if isinstance(k, str) else k): encodable(v, default, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [encodable(v, default, depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return encodable(fields, default, depth + 1)
    if default is not None:
        try:
            return encodable(default(value), None, depth + 1)
        except Exception:
            return value  # orjson calls it again and says what is wrong
    return value
