"""Event content (masked arguments, scrubbed outputs) as JSON, for spans and log lines."""

from __future__ import annotations

from typing import Any

import orjson

from .. import _json

__all__ = ["json_bytes", "json_text", "opaque"]


def opaque(value: Any) -> Any:
    """What JSON shows of a value orjson cannot write: a pydantic model's dump,
    else only its type's name (never `str()`: it might show what masking hid)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return f"<{type(value).__name__}>"


def json_bytes(value: Any) -> bytes:
    """`value` as JSON (integers of any size exact); TypeError if it cannot be written."""
    return _json.dumps(value, default=opaque, option=orjson.OPT_NON_STR_KEYS)


def json_text(value: Any) -> str:
    """`value` as JSON text, `"<not JSON>"` if it cannot be written."""
    try:
        return json_bytes(value).decode()
    except TypeError:
        return '"<not JSON>"'
