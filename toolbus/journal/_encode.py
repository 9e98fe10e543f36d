"""What the journal writes, as JSON and within a size bound.

Arguments are the masked ones; results the published ones (already scrubbed).
Either may be large: beyond `limit` bytes, a result's output is cut down to
the first part of its JSON text (a string), attachments lose their inline
data, long error texts are cut, and the result's metadata says
`journal_truncated: True`; arguments become a marker with their first part.
"""

from __future__ import annotations

from typing import Any

import orjson

from .._json import dumps
from ..models import ToolResult

__all__ = ["arguments_json", "result_json"]

_OPTIONS = orjson.OPT_NON_STR_KEYS


def _text(value: Any) -> str:
    return dumps(value, default=str, option=_OPTIONS).decode()


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
