"""Prometheus: an executor's calls, retries, timeouts and workers as metrics.

One collector per `CollectorRegistry` serves every executor instrumented on
it, each under its own `executor` label: so two executors share a registry,
and instrumenting again never registers a metric twice. Counters and the
histogram are fed by the executor's events (one subscription per executor);
the gauges and `toolbus_events_dropped_total` are read from
`executor.stats()` when the registry is scraped.

prometheus_client is imported when `instrument_prometheus` is called, never
before (`pip install 'toolbus[prometheus]'`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..bus import _signals as sig
from ..bus._events import CallFinished
from ._content import text_of
from ._names import tool_label
from ._subscription import Handle, Signals, require_bus

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from ..executor import Executor

__all__ = ["DURATION_BUCKETS", "PrometheusInstrumentation", "instrument_prometheus"]

DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)

# (name without _total, documentation, labels): the event-fed metrics.
_CALLS = ("toolbus_calls", "Calls that ended, by status and error code.")
_DURATION = (
    "toolbus_call_duration_seconds",
    "Calls' durations (ToolResult.duration: first attempt's start to result), "
    "of calls that ran at least one attempt.",
)
_RETRIES = ("toolbus_retries", "Retry attempts started.")
_TIMEOUTS = ("toolbus_timeouts", "Attempts that timed out.")
_KILLED = ("toolbus_killed_workers", "Worker processes killed with their process group.")
_POLICY = (
    "toolbus_policy_events",
    "Events of signals defined with bus.define_signal (not toolbus's lifecycle signals).",
)
# Read from executor.stats() at scrape time.
_GAUGES = (
    ("toolbus_in_flight", "Calls running now (an attempt or its hooks).", "in_flight"),
    ("toolbus_queued", "Calls waiting for a slot.", "queued"),
    (
        "toolbus_abandoned_workers",
        "Threads stuck in timed-out sync calls, abandoned and not yet returned.",
        "abandoned_workers",
    ),
)
_DROPPED = ("toolbus_events_dropped", "Events never delivered to a subscription.")
_QUEUES = (
    "toolbus_queue_length",
    "Calls waiting for capacity now, by what they wait for (max_parallel, a capacity group, "
    "threads; every batch's own limit as one group, batch).",
)

_SIGNALS = (sig.FINISHED, sig.RETRY_ATTEMPT, sig.TIMEOUT, sig.KILLED)


class _Source:
    """One executor's metrics (the executor label's series), fed by its events."""

    def __init__(self, executor: Executor) -> None:
        from prometheus_client import Counter, Histogram

        self.executor = executor
        self.name = executor.name
        # The label as the exposition's UTF-8 can hold it (a lone surrogate:
        # U+FFFD), so one odd name does not fail every scrape.
        self.label = text_of(executor.name)
        self.handles = 0
        per_tool = ("executor", "tool")
        self.calls = Counter(*_CALLS, (*per_tool, "status", "error_code"), registry=None)
        self.duration = Histogram(*_DURATION, per_tool, registry=None, buckets=DURATION_BUCKETS)
        self.retries = Counter(*_RETRIES, per_tool, registry=None)
        self.timeouts = Counter(*_TIMEOUTS, per_tool, registry=None)
        self.killed = Counter(*_KILLED, per_tool, registry=None)
        self.policy = Counter(*_POLICY, (*per_tool, "signal"), registry=None)
        self.metrics = (
            self.calls,
            self.duration,
            self.retries,
            self.timeouts,
            self.killed,
            self.policy,
        )
        self._counters = {
            sig.RETRY_ATTEMPT: self.retries,
            sig.TIMEOUT: self.timeouts,
            sig.KILLED: self.killed,
        }
        # The series finished calls count in, by (tool, status, error code) and by
        # tool: the delivery thread's own (one event at a time).
        self._calls: dict[tuple[str, str, Any], Any] = {}
        self._durations: dict[str, Any] = {}
        self.subscription = Signals(executor, self._receive, _SIGNALS, others=True)

    def _receive(self, sender: Any, *, event: Any, signal: str) -> None:
        tool = tool_label(self.executor, getattr(event, "tool", None))
        if signal == sig.FINISHED:
            assert isinstance(event, CallFinished)
            result = event.result
            key = (tool, result.status, result.error_code)
            calls = self._calls.get(key)
            if calls is None:
                code = result.error_code.value if result.error_code is not None else ""
                calls = self._calls[key] = self.calls.labels(self.label, tool, result.status, code)
            calls.inc()
            if result.attempts > 0:  # no duration for calls that never ran (unknown tools')
                duration = self._durations.get(tool)
                if duration is None:
                    duration = self._durations[tool] = self.duration.labels(self.label, tool)
                duration.observe(result.duration)
            return
        counter = self._counters.get(signal)
        if counter is not None:
            counter.labels(self.label, tool).inc()
        else:  # a signal defined with bus.define_signal
            if not isinstance(getattr(event, "tool", None), str):
                tool = ""
            self.policy.labels(self.label, tool, signal).inc()

    def stats(self) -> Any:
        try:
            return self.executor.stats()
        except Exception:  # a scrape must not fail for one executor
            return None


class _Collector:
    """Every toolbus metric of one registry: each instrumented executor's series."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sources: dict[str, _Source] = {}

    def describe(self) -> Iterator[Metric]:
        """The metric names, for the registry's duplicate check (no samples)."""
        from prometheus_client.metrics_core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        for name, doc in (_CALLS, _RETRIES, _TIMEOUTS, _KILLED, _POLICY, _DROPPED):
            yield CounterMetricFamily(name, doc)
        yield HistogramMetricFamily(*_DURATION)
        for name, doc, _ in _GAUGES:
            yield GaugeMetricFamily(name, doc)
        yield GaugeMetricFamily(*_QUEUES)

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        with self.lock:
            sources = list(self.sources.values())
        # The event-fed families: each source's samples under one family per name.
        if sources:
            for i in range(len(sources[0].metrics)):
                merged: Metric | None = None
                for source in sources:
                    for family in source.metrics[i].collect():
                        if merged is None:
                            merged = family
                        else:
                            merged.samples.extend(family.samples)
                if merged is not None:
                    yield merged
        stats = [(s.label, s.stats()) for s in sources]
        for name, doc, field in _GAUGES:
            gauge = GaugeMetricFamily(name, doc, labels=("executor",))
            for executor, snapshot in stats:
                if snapshot is not None:
                    gauge.add_metric((executor,), getattr(snapshot, field))
            yield gauge
        queues = GaugeMetricFamily(*_QUEUES, labels=("executor", "group"))
        for executor, snapshot in stats:
            if snapshot is not None:
                for group, waiting in queue_groups(snapshot.queues).items():
                    queues.add_metric((executor, group), waiting)
        yield queues
        dropped = CounterMetricFamily(*_DROPPED, labels=("executor",))
        for executor, snapshot in stats:
            if snapshot is not None:
                dropped.add_metric((executor,), snapshot.events_dropped)
        yield dropped


def queue_groups(queues: dict[str, int]) -> dict[str, int]:
    """`ExecutorStats.queues` as the gauge's `group` labels: every batch's own
    group (`batch:<id>`, a label per batch ever made) counted as one, `batch`."""
    out: dict[str, int] = {}
    for name, waiting in queues.items():
        label = "batch" if name.startswith("batch:") else text_of(name)
        out[label] = out.get(label, 0) + waiting
    return out


# One collector per registry, made on first use (weak: a registry dropped is forgotten).
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, _Collector] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class PrometheusInstrumentation(Handle):
    """An executor's metrics on a Prometheus registry (`instrument_prometheus`).

    `registry` is the `CollectorRegistry` they are on: serve it
    (`prometheus_client.make_asgi_app(registry=...)`, `start_http_server`) or
    scrape it with `exposition()`. `close()` takes this executor's series off
    the registry (when no other handle of the same executor is open on it).
    """

    def __init__(self, executor: Executor, registry: CollectorRegistry, source: _Source) -> None:
        super().__init__(executor)
        self.registry = registry
        self._source = source

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format (`generate_latest`), as `/metrics` serves it."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def _detach(self, timeout: float | None) -> None:
        with _lock:
            collector = _collectors.get(self.registry)
            source = self._source
            source.handles -= 1
            if source.handles > 0 or collector is None:
                return
            with collector.lock:
                if collector.sources.get(source.name) is source:
                    del collector.sources[source.name]
                last = not collector.sources
            if last:
                del _collectors[self.registry]
                self.registry.unregister(collector)
        source.subscription.close()


def instrument_prometheus(
    executor: Executor, registry: CollectorRegistry | None = None
) -> PrometheusInstrumentation:
    """Export `executor`'s metrics to a Prometheus registry (the default one unless given).

    Every series has an `executor` label (`executor.name`): executors sharing a
    registry must have different names (`ValueError` otherwise). Instrumenting
    the same executor on the same registry again shares its series (nothing is
    counted twice). Metrics and labels: docs/observe.md. Returns a handle with
    `registry`, `exposition()` and `close()`.
    """
    try:
        import prometheus_client
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise ImportError(
            "toolbus.observe.instrument_prometheus needs prometheus-client: "
            "pip install 'toolbus[prometheus]'"
        ) from e
    require_bus(executor, "instrument_prometheus")
    if registry is not None and not isinstance(registry, prometheus_client.CollectorRegistry):
        raise TypeError(
            "instrument_prometheus: registry must be a prometheus_client.CollectorRegistry "
            f"(or None: the default one), got {type(registry).__name__}"
        )
    target = registry if registry is not None else prometheus_client.REGISTRY
    with _lock:
        collector = _collectors.get(target)
        if collector is None:
            collector = _Collector()
            target.register(collector)
            _collectors[target] = collector
        with collector.lock:
            source = collector.sources.get(executor.name)
        if source is not None and source.executor is not executor:
            raise ValueError(
                f"another executor named {executor.name!r} is instrumented on this registry: "
                "give executors different names (Executor(name=...))"
            )
        if source is None:
            source = _Source(executor)
            with collector.lock:
                collector.sources[executor.name] = source
        source.handles += 1
    return PrometheusInstrumentation(executor, target, source)
