"""Reading a call given as a plain mapping into a `ToolCall`.

The executor takes `ToolCall`s and mappings: `{"id", "name", "arguments"}`
(and any other `ToolCall` field), or OpenAI's shape
`{"id", "type": "function", "function": {"name", "arguments"}}`. A call always
keeps its id and name, so its result answers it; arguments that are not a
JSON object are carried on as text for the executor's JSON parser, which
rejects them (`INVALID_ARGUMENTS`) instead of the tool running without them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from . import _json
from .models import ToolCall

__all__ = ["UNREADABLE_CALL", "CallLike", "coerce_call"]

log = logging.getLogger("toolbus")

CallLike = ToolCall | Mapping[str, Any]

UNREADABLE_CALL = "<unreadable call>"
"""The name given to a call that is not a mapping, or has no name: no tool has it."""

_OWN_FIELDS = ("id", "name", "arguments")


def coerce_call(call: CallLike) -> ToolCall:
    """A `ToolCall` from a `ToolCall` (returned as it is) or a mapping; never raises.

    Every `ToolCall` field present in the mapping is kept; a field whose value
    is invalid is dropped (logged at DEBUG, by location and error type only,
    since a value may be a secret), except the id, name and arguments, which
    are always made readable, and an invalid `idempotency_key`, which is kept
    as it is so that the executor refuses the call (`INVALID_ARGUMENTS`).
    """
    if isinstance(call, ToolCall):
        if type(getattr(call, "id", None)) is type(getattr(call, "name", None)) is str:
            return call
        # Made without validation (`model_construct`): read as its mapping
        # would be, so its result can answer it (an id of another type, a
        # name that is a `str` subclass, such as an enum's member).
        call = {k: getattr(call, k, None) for k in ToolCall.model_fields}
    if not isinstance(call, Mapping):
        log.debug("could not read a tool call: a %s is not a mapping", type(call).__name__)
        return ToolCall(name=UNREADABLE_CALL)
    try:
        fields = _fields(call)
    except Exception as e:  # a broken Mapping implementation
        log.debug("could not read a tool call: %s", type(e).__name__)
        return ToolCall(name=UNREADABLE_CALL)
    try:
        return ToolCall(**fields)
    except ValidationError as e:
        # Field names and error types only: an input, or even a dict key
        # deeper in a location, may be a secret.
        errors = sorted({(str(err["loc"][0]), err["type"]) for err in e.errors() if err["loc"]})
        log.debug("dropped unreadable fields of tool call %s: %s", fields.get("id"), errors)
        bad = {field for field, _ in errors}
    readable = {k: v for k, v in fields.items() if k not in bad or k in _OWN_FIELDS}
    own = {k: v for k, v in fields.items() if k in _OWN_FIELDS}
    for kept in (readable, own):
        try:
            made = ToolCall(**kept)
        except ValidationError:
            continue
        if "idempotency_key" in bad:
            # Kept as it came, unchecked: the executor answers the call with
            # INVALID_ARGUMENTS rather than run it under a key of its own.
            return made.model_copy(update={"idempotency_key": fields["idempotency_key"]})
        return made
    return ToolCall(name=UNREADABLE_CALL)


def coerce_calls(calls: Iterable[CallLike]) -> list[ToolCall]:
    """`coerce_call` of each call, without its frame for a `ToolCall` it would
    return as it is (the common call: one whose id and name are text, which
    one made with `model_construct` need not have). The executor's, for a
    batch: not a stable name (`__all__` leaves it out)."""
    return [
        c if type(c) is ToolCall and type(c.id) is type(c.__dict__.get("name")) is str
        else coerce_call(c)
        for c in calls
    ]  # fmt: skip


def _fields(call: Mapping[str, Any]) -> dict[str, Any]:
    data = dict(call)
    function = data.get("function")
    if isinstance(function, Mapping):  # OpenAI's shape: name and arguments one level down
        data = {**data, "name": function.get("name"), "arguments": function.get("arguments")}
    fields = {k: data[k] for k in ToolCall.model_fields if data.get(k) is not None}
    if "id" in fields and not isinstance(fields["id"], str):
        fields["id"] = str(fields["id"])
    name = fields.get("name")
    fields["name"] = (name if isinstance(name, str) else str(name or "")) or UNREADABLE_CALL
    if "arguments" in fields:
        fields["arguments"] = arguments_text(fields["arguments"])
    return fields


def arguments_text(value: Any) -> dict[str, Any] | str:
    """Arguments as a `ToolCall` takes them: a JSON object as a dict, text as it
    is, anything else as JSON text that the executor's parser rejects.

    Bytes are decoded as UTF-8; bytes that are not UTF-8 keep their bad bytes
    as lone surrogates, which the parser refuses too. A mapping with keys that
    are not strings is written with each such key as an array (`{[1]:"a"}`),
    so it is refused rather than read as `{"1": "a"}`.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value):
            return dict(value)
        return _bare_keys(value)
    return _text(value)


def _text(value: Any) -> str:
    try:
        return _json.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, ValueError, RecursionError):
        # Still refused by the parser, and names the problem in the call itself.
        return f"<arguments that are not JSON: {type(value).__name__}>"


def _bare_keys(value: Mapping[Any, Any]) -> str:
    items = []
    for k, v in value.items():
        # Not JSON on purpose: an array where a key must be a string.
        key = _text(k) if isinstance(k, str) else _text([k])
        items.append(f"{key}:{_text(v)}")
    return "{" + ",".join(items) + "}"
