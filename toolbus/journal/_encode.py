"""What the journal writes, as JSON and within a size bound.

Arguments are the masked ones; results the published ones (already scrubbed).
Either may be large: beyond `limit` bytes, a result's output is cut down to
the first part of its JSON text (a string), attachments lose their inline
data, long error texts are cut, and the result's metadata says
`journal_truncated: True`; arguments become a marker with their first part.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import orjson

from .._json import canonical, dumps
from ..models import ToolResult

__all__ = [
    "arguments_digest",
    "arguments_json",
    "bindable",
    "result_from_json",
    "result_json",
]

_OPTIONS = orjson.OPT_NON_STR_KEYS


def arguments_digest(arguments: Any, secret: bytes) -> str:
    """What tells two calls' arguments apart without keeping them: an HMAC
    (the journal's secret) of their canonical JSON, as the model sent them."""
    return hmac.new(secret, canonical(arguments), hashlib.sha256).hexdigest()


def bindable(text: str) -> str:
    """`text` as SQLite can store it: lone surrogates (a model's JSON `"\\udc80"`
    decodes to one, and UTF-8 cannot hold it) written as `\\udc80`. Text
    that UTF-8 holds comes back as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _text(value: Any) -> str:
    try:
        return dumps(value, default=str, option=_OPTIONS).decode()
    except (TypeError, ValueError, RecursionError):
        pass  # a lone surrogate, an integer over 64 bits, a cycle, nesting too deep
    try:
        # Escapes lone surrogates (ASCII out), takes any integer, skips odd keys.
        return json.dumps(value, default=str, skipkeys=True)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(f"<not JSON: {type(value).__name__}>")


def _cut(text: str, budget: int) -> str:
    if len(text) <= budget:
        return text
    return text[: max(0, budget)] + f"... [{len(text) - budget} more characters]"


def arguments_json(masked: Any, limit: int) -> str:
    """The masked arguments as JSON text, at most about `limit` characters."""
    text = _text(masked)
    if len(text) <= limit:
        return text
    return _text({"journal_truncated": True, "size": len(text), "start": _cut(text, limit // 2)})


def result_json(result: ToolResult, limit: int) -> tuple[str, bool]:
    """The result as JSON text within about `limit` characters, and whether it was cut."""
    data = result.model_dump()
    text = _text(data)
    if len(text) <= limit:
        return text, False
    data["output"] = _cut(_text(data["output"]), limit // 2)
    data["attachments"] = [{**a, "data": None} for a in data["attachments"]]
    if data["error"]:
        data["error"] = _cut(data["error"], limit // 4)
    data["metadata"] = {**data["metadata"], "journal_truncated": True}
    text = _text(data)
    if len(text) > limit:
        data["metadata"] = {"journal_truncated": True}
        text = _text(data)
    return text, True


def result_from_json(text: str) -> ToolResult:
    """A recorded result back; ValueError if it is not one. Text written by
    the fallback above (lone surrogates escaped) is read by the stdlib, which
    takes them back."""
    try:
        return ToolResult.model_validate_json(text)
    except ValueError:
        return ToolResult.model_validate(json.loads(text))
