"""Masking of arguments and scrubbing of everything toolbus publishes.

Masking replaces the values under secret-looking keys, at any depth. Every value
masking hides is remembered by a `Scrubber`, which removes it from free text
(error messages, log records, outputs) so that a secret that leaks through an
exception message never reaches an event, a log or the model.

Pure functions, no threads: unit-tested on their own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MASK",
    "SECRET_KEY_WORDS",
    "Scrubber",
    "hidden_values",
    "is_secret_key",
    "mask_arguments",
]

MASK = "***"

SECRET_KEY_WORDS: tuple[str, ...] = (
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "authorization",
    "bearer",
    "cookie",
    "credential",
    "privatekey",
)

# Keys are compared without case, dashes or underscores, so "X-Api-Key",
# "api_key" and "APIKEY" are the same key.
_normalize = re.compile(r"[-_\s]")

# Shorter values are masked in arguments but not scrubbed from free text: erasing
# every "id" or "1" from an error message would make it unreadable, and a one-
# to three-character value is not a credential.
MIN_SCRUB_LENGTH = 4

# Concrete types first: isinstance against an ABC alone takes a slow path.
_MAPPINGS = (dict, Mapping)
_SEQUENCES = (list, tuple)


def is_secret_key(key: object) -> bool:
    """True if a value under this key must never be published."""
    if not isinstance(key, str):
        return False
    return _is_secret_name(key)


@functools.lru_cache(maxsize=4096)
def _is_secret_name(key: str) -> bool:
    # Cached: the same few argument names come back on every call.
    k = _normalize.sub("", key).lower()
    return any(word in k for word in SECRET_KEY_WORDS)


def mask_arguments(arguments: Any) -> tuple[Any, list[str]]:
    """Return `(masked, hidden values)` for JSON-like arguments.

    `masked` is a copy with secrets hidden, or `arguments` itself when there is
    nothing to hide. The hidden values are the text forms of every leaf under a
    secret key.
    """
    if not _has_secret(arguments):
        return arguments, []
    hidden: list[str] = []
    return _mask(arguments, hidden), hidden


def _has_secret(value: Any) -> bool:
    if isinstance(value, _MAPPINGS):
        for k, v in value.items():  # noqa: SIM110 - a loop beats any(genexpr) on the hot path
            if (is_secret_key(k) and v is not None) or _has_secret(v):
                return True
        return False
    if isinstance(value, _SEQUENCES):
        return any(_has_secret(v) for v in value)
    return False


def _mask(value: Any, hidden: list[str]) -> Any:
    if isinstance(value, _MAPPINGS):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if is_secret_key(k) and v is not None:
                _collect(v, hidden)
                out[k] = MASK
            else:
                out[k] = _mask(v, hidden)
        return out
    if isinstance(value, _SEQUENCES):
        return [_mask(v, hidden) for v in value]
    return value


def _collect(value: Any, hidden: list[str]) -> None:
    if isinstance(value, _MAPPINGS):
        for v in value.values():
            _collect(v, hidden)
    elif isinstance(value, _SEQUENCES):
        for v in value:
            _collect(v, hidden)
    elif value is not None and not isinstance(value, bool):
        hidden.append(str(value))


def hidden_values(raw: Any, masked: Any) -> list[str]:
    """The leaves of `raw` that `masked` does not show as they are.

    This is how a user-supplied masker, which only returns a masked copy, still
    tells the scrubber what it hid.
    """
    hidden: list[str] = []
    _diff(raw, masked, hidden)
    return hidden


def _diff(raw: Any, masked: Any, hidden: list[str]) -> None:
    if isinstance(raw, _MAPPINGS):
        if not isinstance(masked, Mapping):
            _collect(raw, hidden)
            return
        for k, v in raw.items():
            if k in masked:
                _diff(v, masked[k], hidden)
            else:
                _collect(v, hidden)
    elif isinstance(raw, _SEQUENCES):
        if not isinstance(masked, _SEQUENCES) or len(masked) != len(raw):
            _collect(raw, hidden)
            return
        for r, m in zip(raw, masked, strict=True):
            _diff(r, m, hidden)
    elif raw != masked and raw is not None and not isinstance(raw, bool):
        hidden.append(str(raw))


class Scrubber:
    """Removes a fixed set of secret values from text and JSON-like values.

    An empty scrubber is falsy and costs nothing to apply.
    """

    __slots__ = ("_pattern", "_values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        uniq = sorted({v for v in values if len(v) >= MIN_SCRUB_LENGTH}, key=len, reverse=True)
        self._values: tuple[str, ...] = tuple(uniq)
        # Longest first so a secret that contains another is replaced whole.
        self._pattern = re.compile("|".join(map(re.escape, uniq))) if uniq else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    @property
    def values(self) -> tuple[str, ...]:
        return self._values

    def merged(self, other: Scrubber) -> Scrubber:
        if not other:
            return self
        if not self:
            return other
        return Scrubber(self._values + other._values)

    def text(self, text: str) -> str:
        """`text` with every secret value replaced by the mask."""
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secrets removed from every string."""
        if self._pattern is None:
            return value
        return self._value(value)

    def _value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, _MAPPINGS):
            return {
                (self.text(k) if isinstance(k, str) else k): self._value(v)
                for k, v in value.items()
            }
        if isinstance(value, _SEQUENCES):
            return [self._value(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            text = str(value)
            return MASK if text in self._values else value
        return value


EMPTY_SCRUBBER = Scrubber()
