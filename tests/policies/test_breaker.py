"""circuit_breaker: the state machine on a fake clock, then through an executor."""

from __future__ import annotations

import threading
import time

import pytest
import tenacity

from tests.conftest import MakeExecutor
from tests.policy_clock import FakeClock, call, probe, result
from toolbus import (
    AttemptFailure,
    ErrorCode,
    Executor,
    RetryDecision,
    RetryPolicy,
    ToolCall,
    ToolError,
    ToolRegistry,
    bus,
)
from toolbus.models import Status
from toolbus.policies import (
    CIRCUIT_CLOSED,
    CIRCUIT_HALF_OPEN,
    CIRCUIT_OPEN,
    Admit,
    BasePolicy,
    CircuitBreaker,
    CircuitChanged,
    Decision,
    Reject,
    circuit_breaker,
)
from toolbus.policies._signals import asking, done_asking


def ask(b: CircuitBreaker, c: ToolCall, now: float) -> Admit | Reject:
    decision = b.admit(c, probe, now)
    assert isinstance(decision, Admit | Reject), decision
    return decision


def run(
    b: CircuitBreaker, now: float, status: Status, name: str = "probe", **kw: object
) -> ToolCall:
    """A call admitted at `now` and ended with `status` at once."""
    c = call(name=name)
    assert isinstance(ask(b, c, now), Admit)
    b.on_result(c, result(c, status, **kw), now)  # type: ignore[arg-type]
    return c


def opened(b: CircuitBreaker, now: float = 0.0) -> None:
    for _ in range(b.failures):
        run(b, now, "error")
    assert b.state("probe") == "open"


# -- the state machine on a fake clock ------------------------------------------------------


def test_failures_in_a_row_open_it_and_open_rejects_at_once() -> None:
    b = circuit_breaker(failures=3, window=60, reset_after=30)
    run(b, 0.0, "error")
    run(b, 1.0, "timeout")
    assert b.state("probe") == "closed"
    run(b, 2.0, "error", code=ErrorCode.TOOL_CRASHED)
    assert b.state("probe") == "open"
    refused = ask(b, call(), 10.0)
    assert isinstance(refused, Reject) and refused.code is ErrorCode.CIRCUIT_OPEN
    assert "failed 3 times in a row" in refused.message and "in 22 s" in refused.message


def test_one_failure_is_told_as_one() -> None:
    b = circuit_breaker(failures=1, window=60, reset_after=30)
    run(b, 0.0, "error")
    refused = ask(b, call(), 1.0)
    assert isinstance(refused, Reject)
    assert "not being called: it failed, so its circuit breaker is open" in refused.message


def test_a_success_clears_the_failures_and_old_failures_leave_the_window() -> None:
    b = circuit_breaker(failures=3, window=10, reset_after=30)
    run(b, 0.0, "error")
    run(b, 1.0, "error")
    run(b, 2.0, "ok")
    run(b, 3.0, "error")
    run(b, 4.0, "error")
    assert b.state("probe") == "closed"  # two in a row since the success
    run(b, 20.0, "error")  # the two before are older than the window
    assert b.state("probe") == "closed"
    run(b, 21.0, "error")
    run(b, 22.0, "error")
    assert b.state("probe") == "open"


@pytest.mark.parametrize("status", ["rejected", "cancelled", "deferred"])
def test_calls_that_did_not_fail_the_tool_are_not_failures(status: Status) -> None:
    b = circuit_breaker(failures=1)
    run(b, 0.0, status)
    run(b, 0.0, "cancelled", attempts=1)  # cancelled while it ran: the caller's choice
    run(b, 0.0, "error", attempts=0)  # an error that never ran the tool (a cache's answer)
    assert b.state("probe") == "closed"


def test_a_call_its_budget_ended_between_attempts_is_no_evidence() -> None:
    """Review of issue 21: a call whose retry was still queued when its whole
    call's deadline came (`DEADLINE_EXCEEDED`, attempts 1, no `tool:timeout`)
    opened a breaker, though the caller's budget ended it, not the tool."""
    b = circuit_breaker(failures=1)
    c = call()
    assert isinstance(ask(b, c, 0.0), Admit)
    spent = result(c, "timeout", code=ErrorCode.DEADLINE_EXCEEDED)
    b.on_result(c, spent.model_copy(update={"metadata": {"between_attempts": True}}), 0.0)
    assert b.state("probe") == "closed"
    run(b, 0.0, "timeout", code=ErrorCode.DEADLINE_EXCEEDED)  # a hung attempt it cut short
    assert b.state("probe") == "open"


def test_calls_that_share_an_id_are_each_counted() -> None:
    """Review of issue 21: admitted calls were known by their id, which a
    model may repeat: of two calls both named "dup", the second's success
    went unheard, and the failures before and after it opened the circuit."""
    b = circuit_breaker(failures=2)
    first, second = call(1, id="dup"), call(2, id="dup")
    assert isinstance(ask(b, first, 0.0), Admit) and isinstance(ask(b, second, 0.0), Admit)
    b.on_result(first, result(first, "error"), 0.0)
    b.on_result(second, result(second, "ok"), 0.0)  # clears the failure before it
    run(b, 1.0, "error")
    assert b.state("probe") == "closed"


def test_after_the_pause_one_trial_runs_and_its_success_closes_it() -> None:
    b = circuit_breaker(failures=2, reset_after=30)
    opened(b, 0.0)
    assert isinstance(ask(b, call(), 29.9), Reject)
    trial = call()
    assert isinstance(ask(b, trial, 30.0), Admit)
    assert b.state("probe") == "half-open"
    other = ask(b, call(), 31.0)  # the trial runs: the others are still rejected
    assert isinstance(other, Reject) and other.code is ErrorCode.CIRCUIT_OPEN
    assert "trial call" in other.message
    b.on_result(trial, result(trial, "ok"), 32.0)
    assert b.state("probe") == "closed"
    assert isinstance(ask(b, call(), 32.0), Admit)


def test_a_failed_trial_opens_it_again_for_another_pause() -> None:
    b = circuit_breaker(failures=2, reset_after=30)
    opened(b, 0.0)
    trial = call()
    assert isinstance(ask(b, trial, 30.0), Admit)
    b.on_result(trial, result(trial, "timeout"), 35.0)
    assert b.state("probe") == "open"
    assert isinstance(ask(b, call(), 64.9), Reject)  # 30 s from the failed trial
    assert isinstance(ask(b, call(), 65.0), Admit)


@pytest.mark.parametrize("status", ["rejected", "cancelled", "deferred"])
def test_a_trial_that_ends_saying_nothing_lets_the_next_call_be_the_trial(status: Status) -> None:
    """Never stuck half-open: a trial rejected by a later policy (or cancelled
    while it waited, or deferred) is reported with no attempt; the next call
    is the trial."""
    b = circuit_breaker(failures=1, reset_after=30)
    opened(b, 0.0)
    trial = call()
    assert isinstance(ask(b, trial, 30.0), Admit)
    b.on_result(trial, result(trial, status, attempts=0), 30.5)
    assert b.state("probe") == "half-open"
    second = call()
    assert isinstance(ask(b, second, 31.0), Admit)
    b.on_result(second, result(second, "ok"), 31.5)
    assert b.state("probe") == "closed"


def test_a_trial_never_heard_of_lapses() -> None:
    b = circuit_breaker(failures=1, reset_after=30)
    opened(b, 0.0)
    assert isinstance(ask(b, call(), 30.0), Admit)  # its result never comes
    assert isinstance(ask(b, call(), 59.9), Reject)
    late = call()
    assert isinstance(ask(b, late, 60.0), Admit)  # presumed lost: another trial
    b.on_result(late, result(late, "ok"), 61.0)
    assert b.state("probe") == "closed"


def test_results_of_calls_admitted_before_it_opened_do_not_count() -> None:
    b = circuit_breaker(failures=2, reset_after=30)
    slow_ok, slow_fail = call(), call()
    assert isinstance(ask(b, slow_ok, 0.0), Admit)
    assert isinstance(ask(b, slow_fail, 0.0), Admit)
    opened(b, 1.0)
    b.on_result(slow_ok, result(slow_ok, "ok"), 2.0)  # no: it started before the failures
    assert b.state("probe") == "open"
    b.on_result(slow_fail, result(slow_fail, "error"), 29.0)  # nor does this prolong the pause
    assert isinstance(ask(b, call(), 31.0), Admit)


def test_a_circuit_per_key_and_a_key_that_fails() -> None:
    b = circuit_breaker(failures=1, key=lambda c: c.arguments["user"])  # type: ignore[index]
    c = call(user="ann")
    assert isinstance(ask(b, c, 0.0), Admit)
    b.on_result(c, result(c, "error"), 0.0)
    assert b.state("ann") == "open" and b.state("bob") == "closed"
    assert isinstance(ask(b, call(user="ann"), 1.0), Reject)
    assert isinstance(ask(b, call(user="bob"), 1.0), Admit)
    failed = ask(b, ToolCall(name="probe", arguments={}), 1.0)
    assert isinstance(failed, Reject) and failed.code is ErrorCode.TOOL_UNAVAILABLE
    assert "circuit_breaker(1 in 60 s, per key)" in failed.message


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"failures": 0}, "failures"),
        ({"window": -1}, "window"),
        ({"reset_after": 0}, "reset_after"),
        ({"key": "user"}, "key must be a function"),
    ],
)
def test_options_are_checked_when_made(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises((TypeError, ValueError), match="circuit_breaker") as caught:
        circuit_breaker(**kwargs)  # type: ignore[arg-type]
    assert words in str(caught.value)


# -- through an executor ------------------------------------------------------------------


class FlakyService:
    """A tool's backend that is down while `down` is set."""

    def __init__(self) -> None:
        self.down = True
        self.calls = 0
        self.lock = threading.Lock()
        self.entered = threading.Event()
        self.proceed = threading.Event()
        self.proceed.set()

    def __call__(self, n: int) -> int:
        with self.lock:
            self.calls += 1
        self.entered.set()
        assert self.proceed.wait(10)
        if self.down:
            raise ToolError("the service is down")
        return n


def registry_with(service: FlakyService, **options: object) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, **options)  # type: ignore[call-overload]
    def lookup(n: int) -> int:
        return service(n)

    return reg


def lookup(n: int) -> ToolCall:
    return ToolCall(id=f"l{n}", name="lookup", arguments={"n": n})


def test_through_an_executor_it_opens_rejects_half_opens_and_closes(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    clock = FakeClock()
    breaker = circuit_breaker(failures=3, window=60, reset_after=30, clock=clock)
    service = FlakyService()
    ex = make_executor(registry_with(service), policies=[breaker])
    for n in range(3):
        assert ex.execute(lookup(n)).status == "error"
    (opening,) = recorder.wait_for(CIRCUIT_OPEN)
    assert isinstance(opening, CircuitChanged)
    assert (opening.tool, opening.state, opening.failures, opening.call_id) == (
        "lookup",
        "open",
        3,
        "l2",
    )
    rejected = ex.execute(lookup(3))
    assert rejected.status == "rejected" and rejected.error_code is ErrorCode.CIRCUIT_OPEN
    assert rejected.attempts == 0 and service.calls == 3, "an open circuit never runs the tool"

    clock.advance(30)
    service.down = False
    service.proceed.clear()
    service.entered.clear()
    outcome: list[str] = []
    trial = threading.Thread(target=lambda: outcome.append(ex.execute(lookup(4)).status))
    trial.start()
    assert service.entered.wait(10)  # the trial is running
    (half,) = recorder.wait_for(CIRCUIT_HALF_OPEN)
    assert half.state == "half-open" and half.call_id == "l4"
    meanwhile = ex.execute(lookup(5))
    assert meanwhile.status == "rejected" and meanwhile.error_code is ErrorCode.CIRCUIT_OPEN
    service.proceed.set()
    trial.join(timeout=10)
    assert outcome == ["ok"]
    (closing,) = recorder.wait_for(CIRCUIT_CLOSED)
    assert closing.state == "closed" and closing.call_id == "l4" and closing.failures == 0
    assert ex.execute(lookup(6)).status == "ok"
    states = [e.state for e in recorder.of(CIRCUIT_OPEN) + recorder.of(CIRCUIT_HALF_OPEN)
              + recorder.of(CIRCUIT_CLOSED)]  # fmt: skip
    assert sorted(states) == ["closed", "half-open", "open"]


@pytest.mark.parametrize("timeout", [None, float("inf")])
def test_a_trial_without_a_timeout_is_never_presumed_lost(
    make_executor: MakeExecutor, timeout: float | None
) -> None:
    """No timeout (None, as math.inf) has no end to count `reset_after`
    from: while the trial runs, however long, the others are rejected."""
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=30, clock=clock)
    service = FlakyService()
    ex = make_executor(registry_with(service), policies=[breaker], timeout=timeout)
    assert ex.execute(lookup(0)).status == "error"
    clock.advance(30)
    service.down = False
    service.proceed.clear()
    service.entered.clear()
    outcome: list[str] = []
    trial = threading.Thread(target=lambda: outcome.append(ex.execute(lookup(1)).status))
    trial.start()
    try:
        assert service.entered.wait(10)  # the trial is running
        clock.advance(3600)
        meanwhile = ex.execute(lookup(2))
        assert meanwhile.status == "rejected" and meanwhile.error_code is ErrorCode.CIRCUIT_OPEN
    finally:
        service.proceed.set()
        trial.join(timeout=10)
    assert outcome == ["ok"] and service.calls == 2


def test_a_trial_still_retrying_is_not_presumed_lost(make_executor: MakeExecutor) -> None:
    """A trial may go on for all its attempts' timeouts and the backoffs
    between them: it is not presumed lost `reset_after` after one attempt's
    timeout, which would let a second trial run beside it."""
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=30, clock=clock)
    service = FlakyService()
    retry = RetryPolicy(max_retries=3, backoff_base=1, max_backoff=1, jitter=0)
    ex = make_executor(registry_with(service, retry=retry), policies=[breaker], timeout=10)
    service.down = False
    service.proceed.clear()
    first = ex.submit(lookup(0))
    assert service.entered.wait(10)
    service.down = True
    service.proceed.set()
    assert first.result(timeout=30).status == "error"
    assert breaker.state("lookup") == "open"
    clock.advance(30)
    service.down = False
    service.proceed.clear()
    service.entered.clear()
    trial = ex.submit(lookup(1))
    try:
        assert service.entered.wait(10)  # the trial is running (it may retry 3 times)
        # Past one attempt's timeout and the pause (10 + 30), within its
        # whole span (4 x 10 + 3 x 1 + 30): still its trial's.
        clock.advance(60)
        meanwhile = ex.execute(lookup(2))
        assert meanwhile.status == "rejected" and meanwhile.error_code is ErrorCode.CIRCUIT_OPEN
    finally:
        service.proceed.set()
    assert trial.result(timeout=30).status == "ok" and service.calls == 2


def test_a_failed_trial_reopens_it_with_an_event(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=10, clock=clock)
    service = FlakyService()
    ex = make_executor(registry_with(service), policies=[breaker])
    assert ex.execute(lookup(1)).status == "error"
    clock.advance(10)
    assert ex.execute(lookup(2)).status == "error"  # the trial, still down
    opens = recorder.wait_for(CIRCUIT_OPEN, 2)
    assert [e.call_id for e in opens] == ["l1", "l2"]
    assert [e.call_id for e in recorder.wait_for(CIRCUIT_HALF_OPEN)] == ["l2"]
    assert ex.execute(lookup(3)).error_code is ErrorCode.CIRCUIT_OPEN


def test_retries_end_first_the_breaker_hears_the_terminal_result(
    make_executor: MakeExecutor,
) -> None:
    breaker = circuit_breaker(failures=2)
    attempts: list[int] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=3, backoff_base=0.001))
    def shaky(n: int) -> int:
        attempts.append(n)
        if len(attempts) % 3:  # fails twice, then works
            raise ConnectionError("blip")
        return n

    ex = make_executor(reg, policies=[breaker])
    for n in range(3):
        assert ex.execute(ToolCall(name="shaky", arguments={"n": n})).status == "ok"
    assert len(attempts) == 9 and breaker.state("shaky") == "closed"


def test_a_retry_left_queued_past_the_calls_deadline_does_not_open_it(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    breaker = circuit_breaker(failures=1)
    blocker_queued = threading.Event()
    release = threading.Event()
    reg = ToolRegistry()

    @reg.tool(read_only=True, retry=RetryPolicy(max_retries=3, backoff_base=0.001, jitter=0))
    def flaky() -> str:
        blocker_queued.wait(30)  # the blocker is next in line for the one slot
        raise ConnectionError("down")

    @reg.tool(read_only=True)
    def blocker() -> str:
        release.wait(30)
        return "done"

    ex = make_executor(reg, max_parallel=1, policies=[breaker])
    # The budget must outlast the first attempt, which waits for the test to
    # queue the blocker: 3 s, as 0.5 s could run out first on a busy machine
    # (an attempt's timeout, not a retry left queued).
    handle = ex.submit(ToolCall(name="flaky", id="x"), call_timeout=3.0)
    recorder.wait_for(bus.EXECUTING, timeout=30, where=lambda e: e.call_id == "x")
    held = ex.submit(ToolCall(name="blocker", id="b"))
    recorder.wait_for(bus.QUEUED, timeout=30, where=lambda e: e.call_id == "b")
    blocker_queued.set()
    try:
        spent = handle.result(30)
    finally:
        release.set()
    assert (spent.status, spent.error_code, spent.attempts) == (
        "timeout",
        ErrorCode.DEADLINE_EXCEEDED,
        1,
    )
    assert held.result(30).status == "ok"
    assert breaker.state("flaky") == "closed"
    ex.drain_events(30)
    assert not [e for n, e in recorder.events if n == bus.TIMEOUT and e.call_id == "x"]


class RejectFirst(BasePolicy):
    """A later policy that rejects the first call it is asked about."""

    name = "reject-first"

    def __init__(self) -> None:
        self.asked = 0

    def admit(self, call: ToolCall, tool: object, now: float) -> Decision:  # type: ignore[override]
        self.asked += 1
        if self.asked == 1:
            return Reject(ErrorCode.TOOL_NOT_ALLOWED, "not this one")
        return Admit()


def test_a_trial_rejected_by_a_later_policy_does_not_leave_it_half_open(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=5, clock=clock)
    later = RejectFirst()
    service = FlakyService()
    ex = make_executor(registry_with(service, policies=[later]), policies=[breaker])
    later.asked = 1  # let the failure through
    assert ex.execute(lookup(1)).status == "error"
    later.asked = 0  # the next call it is asked about, the trial, it rejects
    clock.advance(5)
    service.down = False
    trial = ex.execute(lookup(2))
    assert trial.status == "rejected" and trial.error_code is ErrorCode.TOOL_NOT_ALLOWED
    assert breaker.state("lookup") == "half-open"
    assert ex.execute(lookup(3)).status == "ok"  # the next call was the trial
    assert breaker.state("lookup") == "closed"
    assert [e.call_id for e in recorder.wait_for(CIRCUIT_CLOSED)] == ["l3"]


def test_a_key_taken_from_a_secret_argument_is_published_masked(
    make_executor: MakeExecutor, recorder: bus.Recorder
) -> None:
    """tool:circuit-*'s `key` is masked like the arguments (review 10)."""
    secret = "sk-BREAKER-SECRET-42"
    reg = ToolRegistry()
    breaker = circuit_breaker(failures=1, key=lambda c: c.arguments["token"])  # type: ignore[index]

    @reg.tool(read_only=True, policies=[breaker])
    def fetch(token: str) -> str:
        """Always fails."""
        raise ToolError("down")

    ex = make_executor(reg)
    assert (
        ex.execute(ToolCall(id="f1", name="fetch", arguments={"token": secret})).status == "error"
    )
    (opening,) = recorder.wait_for(CIRCUIT_OPEN)
    assert (opening.key, opening.call_id, opening.tool) == ("***", "f1", "fetch")
    assert breaker.state(secret) == "open"  # the caller's own API takes the key as it is


LONG_SECRET = "sk-live-" + "Q7wZ3kP9" * 30  # 248 characters


def _pieces(text: str, secret: str, size: int = 8) -> list[str]:
    """The pieces of `secret` (`size` characters) that `text` shows."""
    return [
        secret[i : i + size] for i in range(len(secret) - size + 1) if secret[i : i + size] in text
    ]


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        # int() quotes 200 characters of its argument: no whole secret to scrub.
        (lambda c: int(c.arguments["api_key"]), "ValueError: invalid literal for int()"),
        # A text longer than the refusal quotes, cut inside the secret.
        (lambda c: {}[f"{'x' * 150} tenant of {c.arguments['api_key']}"], "KeyError: 'xxx"),
    ],
)
def test_a_failing_key_quotes_no_piece_of_a_long_secret(
    make_executor: MakeExecutor, recorder: bus.Recorder, key: object, shown: str
) -> None:
    """A key function's error text was cut (by toolbus, or by `int()`) before
    the executor scrubbed it: 159 characters of a 248-character key showed."""
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[circuit_breaker(failures=3, key=key)])  # type: ignore[arg-type]
    def fetch(url: str, api_key: str) -> str:
        """Fetches."""
        return url

    ex = make_executor(reg)
    r = ex.execute(ToolCall(id="k1", name="fetch", arguments={"url": "u", "api_key": LONG_SECRET}))
    assert ex.drain_events()
    assert r.error_code is ErrorCode.TOOL_UNAVAILABLE
    assert shown in (r.error or "") and "***" in (r.error or "")
    assert _pieces(r.error or "", LONG_SECRET) == []
    (rejected,) = recorder.of(bus.REJECTED)
    (finished,) = recorder.of(bus.FINISHED)
    assert _pieces(repr([rejected, finished]), LONG_SECRET) == []


def test_a_quoted_text_loses_pieces_of_secrets_not_words() -> None:
    """What `key_of` quotes of a key function's error: a run of 8 characters
    of a hidden value anywhere, or its beginning at the end (where a cut
    falls), is masked; a shorter run in the middle is a word of the message."""
    from toolbus.masking import Scrubber
    from toolbus.policies._signals import asking, done_asking, scrub_quote

    secret = "Hunter2-passphrase-0042"
    token = asking(None, None, None, Scrubber([secret]))
    try:
        assert scrub_quote(f"no {secret} here", 200) == "no *** here"
        assert scrub_quote(f"cut: {secret[5:17]}!", 200) == "cut: ***!"
        assert scrub_quote(f"end: {secret[:5]}", 200) == "end: ***"
        assert scrub_quote("a passphrase-less key", 200) == "a ***less key"
        assert scrub_quote("a pass key", 200) == "a pass key"
        assert scrub_quote("x" * 10 + secret[:15] + "y" * 50, 20) == "x" * 10 + "***..."
    finally:
        done_asking(token)
    assert scrub_quote("x" * 300, 200) == "x" * 200 + "..."  # outside an ask: cut only


class _RetryingLong(Executor):
    """Retries with a delay of its own (`should_retry`): nothing a breaker can read."""

    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
        return RetryDecision(retry=failure.attempt < 6, delay=100.0)


def _opened(breaker: CircuitBreaker, clock: FakeClock) -> None:
    """`lookup`'s circuit opened, then its pause over: the next call is the trial."""
    run(breaker, 0.0, "error", name="lookup")
    assert breaker.state("lookup") == "open"
    clock.advance(30)


@pytest.mark.parametrize("retries", ["tenacity", "hook", "plain"])
def test_a_trial_lapses_when_it_ends_never_at_a_guessed_span(
    make_executor: MakeExecutor, retries: str
) -> None:
    """Without a whole-call deadline, how long a trial may go on retrying is
    not guessed (a tenacity strategy, a `should_retry` delay, 6 x 10 s + 5 x
    100 s here): while it has not ended, however long, no second trial runs."""
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=30, clock=clock)
    service = FlakyService()
    reg = registry_with(service)
    if retries == "hook":
        ex: Executor = _RetryingLong(reg, policies=[breaker], timeout=10)
    else:
        retry = (
            RetryPolicy(stop=tenacity.stop_after_attempt(6), wait=tenacity.wait_fixed(100))
            if retries == "tenacity"
            else None
        )
        ex = make_executor(reg, policies=[breaker], timeout=10, retry=retry)
    try:
        _opened(breaker, clock)
        service.down = False
        service.proceed.clear()
        trial = ex.submit(lookup(1))
        try:
            assert service.entered.wait(10)  # the trial runs
            clock.advance(10_000)  # far past one attempt's timeout and the pause
            meanwhile = ex.execute(lookup(2))
            assert meanwhile.error_code is ErrorCode.CIRCUIT_OPEN, meanwhile
        finally:
            service.proceed.set()
        assert trial.result(timeout=30).status == "ok" and service.calls == 1
        assert breaker.state("lookup") == "closed"
    finally:
        ex.close()


def test_a_trial_cancelled_while_it_runs_lets_the_next_call_be_the_trial(
    make_executor: MakeExecutor,
) -> None:
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=30, clock=clock)
    service = FlakyService()
    ex = make_executor(registry_with(service), policies=[breaker], timeout=None)
    _opened(breaker, clock)
    service.down = False
    service.proceed.clear()
    trial = ex.submit(lookup(1))
    assert service.entered.wait(10)
    assert trial.cancel()
    assert trial.result(timeout=30).status == "cancelled"
    service.proceed.set()
    # Told how the trial ended (`on_result`): no evidence, the next call is the trial.
    nxt = ex.execute(lookup(2))
    assert nxt.status == "ok", nxt
    assert breaker.state("lookup") == "closed"


@pytest.mark.parametrize("due", [60.0, None])
def test_a_trial_never_heard_of_lapses_after_its_whole_call_deadline(due: float | None) -> None:
    """The whole-call deadline is the safety bound: a trial unheard of
    `reset_after` after it is presumed lost (without one, never)."""
    clock = FakeClock()
    breaker = circuit_breaker(failures=1, reset_after=30, clock=clock)
    _opened(breaker, clock)
    # As an executor asks: attempts of 10 s, a whole-call budget of 60 s (or none).
    token = asking(None, None, 10.0, due=None if due is None else time.monotonic() + due)
    try:
        assert isinstance(ask(breaker, call(1, name="lookup"), 0.0), Admit)  # never told
        clock.advance(80)  # within the deadline and the pause
        assert isinstance(ask(breaker, call(2, name="lookup"), 0.0), Reject)
        clock.advance(20)  # past them: presumed lost (with a deadline)
        later = ask(breaker, call(3, name="lookup"), 0.0)
        assert isinstance(later, Admit if due is not None else Reject), later
    finally:
        done_asking(token)
