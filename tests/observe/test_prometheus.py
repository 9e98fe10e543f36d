"""Prometheus: every toolbus metric, scraped as text (the exposition format) and parsed back."""

from __future__ import annotations

import shutil
import threading
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import REGISTRY, CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import MakeExecutor, wait_until
from toolbus import RetryPolicy, ToolCall, ToolError, ToolRegistry, bus
from toolbus.observe import instrument_prometheus
from toolbus.tools import CommandTool

POLICY_SIGNAL = "test-policy:denied"
bus.define_signal(POLICY_SIGNAL, "A test policy denied a call (tests/observe/test_prometheus.py).")


@dataclass(frozen=True, slots=True)
class Denied(bus.Event):
    call_id: str
    tool: str


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def noop() -> None:
    """A tool that does nothing."""


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the text exposition, by name and labels."""
    text = generate_latest(registry).decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def make_registry(release: threading.Event) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def ok() -> str:
        return "fine"

    @registry.tool
    def fail() -> str:
        raise ToolError("no")

    attempts: list[int] = []

    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=3, backoff_base=0.001))
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("again")
        return "fine"

    @registry.tool(read_only=True, timeout=0.1)
    def hang() -> str:
        release.wait(10)
        return "late"

    return registry


def test_calls_durations_retries_timeouts_and_unknown_tools(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    registry = CollectorRegistry()
    ex = make_executor(make_registry(release), name="agent")
    handle = instrument_prometheus(ex, registry)
    assert handle.registry is registry
    for _ in range(3):
        ex.execute(ToolCall(name="ok"))
    ex.execute(ToolCall(name="fail"))
    ex.execute(ToolCall(name="flaky"))
    ex.execute(ToolCall(name="hang"))
    ex.execute_batch(
        [ToolCall(name="invented_1"), ToolCall(name="invented_2"), ToolCall(name="ok")]
    )
    ex.drain_events()
    s = scrape(registry)
    calls = "toolbus_calls_total"
    assert value(s, calls, executor="agent", tool="ok", status="ok", error_code="") == 4
    assert value(s, calls, executor="agent", tool="flaky", status="ok", error_code="") == 1
    assert (
        value(s, calls, executor="agent", tool="fail", status="error", error_code="TOOL_ERROR") == 1
    )
    assert (
        value(
            s,
            calls,
            executor="agent",
            tool="hang",
            status="timeout",
            error_code="EXECUTION_TIMEOUT",
        )
        == 1
    )
    assert (
        value(
            s,
            calls,
            executor="agent",
            tool="<unknown>",
            status="rejected",
            error_code="TOOL_NOT_FOUND",
        )
        == 2
    )
    text = handle.exposition().decode()
    assert "invented" not in text  # the model's invented names never become labels
    count = "toolbus_call_duration_seconds_count"
    assert value(s, count, executor="agent", tool="ok") == 4
    assert value(s, count, executor="agent", tool="<unknown>") is None  # never ran
    bucket = "toolbus_call_duration_seconds_bucket"
    assert value(s, bucket, executor="agent", tool="ok", le="+Inf") == 4
    assert value(s, bucket, executor="agent", tool="hang", le="0.05") == 0
    assert value(s, bucket, executor="agent", tool="hang", le="0.25") == 1
    assert value(s, "toolbus_retries_total", executor="agent", tool="flaky") == 2
    assert value(s, "toolbus_timeouts_total", executor="agent", tool="hang") == 1
    assert value(s, "toolbus_events_dropped_total", executor="agent") == 0
    handle.close()


def test_gauges_in_flight_queued_and_abandoned(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    registry = ToolRegistry()
    started = threading.Semaphore(0)

    @registry.tool(read_only=True, timeout=30)
    def block() -> str:
        started.release()
        release.wait(10)
        return "done"

    stuck_started = threading.Event()

    @registry.tool(read_only=True, timeout=30)
    def stuck() -> str:
        stuck_started.set()
        release.wait(10)
        return "late"

    prom = CollectorRegistry()
    ex = make_executor(registry, name="gauges", max_parallel=2)
    handle = instrument_prometheus(ex, prom)
    threads = [
        threading.Thread(target=ex.execute, args=(ToolCall(name="block"),)) for _ in range(3)
    ]
    for t in threads:
        t.start()
    assert started.acquire(timeout=5) and started.acquire(timeout=5)
    wait_until(lambda: ex.stats().queued == 1, what="one call queued")
    s = scrape(prom)
    assert value(s, "toolbus_in_flight", executor="gauges") == 2
    assert value(s, "toolbus_queued", executor="gauges") == 1
    assert value(s, "toolbus_queue_length", executor="gauges", group="max_parallel") == 1
    release.set()
    for t in threads:
        t.join()
    release.clear()
    # A call stopped while its tool runs leaves the worker stuck in it
    # (cancelled once the tool has begun: a short timeout, on a loaded
    # machine, could pass before the worker starts the tool).
    stopping = ex.submit(ToolCall(name="stuck"))
    assert stuck_started.wait(10)
    assert stopping.cancel() and stopping.result(10).status == "cancelled"
    s = scrape(prom)
    assert value(s, "toolbus_in_flight", executor="gauges") == 0
    assert value(s, "toolbus_queued", executor="gauges") == 0
    assert value(s, "toolbus_queue_length", executor="gauges", group="max_parallel") == 0
    assert value(s, "toolbus_abandoned_workers", executor="gauges") == 1
    release.set()
    wait_until(lambda: ex.stats().abandoned_workers == 0, what="the stuck thread returned")
    assert value(scrape(prom), "toolbus_abandoned_workers", executor="gauges") == 0
    handle.close()


def test_a_queue_length_gauge_per_group(
    make_executor: MakeExecutor, release: threading.Event
) -> None:
    registry = ToolRegistry()
    started = threading.Semaphore(0)

    @registry.tool(read_only=True, groups=["db"], timeout=30)
    def query(i: int) -> int:
        started.release()
        release.wait(10)
        return i

    @registry.tool(read_only=True, timeout=30)
    def slow(i: int) -> int:
        started.release()
        release.wait(10)
        return i

    prom = CollectorRegistry()
    # Each batch runs one call at a time: the rest wait in its own group.
    ex = make_executor(registry, name="queues", groups={"db": 1}, concurrency=lambda calls: 1)
    handle = instrument_prometheus(ex, prom)
    singles = [ex.submit(ToolCall(name="query", arguments={"i": i})) for i in range(3)]
    batches = [
        ex.submit_batch([ToolCall(name="slow", arguments={"i": i}) for i in range(2)])
        for _ in range(2)
    ]
    for _ in range(3):
        assert started.acquire(timeout=5)
    wait_until(lambda: ex.stats().queued == 4, what="four calls queued")
    assert ex.stats().queues == {
        "max_parallel": 0,
        "db": 2,
        f"batch:{batches[0].batch_id}": 1,
        f"batch:{batches[1].batch_id}": 1,
    }
    s = scrape(prom)
    labels = {
        dict(k[1])["group"]: v
        for k, v in s.items()
        if k[0] == "toolbus_queue_length" and dict(k[1])["executor"] == "queues"
    }
    # Every batch's own group is one label: a label per batch would never end.
    assert labels == {"max_parallel": 0, "db": 2, "batch": 2}
    release.set()
    for h in singles:
        assert h.result(10).status == "ok"
    for b in batches:
        assert [r.status for r in b.result(10)] == ["ok", "ok"]
    handle.close()


@pytest.mark.skipif(shutil.which("sleep") is None, reason="needs the sleep program")
def test_killed_workers(make_executor: MakeExecutor) -> None:
    registry = ToolRegistry()
    registry.register(
        CommandTool(
            "nap",
            ["sleep", "30"],
            {"type": "object", "properties": {}},
            description="Sleeps.",
            timeout=5,  # time to start the process it kills, however busy the machine
        )
    )
    prom = CollectorRegistry()
    ex = make_executor(registry, name="killer")
    handle = instrument_prometheus(ex, prom)
    assert ex.execute(ToolCall(name="nap")).status == "timeout"
    wait_until(lambda: ex.stats().killed_workers == 1, what="the process killed")
    ex.drain_events()
    s = scrape(prom)
    assert value(s, "toolbus_killed_workers_total", executor="killer", tool="nap") == 1
    handle.close()


def test_policy_events_are_events_of_signals_defined_later(make_executor: MakeExecutor) -> None:
    prom = CollectorRegistry()
    ex = make_executor(ToolRegistry([noop]), name="policies")
    handle = instrument_prometheus(ex, prom)
    late_signal = "test-policy:throttled"
    bus.define_signal(late_signal, "A test policy throttled a call (defined after subscribing).")
    assert ex.emitter.announce(POLICY_SIGNAL, Denied("c1", "noop"))
    assert ex.emitter.announce(POLICY_SIGNAL, Denied("c2", "made_up"))
    assert ex.emitter.announce(late_signal, bus.Event())
    ex.drain_events()
    s = scrape(prom)
    events = "toolbus_policy_events_total"
    assert value(s, events, executor="policies", tool="noop", signal=POLICY_SIGNAL) == 1
    assert value(s, events, executor="policies", tool="<unknown>", signal=POLICY_SIGNAL) == 1
    assert value(s, events, executor="policies", tool="", signal=late_signal) == 1
    # toolbus's own signals are not policy events.
    assert not [k for k in s if k[0] == events and ("signal", "tool:finished") in k[1]]
    handle.close()


def test_two_executors_one_registry_and_instrumenting_twice(make_executor: MakeExecutor) -> None:
    prom = CollectorRegistry()
    registry = ToolRegistry([noop])
    a = make_executor(registry, name="left")
    b = make_executor(registry, name="right")
    ha, hb = instrument_prometheus(a, prom), instrument_prometheus(b, prom)
    again = instrument_prometheus(a, prom)  # the same executor again: shares its series
    a.execute(ToolCall(name="noop"))
    for _ in range(2):
        b.execute(ToolCall(name="noop"))
    a.drain_events()
    b.drain_events()
    s = scrape(prom)
    calls = "toolbus_calls_total"
    assert value(s, calls, executor="left", tool="noop", status="ok", error_code="") == 1
    assert value(s, calls, executor="right", tool="noop", status="ok", error_code="") == 2
    assert value(s, "toolbus_in_flight", executor="left") == 0
    assert value(s, "toolbus_in_flight", executor="right") == 0

    with pytest.raises(ValueError, match="another executor named 'left'"):
        instrument_prometheus(make_executor(registry, name="left"), prom)

    # A second registry is independent of the first.
    other = CollectorRegistry()
    hc = instrument_prometheus(a, other)
    a.execute(ToolCall(name="noop"))
    a.drain_events()
    assert (
        value(scrape(other), calls, executor="left", tool="noop", status="ok", error_code="") == 1
    )
    assert value(scrape(prom), calls, executor="left", tool="noop", status="ok", error_code="") == 2
    hc.close()

    again.close()  # ha still holds the executor's series
    assert value(scrape(prom), "toolbus_in_flight", executor="left") == 0
    ha.close()
    s = scrape(prom)
    assert not [k for k in s if ("executor", "left") in k[1]]
    assert value(s, "toolbus_in_flight", executor="right") == 0
    hb.close()
    assert scrape(prom) == {}  # the collector is off the registry
    # ... and can come back.
    with instrument_prometheus(a, prom) as back:
        assert value(scrape(back.registry), "toolbus_in_flight", executor="left") == 0


def test_the_default_registry_and_a_name_clash_with_other_metrics(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(ToolRegistry([noop]), name="default-registry")
    with instrument_prometheus(ex) as handle:
        assert handle.registry is REGISTRY
        ex.execute(ToolCall(name="noop"))
        ex.drain_events()
        s = scrape(REGISTRY)
        assert (
            value(
                s,
                "toolbus_calls_total",
                executor="default-registry",
                tool="noop",
                status="ok",
                error_code="",
            )
            == 1
        )
    assert value(scrape(REGISTRY), "toolbus_in_flight", executor="default-registry") is None

    prom = CollectorRegistry()
    Counter("toolbus_calls", "someone else's", registry=prom)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        instrument_prometheus(ex, prom)


def test_a_closed_executor_still_scrapes(make_executor: MakeExecutor) -> None:
    prom = CollectorRegistry()
    ex = make_executor(ToolRegistry([noop]), name="closing")
    handle = instrument_prometheus(ex, prom)
    ex.execute(ToolCall(name="noop"))
    ex.close()
    s: dict[Any, float] = scrape(prom)
    assert value(s, "toolbus_in_flight", executor="closing") == 0
    assert (
        value(
            s,
            "toolbus_calls_total",
            executor="closing",
            tool="noop",
            status="ok",
            error_code="",
        )
        == 1
    )
    handle.close()
