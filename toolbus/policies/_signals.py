"""The policies' own signals and events, and how a policy announces one.

Each built-in policy announces what it did on a signal defined with
`bus.define_signal`. A policy is shared (one object may guard tools of several
executors), so it does not hold an emitter: while the executor asks a policy,
`announce` finds the asking executor's emitter and the call's batch.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..bus import Event, define_signal
from ..bus._events import CallEvent

if TYPE_CHECKING:
    from ..bus import Emitter

__all__ = [
    "CACHE_HIT",
    "CIRCUIT_CLOSED",
    "CIRCUIT_HALF_OPEN",
    "CIRCUIT_OPEN",
    "THROTTLED",
    "CacheHit",
    "CircuitChanged",
    "Throttled",
    "announce",
    "asking",
    "call_timeout",
]

THROTTLED = "tool:throttled"
CACHE_HIT = "tool:cache-hit"
CIRCUIT_OPEN = "tool:circuit-open"
CIRCUIT_HALF_OPEN = "tool:circuit-half-open"
CIRCUIT_CLOSED = "tool:circuit-closed"

define_signal(
    THROTTLED, "A call waits for a rate limit (its admission is delayed by `wait` seconds)."
)
define_signal(CACHE_HIT, "A call was answered from a cache, or shared an identical call in flight.")
define_signal(CIRCUIT_OPEN, "A circuit breaker opened: its calls are rejected (CIRCUIT_OPEN).")
define_signal(CIRCUIT_HALF_OPEN, "A circuit breaker lets a trial call through after its pause.")
define_signal(CIRCUIT_CLOSED, "A circuit breaker closed again: its calls run as usual.")


@dataclass(frozen=True, slots=True)
class Throttled(CallEvent):
    """`wait`: seconds until the call is asked about again; `limit`: the rate."""

    wait: float
    limit: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class CacheHit(CallEvent):
    """`shared`: the result came from an identical call in flight, not the cache."""

    shared: bool = False


@dataclass(frozen=True, slots=True)
class CircuitChanged(Event):
    """A breaker's new `state` ("open", "half-open", "closed") for `tool` (and
    `key`, for a breaker per key); `failures` in its window when it changed."""

    tool: str
    state: str
    failures: int
    key: str | None = None
    call_id: str | None = None


# (emitter, batch id, timeout) of the call a policy is being asked about.
_asking: contextvars.ContextVar[tuple[Emitter, str | None, float | None] | None] = (
    contextvars.ContextVar("toolbus_policy_asking", default=None)
)


def asking(emitter: Emitter, batch_id: str | None, timeout: float | None) -> contextvars.Token[Any]:
    """The pipeline: a policy is asked about a call of `batch_id`, whose attempts
    have `timeout`, now (reset the token after)."""
    return _asking.set((emitter, batch_id, timeout))


def call_timeout() -> float | None:
    """The deadline of the attempts of the call a policy is asked about (None:
    none, or not asked by an executor)."""
    current = _asking.get()
    return current[2] if current is not None else None


def done_asking(token: contextvars.Token[Any]) -> None:
    _asking.reset(token)


def announce(name: str, make: Callable[[str | None], Event]) -> bool:
    """Announce the event `make(batch_id)` on signal `name` to the executor that
    is asking; built only if somebody listens. False outside an executor's ask."""
    current = _asking.get()
    if current is None:
        return False
    emitter, batch_id, _ = current
    if not emitter.wants(name):
        return False
    return emitter.announce(name, make(batch_id))
