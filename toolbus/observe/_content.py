"""Event content (masked arguments, scrubbed outputs) as JSON, for spans, log lines
and the status server.

Text from a model may hold a lone surrogate (`"\\ud800"` is valid JSON, and
Python reads it into a `str`), which UTF-8, and so orjson, cannot write. Every
surface writes through `dumps`: such a character becomes U+FFFD (visibly
replaced, never dropped) instead of failing the whole line or response.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .. import _json
from .._text import encodable, text_of

__all__ = ["dumps", "encodable", "json_bytes", "json_text", "opaque", "text_of"]


def opaque(value: Any) -> Any:
    """What JSON shows of a value orjson cannot write: a pydantic model's dump,
    else only its type's name (never `str()`: it might show what masking hid)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # a field pydantic cannot write
            pass
    return f"<{type(value).__name__}>"


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


def json_bytes(value: Any) -> bytes:
    """`value` as JSON (integers of any size exact); TypeError if it cannot be written."""
    return dumps(value, default=opaque, option=orjson.OPT_NON_STR_KEYS)


def json_text(value: Any) -> str:
    """`value` as JSON text, `"<not JSON>"` if it cannot be written."""
    try:
        return json_bytes(value).decode()
    except TypeError:
        return '"<not JSON>"'
