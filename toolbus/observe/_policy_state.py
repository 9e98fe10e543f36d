"""What the policies did, from their events: part of the live state (`_state.py`).

- Circuit breakers: each circuit's state ("closed", "open", "half-open") per
  tool, and per key for a breaker per key, with its failures when it changed,
  since when, and how often it opened (`tool:circuit-*`: `CircuitChanged`).
  A circuit appears once it first changes: one that never opened is closed.
- Rate limits: how often calls were held back (`tool:throttled`: a call asked
  again and held back again counts again) and the waits they were given.
- Caches: calls answered from a cache, or by an identical call in flight
  ("shared") (`tool:cache-hit`).
- Approvals: calls that ended `deferred` and have not been submitted again
  since (by call id): they wait for a person's decision. A call submitted
  again, approved or denied, ends once more and leaves the list.

Pure and not locked: `LiveState` calls it under its own lock. Policy events
carry no arguments (nor does this keep any): a tool, a key, counts and times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..policies._signals import (
    CACHE_HIT,
    CIRCUIT_CLOSED,
    CIRCUIT_HALF_OPEN,
    CIRCUIT_OPEN,
    THROTTLED,
)

__all__ = ["BREAKER_STATES", "POLICY_SIGNALS", "PolicyState"]

POLICY_SIGNALS = (THROTTLED, CACHE_HIT, CIRCUIT_OPEN, CIRCUIT_HALF_OPEN, CIRCUIT_CLOSED)
_STATES = {CIRCUIT_OPEN: "open", CIRCUIT_HALF_OPEN: "half-open", CIRCUIT_CLOSED: "closed"}
BREAKER_STATES = ("open", "half-open", "closed")
# A breaker per key may see many keys (one per user, say): past this many
# circuits the one closed longest is forgotten (the oldest change, if none is
# closed). Calls waiting for approval past this many: the oldest is forgotten
# (a deferred call nobody ever submits again would otherwise stay for good).
_MAX_CIRCUITS = 500
_MAX_WAITING = 200
_TEXT_CHARS = 200
_TOOL_COUNTS = ("throttled", "cache_hits", "shared")


def _rank(state: str) -> int:
    """Open first, then half-open, then closed (then anything else)."""
    return BREAKER_STATES.index(state) if state in BREAKER_STATES else len(BREAKER_STATES)


@dataclass(slots=True)
class _Circuit:
    tool: str
    key: str | None
    state: str
    failures: int
    since: float  # when it entered `state` (the event's timestamp)
    opened: int = 0  # how often it opened since watching
    call_id: str | None = None  # the call whose admission or result changed it

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "key": self.key,
            "state": self.state,
            "failures": self.failures,
            "since": self.since,
            "opened": self.opened,
            "call_id": self.call_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: Any) -> _Circuit:
        key = data.get("key")
        call_id = data.get("call_id")
        return cls(
            name(data["tool"]),
            name(key) if key is not None else None,
            str(data.get("state") or "closed"),
            int(data.get("failures") or 0),
            float(data.get("since") or 0.0),
            int(data.get("opened") or 0),
            str(call_id) if call_id is not None else None,
        )


@dataclass(slots=True)
class _Tool:
    throttled: int = 0
    throttle_wait: float = 0.0  # seconds of waits announced, in all
    cache_hits: int = 0
    shared: int = 0  # of the cache hits: answered by an identical call in flight


class PolicyState:
    """Breakers, throttling, cache hits and calls awaiting approval. See the module's doc.

    `name` cuts a tool name or key to what the views show (the state's `_name`).
    """

    def __init__(self, name: Any) -> None:
        self._name = name
        self._circuits: dict[tuple[str, str | None], _Circuit] = {}
        self._tools: dict[str, _Tool] = {}
        self._waiting: dict[str, dict[str, Any]] = {}  # call id -> entry, oldest first

    def _tool(self, name: str) -> _Tool:
        t = self._tools.get(name)
        if t is None:
            t = self._tools[name] = _Tool()
        return t

    # -- feeding (under the state's lock) -----------------------------------------

    def apply(self, signal: str, r: Mapping[str, Any], ts: float) -> None:
        """One policy event (a signal of `POLICY_SIGNALS`)."""
        tool = self._name(r["tool"])
        if signal == THROTTLED:
            t = self._tool(tool)
            t.throttled += 1
            t.throttle_wait += max(0.0, float(r.get("wait") or 0.0))
        elif signal == CACHE_HIT:
            t = self._tool(tool)
            t.cache_hits += 1
            t.shared += bool(r.get("shared"))
        else:
            self._changed(tool, _STATES[signal], r, ts)

    def _changed(self, tool: str, state: str, r: Mapping[str, Any], ts: float) -> None:
        key = r.get("key")
        at = (tool, self._name(key) if key is not None else None)
        circuit = self._circuits.pop(at, None)  # re-inserted: the dict stays in order of change
        if circuit is None:
            if len(self._circuits) >= _MAX_CIRCUITS:
                self._forget_a_circuit()
            circuit = _Circuit(at[0], at[1], state, 0, ts)
        circuit.state, circuit.since = state, ts
        circuit.failures = int(r.get("failures") or 0)
        call_id = r.get("call_id")
        circuit.call_id = str(call_id) if call_id is not None else None
        circuit.opened += state == "open"
        self._circuits[at] = circuit

    def _forget_a_circuit(self) -> None:
        for at, c in self._circuits.items():  # oldest change first
            if c.state == "closed":
                del self._circuits[at]
                return
        del self._circuits[next(iter(self._circuits))]

    def finished(self, r: Mapping[str, Any], tool: str, status: str, ts: float) -> None:
        """A call ended (`tool:finished`): it waits for approval if `deferred`, else no more."""
        call_id = str(r["call_id"])
        self._waiting.pop(call_id, None)
        if status != "deferred":
            return
        if len(self._waiting) >= _MAX_WAITING:
            del self._waiting[next(iter(self._waiting))]
        error = r["result"].get("error")
        self._waiting[call_id] = {
            "seq": int(r.get("seq") or 0),
            "timestamp": ts,
            "call_id": call_id,
            "batch_id": r.get("batch_id"),
            "tool": tool,
            "reason": " ".join(str(error).split())[:_TEXT_CHARS] if error is not None else None,
        }

    # -- reading --------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """`breakers` (by tool, then key), `tools` (per tool that any policy acted
        on: `throttled`, `throttle_wait`, `cache_hits`, `shared`, `waiting`,
        `breaker`: its circuit's state, or the worst of its keys'), `waiting`
        (calls awaiting approval, newest first) and `totals`."""
        breakers = sorted(self._circuits.values(), key=lambda c: (c.tool, c.key or ""))
        waiting = list(reversed(self._waiting.values()))
        per_tool_waiting: dict[str, int] = {}
        for w in waiting:
            per_tool_waiting[w["tool"]] = per_tool_waiting.get(w["tool"], 0) + 1
        worst: dict[str, str] = {}  # a tool's circuit, or the worst of its keys'
        for c in breakers:
            if c.tool not in worst or _rank(c.state) < _rank(worst[c.tool]):
                worst[c.tool] = c.state
        names = sorted(set(self._tools) | set(per_tool_waiting) | set(worst))
        tools = []
        for n in names:
            t = self._tools.get(n) or _Tool()
            tools.append(
                {
                    "tool": n,
                    "breaker": worst.get(n),
                    "throttled": t.throttled,
                    "throttle_wait": t.throttle_wait,
                    "cache_hits": t.cache_hits,
                    "shared": t.shared,
                    "waiting": per_tool_waiting.get(n, 0),
                }
            )
        totals: dict[str, Any] = {k: sum(t[k] for t in tools) for k in _TOOL_COUNTS}
        totals["waiting"] = len(waiting)
        for state in BREAKER_STATES:
            totals[state] = sum(c.state == state for c in breakers)
        return {
            "breakers": [c.to_json() for c in breakers],
            "tools": tools,
            "waiting": waiting,
            "totals": totals,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None, name: Any) -> PolicyState:
        state = cls(name)
        if not data:
            return state
        circuits = [_Circuit.from_json(c, name) for c in data.get("breakers") or ()]
        for c in sorted(circuits, key=lambda c: c.since):  # back in order of change
            state._circuits[(c.tool, c.key)] = c
        for t in data.get("tools") or ():
            state._tools[name(t["tool"])] = _Tool(
                int(t.get("throttled") or 0),
                float(t.get("throttle_wait") or 0.0),
                int(t.get("cache_hits") or 0),
                int(t.get("shared") or 0),
            )
        for w in reversed(list(data.get("waiting") or ())):
            state._waiting[str(w["call_id"])] = dict(w)
        return state
