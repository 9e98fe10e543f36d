"""What a `cache` keys a call by: data, never an object's address.

The key is the tool's name and the call's arguments (or what the cache's `key`
function made of the call), encoded with each value's type, hashed. That keeps
calls, and users, apart only when the value is data throughout: an object
without a data form (an injected session, a client) could only be written as
its `repr`, which for a plain object holds nothing but its memory address
(reused once the object is freed: another user's call would be answered with
the first one's result), and for a custom `__repr__` whatever it chose to
show. So a value that is not data gives no key at all: the call is not cached
(`cache_key` returns None).

Data:

- str, int, float, bool, None; a date, time, datetime (naive, or with a
  `datetime.timezone` or `zoneinfo.ZoneInfo`), timedelta, UUID, Decimal;
- an Enum member whose value is data;
- a list, tuple or dict of data (a dict's keys too);
- a dataclass instance or pydantic model that holds nothing but data:
  EVERYTHING it holds counts, not only what it shows or dumps: every field
  (`repr=False`, `Field(exclude=True)` ones too), a model's private attributes
  and extra fields, and any other attribute of the instance (its `__dict__`,
  its slots). One `SecretStr`/`SecretBytes` or other object in it and the
  whole value is not data. A secret's value never goes into a key.

Values of different types never share a key: each is encoded with its type,
so `1`, `1.0`, `True`, `"1"`, an Enum member of value 1, a str or int
subclass's instance, a tuple and a list, two dataclasses or models of
different classes with the same fields all key apart. A str, int, float,
list, tuple or dict of a subclass is tagged with its class and its own
attributes count too; an Enum member, dataclass or model is always tagged
with its class. A class's tag is its module and qualified name where that
name reaches it (a module-level class: the same tag in every process); two
classes can share a name (a class made in a function, made again by each
call; a class redefined under its name), so one its name does not reach is
tagged with a number of its own in this process too: distinct classes never
share a tag. The encoding is prefix-free (each piece says its length), so
distinct data give distinct bytes. Keys live only in the cache's memory:
they are never stored or shared.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import functools
import hashlib
import itertools
import sys
import threading
import types
import uuid
import weakref
import zoneinfo
from typing import Any

__all__ = ["cache_key", "encode"]

_DEPTH = 200

# pydantic's own slots on a model: its fields (`__dict__`), which fields were
# set (not data, and not what the model holds), its extra fields and private
# attributes (read on their own, below).
_MODEL_SLOTS = frozenset(
    {
        "__dict__",
        "__weakref__",
        "__pydantic_fields_set__",
        "__pydantic_extra__",
        "__pydantic_private__",
    }
)


class NotData(Exception):
    """A value that is not data (see the module's docstring)."""


def cache_key(name: str, value: Any) -> bytes | None:
    """The hashed key of `value` for tool `name`; None when `value` is not data."""
    out: list[bytes] = []
    try:
        encode(value, out, 0)
    except (NotData, RecursionError):
        return None
    except Exception:  # an attribute that raises when read
        return None
    digest = hashlib.sha256(_sized(name.encode("utf-8", "surrogatepass")))
    for piece in out:
        digest.update(piece)
    return digest.digest()


def encode(value: Any, out: list[bytes], depth: int) -> None:
    """Append `value`'s encoding to `out`; raises NotData for what is not data."""
    kind = type(value)
    if value is None:
        out.append(b"N")
    elif kind is bool:
        out.append(b"T" if value else b"F")
    elif kind is int:
        out.append(b"i" + _int(value))
    elif kind is float:
        out.append(b"f" + _sized(value.hex().encode()))
    elif kind is str:
        out.append(b"s" + _sized(value.encode("utf-8", "surrogatepass")))
    elif depth > _DEPTH:
        raise NotData("nested too deep (a cycle?)")
    elif isinstance(value, enum.Enum):
        # By its class and value: never by a repr (an object's holds its address).
        out.append(b"e" + _type(kind))
        encode(value.value, out, depth + 1)
    elif kind in _LEAVES:
        text = _LEAVES[kind](value).encode("utf-8", "surrogatepass")
        out.append(b"x" + _type(kind) + _sized(text))
    elif kind is list or kind is tuple or kind is dict:
        _container(value, out, depth + 1)
    elif isinstance(value, str | int | float | list | tuple | dict) and not isinstance(value, bool):
        # A subclass: its class, its base value, and what else it holds.
        out.append(b"y" + _type(kind))
        base: Any = next(b for b in (str, int, float, list, tuple, dict) if isinstance(value, b))
        if base is list or base is tuple or base is dict:
            _container(value, out, depth + 1, base)
        else:
            encode(base(value), out, depth + 1)
        _attributes(value, out, depth + 1, ())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        out.append(b"c" + _type(kind))
        _attributes(value, out, depth + 1, ())
    elif _is_pydantic(value):
        out.append(b"m" + _type(kind))
        _attributes(value, out, depth + 1, _MODEL_SLOTS, own=vars(value))
        for held in (value.__pydantic_extra__, value.__pydantic_private__):
            encode(dict(held) if held is not None else None, out, depth + 1)
    else:
        raise NotData(f"a {kind.__name__}")


def _container(value: Any, out: list[bytes], depth: int, base: type | None = None) -> None:
    base = base or type(value)
    if base is dict:
        items = []
        for k, v in value.items():
            key: list[bytes] = []
            encode(k, key, depth)
            item = key.copy()
            encode(v, item, depth)
            items.append((b"".join(key), b"".join(item)))
        items.sort()  # key order does not matter (the keys' encodings are distinct)
        out.append(b"d" + _count(len(items)))
        out.extend(item for _, item in items)
        return
    out.append((b"l" if base is list else b"t") + _count(len(value)))
    for v in value:
        encode(v, out, depth)


def _attributes(value: Any, out: list[bytes], depth: int, skip: Any, own: Any = None) -> None:
    """Everything the instance holds: its `__dict__` and its slots, by name."""
    held: dict[str, Any] = {}
    if own is None:
        own = getattr(value, "__dict__", None)
        if own is not None and not isinstance(own, dict):
            raise NotData("an instance __dict__ that is not a dict")
    if own:
        held.update(own)
    for at, cls in enumerate(type(value).__mro__):
        for name, member in vars(cls).items():
            if type(member) is types.MemberDescriptorType and name not in skip:
                try:
                    # By its place in the MRO: two classes there may share a
                    # qualified name (and a slot's name), never a place.
                    held[f"{at}:{cls.__qualname__}.{name}"] = member.__get__(value, cls)
                except AttributeError:  # a slot never set
                    continue
    for k in held:
        if type(k) is not str:
            raise NotData("an attribute name that is not a str")
    encode(held, out, depth)


def _tz(tz: datetime.tzinfo | None) -> str:
    if tz is None:
        return ""
    if type(tz) is datetime.timezone:
        return repr(tz)
    if type(tz) is zoneinfo.ZoneInfo and tz.key is not None:
        return f"zoneinfo:{tz.key}"
    raise NotData(f"a tzinfo {type(tz).__name__}")


_LEAVES: dict[type, Any] = {
    datetime.date: lambda v: v.isoformat(),
    datetime.datetime: lambda v: f"{v.isoformat()}|{v.fold}|{_tz(v.tzinfo)}",
    datetime.time: lambda v: f"{v.isoformat()}|{v.fold}|{_tz(v.tzinfo)}",
    datetime.timedelta: lambda v: f"{v.days},{v.seconds},{v.microseconds}",
    uuid.UUID: lambda v: v.hex,
    decimal.Decimal: str,
}


def _int(value: int) -> bytes:
    # Hex: no limit on its digits (decimal refuses past 4300 of them).
    return _sized(format(value, "x").encode())


def _sized(data: bytes) -> bytes:
    return _count(len(data)) + data


def _count(n: int) -> bytes:
    return b"%d:" % n


def _type(kind: type) -> bytes:
    """A class's tag: its module and qualified name, the same in every process,
    when that name reaches it; else (a class made in a function, a class its
    name no longer reaches) that and a number of its own in this process too."""
    name = _sized(f"{kind.__module__}.{kind.__qualname__}".encode("utf-8", "surrogatepass"))
    if _reached(kind):
        return b"n" + name
    return b"u" + name + _count(_unnamed(kind))


def _reached(kind: type) -> bool:
    """Whether `kind` is what its module's attribute of its qualified name is:
    a class no other can share its name with (while that holds)."""
    module = sys.modules.get(kind.__module__)
    if module is None or "<locals>" in kind.__qualname__:
        return False
    found: Any = module
    for part in kind.__qualname__.split("."):
        # Read from each one's own __dict__: no module __getattr__ (a lazy
        # import) or descriptor is run to find it.
        space = getattr(found, "__dict__", None)
        if not isinstance(space, dict | types.MappingProxyType):
            return False
        found = space.get(part)
        if found is None:
            return False
    return found is kind


# The classes no name reaches, each with a number no other class gets in this
# process (never an address, which a class made after this one is freed may
# reuse). By identity: a metaclass's `__eq__` may call two classes equal.
_UNNAMED: dict[int, tuple[weakref.ref[type], int]] = {}
_NUMBERS = itertools.count(1)
_UNNAMED_LOCK = threading.Lock()


def _unnamed(kind: type) -> int:
    with _UNNAMED_LOCK:
        held = _UNNAMED.get(id(kind))
        if held is not None and held[0]() is kind:
            return held[1]
        number = next(_NUMBERS)
        _UNNAMED[id(kind)] = (weakref.ref(kind, functools.partial(_forget, id(kind))), number)
        return number


def _forget(key: int, ref: weakref.ref[type]) -> None:
    """A numbered class was freed: its entry goes (unlocked: called by the
    collector, maybe inside `_unnamed` itself; its id is not reused yet)."""
    held = _UNNAMED.get(key)
    if held is not None and held[0] is ref:
        del _UNNAMED[key]


def _is_pydantic(value: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(value, BaseModel)
