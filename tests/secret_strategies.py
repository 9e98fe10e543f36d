"""Hypothesis strategies shared by the secret property tests."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

# Marked so that a generated secret can never be a word toolbus itself prints
# (hypothesis did find "timeouts", a stats field, when secrets were bare words).
secrets = st.text(string.ascii_letters + string.digits, min_size=6, max_size=22).map(
    lambda s: f"Zq{s}"
)


def nest(value: dict[str, Any], shape: list[str]) -> Any:
    """`value` wrapped in dicts and lists, outermost last, as `shape` says."""
    for kind in shape:
        value = {"inner": value} if kind == "dict" else [value, "filler"]
    return value
