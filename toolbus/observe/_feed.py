"""One executor's events, watched: a bus subscription feeding a `LiveState`, and
optionally a bounded ring of recent records for clients that resume (`/events`
with `Last-Event-ID`).

The subscription is an ordinary one (its own queue, on the executor's delivery
pool): a slow feed never slows tools or other observers. Like every surface of
`toolbus.observe` it lingers (`LINGER`: events handed over in bursts) and
refuses an executor whose events do not go to the bus. Events are seen only
from the moment the feed starts.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import bus
from ..executor import Executor
from ..models import ToolResult
from ._content import dumps
from ._names import tool_label
from ._state import STATE_SIGNALS, LiveState
from ._subscription import LINGER, Signals, require_bus
from ._wire import encode

__all__ = ["Feed"]


class Feed:
    """Subscribes to `executor`'s events; `close()` (or `with`) unsubscribes.

    `history`: how many encoded records to keep for `since()` (0: none; then
    the records lack the fields only a client of `/events` reads: arguments,
    outputs, metadata).
    Callbacks given to `listen` run on the delivery thread after each burst
    of records is applied and stored; they must be quick (wake someone up, no
    more).
    """

    def __init__(self, executor: Executor, *, history: int = 0) -> None:
        require_bus(executor)
        self._executor = executor
        self.state = LiveState()
        self._lock = threading.Lock()
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=history or None)
        self._keep = history > 0
        self._evicted = 0  # the highest seq that fell out of the ring
        self._latest = 0
        self._first = 0  # the first seq seen (0: none yet); the lowest, as seqs come in order
        self._listeners: list[Callable[[], None]] = []
        # The delivery thread's own: records of the burst handed over so far,
        # applied and stored together when it ends (`_flush`), one lock and one
        # wake-up per burst.
        self._batch: list[tuple[int, dict[str, Any]]] = []
        if self._keep:  # /events sends every signal
            self.subscription: bus.Subscription = bus.Subscription(
                None, self._on_event, executor, linger=LINGER, flush=self._flush
            )
        else:  # only what the state reads: fewer events are built at all
            self.subscription = Signals(
                executor, self._on_event, STATE_SIGNALS, others=True, flush=self._flush
            )

    def _on_event(self, sender: Any, *, event: bus.Event, signal: str) -> None:
        record = encode(signal, event, light=not self._keep)
        if "tool" in record:
            # A name the executor does not know (one the model invented) is
            # `<unknown>`, as in log lines and metrics: asked of the registry,
            # whatever the call's error code (a closed executor cancels it).
            record["tool"] = tool_label(self._executor, getattr(event, "tool", None))
        result = getattr(event, "result", None)
        if type(result) is ToolResult and type(record.get("result")) is dict:
            # The result's name is the call's too: the model's invented text
            # (the content scanner reads the error's echo of it, not this).
            record["result"]["name"] = tool_label(self._executor, result.name)
        self._batch.append((event.seq, record))

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        # `dumps`: a lone surrogate a model sent (a tool name, a call id) is
        # written as U+FFFD, not lost with the whole record.
        # Each copied (`bytes(memoryview(...))`; `bytes(b)` is `b` itself): the
        # text orjson returns keeps about 4 KB allocated however short it is,
        # which the ring, holding `history` records, would keep for good.
        ring = [(seq, bytes(memoryview(dumps(r)))) for seq, r in batch] if self._keep else []
        # One lock around both: a state snapshot at seq S means S is in the ring
        # (or evicted), so a client resuming from a snapshot never sees a false gap.
        with self._lock:
            for _, record in batch:
                self.state.apply(record)
            for item in ring:
                if len(self._ring) == self._ring.maxlen:
                    self._evicted = self._ring[0][0]
                self._ring.append(item)
            self._latest = max(self._latest, batch[-1][0])
            if not self._first:
                self._first = batch[0][0]
            listeners = tuple(self._listeners)
        for wake in listeners:
            wake()

    def listen(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(wake)

    @property
    def latest(self) -> int:
        """The highest `seq` seen so far (0: none)."""
        with self._lock:
            return self._latest

    def since(self, seq: int) -> tuple[list[tuple[int, bytes]], bool]:
        """The kept records after `seq`, oldest first, and whether some are missing.

        Missing: records after `seq` fell out of the ring, or came before the
        first this feed saw (a client resuming on a server started since), or
        `seq` is ahead of anything seen (a client of another executor or
        server). Such a client should reload the state (`/status`) and go on
        from there. `seq` 0 (no event had: a new client) misses nothing.
        """
        with self._lock:
            gap = (
                seq < self._evicted
                or seq > self._latest
                # The client has `seq`: it needs `seq + 1` on, and this feed has `_first` on.
                or 0 < seq < self._first - 1
            )
            newer: list[tuple[int, bytes]] = []
            for item in reversed(self._ring):
                if item[0] <= seq:
                    break
                newer.append(item)
        newer.reverse()
        return newer, gap

    def close(self) -> None:
        self.subscription.close()
        with self._lock:
            self._listeners.clear()

    def __enter__(self) -> Feed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
