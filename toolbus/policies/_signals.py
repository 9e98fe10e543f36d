"""The policies' own signals and events, and how a policy announces one.

Each built-in policy announces what it did on a signal defined with
`bus.define_signal`. A policy is shared (one object may guard tools of several
executors), so it does not hold an emitter: while the executor asks a policy,
`announce` finds the asking executor's emitter and the call's batch, and
masks the event with the call's scrubber: a policy keyed on an argument
(`key=lambda c: c.arguments["api_key"]`) never publishes a secret as its key.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from ..bus import Event, define_signal
from ..bus._events import CallEvent
from ..masking import EMPTY_SCRUBBER, MASK, MIN_SCRUB_LENGTH, Scrubber, scrub_published

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
    "asked_by_an_executor",
    "asking",
    "call_timeout",
    "scrub",
    "scrub_quote",
    "time_left",
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


# (emitter, batch id, timeout, scrubber, whole-call deadline, retry policy) of
# the call a policy is being asked about; no emitter at submission, when
# nothing is announced yet.
_Asking: TypeAlias = tuple["Emitter | None", str | None, float | None, Scrubber, float | None, Any]
_asking: contextvars.ContextVar[_Asking | None] = contextvars.ContextVar(
    "toolbus_policy_asking", default=None
)


def asking(
    emitter: Emitter | None,
    batch_id: str | None,
    timeout: float | None,
    scrubber: Scrubber = EMPTY_SCRUBBER,
    due: float | None = None,
    retry: Any = None,
) -> contextvars.Token[Any]:
    """The pipeline: a policy is asked about a call of `batch_id`, whose attempts
    have `timeout`, whose secrets `scrubber` hides and whose whole-call
    deadline is `due` (a `time.monotonic()` instant), now (reset the token after)."""
    return _asking.set((emitter, batch_id, timeout, scrubber, due, retry))


def asked_by_an_executor() -> bool:
    """True while an executor asks a policy about a call (`call_timeout` and
    `time_left` then say what that call has)."""
    return _asking.get() is not None


def call_timeout() -> float | None:
    """The timeout of each attempt of the call a policy is asked about (None:
    none, or not asked by an executor). Not its whole-call budget: see
    `time_left`."""
    current = _asking.get()
    return current[2] if current is not None else None


def time_left() -> float | None:
    """Seconds left before the whole-call deadline (`call_timeout`) of the
    call a policy is asked about; None when it has none (or outside an
    executor's ask). A policy that would make the call wait longer should
    refuse it now instead: the call ends at its deadline anyway."""
    current = _asking.get()
    due = current[4] if current is not None else None
    return None if due is None else due - time.monotonic()


def done_asking(token: contextvars.Token[Any]) -> None:
    _asking.reset(token)


def announce(name: str, make: Callable[[str | None], Event]) -> bool:
    """Announce the event `make(batch_id)` on signal `name` to the executor that
    is asking; built only if somebody listens. False outside an executor's ask.

    The event's fields are masked like the call's arguments (see `scrub`)
    before anyone sees it; the call's identity (`call_id`, `tool`,
    `batch_id`, `parent_call_id`) is published as in every other event."""
    current = _asking.get()
    if current is None:
        return False
    emitter, batch_id, _, scrubber, _, _ = current
    if emitter is None or not emitter.wants(name):
        return False
    event = make(batch_id)
    if scrubber:
        event = _scrubbed(event, scrubber)
    return emitter.announce(name, event)


def scrub(text: str) -> str:
    """`text` (a key, a name) fit to publish for the call a policy is asked
    about: masked whole if it is part of a value the call's masking hides (a
    key taken from a secret argument, or a slice of one), else with every such
    value scrubbed from it. `text` itself outside an executor's ask.

    Built-in policies publish their keys through it (events, refusals)."""
    current = _asking.get()
    if current is None or not current[3]:
        return text
    values = current[3].values
    # A key sliced from a secret (`api_key[:8]`) holds no whole secret for the
    # scrubber to find; a part that long of a hidden value is masked whole.
    if len(text) >= MIN_SCRUB_LENGTH and any(text in v for v in values):
        return MASK
    return current[3].text(text)


# A run of a hidden value this long, anywhere in a text that quotes the
# arguments, is taken for a piece of it (a shorter one is as likely a word of
# the message); at the text's end, where a cut falls, a beginning as short as
# a scrubbed secret is.
_PIECE = 8


def scrub_quote(text: str, limit: int) -> str:
    """`text`, which may quote the arguments of the call a policy is asked
    about (the exception of a key function), fit to publish and cut to `limit`
    characters: scrubbed before it is cut (a cut secret is no longer found
    whole), then with every piece of a hidden value left in it masked, one
    that the code quoting it cut (`int()` quotes 200 characters of its
    argument) or that the cut here left. Only cut outside an executor's ask."""
    current = _asking.get()
    scrubber = current[3] if current is not None else EMPTY_SCRUBBER
    if scrubber:
        text = scrubber.text(text)
    cut = len(text) > limit
    if cut:
        text = text[:limit]
    text = _pieces_masked(text, scrubber.values)
    return text + "..." if cut else text


def _pieces_masked(text: str, values: tuple[str, ...]) -> str:
    """`text` with each run of it that is part of one of `values` masked."""
    if not values:
        return text
    parts, start, i, n = [], 0, 0, len(text)
    while i <= n - MIN_SCRUB_LENGTH:
        end = _piece_end(text, i, values)
        if end - i >= _PIECE or (end == n and end - i >= MIN_SCRUB_LENGTH):
            parts += [text[start:i], MASK]
            start = i = end
        else:
            i += 1
    return "".join([*parts, text[start:]]) if parts else text


def _piece_end(text: str, i: int, values: tuple[str, ...]) -> int:
    """The end of the longest run of `text` from `i` that one of `values`
    holds (`i` when it holds no `MIN_SCRUB_LENGTH` characters of it)."""
    if not any(text[i : i + MIN_SCRUB_LENGTH] in v for v in values):
        return i
    # What a value holds of a run, it holds of its beginning: the longest is
    # found by halving.
    low, high = i + MIN_SCRUB_LENGTH, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if any(text[i:mid] in v for v in values):
            low = mid
        else:
            high = mid - 1
    return low


# The call's identity: the same in every event of the call, never masked.
_IDENTITY = frozenset({"call_id", "tool", "batch_id", "parent_call_id"})


def _scrubbed(event: Event, scrubber: Scrubber) -> Event:
    """`event` with the call's secrets scrubbed from its strings and JSON-like
    values, but its identity: whatever a policy puts in an event is published
    no rawer than the call's arguments."""
    if not dataclasses.is_dataclass(event):
        return event
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(event):
        if f.name in _IDENTITY or not f.init:
            continue
        value = getattr(event, f.name)
        if isinstance(value, str | dict | list | tuple):
            shown = scrub_published(scrubber, value)
            # (a tuple comes back a list: only a changed one is replaced)
            if shown is not value and not (isinstance(value, tuple) and shown == list(value)):
                changes[f.name] = shown
        # numbers, flags, objects of its own: as the policy made them
    return dataclasses.replace(event, **changes) if changes else event
