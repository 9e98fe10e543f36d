"""Normalising what a tool returns into a JSON-able output."""

from __future__ import annotations

import math
from typing import Any

import orjson
from pydantic import BaseModel

from . import _json
from .models import Attachment, ToolOutput

__all__ = ["OutputError", "normalize_output"]

_SCALARS = (str, int, float, bool, type(None))
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


class OutputError(TypeError):
    """A tool returned something that cannot be handed to a model."""


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return list(value)
    raise TypeError(f"type {type(value).__name__} is not JSON serializable")


def _json_value(value: Any) -> Any:
    if isinstance(value, _SCALARS) and not (isinstance(value, float) and not math.isfinite(value)):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return _json.loads(_json.dumps(value, default=_default, option=_OPTS))
    except (TypeError, orjson.JSONEncodeError) as e:
        error: Exception = e
    if _json.SURROGATES in str(error):
        # A lone surrogate (a file name decoded with `surrogateescape`): kept,
        # as in a text output; each surface that writes it out makes it U+FFFD.
        # Only here, after orjson refused it, so other outputs pay nothing.
        try:
            return _json.reread(value, default=_default, option=_OPTS)
        except (TypeError, ValueError, RecursionError) as e:
            error = e
    raise OutputError(f"tool returned a value that is not JSON-serializable: {error}") from None


def normalize_output(value: Any) -> tuple[Any, tuple[Attachment, ...], dict[str, Any]]:
    """Return `(output, attachments, metadata)` for a tool's return value.

    Accepts any JSON-able value (dataclasses, datetimes and pydantic models
    included) or a `ToolOutput`; raises `OutputError` for anything else.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # (most tools)
        return value, (), {}
    if isinstance(value, ToolOutput):
        return _json_value(value.content), value.attachments, _json_value(value.metadata)
    return _json_value(value), (), {}
