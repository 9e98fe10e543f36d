"""Extend toolbus by adding actors of your own beside the built-in ones.

Two kinds:

- `Metrics`, a `bus.ObserverActor`: bus events arrive in its own mailbox and are
  handled on its own thread, so it never slows a tool. It answers the agent's
  own messages too (`on_message`): here, a request for a latency report.
- `KeyValueStore`, a plain pykka actor that owns the state of some tools. The
  tool objects only hold its `ActorRef` and `ask` it, so parallel calls need
  no locks (the actor handles one message at a time) and the state outlives any
  one executor.

Run: python examples/custom_actor.py
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, cast

import pykka
from pydantic import BaseModel

from toolbus import Executor, Tool, ToolCall, ToolContext, ToolError, ToolRegistry, bus

# -- an observer actor -----------------------------------------------------------


@dataclass(frozen=True)
class ReportRequest:
    """Ask the metrics actor for a report."""


@dataclass(frozen=True)
class ToolStats:
    calls: int
    statuses: dict[str, int]
    attempts: int
    mean_ms: float
    max_ms: float


class Metrics(bus.ObserverActor):
    """Per-tool call counts, statuses and latencies."""

    def __init__(self) -> None:
        super().__init__()
        self.durations: dict[str, list[float]] = {}
        self.statuses: dict[str, dict[str, int]] = {}
        self.attempts: dict[str, int] = {}

    def on_event(self, signal: str, sender: Any, event: bus.Event) -> None:
        if isinstance(event, bus.CallFinished):
            r = event.result
            self.durations.setdefault(r.name, []).append(r.duration)
            counts = self.statuses.setdefault(r.name, {})
            counts[r.status] = counts.get(r.status, 0) + 1
        elif isinstance(event, bus.Executing):
            self.attempts[event.tool] = self.attempts.get(event.tool, 0) + 1

    def on_message(self, message: Any) -> Any:
        if isinstance(message, ReportRequest):
            return {
                name: ToolStats(
                    calls=len(ds),
                    statuses=dict(self.statuses[name]),
                    attempts=self.attempts.get(name, 0),
                    mean_ms=statistics.fmean(ds) * 1000,
                    max_ms=max(ds) * 1000,
                )
                for name, ds in sorted(self.durations.items())
            }
        return super().on_message(message)


# -- an actor that owns the state of some tools ----------------------------------


@dataclass(frozen=True)
class Get:
    key: str


@dataclass(frozen=True)
class Put:
    key: str
    value: str


@dataclass(frozen=True)
class Keys:
    pass


class KeyValueStore(pykka.ThreadingActor):
    # Daemon thread, like toolbus's own actors: never keeps the process alive.
    use_daemon_thread = True

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Get):
            return self.data.get(message.key)
        if isinstance(message, Put):
            previous = self.data.get(message.key)
            self.data[message.key] = message.value
            return previous
        if isinstance(message, Keys):
            return sorted(self.data)
        raise TypeError(f"unknown message {message!r}")


class StoreTool(Tool):
    """Base for tools backed by a `KeyValueStore` actor."""

    def __init__(self, store: pykka.ActorRef[KeyValueStore]) -> None:
        self.store = store
        super().__init__()

    def ask(self, message: Any, ctx: ToolContext) -> Any:
        # Bound the wait by the call's own deadline, so a stuck store ends the
        # call as this tool's error rather than as a timeout with a stuck worker.
        remaining = ctx.remaining
        try:
            return self.store.ask(message, timeout=5.0 if remaining is None else remaining)
        except pykka.Timeout:
            raise ToolError("the store did not answer in time", retryable=False) from None


class KeyParams(BaseModel):
    key: str


class PutParams(BaseModel):
    key: str
    value: str


class StoreGet(StoreTool):
    name = "store_get"
    description = "Read the value stored under a key (null if there is none)."
    Params = KeyParams
    read_only = True

    # The ctx parameter is toolbus's documented second form of `run`; mypy cannot
    # see that `Tool.run` has two forms.
    def run(self, params: KeyParams, ctx: ToolContext) -> str | None:  # type: ignore[override]
        value: str | None = self.ask(Get(params.key), ctx)
        return value


class StorePut(StoreTool):
    name = "store_put"
    description = "Store a value under a key; returns the previous value."
    Params = PutParams

    def run(self, params: PutParams, ctx: ToolContext) -> dict[str, str | None]:  # type: ignore[override]
        previous: str | None = self.ask(Put(params.key, params.value), ctx)
        return {"key": params.key, "previous": previous}


class StoreKeys(StoreTool):
    name = "store_keys"
    description = "List the stored keys."
    read_only = True

    def run(self, params: Any, ctx: ToolContext) -> list[str]:  # type: ignore[override]
        keys: list[str] = self.ask(Keys(), ctx)
        return keys


# -- the agent ---------------------------------------------------------------------


def main() -> None:
    store = KeyValueStore.start()
    metrics = Metrics.start()
    registry = ToolRegistry([StoreGet(store), StorePut(store), StoreKeys(store)])

    @registry.tool(read_only=True)
    def slow_lookup(term: str) -> str:
        """Look a term up in a slow dictionary."""
        time.sleep(0.05)
        return f"{term}: a word"

    try:
        with Executor(registry, max_parallel=4) as executor:
            subscription = Metrics.attach(metrics, bus.EXECUTING, bus.FINISHED, sender=executor)

            # Barrier order: each put waits for the calls before it, so the gets
            # between them see exactly the writes the model placed ahead of them.
            batch = executor.execute_batch(
                [
                    ToolCall(name="store_put", arguments={"key": "city", "value": "Oslo"}),
                    ToolCall(name="store_get", arguments={"key": "city"}),
                    ToolCall(name="slow_lookup", arguments={"term": "fjord"}),
                    ToolCall(name="store_put", arguments={"key": "city", "value": "Bergen"}),
                    ToolCall(name="store_get", arguments={"key": "city"}),
                    ToolCall(name="store_put", arguments={"key": "country", "value": "Norway"}),
                    ToolCall(name="store_keys"),
                    ToolCall(name="store_get", arguments={"key": 42}),  # invalid: rejected
                ]
            )
            for call_result in batch:
                shown = call_result.output if call_result.ok else call_result.error
                print(f"{call_result.name:12} {call_result.status:8} {shown}")

            # The events are in the metrics mailbox once drained; the report request
            # queues behind them, so the report covers every call above.
            executor.drain_events()
            report = cast(dict[str, ToolStats], metrics.ask(ReportRequest()))
            print("\nmetrics report (asked from the Metrics actor):")
            for name, s in report.items():
                print(
                    f"  {name:12} calls={s.calls} attempts={s.attempts} "
                    f"statuses={s.statuses} mean={s.mean_ms:.1f}ms max={s.max_ms:.1f}ms"
                )
            subscription.close()

        # The store's state outlives the executor.
        with Executor(registry) as executor:
            later = executor.execute(ToolCall(name="store_get", arguments={"key": "country"}))
            print(f"\nafter a new executor started: country = {later.output}")
    finally:
        # attach() does not own the actor: stopping it is up to whoever started it.
        metrics.stop()
        store.stop()


if __name__ == "__main__":
    main()
