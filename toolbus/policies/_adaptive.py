"""`adaptive_timeout`: a tool's deadline learned from how long its calls take.

Seed 004's dynamic timeout. Per tool, a window of recent samples:

- an `ok` result of one attempt gives its `duration` (seconds from the
  attempt's dispatch to the result: hooks included, as the deadline counts
  them, and the policies' decisions, which it does not: it errs long). A
  call that took retries is left out: its duration also holds failed
  attempts and backoff, and says nothing of one attempt.
- a `timeout` result gives the deadline it missed (the call's attempt timeout):
  the call took at least that long. So a tool whose calls keep timing out sees
  its deadline grow, by `factor` each round, up to `ceiling`.

The deadline is `clamp(percentile(samples) * factor, floor, ceiling)`, asked at
each submission. Until a tool has `min_samples` samples, its timeout as set
(the tool's, else the executor's) applies. A tool that sets its own `timeout`
keeps it unless `override=True`.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from .._options import real_number
from ..models import ErrorCode, ToolCall, ToolResult
from ._protocol import BasePolicy
from ._signals import call_timeout

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["AdaptiveTimeout", "adaptive_timeout"]


def adaptive_timeout(
    percentile: float = 0.99,
    factor: float = 2.0,
    floor: float = 1.0,
    ceiling: float = 300.0,
    min_samples: int = 20,
    override: bool = False,
    *,
    window: int = 200,
) -> AdaptiveTimeout:
    """Deadlines learned per tool: `clamp(percentile(samples) * factor, floor, ceiling)`.

    - `percentile`: in (0, 1]; of the last `window` samples (linear interpolation).
    - `factor`: > 0, how much room above it a call gets.
    - `floor`, `ceiling`: seconds, `0 < floor <= ceiling`, both finite.
    - `min_samples`: samples a tool needs before its deadline is learned.
    - `override`: learn even tools that set their own `timeout`.
    - `window`: samples kept per tool (at least `min_samples`)."""
    return AdaptiveTimeout(
        percentile=percentile,
        factor=factor,
        floor=floor,
        ceiling=ceiling,
        min_samples=min_samples,
        override=override,
        window=window,
    )


class _Samples:
    __slots__ = ("learned", "values")

    def __init__(self, window: int) -> None:
        self.values: deque[float] = deque(maxlen=window)
        self.learned: float | None = None  # the deadline, worked out once per change


class AdaptiveTimeout(BasePolicy):
    """See `adaptive_timeout()`."""

    name = "adaptive_timeout"

    def __init__(
        self,
        *,
        percentile: float,
        factor: float,
        floor: float,
        ceiling: float,
        min_samples: int,
        override: bool,
        window: int,
    ) -> None:
        self.percentile = _number(percentile, "percentile")
        if not 0 < self.percentile <= 1:
            raise ValueError(f"adaptive_timeout: percentile must be in (0, 1], got {percentile!r}")
        self.factor = _number(factor, "factor")
        if self.factor <= 0:
            raise ValueError(f"adaptive_timeout: factor must be > 0, got {factor!r}")
        self.floor = _number(floor, "floor")
        self.ceiling = _number(ceiling, "ceiling")
        if not 0 < self.floor <= self.ceiling:
            raise ValueError(
                f"adaptive_timeout: need 0 < floor <= ceiling, got floor={floor!r}, "
                f"ceiling={ceiling!r}"
            )
        self.min_samples = _count(min_samples, "min_samples", 1)
        self.window = _count(window, "window", self.min_samples)
        if not isinstance(override, bool):
            raise TypeError(f"adaptive_timeout: override must be True or False, got {override!r}")
        self.override = override
        self._lock = threading.Lock()
        self._tools: dict[str, _Samples] = {}

    def timeout(self, tool: Tool, default: float | None) -> float | None:
        if tool.timeout is not None and not self.override:
            return default
        learned = self.learned(tool.name)
        return default if learned is None else learned

    def learned(self, tool: str) -> float | None:
        """The deadline learned for `tool`, or None until it has `min_samples`."""
        with self._lock:
            found = self._tools.get(tool)
            if found is None or len(found.values) < self.min_samples:
                return None
            if found.learned is None:
                value = _percentile(sorted(found.values), self.percentile) * self.factor
                found.learned = min(self.ceiling, max(self.floor, value))
            return found.learned

    def samples(self, tool: str) -> list[float]:
        """The samples kept for `tool`, oldest first."""
        with self._lock:
            found = self._tools.get(tool)
            return list(found.values) if found is not None else []

    def on_result(self, call: ToolCall, result: ToolResult, now: float) -> ToolResult | None:
        if result.status == "ok" and result.attempts == 1:
            self.add(call.name, result.duration)
        elif result.status == "timeout" and result.error_code is not ErrorCode.DEADLINE_EXCEEDED:
            # (The whole call's deadline ended it: no sample of the tool's own
            # time, which may have been cut short by queueing or backoffs.)
            missed = call_timeout()
            if missed is not None and math.isfinite(missed):
                self.add(call.name, missed)
        return None

    def add(self, tool: str, seconds: float) -> None:
        """Count a sample of `seconds` for `tool` (what `on_result` does)."""
        if not (math.isfinite(seconds) and seconds >= 0):
            return
        with self._lock:
            found = self._tools.get(tool)
            if found is None:
                found = self._tools[tool] = _Samples(self.window)
            found.values.append(seconds)
            found.learned = None


def _percentile(ordered: list[float], q: float) -> float:
    """The `q` quantile of sorted values, interpolated between the nearest two
    (numpy's default, "linear")."""
    at = (len(ordered) - 1) * q
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _number(value: Any, what: str) -> float:
    number = float(real_number(value, what, "adaptive_timeout"))
    if not math.isfinite(number):
        raise ValueError(f"adaptive_timeout: {what} must be finite, got {value!r}")
    return number


def _count(value: Any, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"adaptive_timeout: {what} must be an integer >= {least}, got {value!r}")
    return value
