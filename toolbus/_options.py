"""Validation of options, in one place and one wording.

Tools, retry policies and executors check their numbers here when they are
made (and tools their resource keys), so that a bad value is an error naming its owner and option at
registration, never a lost call later (a string timeout used to reach the
supervisor's timer and break it). Pure functions, no state.

Every numeric check rejects `bool` (an `int` to Python, never meant as a count or a
duration), non-numbers (`"4"` included) and NaN. Numbers keep their type when
they are `int` or `float`, so messages show them as the caller wrote them; other
real numbers (a `Fraction`, a NumPy scalar) become `float`, other integers `int`.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Collection

__all__ = [
    "check_cpu_limit",
    "check_memory_limit",
    "check_on_full",
    "check_priority",
    "check_resource_keys",
    "non_negative_int",
    "non_negative_number",
    "positive_int",
    "positive_number",
    "real_number",
    "timeout_seconds",
    "wait_seconds",
]


def _where(option: str, owner: str) -> str:
    return f"{owner}: {option}" if owner else option


def _real(value: object, option: str, owner: str, kind: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{_where(option, owner)} must be {kind}, got {type(value).__name__} {value!r}"
        )
    try:
        number = value if isinstance(value, float) else float(value)
    except OverflowError:  # an integer beyond every float: infinite, for our purposes
        number = math.inf if value > 0 else -math.inf  # type: ignore[operator]
    else:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value  # kept as given (it fits a float)
    if math.isnan(number):
        raise ValueError(f"{_where(option, owner)} must be {kind}, got NaN")
    return number


def real_number(value: object, option: str, owner: str = "") -> float:
    """`value` as a number (any real but NaN; an integer beyond every float is
    infinite); else `TypeError` / `ValueError` naming `owner` and `option`."""
    return _real(value, option, owner, "a number")


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


def own_bound(others: str) -> str:
    """What None and inf mean for a `call_timeout` that others bound too
    (`timeout_seconds(hint=...)`); `others` says which still apply."""
    return f"None or inf: no bound of its own; {others}"


def timeout_seconds(
    value: object, option: str, owner: str = "", none: str = "", *, hint: str = ""
) -> float | None:
    """A timeout: None, `math.inf` (returned as they are) or a number > 0; else
    `TypeError` / `ValueError` naming `owner` and `option`, and saying what
    None means there (`none`, such as "the executor's timeout"; "" for no
    deadline, as `math.inf` always is), or the whole `hint` of what None and
    inf mean, where they mean the same."""
    if value is None:
        return None
    if not hint:
        hint = f"inf for no deadline, None for {none}" if none else "or None for no deadline"
    number = _real(value, option, owner, f"a number of seconds ({hint})")
    if not number > 0:
        raise ValueError(f"{_where(option, owner)} must be > 0 ({hint}), got {value!r}")
    return number


def wait_seconds(value: object, option: str, owner: str = "") -> float | None:
    """How long a caller waits (a `close`, a drain): a number (one <= 0 waits
    not at all, as a deadline already past), or None or `math.inf` for no
    bound (returned as None, and so is a number longer than any wait a lock
    takes: past `threading.TIMEOUT_MAX` it raises `OverflowError`); else
    `TypeError` / `ValueError` naming `owner` and `option`."""
    if value is None:
        return None
    number = _real(value, option, owner, "a number of seconds (or None: no bound)")
    return None if number >= threading.TIMEOUT_MAX else max(0.0, number)


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


def check_priority(value: object, owner: str = "") -> int | None:
    """`priority` (`execute*(..., priority=N)`): None (not given), or any integer,
    negative included; else `TypeError`."""
    if value is None:
        return None
    return _integer(value, "priority", owner)


ON_FULL = ("reject", "wait")


def check_on_full(value: object, option: str = "on_full", owner: str = "") -> str:
    """`on_full`: what a call that finds its queue full does, "reject" or "wait"."""
    if not isinstance(value, str):
        raise TypeError(
            f'{_where(option, owner)} must be "reject" or "wait", got '
            f"{type(value).__name__} {value!r}"
        )
    if value not in ON_FULL:
        raise ValueError(f'{_where(option, owner)} must be "reject" or "wait", got {value!r}')
    return value


# What an rlimit can hold, with room: beyond these a limit is a typo, not a wish.
MEMORY_LIMIT_MB = (16, 2**40)  # below 16 MB an interpreter (or a loader) cannot start
CPU_LIMIT_S = 2**31


def check_memory_limit(value: object, owner: str = "") -> int | None:
    """`memory_limit_mb`: None, or a whole number of MB an address-space limit can hold."""
    if value is None:
        return None
    mb = positive_int(value, "memory_limit_mb", owner)
    low, high = MEMORY_LIMIT_MB
    if not low <= mb <= high:
        raise ValueError(
            f"{_where('memory_limit_mb', owner)} must be between {low} and {high} (MB), got {mb}"
        )
    return mb


def check_cpu_limit(value: object, owner: str = "") -> float | None:
    """`cpu_limit_s`: None, or seconds of CPU a limit can hold."""
    if value is None:
        return None
    seconds = positive_number(value, "cpu_limit_s", owner)
    if seconds > CPU_LIMIT_S:
        raise ValueError(
            f"{_where('cpu_limit_s', owner)} must be at most {CPU_LIMIT_S} seconds, got {value!r}"
        )
    return seconds


def check_resource_keys(
    value: object,
    owner: str,
    *,
    free_text: bool,
    known: Collection[str] | None,
    injected: Collection[str],
) -> tuple[str, ...]:
    """`resource_keys`: a tuple or list of names of parameters the model sends
    (of `known`, when the tool's schema lists them); else `ValueError`. A name
    never found in the arguments would make every call a full barrier."""
    where = _where("resource_keys", owner)
    if not isinstance(value, tuple | list):
        raise ValueError(
            f"{where} must be a tuple or list of parameter names, "
            f"got {type(value).__name__} {value!r}"
        )
    if not all(isinstance(k, str) and k for k in value):
        raise ValueError(f"{where} must be non-empty strings, got {value!r}")
    if value and free_text:
        raise ValueError(f"{where} needs named parameters; a custom tool takes free text")
    for key in value:
        if key in injected:
            raise ValueError(f"{where} names {key!r}, an injected parameter the model never sends")
        if known is not None and key not in known:
            raise ValueError(f"{where} names {key!r}, which is not one of its parameters")
    return tuple(dict.fromkeys(value))
