"""Text that UTF-8 can hold: lone surrogates written as U+FFFD.

A Python `str` may hold a lone surrogate (a model's JSON `"\\ud800"`, a file
name decoded with `surrogateescape`), which no UTF-8 writer (orjson, pydantic,
a socket) accepts: one such character fails a whole log line, response or
message. `text_of` and `encodable` replace it (visibly, never dropped) for the
surfaces that write text out: the observability surfaces and the MCP server.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["encodable", "text_of"]

_SURROGATE = re.compile("[\ud800-\udfff]")

# orjson's own recursion limit
_MAX_DEPTH = 254


def text_of(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate becomes U+FFFD (a pair of
    surrogates, the UTF-16 form of one character, becomes that character).
    `text` itself, at the cost of one scan, when it has none (the usual case)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


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
