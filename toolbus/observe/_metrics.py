"""`/metrics`: the seam between the status server and the Prometheus exporter.

The server gives each instance a fresh `prometheus_client.CollectorRegistry`
and asks `instrument(executor, registry, state)` to fill it:

- if `toolbus.observe.instrument_prometheus` exists (the `prometheus` extra's
  subscriber), it is used as is: `instrument_prometheus(executor,
  registry=registry)`, whose handle's `close()` the server calls on close;
- otherwise `StatsCollector` below stands in: on each scrape it reads
  `executor.stats()` and the server's `LiveState`, under the same metric
  names (all but the duration histogram, which needs the real exporter's
  buckets).

So the server never changes when the exporter lands: the lookup is by name,
at run time.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..executor import Executor
from ._config import executor_name
from ._state import LiveState

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

__all__ = ["Handle", "StatsCollector", "instrument"]


class Handle(Protocol):
    def close(self) -> None: ...


def instrument(executor: Executor, registry: CollectorRegistry, state: LiveState) -> Handle:
    """Export `executor`'s metrics into `registry`; close the handle to stop."""
    exporter = getattr(importlib.import_module("toolbus.observe"), "instrument_prometheus", None)
    if callable(exporter):
        handle: Handle = exporter(executor, registry=registry)
        return handle
    return StatsCollector(executor, state, registry)


class StatsCollector:
    """A collector reading the executor's counters and the live state per scrape."""

    def __init__(self, executor: Executor, state: LiveState, registry: CollectorRegistry) -> None:
        self._executor = executor
        self._state = state
        self._name = executor_name(executor)
        self._registry = registry
        registry.register(self)

    def describe(self) -> list[Any]:
        return []  # unchecked: names are fixed, and stats() should not run at register time

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        ex = self._name
        calls = CounterMetricFamily(
            "toolbus_calls",
            "Calls ended, by tool, status and error code (since the server started watching).",
            labels=("executor", "tool", "status", "error_code"),
        )
        for tool in self._state.snapshot(0.0)["tools"]:
            for outcome, count in tool["outcomes"].items():
                status, _, code = outcome.partition("/")
                calls.add_metric((ex, tool["tool"], status, code), count)
        yield calls
        stats = self._executor.stats()
        counters = {
            "toolbus_retries": ("Retry attempts started.", stats.retries),
            "toolbus_timeouts": ("Attempts that hit their deadline.", stats.timeouts),
            "toolbus_killed_workers": ("Worker processes killed.", stats.killed_workers),
            "toolbus_events_dropped": ("Events never delivered.", stats.events_dropped),
        }
        for name, (doc, value) in counters.items():
            yield _counter(name, doc, ex, value)
        gauges = {
            "toolbus_in_flight": ("Calls running now.", stats.in_flight),
            "toolbus_queued": ("Calls waiting for capacity.", stats.queued),
            "toolbus_abandoned_workers": (
                "Threads stuck in abandoned calls.",
                stats.abandoned_workers,
            ),
        }
        for name, (doc, value) in gauges.items():
            gauge = GaugeMetricFamily(name, doc, labels=("executor",))
            gauge.add_metric((ex,), value)
            yield gauge

    def close(self) -> None:
        try:
            self._registry.unregister(self)
        except KeyError:
            pass


def _counter(name: str, doc: str, executor: str, value: float) -> Metric:
    from prometheus_client.core import CounterMetricFamily

    counter = CounterMetricFamily(name, doc, labels=("executor",))
    counter.add_metric((executor,), value)
    return counter
