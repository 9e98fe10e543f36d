"""JSON in and out with orjson's speed and Python's exact integers.

orjson handles integers of at most 64 bits: it reads a longer one as a float
(silently losing digits), refuses to read one past a double's range (10**400:
"number is infinity") and refuses to write one. A model may send, and a tool
may return, any integer, so both directions fall back to the standard `json`
module, and only when needed: `loads` when the text has a run of 19 or more
digits (the shortest integer orjson might get wrong) or orjson refused a
number as infinite, `dumps` when orjson reports an integer out of range. Every
other text or value takes the orjson path unchanged.

A lone surrogate, which orjson refuses (no UTF-8 holds it), takes the same
kind of fallback, again only once orjson has refused: `reread` (a tool's
output kept as it is), `dumps_surrogatepass`/`loads_surrogatepass` (toolbus's
own wire, exact). One piece, about 550 lines: every fallback writes
what orjson would through the one `_Prepare`.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
import re
import sys
import uuid
from collections.abc import Callable
from typing import Any

import orjson

__all__ = [
    "MAX_DEPTH",
    "SURROGATES",
    "JSONDecodeError",
    "canonical",
    "detached",
    "dumps",
    "dumps_surrogatepass",
    "loads",
    "loads_surrogatepass",
    "reread",
]

JSONDecodeError = orjson.JSONDecodeError

_LONG_DIGITS = re.compile(r"\d{19,}")
_LONG_DIGITS_BYTES = re.compile(rb"\d{19,}")


def loads(data: str | bytes) -> Any:
    """Parse JSON text; integers of any size come back exact.

    Accepts what orjson accepts (strict JSON, valid UTF-8, no NaN), and an
    integer past a double's range, which it refuses; raises its
    `JSONDecodeError` otherwise.
    """
    return _read(data, exact=True)


def _read(data: str | bytes, *, exact: bool) -> Any:
    """`loads`; without `exact`, an integer past a double's range is refused,
    as orjson refuses it (`canonical`'s keys)."""
    try:
        value = orjson.loads(data)
    except JSONDecodeError as e:
        if not exact or not str(e).startswith(_INFINITE):
            raise
        return _exact(data, e)
    if len(data) < 19:
        return value
    if isinstance(data, bytes):
        long_digits = _LONG_DIGITS_BYTES.search(data) is not None
    else:
        long_digits = _LONG_DIGITS.search(data) is not None
    # orjson has validated the text, so the stdlib parser, which is laxer
    # (NaN, lone surrogates), only ever re-reads valid JSON here.
    return json.loads(data) if long_digits else value


# What orjson says of a number past a double's range (10**400, which `dumps` writes; 1e400).
_INFINITE = "number is infinity"


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number is infinity when parsed as double")
    return value


def _int(text: str) -> int:
    """An integer's digits as the integer, however many (`int()` refuses more
    than `sys.get_int_max_str_digits()`; a `Decimal` has no such limit)."""
    if len(text) <= 4000:
        return int(text)
    return int(decimal.Decimal(text))


def _stdlib(text: str | bytes) -> Any:
    """The stdlib's reading of a JSON text, strict as orjson (no NaN, no
    infinite float), any integer exact."""
    return json.loads(text, parse_float=_finite, parse_int=_int, parse_constant=_no_constant)


def _exact(data: str | bytes, refused: JSONDecodeError) -> Any:
    """A text orjson refused for a number past a double's range, read by the
    stdlib: such an integer exact; such a float, NaN and the infinities still
    refused, as is anything else orjson would refuse that the stdlib reads (a
    lone surrogate's escape: `_has_surrogate`), with orjson's reason."""
    try:
        value = _stdlib(data)
    except (ValueError, RecursionError):
        raise _reason(data, refused) from None
    if _has_surrogate(value):
        raise _reason(data, refused)
    return value


# A whole integer token of 19 or more digits (in a string too: harmless, see `_reason`).
_INT_TOKEN = re.compile(r"(?<![\w.+-])(-?)([0-9]{19,})(?![\w.])")
_INT_TOKEN_BYTES = re.compile(rb"(?<![\w.+-])(-?)([0-9]{19,})(?![\w.])")


def _reason(data: str | bytes, refused: JSONDecodeError) -> JSONDecodeError:
    """Why orjson refuses `data` but for its long integers: each read as 0
    padded with spaces to its length (the same positions; in a string, still
    a string), so a NaN or a bad escape after `10**400` is named, not the
    integer. `refused` if that reads (the integers were all it refused)."""
    if isinstance(data, bytes):
        plain: str | bytes = _INT_TOKEN_BYTES.sub(
            lambda m: m[1] + b"0" + b" " * (len(m[2]) - 1), data
        )
    else:
        plain = _INT_TOKEN.sub(lambda m: m[1] + "0" + " " * (len(m[2]) - 1), data)
    try:
        orjson.loads(plain)
    except JSONDecodeError as e:
        return e
    return refused


def _has_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if not v.isascii() and _SURROGATE.search(v) is not None:
                return True
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical(arguments: Any) -> bytes:
    """A call's arguments as canonical JSON (sorted keys), for keys and digests:
    a JSON text is parsed first, so spacing and key order do not matter; text
    that is not JSON comes back as it is, and what JSON cannot hold as its repr.

    Distinct arguments give distinct bytes. Plain JSON cannot tell NaN or an
    infinity from null (orjson writes all three as null), nor `{1: x}` from
    `{"1": x}`: arguments holding those (only a Python caller can give them,
    never a JSON text) get a tagged encoding of their own (`_tagged`), which
    no other arguments share. Everything else is written exactly as before, so
    the idempotency keys a journal holds stay valid."""
    value: Any = arguments
    if isinstance(arguments, str):
        try:
            # An integer past a double's range refused, as it always was: the
            # text's bytes are its key (`loads` reads it now, `repr` would move it).
            value = _read(arguments, exact=False)
        except (ValueError, TypeError):
            return arguments.encode("utf-8", "surrogatepass")
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # A key that is not a string; or else an integer beyond 64 bits, or a
        # type orjson cannot write, written as their repr (as they always were).
        if _has_non_str_key(value):
            try:
                return _tagged(value)
            except (TypeError, ValueError, RecursionError):
                pass
        return _repr(arguments)
    # NaN and the infinities come out as null: only then is a look needed.
    if b"null" in data and _has_non_finite(value):
        try:
            return _tagged(value)
        except (TypeError, ValueError, RecursionError):
            return _repr(arguments)
    return data


def _repr(value: Any) -> bytes:
    """`repr(value)` in UTF-8 (lone surrogates kept): `canonical`'s bytes for
    what JSON cannot hold. `repr` refuses an integer past Python's digit limit
    (`sys.get_int_max_str_digits()`): inside dicts, lists, tuples and sets such
    an integer is written whole, as `repr` would without the limit (so distinct
    values still differ, and no key `repr` made moves). Inside another object
    it is a TypeError, saying so, rather than a key shared by distinct values."""
    try:
        text = repr(value)
    except ValueError:
        text = _whole(value, 0)
    return text.encode("utf-8", "surrogatepass")


def _whole(v: Any, depth: int) -> str:
    if depth > MAX_DEPTH:
        raise TypeError("arguments nested too deep to key")
    kind = type(v)
    if kind is int and _too_long_for_str(v):
        return format(decimal.Decimal(v), "f")
    if kind is dict:
        inner = ", ".join(f"{_whole(k, depth + 1)}: {_whole(x, depth + 1)}" for k, x in v.items())
        return "{" + inner + "}"
    if kind is list:
        return "[" + ", ".join(_whole(x, depth + 1) for x in v) + "]"
    if kind is tuple:
        inner = ", ".join(_whole(x, depth + 1) for x in v)
        return "(" + inner + ("," if len(v) == 1 else "") + ")"
    if kind is set or kind is frozenset:
        # (In `repr`'s order, the set's own: the same as `repr` would give.)
        inner = ", ".join(_whole(x, depth + 1) for x in v)
        if kind is frozenset:
            return "frozenset({" + inner + "})" if v else "frozenset()"
        return "{" + inner + "}" if v else "set()"
    try:
        return repr(v)
    except ValueError:
        raise TypeError(
            f"a {type(v).__name__} among the arguments holds an integer of more than "
            f"{sys.get_int_max_str_digits()} digits: it cannot be keyed (pass it as JSON "
            "text, or as a plain int)"
        ) from None


# Starts every tagged encoding: 0xFF is never in UTF-8, so never in JSON text,
# a text argument (even with lone surrogates, "surrogatepass"), or a repr.
_TAGGED = b"\xff"


def _children(value: Any) -> Any:
    if isinstance(value, dict):
        return value.values()
    if isinstance(value, list | tuple):
        return value
    return ()


def _has_non_str_key(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict) and any(not isinstance(k, str) for k in v):
            return True
        stack.extend(_children(v))
    return False


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return True
        stack.extend(_children(v))
    return False


def _tagged(value: Any) -> bytes:
    """`value` in an encoding with no collisions, for the arguments plain JSON
    would confuse: every string is written with a leading "'", every float that
    is not finite as "#nan", "#inf" or "#-inf", and a dict as an object whose
    keys are the encodings of its keys (so 1 and "1" stay apart)."""
    return _TAGGED + dumps(_tag(value, 0), option=orjson.OPT_SORT_KEYS)


def _tag(v: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError("too deep")
    if v is None or isinstance(v, bool | int):
        return v
    if isinstance(v, str):
        return "'" + v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return "#nan" if math.isnan(v) else "#inf" if v > 0 else "#-inf"
    if isinstance(v, dict):
        return {
            dumps(_tag(k, depth + 1), option=orjson.OPT_SORT_KEYS).decode(): _tag(x, depth + 1)
            for k, x in v.items()
        }
    if isinstance(v, list | tuple):
        return [_tag(x, depth + 1) for x in v]
    native = _native(v, 0)
    if native is _NOT_NATIVE:
        raise TypeError(f"Type is not JSON serializable: {type(v).__name__}")
    return _tag(native, depth + 1)


def dumps(
    value: Any, *, default: Callable[[Any], Any] | None = None, option: int | None = None
) -> bytes:
    """`orjson.dumps(value, default=default, option=option)`, with integers
    beyond 64 bits written exactly instead of raising.

    The fallback (only for values holding such an integer) writes what orjson
    would: compact or indented (`OPT_INDENT_2`), UTF-8, NaN and infinities as
    null, dataclasses, datetimes, enums and UUIDs as orjson does, non-string
    keys only with `OPT_NON_STR_KEYS`. Raises `TypeError` (orjson's
    `JSONEncodeError`) for what cannot be written.
    """
    try:
        return orjson.dumps(value, default=default, option=option)
    except orjson.JSONEncodeError as e:
        if "Integer exceeds" not in str(e):
            raise
    try:
        return _stdlib_text(value, default, option or 0).encode()
    except UnicodeEncodeError:
        # A lone surrogate beside the long integer: what orjson raises for
        # it, so callers that catch TypeError (and read why) see the same.
        raise orjson.JSONEncodeError(SURROGATES) from None


def _stdlib_text(value: Any, default: Callable[[Any], Any] | None, options: int) -> str:
    """`value` as orjson would write it, through the stdlib: any integer, and
    a lone surrogate kept as the character itself (the caller encodes)."""
    indented = bool(options & orjson.OPT_INDENT_2)
    layout: dict[str, Any] = {
        "ensure_ascii": False,
        "allow_nan": False,
        "indent": 2 if indented else None,
        "separators": (",", ": ") if indented else (",", ":"),
    }
    try:
        # Integers as they are (the quicker walk: `_Prepare.items`), unless
        # one is too long for `str()` (ValueError): then a placeholder each.
        return json.dumps(_Prepare(default, options, None).value(value, 0), **layout)
    except ValueError:
        pass
    prep = _Prepare(default, options, {})
    text = json.dumps(prep.value(value, 0), **layout)
    for token, digits in (prep.huge or {}).items():
        text = text.replace(json.dumps(token), digits, 1)
    return text


SURROGATES = "str is not valid UTF-8: surrogates not allowed"
"""What orjson says (in its `JSONEncodeError`) of a lone surrogate it cannot write."""


def reread(
    value: Any, *, default: Callable[[Any], Any] | None = None, option: int | None = None
) -> Any:
    """`loads(dumps(value, default=default, option=option))`, but a lone
    surrogate (in a string or a key), which no UTF-8 JSON can hold, is kept
    as it is: for a value that holds one, where that round trip raises.

    No JSON text is made: the value is rebuilt as the round trip would give
    it (plain types, integers exact, NaN as None, orjson's depth limit), so
    every string comes back exactly, two surrogates that would form a pair
    still two. Raises `TypeError` for what cannot be written."""
    return _Prepare(default, option or 0, None).value(value, 0)


def dumps_surrogatepass(
    value: Any, *, default: Callable[[Any], Any] | None = None, option: int | None = None
) -> bytes:
    """`dumps`, but a lone surrogate is written as it is, in the bytes UTF-8
    would give it (`surrogatepass`), where `dumps` raises: not JSON any other
    reader takes, only `loads_surrogatepass` (toolbus's own wire, which must
    bring every string back exactly: a secret echoed by a tool is masked by
    equality). A value without one is `dumps`'s bytes."""
    try:
        return dumps(value, default=default, option=option)
    except orjson.JSONEncodeError as e:
        if SURROGATES not in str(e):
            raise
    return _stdlib_text(value, default, option or 0).encode("utf-8", "surrogatepass")


def loads_surrogatepass(data: bytes) -> Any:
    """`loads`, but it also reads what `dumps_surrogatepass` wrote: lone
    surrogates, each string exactly as written. Raises `ValueError` for
    anything else that is not JSON (as `loads` does), NaN too."""
    try:
        return loads(data)
    except JSONDecodeError as e:
        error: ValueError = e
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise error from None
    if text.isascii() or _SURROGATE.search(text) is None:
        raise error  # not what dumps_surrogatepass writes: orjson said why
    try:
        # Raw characters, never escapes: the stdlib would join an escaped
        # pair into one character.
        return _stdlib(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_long_for_str(n: int) -> bool:
    """Whether `str(n)` would raise: more digits than `sys.get_int_max_str_digits()`
    allows (0: no limit). Asked with a margin (3.3 bits a digit, against
    log2(10) ≈ 3.32): one just under the limit is written exactly either way."""
    limit = sys.get_int_max_str_digits()
    return limit != 0 and n.bit_length() > 3.3 * limit


MAX_DEPTH = 254
"""orjson's own recursion limit: the most levels of objects and arrays it writes."""


@dataclasses.dataclass(slots=True)
class _Prepare:
    """Turns a value into plain JSON types the way orjson would write it."""

    default: Callable[[Any], Any] | None
    options: int
    # Integers too long for `str()`: a placeholder each, by its exact digits
    # (a `Decimal`, which writes them without that limit). None: no JSON text
    # is made (`reread`), so integers stay as they are, and subclasses of
    # str, int and float become the plain type, as a JSON round trip makes them.
    huge: dict[str, str] | None

    def value(self, v: Any, depth: int) -> Any:
        # orjson counts containers: the 255th (at depth 254) is one too many, empty or not.
        if depth >= MAX_DEPTH and (depth > MAX_DEPTH or isinstance(v, dict | list)):
            raise orjson.JSONEncodeError("Recursion limit reached")
        # The exact types first: a large output is mostly these.
        kind = type(v)
        if kind is str or v is None or kind is bool:
            return v
        if kind is dict:
            return {self.key(k): self.value(x, depth + 1) for k, x in v.items()}
        if kind is list or kind is tuple:
            # (Not for sorted keys: the walk leaves them as they are, as the
            # stdlib fallback always did, and `canonical`'s bytes must not move.)
            if self.huge is None and len(v) > _RUN and not self.options & orjson.OPT_SORT_KEYS:
                return self.items(v, depth)
            return [self.value(x, depth + 1) for x in v]
        if kind is float:
            return v if math.isfinite(v) else None
        if isinstance(v, int) and not isinstance(v, bool):
            if self.huge is None:
                return int(v)
            if _too_long_for_str(v):
                token = f"\x00toolbus-int-{id(self)}-{len(self.huge)}\x00"
                self.huge[token] = format(decimal.Decimal(v), "f")
                return token
            return v
        if isinstance(v, str):
            return v if self.huge is not None else str.__str__(v)
        if isinstance(v, float):
            return (float(v) if self.huge is None else v) if math.isfinite(v) else None
        if isinstance(v, dict):
            return {self.key(k): self.value(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [self.value(x, depth + 1) for x in v]
        native = _native(v, self.options)
        if native is not _NOT_NATIVE:
            return self.value(native, depth + 1)
        if self.default is None:
            raise orjson.JSONEncodeError(f"Type is not JSON serializable: {type(v).__name__}")
        return self.value(self.default(v), depth + 1)

    def items(self, v: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
        """`reread` of a long list: each run of items orjson writes (a lone
        surrogate is what it refuses, in one item of many) read back from
        its JSON, as the round trip would, in one C pass; the rest walked."""
        out: list[Any] = []
        spans = [(0, len(v))]
        while spans:
            lo, hi = spans.pop()
            if hi - lo <= _RUN:
                out.extend(self.value(x, depth + 1) for x in v[lo:hi])
                continue
            # Inside as many lists as `v` is deep: orjson's depth limit, for
            # the run, is then the whole value's.
            wrapped: Any = v[lo:hi]
            for _ in range(depth):
                wrapped = [wrapped]
            try:
                back = loads(orjson.dumps(wrapped, default=self.default, option=self.options))
            except TypeError:
                mid = (lo + hi) // 2
                spans += ((mid, hi), (lo, mid))  # (the first half popped first)
                continue
            for _ in range(depth):
                back = back[0]
            out.extend(back)
        return out

    def key(self, k: Any) -> str:
        if type(k) is str:
            return k
        if isinstance(k, str):
            return k if self.huge is not None else str.__str__(k)
        if not self.options & orjson.OPT_NON_STR_KEYS:
            raise orjson.JSONEncodeError("Dict key must be str")
        if k is None or isinstance(k, bool):
            return json.dumps(k)
        if isinstance(k, int):
            return str(k)
        if isinstance(k, float):
            return json.dumps(k) if math.isfinite(k) else "null"
        native = _native(k, self.options)
        if isinstance(native, str | int | float):
            return self.key(native)
        raise orjson.JSONEncodeError("Dict key must be a type serializable with OPT_NON_STR_KEYS")


# `_Prepare.items`: the shortest run of items tried with orjson as a whole.
_RUN = 256

_NOT_NATIVE = object()


def _native(v: Any, options: int) -> Any:
    """What orjson writes for a type it knows without `default`."""
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, datetime.datetime | datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
    if options & orjson.OPT_SERIALIZE_NUMPY and hasattr(v, "tolist") and hasattr(v, "dtype"):
        return v.tolist()
    return _NOT_NATIVE


def detached(value: Any) -> Any:
    """`value` with its dicts, lists and tuples copied (subclasses as the
    plain kind), so that what is published later (events are built and
    delivered on other threads) shows it as it was now, whatever its owner
    changes in it meanwhile (a tool that fills in its own arguments). Each
    container is copied once: a structure that shares one, or holds itself,
    keeps that shape. Other objects are shared, and so is what lies deeper
    than 200 levels."""
    if type(value) is dict:
        # A loop, not all(genexpr): this runs for every call's arguments.
        for v in value.values():
            if type(v) not in _LEAVES:
                break
        else:
            return dict(value)  # the usual arguments: flat
    if not isinstance(value, dict | list | tuple):
        return value
    return _detached(value, {}, 0)


_LEAVES = frozenset({str, int, float, bool, type(None)})


def _detached(value: Any, copies: dict[int, Any], depth: int) -> Any:
    if depth > 200 or not isinstance(value, dict | list | tuple):
        return value
    depth += 1
    made = copies.get(id(value))
    if made is not None:
        return made
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        copies[id(value)] = out
        for k, v in list(value.items()):
            out[k] = _detached(v, copies, depth)
        return out
    if isinstance(value, list):
        items: list[Any] = []
        copies[id(value)] = items
        items.extend(_detached(v, copies, depth) for v in list(value))
        return items
    made = copies[id(value)] = tuple(_detached(v, copies, depth) for v in value)
    return made
