"""A content scanner's options, checked when it is made: a bad one is a
clear `TypeError` or `ValueError` then, never a surprise on a call."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ._actions import ACTIONS
from ._rules import Rule

__all__ = ["allow_patterns", "check_options"]


def check_options(
    default: object,
    rules: object,
    engine: object,
    secret: object,
    to_model: object,
    builtin: object = True,
) -> None:
    if default not in ACTIONS:
        raise ValueError(f"ContentScanner: default must be one of {ACTIONS}, got {default!r}")
    if not isinstance(rules, Sequence) or isinstance(rules, str):
        raise TypeError("ContentScanner: rules must be a list of Rule")
    for r in rules:
        if not isinstance(r, Rule):
            raise TypeError(f"ContentScanner: rules must hold Rule, got {type(r).__name__}")
    if engine not in ("auto", "hyperscan", "re"):
        raise ValueError(f"ContentScanner: engine must be auto, hyperscan or re, got {engine!r}")
    if secret is not None and not isinstance(secret, bytes):
        raise TypeError(f"ContentScanner: secret must be bytes, got {type(secret).__name__}")
    if secret is not None and len(secret) < 16:
        # An HMAC under a short key is a tag anyone can make for a guess.
        raise ValueError("ContentScanner: secret must be at least 16 bytes (random ones)")
    if not isinstance(builtin, bool):
        raise TypeError(f"ContentScanner: builtin must be True or False, got {builtin!r}")
    if not isinstance(to_model, bool):
        raise TypeError(f"ContentScanner: to_model must be True or False, got {to_model!r}")


def allow_patterns(allow: Iterable[str]) -> list[re.Pattern[str]]:
    """`allow`, compiled: a list of patterns (strings) that compile."""
    if isinstance(allow, str | bytes) or not isinstance(allow, Iterable):
        raise TypeError("ContentScanner: allow must be a list of patterns")
    out = list(allow)
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"ContentScanner: allow must hold strings, got {type(v).__name__}")
    try:
        return [re.compile(a) for a in out]
    except re.error as e:
        raise ValueError(f"ContentScanner: an allow pattern does not compile: {e}") from None
