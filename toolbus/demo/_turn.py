"""The scripted agent turn: the calls a model emitted, and how the agent executes them.

`play()` runs the turn on a background thread and hands every bus event to the
caller as it is delivered, so the caller's thread is free to render.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .. import bus
from ..executor import Executor, ExecutorStats
from ..models import BatchResult, Status, ToolCall
from ..retry import RetryPolicy
from ..tools import ToolError
from ._tools import World, build_registry

__all__ = [
    "DEMO_TOKEN",
    "SCRIPT",
    "Outcome",
    "Step",
    "TurnEvent",
    "current_token",
    "inject_auth",
    "play",
]

DEMO_TOKEN = "tbk_live_7Qf3xR9wLm2Vz8Kc"
"""The bearer token the demo injects. It must never appear in anything printed."""

current_token: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_token", default=None
)
"""Set by the agent for the duration of a turn; read by `inject_auth` on worker threads."""

_AUTH_TOOLS = frozenset({"read_private_repo", "deploy_status"})

MAX_PARALLEL = 4


@dataclass(frozen=True, slots=True)
class Step:
    """One call of the script, with what it is meant to show and the status it must end in."""

    call: ToolCall
    shows: str
    expect: Status


def _step(cid: str, name: str, arguments: dict[str, Any] | str, shows: str, expect: Status) -> Step:
    return Step(ToolCall(id=cid, name=name, arguments=arguments), shows, expect)


SCRIPT: tuple[Step, ...] = (
    _step("c1", "get_weather", '{"city": "Oslo"}', "read, runs in parallel", "ok"),
    _step("c2", "get_weather", '{"city": "Par', "torn JSON from the model", "rejected"),
    _step("c3", "get_forecast", {"city": "Oslo"}, "a tool that does not exist", "rejected"),
    _step("c4", "get_weather", {"city": "Lima"}, "read, runs in parallel", "ok"),
    _step("c5", "search_docs", {"query": "rotate api keys"}, "flaky: fails once, retried", "ok"),
    _step("c6", "legacy_inventory", {"sku": "TB-42"}, "hangs; abandoned at 0.5 s", "timeout"),
    _step(
        "c7",
        "save_note",
        {"text": "Oslo 4°C; read the key rotation doc"},
        "write: a barrier between reads",
        "ok",
    ),
    _step("c8", "list_notes", {}, "read after the write sees it", "ok"),
    _step(
        "c9",
        "get_weather",
        {"city": 42, "units": "kelvin"},
        "arguments violate the schema",
        "rejected",
    ),
    _step("c10", "read_private_repo", {"repo": "acme/billing"}, "auth injected, echoed", "ok"),
    _step(
        "c11",
        "deploy_status",
        {"service": "billing"},
        "auth injected, leaks in error",
        "error",
    ),
)


def inject_auth(call: ToolCall) -> ToolCall:
    """Pre-call hook: give calls of tools that take `auth` the turn's bearer token.

    Raises (which rejects the call) when the turn has no token.
    """
    if call.name not in _AUTH_TOOLS:
        return call  # other tools' schemas forbid an `auth` argument
    token = current_token.get()
    if token is None:
        raise ToolError("no credentials for this turn")
    # Raw JSON is parsed before pre-call hooks run, so arguments are a dict here.
    args = call.arguments if isinstance(call.arguments, dict) else {}
    # Whatever the model put under `auth` is replaced: only the agent's token counts.
    return call.with_arguments({**args, "auth": {"bearer_token": token}})


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """One bus event as it was delivered, `at` seconds after the turn started."""

    at: float
    signal: str
    event: bus.Event


@dataclass(frozen=True, slots=True)
class Outcome:
    """Everything the turn produced, once every event has been delivered."""

    batch: BatchResult
    stats: ExecutorStats
    events: tuple[TurnEvent, ...]
    late_result_seen: bool


class Player:
    """A part of the demo played on a thread: its events and, last, its outcome
    (or the error that ended it) are handed to the rendering thread on `feed`."""

    def __init__(self) -> None:
        self.feed: queue.Queue[Any] = queue.Queue()
        self.events: list[TurnEvent] = []
        self.lock = threading.Lock()
        self.late = threading.Event()
        self.started = time.monotonic()

    def wants(self, event: bus.Event) -> bool:
        return True

    def noticed(self, signal: str) -> None:
        if signal == bus.LATE_RESULT:
            self.late.set()

    def receive(self, sender: Any, *, event: bus.Event, signal: str) -> None:
        # Runs on the executor's announcer thread: record and hand over, nothing slow.
        if not self.wants(event):
            return
        item = TurnEvent(time.monotonic() - self.started, signal, event)
        with self.lock:
            self.events.append(item)
        self.feed.put(item)
        self.noticed(signal)

    def run(self) -> None:
        try:
            self.feed.put(self._play())
        except BaseException as e:  # handed to the rendering thread, which re-raises
            self.feed.put(e)

    def stream(self, name: str, done: type) -> Iterator[Any]:
        """Play on a daemon thread named `name`; yield what it hands over as it
        comes, its outcome (a `done`) last; re-raise what the play raised."""
        threading.Thread(target=self.run, name=name, daemon=True).start()
        while True:
            item = self.feed.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if isinstance(item, done):
                return

    def _play(self) -> Any:
        raise NotImplementedError


class _Turn(Player):
    def _play(self) -> Outcome:
        world = World()
        registry = build_registry(world)
        with Executor(
            registry,
            max_parallel=MAX_PARALLEL,
            timeout=5.0,
            retry=RetryPolicy(max_retries=0),
            pre_call=[inject_auth],
        ) as ex:
            sub = bus.subscribe(self.receive, sender=ex)
            try:
                self.started = time.monotonic()
                # The agent's request context: the executor captures it at submission.
                reset = current_token.set(DEMO_TOKEN)
                try:
                    batch = ex.execute_batch([s.call for s in SCRIPT])
                finally:
                    current_token.reset(reset)
                # The hung client finally answers; its result is discarded as late.
                world.unplug.set()
                late = self.late.wait(2.0)
                ex.drain_events()
                stats = ex.stats()
            finally:
                sub.close()
                world.unplug.set()  # never leave a thread blocked, whatever happened
        with self.lock:
            events = tuple(self.events)
        return Outcome(batch, stats, events, late)


def play() -> Iterator[TurnEvent | Outcome]:
    """Run the scripted turn; yield each event as delivered, then the `Outcome` last.

    Events are yielded on the caller's thread while the turn runs on a daemon
    thread. Anything the turn raises is re-raised here.
    """
    yield from _Turn().stream("toolbus-demo-turn", Outcome)
