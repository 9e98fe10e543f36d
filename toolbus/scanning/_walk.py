"""Walking a JSON-like value: its texts gathered, then put back scanned.

The scanner does not scan a value string by string: `walk` first hands every
text in it (strings, keys, an object's `str`, a number that may be a card) to
a `Gather`, so that they are scanned together, then walks it again with a
`PutBack` that puts each text's scanned copy where the text was. Both walks
are the same function, so they meet the texts in the same order.

A string of digits under a key that names an id (`an_id`) is no text to
scan: an id that passes the Luhn check is no card number.

A walk copies only what changes: a value with nothing to replace comes back
as itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from ._values import an_id, names_a_card, names_a_pin, secret_key

__all__ = ["UNREADABLE", "UNREADABLE_TEXT", "Gather", "PutBack", "gather", "walk"]

UNREADABLE = "[REDACTED:unreadable]"
"""What stands for an object whose text cannot be read (its `str` raised)."""
UNREADABLE_TEXT = "unreadable"
"""What `on_text` is told such an object's key expects: its text is UNREADABLE."""

_MAPPINGS = (dict, Mapping)
_SEQUENCES = (list, tuple)


OnText = Callable[[str, "str | None"], "str | None"]
"""Told each text and what its key expects it to be ("password", "secret",
None: `secret_key`; UNREADABLE_TEXT: an object's text that could not be read);
returns what replaces it, or None to keep it."""


def walk(value: Any, key: object, on_text: OnText) -> Any:
    """`value` with each text replaced as `on_text` says (`key`: the key
    `value` sits under, or None)."""
    if isinstance(value, str):
        if an_id(value, key):
            return value
        new = on_text(value, secret_key(key) if isinstance(key, str) else None)
        return value if new is None else new
    if isinstance(value, _MAPPINGS):
        return _mapping(value, key, on_text)
    if isinstance(value, _SEQUENCES):
        out: list[Any] | None = None if isinstance(value, list) else []
        for i, v in enumerate(value):
            nv = walk(v, key, on_text)
            if out is None and nv is not v:
                out = list(value[:i])
            if out is not None:
                out.append(nv)
        return value if out is None else out
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float | Decimal):
        found = _number_text(value, key)
        if found is None:
            return value
        new = on_text(*found)
        return value if new is None else new
    return _object(value, on_text)


def _mapping(value: Mapping[Any, Any], key: object, on_text: OnText) -> Any:
    # Not a dict (a MappingProxy, say): published as a dict, like JSON would.
    out: dict[Any, Any] | None = None if isinstance(value, dict) else {}
    for i, (k, v) in enumerate(value.items()):
        nk: Any
        if isinstance(k, str):
            scanned = on_text(k, None)
            nk = k if scanned is None else scanned
        elif k is None or isinstance(k, bool | int | float):
            nk = k
        else:  # a tuple, bytes, an object: its text is what shows
            nk = _object(k, on_text)
        nv = walk(v, _key_of(k, v, value, key), on_text)
        if out is None and (nk is not k or nv is not v):
            out = dict(list(value.items())[:i])
        if out is not None:
            if nk is not k and (nk in out or nk in value):
                # Two keys redacted alike ("[REDACTED:email]"), or one redacted
                # like another key, keep both values.
                base, n = nk, i
                while nk in out or nk in value:
                    nk, n = f"{base} ({n})", n + 1
            out[nk] = nv
    return value if out is None else out


def _object(value: object, on_text: OnText) -> Any:
    """An object is published as it is unless its text shows something."""
    try:
        text = str(value)
    except Exception:
        on_text(UNREADABLE, UNREADABLE_TEXT)
        return UNREADABLE
    new = on_text(text, None)
    return value if new is None else new


def gather(value: Any, key: object, texts: list[str], keyed: dict[int, str]) -> None:
    """What `walk(value, key, Gather())` gathers, appended to `texts` and
    `keyed`, building nothing: the walk every scan makes, kept lean."""
    if isinstance(value, str):
        if an_id(value, key):
            return
        if isinstance(key, str) and (expected := secret_key(key)) is not None:
            keyed[len(texts)] = expected
        texts.append(value)
    elif isinstance(value, _MAPPINGS):
        for k, v in value.items():
            if isinstance(k, str):
                texts.append(k)
            elif not (k is None or isinstance(k, bool | int | float)):
                _gather_object(k, texts, keyed)
            if v is not None and v is not True and v is not False:
                gather(v, _key_of(k, v, value, key), texts, keyed)
    elif isinstance(value, _SEQUENCES):
        for v in value:
            if v is not None and v is not True and v is not False:
                gather(v, key, texts, keyed)
    elif value is None or isinstance(value, bool):
        return
    elif isinstance(value, int | float | Decimal):
        found = _number_text(value, key)
        if found is not None:
            if found[1] is not None:
                keyed[len(texts)] = found[1]
            texts.append(found[0])
    else:
        _gather_object(value, texts, keyed)


def _gather_object(value: object, texts: list[str], keyed: dict[int, str]) -> None:
    try:
        texts.append(str(value))
    except Exception:
        keyed[len(texts)] = UNREADABLE_TEXT
        texts.append(UNREADABLE)


# Where a value's key is only "value": the key it stands for is its record's
# name (`{"name": "DB_PASSWORD", "value": ...}`, a Kubernetes env entry, an
# AWS tag's Key/Value), else the key the record itself sits under (Terraform's
# `{"db_password": {"value": ...}}`).
_VALUE_KEYS = frozenset({"value", "Value", "VALUE"})
_NAME_KEYS = ("name", "Name", "key", "Key", "NAME", "KEY")


def _key_of(key: object, value: object, record: Mapping[Any, Any], outer: object) -> object:
    """The key `value`, under `key` in `record` (itself under `outer`), is
    judged by. Only a string takes its record's: a number under a bare
    `value` is a setting's, as likely as a secret's."""
    if key not in _VALUE_KEYS or not isinstance(value, str):
        return key
    for name_key in _NAME_KEYS:
        name = record.get(name_key)
        if isinstance(name, str) and secret_key(name) is not None:
            return name
    if isinstance(outer, str) and secret_key(outer) is not None:
        return outer
    return key


def _number_text(value: int | float | Decimal, key: object) -> tuple[str, str | None] | None:
    """The text of a number that counts, and what its key expects: a whole
    number of 4 to 12 digits under a key that names a password or a PIN
    (`"password": 83749261`; not a float, a score), or a card number under a
    key that names one."""
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and 1000 <= abs(value) < 10**12
        and isinstance(key, str)
        and names_a_pin(key)
    ):
        return str(value), "password"
    number = _card_number(value, key)
    return None if number is None else (number, None)


def _card_number(value: int | float | Decimal, key: object) -> str | None:
    """A number's digits, if it may be a card number: under a key that
    names a card, whole, and 13 to 19 digits long."""
    if not (isinstance(key, str) and names_a_card(key)):
        return None
    # The range first: int() of Decimal("1E+1000000") takes a minute (found by review).
    if isinstance(value, Decimal):
        if not value.is_finite() or not 12 <= value.adjusted() <= 18:
            return None
    elif isinstance(value, float) and not (10**12 <= abs(value) < 10**19):
        return None
    try:
        if value != int(value):
            return None
    except (ValueError, OverflowError):  # nan, inf
        return None
    number = int(value)
    if not 10**12 <= abs(number) < 10**19:
        return None  # too short or too long for a card number
    return str(number)


class Gather:
    """The first walk's `on_text`: keeps every text, and what the key of
    each that sits under a secret-looking one expects (by index), replacing
    none."""

    __slots__ = ("keyed", "texts")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.keyed: dict[int, str] = {}

    def __call__(self, text: str, expected: str | None) -> None:
        if expected is not None:
            self.keyed[len(self.texts)] = expected
        self.texts.append(text)


class PutBack:
    """The second walk's `on_text`: the scanned copy of each text, by the
    order the first walk met them. A text that is not the one gathered
    there (a value changed between the walks, an object whose `str` did) is
    scanned again on its own, by `rescan`."""

    __slots__ = ("_at", "_keyed", "_new", "_rescan", "_texts")

    def __init__(
        self,
        texts: list[str],
        keyed: dict[int, str],
        new: dict[int, str],
        rescan: Callable[[str, str | None], str],
    ) -> None:
        self._texts, self._keyed, self._new, self._rescan = texts, keyed, new, rescan
        self._at = 0

    def __call__(self, text: str, expected: str | None) -> str | None:
        at = self._at
        self._at = at + 1
        # The same text under a key that expects the same: a text that moved
        # under a password's key between the walks is not let by as plain.
        if at < len(self._texts) and self._texts[at] == text and self._keyed.get(at) == expected:
            return self._new.get(at)
        scanned = self._rescan(text, expected)
        return None if scanned == text else scanned
