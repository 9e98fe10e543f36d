"""Lifecycle events as plain JSON-able records: what `/events` sends and the state reads.

A record is a flat dict: `seq`, `signal`, `timestamp`, then the event's own
fields (`call_id`, `tool`, `attempt`, `arguments`, `result`, ...), and for a
call's event `run`: which run of a call it is (`CallEvent._run`, a number
counted up per submitted call in the process: it tells apart two calls a model
gave the same id, which a view of calls in flight must show as two). Every event
is already masked and scrubbed when it is built; this only makes it plain data,
and bounds its large fields (arguments, outputs, progress data) to about
`max_chars` bytes of JSON each, so one huge output cannot flood a page.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import orjson
from pydantic import BaseModel

from .. import _json
from ..bus import Event
from ..models import ToolResult
from ._content import dumps, opaque, text_of

__all__ = ["MAX_FIELD_CHARS", "encode", "plain"]

MAX_FIELD_CHARS = 2000

_SKIP = frozenset({"seq", "timestamp"})
_SCALARS = frozenset({int, float, bool, type(None)})
_BULKY = frozenset({"arguments", "data", "record"})


def plain(value: Any, max_chars: int = MAX_FIELD_CHARS) -> Any:
    """`value` as JSON-able data; a value whose JSON takes more than `max_chars`
    bytes becomes the text of its first bytes, ending in "…"."""
    kind = type(value)
    if kind is str:
        # A lone surrogate a model sent: no UTF-8 (no JSON, no terminal) can
        # hold it, so every reader of the record gets U+FFFD instead.
        value = text_of(value)
        return value if len(value) <= max_chars else value[: max_chars - 1] + "…"
    if kind in _SCALARS:
        return value
    if kind is dict or kind is list:  # arguments, outputs: JSON as they are, mostly
        try:
            text = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError):
            pass  # not JSON as it is: the general way below
        else:
            return (
                value
                if len(text) <= max_chars
                else text[: max_chars - 1].decode("utf-8", "ignore") + "…"
            )
    if isinstance(value, enum.Enum):
        return plain(value.value, max_chars)  # (a member's value may be any object)
    if isinstance(value, str | int | float):  # subclasses
        return plain(str(value) if isinstance(value, str) else float(value), max_chars)
    if isinstance(value, ToolResult):
        return _result(value, max_chars)
    if isinstance(value, BaseModel):
        try:
            value = value.model_dump(mode="json")
        except Exception:  # a field pydantic cannot write: shown below, as an object
            pass
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {name: getattr(value, name) for name in _fields(type(value))}
    try:
        text = orjson.dumps(value)  # JSON as it is: kept as it is (the common case)
        native = True
    except (TypeError, orjson.JSONEncodeError):
        native = False
        try:  # (a lone surrogate a model sent is written as U+FFFD: `dumps`)
            text = dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)
        except Exception:  # an object's text fails: it shows its type's name
            try:
                text = dumps(value, default=opaque, option=orjson.OPT_NON_STR_KEYS)
            except Exception:  # not JSON even so (nested too deep)
                text = dumps(_shown(value))
    if len(text) > max_chars:
        return text[: max_chars - 1].decode("utf-8", "ignore") + "…"
    # Read back with integers exact: orjson reads one past 64 bits as a float,
    # and refuses one past a double's range (10**400, which a model may send).
    return value if native else _json.loads(text)


def _shown(value: Any) -> str:
    """`value`'s repr; its type's name where that fails (a repr that raises,
    a structure nested past the recursion limit)."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    """A dataclass's field names but `seq`, `timestamp` and private ones
    (`_run`: toolbus's own, not the event's data), cached per class."""
    names = _FIELDS.get(cls)
    if names is None:
        fields = dataclasses.fields(cls)
        names = _FIELDS[cls] = tuple(
            f.name for f in fields if f.name not in _SKIP and not f.name.startswith("_")
        )
    return names


def _result(result: ToolResult, max_chars: int, light: bool = False) -> dict[str, Any]:
    record: dict[str, Any] = {
        "call_id": result.call_id,
        "name": plain(result.name, 200),
        "status": result.status,
        "error": plain(result.error, max_chars),
        "error_code": result.error_code.value if result.error_code else None,
        "attempts": result.attempts,
        "duration": result.duration,
    }
    if not light:
        record["output"] = plain(result.output, max_chars)
        record["attachments"] = len(result.attachments)
        record["metadata"] = plain(result.metadata, max_chars)
    return record


def encode(
    signal: str, event: Event, max_chars: int = MAX_FIELD_CHARS, *, light: bool = False
) -> dict[str, Any]:
    """One event as a record: `seq`, `signal`, `timestamp` and the event's fields.

    `light`: without the bulky fields no view draws (arguments, outputs,
    metadata, progress data, journal records): what `live()` feeds its state.
    """
    record: dict[str, Any] = {"seq": event.seq, "signal": signal, "timestamp": event.timestamp}
    names = _FIELDS.get(type(event))
    if names is None:
        if not dataclasses.is_dataclass(event):
            return record
        names = _fields(type(event))
    for name in names:
        if light and name in _BULKY:
            continue
        value = getattr(event, name)
        if type(value) is ToolResult:
            record[name] = _result(value, max_chars, light)
        else:
            record[name] = plain(value, max_chars)
    run = getattr(event, "_run", 0)
    if run and type(run) is int:
        record["run"] = run
    return record
