"""Latencies in log-spaced buckets: small, mergeable into a snapshot, within 2.5 %."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["Latencies"]


class Latencies:
    """Durations in log-spaced buckets (each 5 % wider than the last).

    A quantile is the middle of its bucket: within 2.5 % of the true value,
    whatever the count. Small (one entry per bucket in use), so a snapshot
    carries it and a client restores it.
    """

    GAMMA = 1.05
    _LOG_GAMMA = math.log(GAMMA)
    _FLOOR = 1e-6  # durations below a microsecond share one bucket

    __slots__ = ("buckets", "count", "max", "total")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        index = math.ceil(math.log(max(seconds, self._FLOOR)) / self._LOG_GAMMA)
        self.buckets[index] = self.buckets.get(index, 0) + 1
        self.count += 1
        self.total += seconds
        self.max = max(self.max, seconds)

    def quantile(self, q: float) -> float | None:
        """The `q` quantile (0 < q <= 1) by nearest rank; None without data."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                middle = 2 * self.GAMMA**index / (self.GAMMA + 1)
                return min(middle, self.max)
        return self.max

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def to_json(self) -> dict[str, Any]:
        return {
            "buckets": {str(i): n for i, n in sorted(self.buckets.items())},
            "count": self.count,
            "sum": self.total,
            "max": self.max,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Latencies:
        lat = cls()
        if not data:
            return lat
        lat.buckets = {int(i): int(n) for i, n in dict(data.get("buckets") or {}).items()}
        lat.count = int(data.get("count") or 0)
        lat.total = float(data.get("sum") or 0.0)
        lat.max = float(data.get("max") or 0.0)
        return lat
