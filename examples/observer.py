"""Observe an executor through the signal bus, three ways.

1. Raw blinker: `bus.signal("tool:finished").connect(fn, sender=executor, weak=False)`.
   The receiver runs on one of the executor's delivery threads, in event order
   (never delaying results: results do not wait for events).
2. `bus.subscribe(fn, "tool:executing", "tool:finished")`: every receiver has
   its own queue, so a slow observer (here: 0.2 s per event, like a remote log
   sink) slows nobody but itself. (`isolated=True` is accepted and changes
   nothing.)
3. `bus.Recorder`: collects events; `wait_for` blocks until the expected events
   arrived, which is how tests should wait (never sleep and hope).

Also shows `tool:progress` from a tool that reports progress via `ToolContext`,
and retry and timeout events.

Run: python examples/observer.py
"""

from __future__ import annotations

import threading
import time
from typing import Any

from toolbus import Executor, RetryPolicy, ToolCall, ToolContext, ToolRegistry, bus

registry = ToolRegistry()

_attempts: dict[str, int] = {}
_lock = threading.Lock()


@registry.tool(read_only=True)
def index_documents(count: int, ctx: ToolContext) -> str:
    """Index some documents, reporting progress."""
    for i in range(1, count + 1):
        time.sleep(0.02)
        ctx.progress(f"indexed {i}/{count}", fraction=i / count)
    return f"indexed {count} documents"


@registry.tool(read_only=True, retry=RetryPolicy(max_retries=2, backoff_base=0.05))
def fetch_feed(url: str) -> str:
    """Fetch a feed; fails once per URL, then works."""
    with _lock:
        n = _attempts[url] = _attempts.get(url, 0) + 1
    if n == 1:
        raise ConnectionError(f"connection to {url} reset")
    return f"12 items from {url}"


@registry.tool(read_only=True, timeout=0.2)
def slow_report() -> str:
    """A report that takes longer than its timeout allows."""
    time.sleep(1.0)
    return "too late"


class SlowSink:
    """Stands in for an observer that ships events to a remote service."""

    def __init__(self, expected: int) -> None:
        self.received: list[str] = []
        self.lock = threading.Lock()
        self.expected = expected
        self.all_received = threading.Event()

    def __call__(self, sender: Any, *, event: Any, signal: str) -> None:
        time.sleep(0.2)
        with self.lock:
            self.received.append(f"{signal} {event.tool}")
            if len(self.received) >= self.expected:
                self.all_received.set()


def main() -> None:
    with Executor(registry, max_parallel=4) as executor:
        # 1. Raw blinker. weak=False: blinker holds receivers weakly by default,
        # and a closure like this one would be collected at once.
        finished: list[str] = []

        def on_finished(sender: Any, *, event: bus.CallFinished) -> None:
            r = event.result
            finished.append(f"{r.name}: {r.status} in {r.attempts} attempt(s)")

        bus.signal(bus.FINISHED).connect(on_finished, sender=executor, weak=False)

        # 2. A slow observer: it delays only its own queue.
        # Three calls, one tool:executing and one tool:finished each (the retry
        # adds a second tool:executing): 7 events.
        sink = SlowSink(expected=7)
        subscription = bus.subscribe(
            sink, bus.EXECUTING, bus.FINISHED, sender=executor, isolated=True
        )

        # 3. A recorder of the events the example checks.
        with bus.Recorder(
            bus.PROGRESS, bus.RETRY_ATTEMPT, bus.RETRY_SUCCESS, bus.TIMEOUT, sender=executor
        ) as recorder:
            started = time.monotonic()
            batch = executor.execute_batch(
                [
                    ToolCall(name="index_documents", arguments={"count": 5}),
                    ToolCall(name="fetch_feed", arguments={"url": "https://news.example/rss"}),
                    ToolCall(name="slow_report"),
                ]
            )
            elapsed = time.monotonic() - started
            print(f"batch returned in {elapsed:.2f}s (the slow sink needs 0.2 s per event):")
            for r in batch:
                print(f"  {r.name}: {r.status} {r.output or r.error}")

            progress = recorder.wait_for(bus.PROGRESS, 5)
            print("\nprogress events:")
            for p in progress:
                print(f"  {p.tool}: {p.message} ({p.fraction:.0%})")
            (retry,) = recorder.wait_for(bus.RETRY_ATTEMPT)
            print(f"retry: attempt {retry.attempt} of {retry.tool} after {retry.previous_error!r}")
            (success,) = recorder.wait_for(bus.RETRY_SUCCESS)
            print(f"retry success: {success.tool} after {success.attempts} attempts")
            (timeout,) = recorder.wait_for(bus.TIMEOUT)
            print(f"timeout: {timeout.tool} after {timeout.timeout}s")

        # Delivered on the delivery threads: wait for them before reading.
        executor.drain_events()
        bus.signal(bus.FINISHED).disconnect(on_finished)
        print("\nraw blinker receiver saw:")
        for line in sorted(finished):
            print(f"  {line}")

        with sink.lock:
            handled = len(sink.received)
        print(f"\nslow sink has handled {handled} of {sink.expected} events so far")
        # drain_events() waited for the slow sink too (up to its 10 s default).
        caught_up = sink.all_received.wait(timeout=10)
        print(f"slow sink caught up: {caught_up}")
        with sink.lock:
            for line in sink.received:
                print(f"  {line}")
        subscription.close()


if __name__ == "__main__":
    main()
