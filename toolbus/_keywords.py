"""Keyword options written once, as a TypedDict, and refused as Python refuses others.

A function that takes `**options: Unpack[SomeOptions]` lists its options once
(the TypedDict), for type checkers and readers; at run time any keyword would
get in. `keywords_of(SomeOptions)` is the set it takes, and `refuse_unknown`
raises, for one it does not, the `TypeError` Python raises for a function
whose parameters are written out: "f() got an unexpected keyword argument 'x'".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["keywords_of", "refuse_unknown"]


def keywords_of(typed_dict: Any) -> frozenset[str]:
    """The keys of a TypedDict class (its bases' included)."""
    return frozenset(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


def refuse_unknown(options: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    """TypeError, as Python words it for the function `where`, for the first
    of `options` not in `allowed`."""
    for key in options:
        if key not in allowed:
            raise TypeError(f"{where}() got an unexpected keyword argument {key!r}")
