"""Text that UTF-8 can hold (lone surrogates written as U+FFFD), and text safe
to show on a terminal (control characters written visibly).

A Python `str` may hold a lone surrogate (a model's JSON `"\\ud800"`, a file
name decoded with `surrogateescape`), which no UTF-8 writer (orjson, pydantic,
a socket) accepts: one such character fails a whole log line, response or
message. `text_of` and `encodable` replace it (visibly, never dropped) for the
surfaces that write text out: the observability surfaces, the MCP server, the
model's text of a result, the CLI. In text and values it becomes U+FFFD; in a
key (`key_of`) its escape (`\\udce9`), so two keys that differ only there
stay two.

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

__all__ = ["encodable", "for_terminal", "key_of", "text_of"]

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
    """`value` with every string made writable (`text_of`) and every key too
    (`key_of`, which keeps keys apart): plain containers rebuilt, dataclasses
    as their fields, what `default` turns an object into, anything else as
    it is."""
    kind = type(value)
    if kind is str:
        return text_of(value)
    if kind in _LEAVES:
        return value
    if depth > _MAX_DEPTH:
        return value  # orjson refuses it for its depth anyway
    if isinstance(value, str):
        return text_of(value)
    if value is None or isinstance(value, bool | int | float | orjson.Fragment):
        return value
    depth += 1
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, v in value.items():
            k = key
            if isinstance(k, str) and text_of(k) is not k:
                k = _distinct(key_of(k), value, out)
            # The leaves here, not in a call each: a large output is mostly leaves.
            kind = type(v)
            if kind is str:
                out[k] = text_of(v)
            else:
                out[k] = v if kind in _LEAVES else encodable(v, default, depth)
        return out
    if isinstance(value, list | tuple):
        if len(value) > _RUN:
            return _items(value, default, depth)
        return [encodable(v, default, depth) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return encodable(fields, default, depth)
    if default is not None:
        try:
            return encodable(default(value), None, depth)
        except Exception:
            return value  # orjson calls it again and says what is wrong
    return value


_LEAVES = frozenset({int, float, bool, type(None)})

# Items of a long list that orjson writes as they are (it refuses a lone
# surrogate anywhere in them) are kept, not walked: the output of 200 000
# rows with one bad file name is written in a few of its C passes, not a
# Python call a value.
_RUN = 256
_PROBE = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _items(
    items: list[Any] | tuple[Any, ...], default: Callable[[Any], Any] | None, depth: int
) -> list[Any]:
    out: list[Any] = []
    spans = [(0, len(items))]
    while spans:
        lo, hi = spans.pop()
        if hi - lo <= _RUN:
            out.extend(encodable(v, default, depth) for v in items[lo:hi])
            continue
        part = items[lo:hi]
        try:
            orjson.dumps(part, default=default, option=_PROBE)
        except TypeError:
            mid = (lo + hi) // 2
            spans += ((mid, hi), (lo, mid))  # (the first half popped first)
            continue
        out.extend(part)
    return out


def key_of(key: str) -> str:
    """A key as UTF-8 can hold it: a lone surrogate written as the six
    characters of its escape (`\\udce9`, the byte 0xE9 that
    `surrogateescape` could not decode), not U+FFFD as in `text_of`, which
    would make `report-\\udce9.txt` and `report-\\udce8.txt` one key, and
    one of their values lost. A pair of surrogates becomes its character.
    `key` itself when it has none."""
    if text_of(key) is key:
        return key
    joined = key.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", joined)


def _distinct(key: str, given: dict[Any, Any], made: dict[Any, Any]) -> str:
    # The escaped key spelled out already (a key with a backslash in it):
    # numbered, rather than one of the two values lost.
    candidate, n = key, 1
    while candidate in given or candidate in made:
        n += 1
        candidate = f"{key} ({n})"
    return candidate
