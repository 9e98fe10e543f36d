"""The live state of one executor, built from its lifecycle events.

`LiveState.apply(record)` takes one event as a plain record (`_wire.encode`:
`seq`, `signal`, `timestamp` and the event's fields), so the same model is fed
in-process by a bus subscription (`live`, the status server) and across
processes from `/events` (`toolbus top`). `snapshot(now)` returns plain JSON
data (what `/status` serves as `state` and what the views draw), and
`LiveState.restore(snapshot)` rebuilds the model from it: a client loads
`/status`, restores, then applies the events after the snapshot's `seq`.

Pure: no threads, no I/O, no clock of its own (the caller passes `now`).
Thread-safe: one lock around every read and write, so a delivery thread may
apply events while a renderer takes snapshots.

What it tracks, from the moment it starts watching (the executor's own
counters since it started are `executor.stats()`):

- calls waiting for capacity (`tool:queued` until the call starts or ends),
  counted by what they wait for (`queues`), and how many waits began in all
  (`totals["queued"]`);
- calls in flight: tool, attempt, state, elapsed since the first attempt; one
  row per run (the record's `run`), so two calls a model gave the same id are
  two rows (records without `run` fall back to batch and call id);
- recent results and recent failures (bounded);
- per tool: calls by status and by outcome (status and error code), retries, timeouts, killed
  workers, latency percentiles (log-spaced buckets, within 2.5 %);
- totals: finished calls by status, retries, timeouts, killed workers, late
  results, batches; events by signal (signals defined later included);
- what the policies did (`_policy_state.py`): circuit breakers' states per
  tool (and key), calls throttled, cache hits, calls waiting for approval.

A tool name the registry did not know (`TOOL_NOT_FOUND`: one the model
invented) is counted under `<unknown>`, which bounds the number of rows.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bus import _signals as sig
from ._latency import Latencies
from ._names import UNKNOWN_TOOL
from ._policy_state import POLICY_SIGNALS, PolicyState

__all__ = [
    "POLICY_SIGNALS",
    "QUANTILES",
    "STATE_SIGNALS",
    "STATUSES",
    "UNKNOWN_TOOL",
    "Latencies",
    "LiveState",
]

STATUSES = ("ok", "error", "timeout", "rejected", "cancelled", "deferred")
# The lifecycle signals `apply` reads (it counts any other it is given, too, and
# reads the policies' own: `POLICY_SIGNALS`).
STATE_SIGNALS = (
    sig.QUEUED,
    sig.EXECUTING,
    sig.RETRY_ATTEMPT,
    sig.ERROR,
    sig.TIMEOUT,
    sig.KILLED,
    sig.LATE_RESULT,
    sig.PROGRESS,
    sig.FINISHED,
    sig.BATCH_START,
)
QUANTILES = (0.5, 0.95, 0.99)
_NAME_CHARS = 64  # a tool name the model made up is shown cut to this
_ERROR_CHARS = 300
_MAX_IN_FLIGHT = 10_000  # only reached if events were lost: the oldest go first


@dataclass(slots=True)
class _Call:
    call_id: str
    tool: str
    batch_id: str | None
    attempt: int
    started: float
    state: str = "running"
    detail: str | None = None
    fraction: float | None = None
    run: int = 0

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "run": self.run,
            "tool": self.tool,
            "batch_id": self.batch_id,
            "attempt": self.attempt,
            "started": self.started,
            "elapsed": max(0.0, now - self.started),
            "state": self.state,
            "detail": self.detail,
            "fraction": self.fraction,
        }


@dataclass(slots=True)
class _Tool:
    statuses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    outcomes: dict[str, int] = field(default_factory=dict)  # "status" or "status/CODE"
    retries: int = 0
    timeouts: int = 0
    killed: int = 0
    latencies: Latencies = field(default_factory=Latencies)

    def to_json(self, name: str, in_flight: int) -> dict[str, Any]:
        q = {f"p{round(x * 100)}": self.latencies.quantile(x) for x in QUANTILES}
        return {
            "tool": name,
            "calls": sum(self.statuses.values()),
            **self.statuses,
            "in_flight": in_flight,
            "retries": self.retries,
            "timeouts": self.timeouts,
            "killed": self.killed,
            "outcomes": dict(sorted(self.outcomes.items())),
            **q,
            "mean": self.latencies.mean,
            "max": self.latencies.max if self.latencies.count else None,
            "latency": self.latencies.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Tool:
        t = cls()
        for s in STATUSES:
            t.statuses[s] = int(data.get(s) or 0)
        t.outcomes = {str(k): int(v) for k, v in dict(data.get("outcomes") or {}).items()}
        t.retries = int(data.get("retries") or 0)
        t.timeouts = int(data.get("timeouts") or 0)
        t.killed = int(data.get("killed") or 0)
        t.latencies = Latencies.from_json(data.get("latency"))
        return t


# A call in flight: (batch id, call id, run); run 0 for a record without one.
_Key = tuple[str | None, str, int]

_TOTALS = (
    "finished", *STATUSES, "retries", "timeouts", "killed", "late_results", "batches", "queued",
)  # fmt: skip


def _name(value: Any) -> str:
    text = str(value) if value is not None else ""
    return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"


def _text(value: Any, limit: int = _ERROR_CHARS) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LiveState:
    """What an executor is doing, from its events. See the module's doc."""

    def __init__(self, *, recent: int = 50, errors: int = 20) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self._events = 0
        self._malformed = 0
        self._since: float | None = None
        self._in_flight: dict[_Key, _Call] = {}
        # Calls waiting for capacity now: what each waits for (`tool:queued`).
        self._waiting: dict[_Key, str] = {}
        self._recent: deque[dict[str, Any]] = deque(maxlen=recent)
        self._errors: deque[dict[str, Any]] = deque(maxlen=errors)
        self._tools: dict[str, _Tool] = {}
        self._totals: dict[str, int] = dict.fromkeys(_TOTALS, 0)
        self._signals: dict[str, int] = {}
        self._policies = PolicyState(_name)

    @property
    def seq(self) -> int:
        """The `seq` of the last event applied (0: none yet)."""
        with self._lock:
            return self._seq

    # -- feeding ------------------------------------------------------------------

    def apply(self, record: Mapping[str, Any]) -> bool:
        """Apply one event record; False if it was skipped.

        Skipped: an event at or before the `seq` already applied (a client
        resuming after a snapshot sees some twice), or a malformed record
        (counted as `malformed`, never raised: records may come off a wire).
        """
        with self._lock:
            try:
                seq = int(record.get("seq") or 0)
                if seq and seq <= self._seq:
                    return False
                self._apply(str(record["signal"]), record)
            # (OverflowError: a JSON number out of range, 1e400, is infinite)
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                self._malformed += 1
                return False
            if seq:
                self._seq = seq
            self._events += 1
            return True

    def apply_all(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Apply records in order; the number applied."""
        return sum(self.apply(r) for r in records)

    def _tool(self, name: str) -> _Tool:
        t = self._tools.get(name)
        if t is None:
            t = self._tools[name] = _Tool()
        return t

    def _apply(self, signal: str, r: Mapping[str, Any]) -> None:
        ts = float(r.get("timestamp") or 0.0)
        if self._since is None and ts:
            self._since = ts
        self._signals[signal] = self._signals.get(signal, 0) + 1
        if signal in POLICY_SIGNALS:
            self._policies.apply(signal, r, ts)
            return
        if signal in (sig.BATCH_START, sig.IN_DOUBT, sig.RUN_HALTED) or "call_id" not in r:
            if signal == sig.BATCH_START:
                self._totals["batches"] += 1
            return
        key = (r.get("batch_id"), str(r["call_id"]), int(r.get("run") or 0))
        call = self._in_flight.get(key)
        attempt = int(r.get("attempt") or 0)
        tool = _name(r.get("tool"))
        if signal != sig.QUEUED:
            self._waiting.pop(key, None)  # started, or ended, or moved on
        if signal == sig.QUEUED:
            self._totals["queued"] += 1
            if key not in self._waiting and len(self._waiting) >= _MAX_IN_FLIGHT:
                self._waiting.pop(next(iter(self._waiting)))
            self._waiting[key] = _name(r.get("group"))
        elif signal == sig.EXECUTING:
            if call is None:
                if len(self._in_flight) >= _MAX_IN_FLIGHT:
                    self._in_flight.pop(next(iter(self._in_flight)))
                call = self._in_flight[key] = _Call(key[1], tool, key[0], attempt, ts, run=key[2])
            call.attempt, call.state, call.detail, call.fraction = attempt, "running", None, None
        elif signal == sig.RETRY_ATTEMPT:
            self._totals["retries"] += 1
            self._tool(tool).retries += 1
            if call is not None:
                call.attempt, call.state = attempt, "retrying"
                call.detail = _text(r.get("previous_error"), 120)
        elif signal == sig.ERROR:
            if call is not None:
                call.state, call.detail = "failed", _text(r.get("error"), 120)
        elif signal == sig.TIMEOUT:
            self._totals["timeouts"] += 1
            self._tool(tool).timeouts += 1
            if call is not None:
                call.state, call.detail = "timed out", None
        elif signal == sig.KILLED:
            self._totals["killed"] += 1
            self._tool(tool).killed += 1
        elif signal == sig.LATE_RESULT:
            self._totals["late_results"] += 1
        elif signal == sig.PROGRESS:
            if call is not None:
                call.detail = _text(r.get("message"), 120)
                fraction = r.get("fraction")
                call.fraction = float(fraction) if fraction is not None else None
        elif signal == sig.FINISHED:
            self._finished(key, r, ts)

    def _finished(self, key: _Key, r: Mapping[str, Any], ts: float) -> None:
        self._in_flight.pop(key, None)
        result = r["result"]
        status = str(result["status"])
        code = result.get("error_code")
        tool = _name(r.get("tool") or result.get("name"))
        stats = self._tool(UNKNOWN_TOOL if code == "TOOL_NOT_FOUND" else tool)
        if status in stats.statuses:
            stats.statuses[status] += 1
            self._totals[status] += 1
        outcome = f"{status}/{code}" if code else status
        stats.outcomes[outcome] = stats.outcomes.get(outcome, 0) + 1
        attempts = int(result.get("attempts") or 0)
        duration = float(result.get("duration") or 0.0)
        if attempts:  # a call that never started has no latency
            stats.latencies.add(duration)
        self._totals["finished"] += 1
        entry = {
            "seq": int(r.get("seq") or 0),
            "timestamp": ts,
            "call_id": key[1],
            "batch_id": key[0],
            "tool": tool,
            "status": status,
            "error_code": code,
            "error": _text(result.get("error")),
            "duration": duration,
            "attempts": attempts,
        }
        self._recent.append(entry)
        if status not in ("ok", "deferred"):  # a deferred call waits, it did not fail
            self._errors.append(entry)
        self._policies.finished(r, tool, status, ts)

    # -- reading ------------------------------------------------------------------

    def snapshot(self, now: float) -> dict[str, Any]:
        """The state as plain JSON data; `now` (epoch seconds) gives calls their elapsed time.

        Keys: `seq`, `events`, `malformed`, `since` (the first event's time),
        `totals`, `in_flight` (oldest first), `recent` and `errors` (newest
        first), `tools` (by name, with `p50`/`p95`/`p99`/`mean`/`max` in
        seconds and the `latency` buckets), `signals` (events by signal),
        `policies` (`PolicyState.to_json`: `breakers`, `tools`, `waiting`, `totals`),
        `queued` (the calls waiting for capacity now, oldest first: `call_id`,
        `batch_id`, `run`, `group`) and `queues` (how many wait, by `group`).
        """
        with self._lock:
            per_tool: dict[str, int] = {}
            for call in self._in_flight.values():
                per_tool[call.tool] = per_tool.get(call.tool, 0) + 1
            queues: dict[str, int] = {}
            for group in self._waiting.values():
                queues[group] = queues.get(group, 0) + 1
            names = sorted(set(self._tools) | set(per_tool))
            return {
                "seq": self._seq,
                "events": self._events,
                "malformed": self._malformed,
                "since": self._since,
                "totals": dict(self._totals),
                "in_flight": [
                    c.to_json(now)
                    for c in sorted(self._in_flight.values(), key=lambda c: c.started)
                ],
                "recent": list(reversed(self._recent)),
                "errors": list(reversed(self._errors)),
                "tools": [
                    self._tools.get(n, _Tool()).to_json(n, per_tool.get(n, 0)) for n in names
                ],
                "signals": dict(sorted(self._signals.items())),
                "policies": self._policies.to_json(),
                "queued": [
                    {"call_id": k[1], "batch_id": k[0], "run": k[2], "group": group}
                    for k, group in self._waiting.items()
                ],
                "queues": dict(sorted(queues.items())),
            }

    @classmethod
    def restore(
        cls, snapshot: Mapping[str, Any], *, recent: int = 50, errors: int = 20
    ) -> LiveState:
        """A state rebuilt from `snapshot(...)`'s data (as `/status` serves it)."""
        state = cls(recent=recent, errors=errors)
        state._seq = int(snapshot.get("seq") or 0)
        state._events = int(snapshot.get("events") or 0)
        state._malformed = int(snapshot.get("malformed") or 0)
        since = snapshot.get("since")
        state._since = float(since) if since is not None else None
        for k, v in dict(snapshot.get("totals") or {}).items():
            if k in state._totals:
                state._totals[k] = int(v)
        for c in snapshot.get("in_flight") or ():
            call = _Call(
                str(c["call_id"]),
                _name(c.get("tool")),
                c.get("batch_id"),
                int(c.get("attempt") or 0),
                float(c.get("started") or 0.0),
                str(c.get("state") or "running"),
                c.get("detail"),
                c.get("fraction"),
                int(c.get("run") or 0),
            )
            state._in_flight[(call.batch_id, call.call_id, call.run)] = call
        state._recent.extend(reversed([dict(e) for e in snapshot.get("recent") or ()]))
        state._errors.extend(reversed([dict(e) for e in snapshot.get("errors") or ()]))
        for t in snapshot.get("tools") or ():
            state._tools[_name(t["tool"])] = _Tool.from_json(t)
        state._signals = {str(k): int(v) for k, v in dict(snapshot.get("signals") or {}).items()}
        state._policies = PolicyState.from_json(snapshot.get("policies"), _name)
        for q in snapshot.get("queued") or ():
            key = (q.get("batch_id"), str(q["call_id"]), int(q.get("run") or 0))
            state._waiting[key] = _name(q.get("group"))
        return state
