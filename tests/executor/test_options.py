"""The executor's options and its retry policy's settings are checked when
made: a clear `TypeError`/`ValueError` naming the option, never a call that
fails later; `timeout=math.inf` is no timeout.

Pins defects found outside the repo: strings, bools, NaN and infinities taken
as limits and delays.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import (
    Executor,
    RetryPolicy,
    ToolRegistry,
)


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        *(("max_retries", v) for v in ["1", True, -1, 1.5, math.nan]),
        *(("backoff_base", v) for v in ["1", True, -1, math.nan, math.inf]),
        *(("backoff_factor", v) for v in ["2", 0, -2, math.nan, math.inf]),
        *(("max_backoff", v) for v in ["30", -1, math.nan, math.inf]),
        *(("jitter", v) for v in ["0.1", False, -0.1, math.nan, math.inf]),
        ("retry_on", "ConnectionError"),
        ("retry_on", (ConnectionError, 3)),
        ("stop", 3),
        ("wait", "fixed"),
    ],
)
def test_retry_policy_settings_are_validated(option: str, bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=f"RetryPolicy: {option}"):
        RetryPolicy(**{option: bad})


def test_retry_policy_accepts_one_exception_class() -> None:
    assert RetryPolicy(retry_on=KeyError).retry_on == (KeyError,)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        *(("max_parallel", v) for v in ["4", True, 0, -1, 2.0, math.nan]),
        *(("timeout", v) for v in ["30", True, 0, -1, math.nan]),
        *(("hook_grace", v) for v in ["5", True, 0, -1, math.nan, math.inf]),
        *(("max_argument_bytes", v) for v in ["10", True, 0, 1.5, math.nan]),
        *(("max_abandoned_workers", v) for v in ["10", True, -1, 1.5, math.nan]),
        ("retry", 3),
        # Functions (or lists of them) where functions are asked for: else
        # every call would fail, a post-call hook's only after its tool ran.
        *(("authorize", v) for v in [5, "yes"]),
        *(("masker", v) for v in ["x", 1]),
        *(("concurrency", v) for v in [5, "8"]),
        *(("pre_call", v) for v in [[5], 5, "hook", print]),
        *(("post_call", v) for v in [[None], [print, 3], None]),
        *(("publisher", v) for v in [5, "bus", object()]),
    ],
)
def test_executor_options_are_validated(option: str, bad: Any) -> None:
    with pytest.raises((TypeError, ValueError), match=f"Executor: {option}"):
        Executor(ToolRegistry(), **{option: bad})


def test_executor_takes_an_infinite_timeout_as_none(make_executor: MakeExecutor) -> None:
    assert make_executor(ToolRegistry(), timeout=math.inf).timeout is None
    assert make_executor(ToolRegistry(), timeout=None).timeout is None


def test_executor_backends_must_be_a_mapping() -> None:
    with pytest.raises(TypeError, match=r"backends=\.\.\.\) must map backend names"):
        Executor(ToolRegistry(), backends=5)  # type: ignore[arg-type]
