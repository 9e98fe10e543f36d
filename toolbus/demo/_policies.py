"""The demo's third part: the built-in policies deciding about calls before they run.

One executor, four tools, each behind one policy, played one after another:

- `search_catalog`, `rate_limit("2/second")`: four calls in one batch; two
  start, two wait for their turn (`tool:throttled`), then run.
- `exchange_rate`, `cache(ttl=60)`: the same call twice; the second is
  answered from the cache without running (`tool:cache-hit`).
- `status_page`, `circuit_breaker(failures=2, reset_after=0.3)`: two failures
  open it (`tool:circuit-open`); the next call is rejected at once; after the
  pause a trial call runs and closes it again.
- `deploy`, `requires_approval()`: the call ends `deferred` with an
  `ApprovalRequest`; a person approves it with an edit (another version),
  minted by the executor, and submitted again it runs with that version.
- `drop_table`, an input guardrail that trips on a production table: in an
  agent run's batch, the first drop runs, the second trips the wire
  (`tool:guardrail-tripped`), and the run is halted: the rest of the batch,
  and a later call of the run, end `HALTED` (`tool:run-halted`).

`play_policies()` runs them on a background thread and hands every call event,
every circuit change and a `Note` heading each step to the caller as delivered,
like `play()` does for the turn. `policies_part()` prints them and checks them.

One piece: the part's tools, its script and the checks of what the script
did are read side by side; split, each would make sense only with the others.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import bus
from ..executor import Executor, ExecutorStats
from ..models import BatchResult, ErrorCode, ToolCall, ToolResult
from ..policies import (
    CacheHit,
    CircuitChanged,
    GuardrailTripped,
    Throttled,
    Trip,
    cache,
    circuit_breaker,
    guardrail,
    rate_limit,
    requires_approval,
)
from ..retry import RetryPolicy
from ..tools import ToolError, ToolRegistry
from ._tools import Auth
from ._turn import DEMO_TOKEN, Player, TurnEvent, current_token
from ._view import checks_grid, event_line, short, show_part

__all__ = [
    "RATE",
    "RESET_AFTER",
    "Note",
    "PoliciesOutcome",
    "build_policies_registry",
    "play_policies",
    "policies_part",
]

RATE = "2/second"
RESET_AFTER = 0.3
"""Seconds the breaker stays open before it lets a trial call through."""

_INTRO = (
    "A policy decides about a call before its tool runs: let it go, make it wait, refuse it, "
    "answer it without running it, hold it for a person, or halt the agent run. One "
    "executor, five tools, each behind one of the built-in policies (toolbus.policies), "
    "called one after another."
)

_QUERIES = ("kettle", "teapot", "toaster", "mugs")


@dataclass
class _World:
    """What the tools of one run did: how often each ran."""

    ran: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, tool: str) -> int:
        with self.lock:
            self.ran[tool] = self.ran.get(tool, 0) + 1
            return self.ran[tool]


def build_policies_registry(world: _World) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[rate_limit(RATE)])
    def search_catalog(query: str) -> list[str]:
        """Search the product catalogue (its API allows two calls a second)."""
        world.count("search_catalog")
        time.sleep(0.05)
        return [f"{query} (steel)", f"{query} (ceramic)"]

    @reg.tool(read_only=True, policies=[cache(ttl=60)])
    def exchange_rate(base: str, quote: str) -> dict[str, object]:
        """Today's exchange rate (a slow upstream; its answer holds for a minute)."""
        world.count("exchange_rate")
        time.sleep(0.2)
        return {"base": base, "quote": quote, "rate": 11.62}

    @reg.tool(read_only=True, policies=[circuit_breaker(failures=2, reset_after=RESET_AFTER)])
    def status_page(region: str) -> dict[str, str]:
        """Service status of a region (its upstream is restarting: it fails twice)."""
        if world.count("status_page") <= 2:
            raise ConnectionError("503 from status API: upstream restarting")
        return {"region": region, "status": "operational"}

    @reg.tool(policies=[requires_approval(reason="a deploy changes production")])
    def deploy(service: str, version: str, auth: Auth) -> dict[str, object]:
        """Deploy a version of a service (mutating; needs the user's credentials)."""
        world.count("deploy")
        time.sleep(0.1)
        return {"service": service, "version": version, "deployed": True}

    @guardrail
    def no_production_tables(call: ToolCall) -> Trip | None:
        table = call.arguments.get("table", "") if isinstance(call.arguments, dict) else ""
        if str(table).startswith("prod_"):
            return Trip(f"the agent tried to drop {table}, a production table")
        return None

    @reg.tool(policies=[no_production_tables])
    def drop_table(table: str) -> str:
        """Drop a table (mutating)."""
        world.count("drop_table")
        return f"dropped {table}"

    return reg


def _inject_auth(call: ToolCall) -> ToolCall:
    """Pre-call hook: the turn's bearer token for `deploy` (as the turn's hook does)."""
    if call.name != "deploy":
        return call
    token = current_token.get()
    if token is None:
        raise ToolError("no credentials for this turn")
    args = call.arguments if isinstance(call.arguments, dict) else {}
    return call.with_arguments({**args, "auth": {"bearer_token": token}})


@dataclass(frozen=True, slots=True)
class Note:
    """A line between the events: what the next step does, `at` seconds in."""

    at: float
    text: str


@dataclass(frozen=True, slots=True)
class PoliciesOutcome:
    """What the policies part produced, once every event has been delivered."""

    throttled: BatchResult  # r1..r4, one batch against the rate limit
    miss: ToolResult  # k1: ran, stored
    hit: ToolResult  # k2: the same call, from the cache
    failed: tuple[ToolResult, ...]  # b1, b2: the failures that open the breaker
    refused: ToolResult  # b3: rejected by the open breaker
    trial: ToolResult  # b4: the trial after the pause
    deferred: ToolResult  # a1: held for approval
    approved: ToolResult  # a1 again, with an edited approval
    guarded: BatchResult  # g1..g3: the second trips the guardrail, the run halts
    after: ToolResult  # g4: a later call of the halted run
    ran: dict[str, int]  # how often each tool ran
    stats: ExecutorStats
    events: tuple[TurnEvent, ...]

    def of(self, kind: type[Any], signal: str | None = None) -> list[Any]:
        """The events of type `kind` (on `signal`, if given), in delivery order."""
        return [
            e.event
            for e in self.events
            if isinstance(e.event, kind) and (signal is None or e.signal == signal)
        ]


class _Part(Player):
    def wants(self, event: bus.Event) -> bool:
        # The calls' own events and the breaker's; the batch's: the turn showed those.
        return isinstance(event, bus.CallEvent | CircuitChanged | bus.RunHalted)

    def note(self, ex: Executor, text: str) -> None:
        ex.drain_events()  # every event before it is on the feed already
        self.feed.put(Note(time.monotonic() - self.started, text))

    def _play(self) -> PoliciesOutcome:
        world = _World()
        with Executor(
            build_policies_registry(world),
            max_parallel=4,
            timeout=5.0,
            retry=RetryPolicy(max_retries=0),
            pre_call=[_inject_auth],
        ) as ex:
            sub = bus.subscribe(self.receive, sender=ex)
            reset = current_token.set(DEMO_TOKEN)
            try:
                self.started = time.monotonic()
                outcome = self._steps(ex, world)
            finally:
                current_token.reset(reset)
                sub.close()
        return outcome

    def _steps(self, ex: Executor, world: _World) -> PoliciesOutcome:
        def call(cid: str, name: str, **arguments: Any) -> ToolCall:
            return ToolCall(id=cid, name=name, arguments=arguments)

        self.note(ex, f'rate_limit("{RATE}") on search_catalog: four calls in one batch')
        throttled = ex.execute_batch(
            [call(f"r{i}", "search_catalog", query=q) for i, q in enumerate(_QUERIES, 1)]
        )
        self.note(ex, "cache(ttl=60) on exchange_rate: the same call twice")
        miss = ex.execute(call("k1", "exchange_rate", base="EUR", quote="NOK"))
        hit = ex.execute(call("k2", "exchange_rate", base="EUR", quote="NOK"))
        self.note(
            ex,
            f"circuit_breaker(failures=2, reset_after={RESET_AFTER:g}) on status_page, "
            "whose upstream is restarting: three calls",
        )
        failed = tuple(ex.execute(call(f"b{i}", "status_page", region="eu-north")) for i in (1, 2))
        refused = ex.execute(call("b3", "status_page", region="eu-north"))
        self.note(ex, f"{RESET_AFTER:g} s later (the breaker's pause), one more call")
        # A genuine wait: the pause is what the breaker is for. The calls'
        # results, not the clock, say when each call ran.
        time.sleep(RESET_AFTER)
        trial = ex.execute(call("b4", "status_page", region="eu-north"))
        self.note(ex, 'requires_approval() on deploy; the model asks to deploy "billing" 2.4.1')
        a1 = call("a1", "deploy", service="billing", version="2.4.1")
        deferred = ex.execute(a1)
        request = deferred.approval_request
        if request is not None:
            self.note(
                ex,
                f"A person reviews {request.tool} {short(request.arguments_masked, 80)} "
                f"(digest {request.digest[:12]}…) and approves it with an edit, version "
                '2.4.2: ex.approve(request, arguments={...}, decided_by="ops lead")',
            )
            edit = ex.approve(
                request,
                arguments={"service": "billing", "version": "2.4.2"},
                decided_by="ops lead",
            )
            approved = ex.execute(a1, approval=edit)
        else:
            approved = deferred
        self.note(
            ex,
            "a guardrail on drop_table trips on production tables; an agent run drops "
            "staging_tmp, prod_orders, staging_cache",
        )
        tables = ("staging_tmp", "prod_orders", "staging_cache")
        guarded = ex.execute_batch(
            [call(f"g{i}", "drop_table", table=t) for i, t in enumerate(tables, 1)],
            agent_run="demo-run",
        )
        self.note(ex, "a later call of the same agent run")
        after = ex.execute(call("g4", "drop_table", table="staging_old"), agent_run="demo-run")
        ex.drain_events()
        with self.lock:
            events = tuple(self.events)
        with world.lock:
            ran = dict(world.ran)
        stats = ex.stats()
        return PoliciesOutcome(
            throttled,
            miss,
            hit,
            failed,
            refused,
            trial,
            deferred,
            approved,
            guarded,
            after,
            ran,
            stats,
            events,
        )


def play_policies() -> Iterator[TurnEvent | Note | PoliciesOutcome]:
    """Run the policies part; yield each event and note as delivered, then the outcome."""
    yield from _Part().stream("toolbus-demo-policies", PoliciesOutcome)


def _note_line(note: Note) -> Table:
    line = Table.grid(padding=(0, 1))
    line.add_column(justify="right", width=8, no_wrap=True)
    line.add_column(ratio=1, overflow="fold")
    line.add_row(Text(f"{note.at * 1000:.0f} ms", style="dim"), Text(f"▸ {note.text}", "bold"))
    return line


def policies_part(console: Console, *, wide: bool) -> int:
    """Play the policies part; print its events, a line per policy; its exit code."""
    outcome = show_part(
        console,
        "[bold]Policies[/]: decided before a call runs",
        _INTRO,
        play_policies(),
        PoliciesOutcome,
        lambda item: _note_line(item) if isinstance(item, Note) else event_line(item, wide=wide),
    )
    checks = _checks(outcome)
    console.print(checks_grid(checks))
    return 0 if all(ok for ok, _ in checks) else 1


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _checks(o: PoliciesOutcome) -> list[tuple[bool, str]]:
    """One line per policy, and whether it did what the script says."""
    # rate_limit: two calls were made to wait, and then every call ran.
    waits: dict[str, float] = {}
    for t in o.of(Throttled):
        waits.setdefault(t.call_id, t.wait)
    ran_at_once = [r.call_id for r in o.throttled if r.call_id not in waits]
    rate_ok = (
        len(waits) == 2 and all(r.ok for r in o.throttled) and o.ran.get("search_catalog") == 4
    )
    waited = ", ".join(f"{cid} {_ms(w)}" for cid, w in waits.items()) or "none"
    rate = (
        f'rate_limit("{RATE}"): {", ".join(ran_at_once)} started at once; waited for their '
        f"turn (tool:throttled): {waited}; then ran: "
        f"{sum(r.ok for r in o.throttled)} of {len(o.throttled)} ok"
    )
    # cache: the second identical call was answered without running.
    hits = [h.call_id for h in o.of(CacheHit)]
    cache_ok = (
        o.miss.ok
        and o.miss.metadata.get("cache") == "miss"
        and o.hit.ok
        and o.hit.metadata.get("cache") == "hit"
        and o.hit.attempts == 0
        and hits == [o.hit.call_id]
        and o.ran.get("exchange_rate") == 1
    )
    cached = (
        f"cache(ttl=60): k1 ran in {_ms(o.miss.duration)} (cache={o.miss.metadata.get('cache')}); "
        f"k2, the same call, answered in {_ms(o.hit.duration)} "
        f"(cache={o.hit.metadata.get('cache')}, attempts {o.hit.attempts}, tool:cache-hit); "
        f"the tool ran {_times(o.ran.get('exchange_rate', 0))}"
    )
    # circuit_breaker: opened by the second failure, refused the next call at
    # once, let the trial through after the pause, closed when it worked.
    changes = [(c.state, c.call_id) for c in o.of(CircuitChanged)]
    breaker_ok = (
        all(r.status == "error" for r in o.failed)
        and o.refused.status == "rejected"
        and o.refused.error_code is ErrorCode.CIRCUIT_OPEN
        and o.refused.attempts == 0
        and o.trial.ok
        and changes == [("open", "b2"), ("half-open", "b4"), ("closed", "b4")]
        and o.ran.get("status_page") == 3
    )
    code = o.refused.error_code.value if o.refused.error_code else "-"
    breaker = (
        f"circuit_breaker(failures=2, reset_after={RESET_AFTER:g}): b1, b2 failed and opened "
        f"it (tool:circuit-open); b3 {o.refused.status} ({code}) in "
        f"{_ms(o.refused.duration)}, without running; after "
        f"{RESET_AFTER:g} s b4 ran as the trial ({o.trial.status}) and closed it "
        "(tool:circuit-half-open, tool:circuit-closed)"
    )
    # requires_approval: deferred with a request, ran once approved with an edit.
    request = o.deferred.approval_request
    output = o.approved.output if isinstance(o.approved.output, dict) else {}
    approval_ok = (
        o.deferred.status == "deferred"
        and o.deferred.error_code is ErrorCode.APPROVAL_REQUIRED
        and request is not None
        and o.approved.ok
        and output.get("version") == "2.4.2"
        and o.ran.get("deploy") == 1
        and o.stats.deferred == 1
    )
    digest = f"digest {request.digest[:12]}…" if request is not None else "no request"
    approval = (
        f"requires_approval(): a1 {o.deferred.status} "
        f"({o.deferred.error_code.value if o.deferred.error_code else '-'}, {digest}), "
        f"nothing deployed; approved with an edit and submitted again: {o.approved.status}, "
        f"version {output.get('version')} deployed"
    )
    # guardrail: g1 ran, g2 tripped it and halted the run: g3 and g4 did not run.
    tripped = [t.call_id for t in o.of(GuardrailTripped)]
    halted = o.of(bus.RunHalted)
    statuses = [(r.status, r.error_code) for r in o.guarded]
    halted_code = ("cancelled", ErrorCode.HALTED)
    guard_ok = (
        statuses == [("ok", None), halted_code, halted_code]
        and (o.after.status, o.after.error_code) == halted_code
        and tripped == ["g2"]
        and [h.agent_run for h in halted] == ["demo-run"]
        and o.ran.get("drop_table") == 1
    )
    guard = (
        "guardrail on drop_table: g1 ran; g2 (prod_orders) tripped it "
        f"(tool:guardrail-tripped) and halted agent run demo-run (tool:run-halted); "
        f"g3 and the later g4 ended {o.after.status} ({o.after.error_code or '-'}), unrun"
    )
    texts = [repr(e.event) for e in o.events]
    results = (*o.throttled, o.miss, o.hit, *o.failed, o.refused, o.trial, *o.guarded, o.after)
    texts += [r.model_dump_json() for r in (*results, o.deferred, o.approved)]
    leaks = sum(DEMO_TOKEN in t for t in texts)
    return [
        (rate_ok, rate),
        (cache_ok, cached),
        (breaker_ok, breaker),
        (approval_ok, approval),
        (guard_ok, guard),
        (leaks == 0, f"bearer token found in {leaks} of {len(texts)} events and results"),
    ]
