"""What a `cache` keys a call by: data, never an object's address.

The key is the tool's name and the call's arguments (or what the cache's `key`
function made of the call) in canonical JSON. That keeps calls, and users,
apart only when the value is data throughout: an object JSON cannot hold
(an injected session, a client) would be written as its `repr`, which for a
plain object holds nothing but its memory address (reused once the object is
freed: another user's call would be answered with the first one's result), and
for a custom `__repr__` whatever it chose to show. So a value that is not data
gives no key at all: the call is not cached (`cache_key` returns None).

Data: str, int, float, bool, None, a date, time or datetime, a UUID, a
Decimal, an Enum member; a list or tuple of data; a dict whose keys are
str/int/float/bool/None and whose values are data; a dataclass instance whose
fields are data; a pydantic model (its `model_dump(mode="json")`).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib
import uuid
from typing import Any

from .._json import canonical

__all__ = ["as_data", "cache_key"]

_LEAVES = (
    str,
    int,
    float,
    bool,
    type(None),
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    enum.Enum,
)
_KEYS = (str, int, float, bool, type(None))
_DEPTH = 200


class NotData(Exception):
    """A value that is not data (see the module's docstring)."""


def cache_key(name: str, value: Any) -> bytes | None:
    """The hashed key of `value` for tool `name`; None when `value` is not data."""
    try:
        data = as_data(value, 0)
    except (NotData, RecursionError):
        return None
    except Exception:  # (a pydantic model's model_dump failing)
        return None
    return hashlib.sha256(name.encode("utf-8", "surrogatepass") + b"\0" + canonical(data)).digest()


def as_data(value: Any, depth: int = 0) -> Any:
    """`value` as plain data (a dataclass as the dict of its fields, a pydantic
    model as its JSON dump); raises NotData for what is not data."""
    if isinstance(value, _LEAVES):
        return value
    if depth > _DEPTH:
        raise NotData("nested too deep (a cycle?)")
    depth += 1
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, _KEYS):
                raise NotData(f"a key of type {type(k).__name__}")
            out[k] = as_data(v, depth)
        return out
    if isinstance(value, list | tuple):
        return [as_data(v, depth) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_data(getattr(value, f.name), depth) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump) and _is_pydantic(value):
        return as_data(dump(mode="json"), depth)
    raise NotData(f"a {type(value).__name__}")


def _is_pydantic(value: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(value, BaseModel)
