"""Event content (masked arguments, scrubbed outputs) as JSON, for spans, log lines
and the status server.

Text from a model may hold a lone surrogate (`"\\ud800"` is valid JSON, and
Python reads it into a `str`), which UTF-8, and so orjson, cannot write. Every
surface writes through `dumps`: such a character becomes U+FFFD (visibly
replaced, never dropped) instead of failing the whole line or response.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import orjson

from .. import _json

__all__ = ["dumps", "encodable", "json_bytes", "json_text", "opaque", "text_of"]


def opaque(value: Any) -> Any:
    """What JSON shows of a value orjson cannot write: a pydantic model's dump,
    else only its type's name (never `str()`: it might show what masking hid)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return f"<{type(value).__name__}>"


def text_of(text: str) -> str:
    """`text` as UTF-8 can hold it: a lone surrogate becomes U+FFFD (a pair of
    surrogates, the UTF-16 form of one character, becomes that character).
    `text` itself, at the cost of one scan, when it has none (the usual case)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_SURROGATE = re.compile("[\ud800-\udfff]")


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


def dumps(
    value: Any, *, default: Callable[[Any], Any] | None = None, option: int | None = None
) -> bytes:
    """`_json.dumps` (orjson, integers of any size exact) that writes a lone
    surrogate as U+FFFD instead of raising; TypeError for what cannot be written."""
    try:
        return _json.dumps(value, default=default, option=option)
    except UnicodeEncodeError:
        pass  # the exact-integer path's own encoding met one
    except orjson.JSONEncodeError as e:
        if "surrogates" not in str(e):
            raise
    return _json.dumps(encodable(value, default), default=default, option=option)


# orjson's own recursion limit
_MAX_DEPTH = 254


def json_bytes(value: Any) -> bytes:
    """`value` as JSON (integers of any size exact); TypeError if it cannot be written."""
    return dumps(value, default=opaque, option=orjson.OPT_NON_STR_KEYS)


def json_text(value: Any) -> str:
    """`value` as JSON text, `"<not JSON>"` if it cannot be written."""
    try:
        return json_bytes(value).decode()
    except TypeError:
        return '"<not JSON>"'
