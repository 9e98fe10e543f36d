"""Validation of numeric options, in one place and one wording.

Tools, retry policies and executors check their numbers here when they are
made, so that a bad value is an error naming its owner and option at
registration, never a lost call later (a string timeout used to reach the
supervisor's timer and break it). Pure functions, no state.

Every check rejects `bool` (an `int` to Python, never meant as a count or a
duration), non-numbers (`"4"` included) and NaN. Numbers keep their type when
they are `int` or `float`, so messages show them as the caller wrote them; other
real numbers (a `Fraction`, a NumPy scalar) become `float`, other integers `int`.
"""

from __future__ import annotations

import math
import numbers

__all__ = [
    "non_negative_int",
    "non_negative_number",
    "positive_int",
    "positive_number",
    "timeout_seconds",
]


def _where(option: str, owner: str) -> str:
    return f"{owner}: {option}" if owner else option


def _real(value: object, option: str, owner: str, kind: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{_where(option, owner)} must be {kind}, got {type(value).__name__} {value!r}"
        )
    number = value if isinstance(value, int | float) else float(value)
    if math.isnan(number):
        raise ValueError(f"{_where(option, owner)} must be {kind}, got NaN")
    return number


def _integer(value: object, option: str, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{_where(option, owner)} must be an integer, got {type(value).__name__} {value!r}"
        )
    return int(value)


def positive_number(value: object, option: str, owner: str = "") -> float:
    """`value` if it is a finite number > 0; else `TypeError` / `ValueError`
    naming `owner` and `option`."""
    number = _real(value, option, owner, "a number")
    if not 0 < number < math.inf:
        raise ValueError(f"{_where(option, owner)} must be > 0 and finite, got {value!r}")
    return number


def non_negative_number(value: object, option: str, owner: str = "") -> float:
    """`value` if it is a finite number >= 0; else `TypeError` / `ValueError`."""
    number = _real(value, option, owner, "a number")
    if not 0 <= number < math.inf:
        raise ValueError(f"{_where(option, owner)} must be >= 0 and finite, got {value!r}")
    return number


def timeout_seconds(value: object, option: str, owner: str = "") -> float | None:
    """A timeout: None, `math.inf` (both: no deadline, returned as they are) or
    a number > 0; else `TypeError` / `ValueError` naming `owner` and `option`."""
    if value is None:
        return None
    number = _real(value, option, owner, "a number of seconds (or None for no deadline)")
    if not number > 0:
        raise ValueError(
            f"{_where(option, owner)} must be > 0 (or None for no deadline), got {value!r}"
        )
    return number


def positive_int(value: object, option: str, owner: str = "") -> int:
    """`value` if it is an integer >= 1; else `TypeError` / `ValueError`."""
    number = _integer(value, option, owner)
    if number < 1:
        raise ValueError(f"{_where(option, owner)} must be >= 1, got {value!r}")
    return number


def non_negative_int(value: object, option: str, owner: str = "") -> int:
    """`value` if it is an integer >= 0; else `TypeError` / `ValueError`."""
    number = _integer(value, option, owner)
    if number < 0:
        raise ValueError(f"{_where(option, owner)} must be >= 0, got {value!r}")
    return number
