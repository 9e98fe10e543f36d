"""quota: a budget of calls, counted at submission, never overshot."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import MakeExecutor
from tests.policy_clock import FakeClock, call, probe, result
from toolbus import ErrorCode, Executor, RetryPolicy, ToolCall, ToolRegistry
from toolbus.models import Status
from toolbus.policies import Admit, Quota, Reject, quota, requires_approval


def ask(q: Quota, c: ToolCall, now: float) -> Admit | Reject:
    decision = q.admit(c, probe, now)
    assert isinstance(decision, Admit | Reject), decision
    return decision


# -- decisions on a fake clock --------------------------------------------------------


def test_a_lifetime_budget_admits_n_then_rejects_until_reset() -> None:
    q = quota(3)
    assert q.at_submission
    assert [type(ask(q, call(n), 0.0)) for n in range(5)] == [Admit, Admit, Admit, Reject, Reject]
    refused = ask(q, call(), 99.0)
    assert isinstance(refused, Reject) and refused.code is ErrorCode.QUOTA_EXCEEDED
    assert "at most 3 calls" in refused.message and "'probe'" in refused.message
    assert q.used("probe") == 3
    q.reset()
    assert isinstance(ask(q, call(), 100.0), Admit)
    assert q.used("probe") == 1


def test_a_window_counts_the_calls_of_the_last_window_seconds() -> None:
    clock = FakeClock()
    q = quota(2, window=10.0, clock=clock)
    assert isinstance(ask(q, call(), 0.0), Admit)  # at 1000
    clock.advance(4.0)
    assert isinstance(ask(q, call(), 0.0), Admit)  # at 1004
    clock.advance(2.0)
    refused = ask(q, call(), 0.0)  # at 1006: both count, the first leaves at 1010
    assert isinstance(refused, Reject) and refused.code is ErrorCode.QUOTA_EXCEEDED
    assert "in any 10 s" in refused.message and "in 4 s" in refused.message
    clock.set(1010.0)  # a sliding count: the first is out of the window
    assert isinstance(ask(q, call(), 0.0), Admit)
    assert q.used("probe") == 2
    clock.set(1013.9)
    assert isinstance(ask(q, call(), 0.0), Reject)
    clock.set(1014.0)
    assert isinstance(ask(q, call(), 0.0), Admit)


def test_without_a_clock_it_counts_on_the_executors_now() -> None:
    q = quota(1, window=5.0)
    assert isinstance(ask(q, call(), 100.0), Admit)
    assert isinstance(ask(q, call(), 104.0), Reject)
    assert isinstance(ask(q, call(), 105.0), Admit)


def test_a_budget_per_key_and_a_key_that_fails() -> None:
    q = quota(1, key=lambda c: c.arguments["user"])  # type: ignore[index]
    assert isinstance(ask(q, call(user="ann"), 0.0), Admit)
    assert isinstance(ask(q, call(user="bob"), 0.0), Admit)
    refused = ask(q, call(user="ann"), 0.0)
    assert isinstance(refused, Reject) and "for 'ann'" in refused.message
    assert q.used("ann") == 1 and q.used("cy") == 0
    broken = quota(1, key=lambda c: c.arguments["nobody"])  # type: ignore[index]
    failed = ask(broken, call(), 0.0)
    assert isinstance(failed, Reject) and failed.code is ErrorCode.TOOL_UNAVAILABLE
    assert "quota(1, per key)" in failed.message and "KeyError" in failed.message


@pytest.mark.parametrize(
    ("status", "attempts", "given_back"),
    [
        ("deferred", 0, True),  # waits for an approval: it comes again, counted then
        ("cancelled", 0, True),  # never attempted: its batch cancelled, or aborted
        ("cancelled", 1, False),  # cancelled while it ran: it was let through
        ("rejected", 0, False),  # refused after the quota: an answer, counted
        ("ok", 1, False),
        ("error", 2, False),
    ],
)
def test_a_call_that_ends_unanswered_gives_its_unit_back(
    status: Status, attempts: int, given_back: bool
) -> None:
    q = quota(1)
    first = call(1, id="c1")
    assert isinstance(ask(q, first, 0.0), Admit)
    q.on_result(first, result(first, status, attempts=attempts), 1.0)
    q.on_result(first, result(first, status, attempts=attempts), 1.0)  # told twice: once
    assert q.used("probe") == (0 if given_back else 1)
    assert isinstance(ask(q, call(2, id="c2"), 2.0), Admit if given_back else Reject)


def test_a_unit_given_back_in_a_window_is_that_admissions() -> None:
    clock = FakeClock()
    q = quota(2, window=10.0, clock=clock)
    early, late = call(1, id="early"), call(2, id="late")
    assert isinstance(ask(q, early, 0.0), Admit)  # at 1000
    clock.advance(5.0)
    assert isinstance(ask(q, late, 0.0), Admit)  # at 1005
    q.on_result(late, result(late, "deferred", attempts=0), 0.0)
    assert q.used("probe") == 1
    assert isinstance(ask(q, call(3), 0.0), Admit)  # the late one's unit, at 1005
    assert isinstance(ask(q, call(4), 0.0), Reject)
    clock.set(1010.0)  # the early one leaves the window: one unit again
    assert isinstance(ask(q, call(5), 0.0), Admit)


def test_after_a_reset_an_earlier_admission_gives_nothing_back() -> None:
    q = quota(1)
    before = call(1, id="before")
    assert isinstance(ask(q, before, 0.0), Admit)
    q.reset()
    assert isinstance(ask(q, call(2, id="after"), 0.0), Admit)
    q.on_result(before, result(before, "deferred", attempts=0), 0.0)
    assert q.used("probe") == 1 and not q._open.get("before")


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"max_calls": 0}, ValueError, "max_calls"),
        ({"max_calls": 2.5}, TypeError, "max_calls"),
        ({"max_calls": True}, TypeError, "max_calls"),
        ({"max_calls": 3, "window": 0}, ValueError, "window"),
        ({"max_calls": 3, "window": "1h"}, TypeError, "window"),
        ({"max_calls": 3, "key": 1}, TypeError, "key must be a function"),
    ],
)
def test_options_are_checked_when_made(kwargs: dict[str, object], error: type, words: str) -> None:
    with pytest.raises(error, match="quota") as caught:
        quota(**kwargs)  # type: ignore[arg-type]
    assert words in str(caught.value)


# -- through an executor ------------------------------------------------------------------


def counting_registry(policies: list[Quota] | None = None) -> tuple[ToolRegistry, list[int]]:
    reg = ToolRegistry()
    ran: list[int] = []
    lock = threading.Lock()

    @reg.tool(read_only=True, policies=policies or [])
    def work(n: int, user: str = "") -> int:
        with lock:
            ran.append(n)
        return n

    return reg, ran


def test_in_a_batch_over_budget_the_first_calls_run(make_executor: MakeExecutor) -> None:
    reg, ran = counting_registry([quota(3)])
    ex = make_executor(reg, max_parallel=8)
    batch = ex.execute_batch([ToolCall(name="work", arguments={"n": n}) for n in range(6)])
    assert [r.status for r in batch.results] == ["ok"] * 3 + ["rejected"] * 3
    assert all(r.error_code is ErrorCode.QUOTA_EXCEEDED for r in batch.results[3:])
    assert all(r.attempts == 0 for r in batch.results[3:])
    assert sorted(ran) == [0, 1, 2]


def test_parallel_batches_from_8_threads_never_overshoot(make_executor: MakeExecutor) -> None:
    q = quota(37)
    reg, ran = counting_registry()
    ex = make_executor(reg, policies=[q], max_parallel=8)
    start = threading.Barrier(8, timeout=10)
    statuses: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        start.wait()
        for round_ in range(2):
            batch = ex.execute_batch(
                [
                    ToolCall(name="work", arguments={"n": k * 100 + round_ * 10 + i})
                    for i in range(5)
                ]
            )
            with lock:
                statuses.extend(r.status for r in batch.results)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(ran) == 37, "exactly the budget ran"
    assert statuses.count("ok") == 37 and statuses.count("rejected") == 80 - 37
    assert q.used("work") == 37


def test_retries_are_the_same_call_and_are_not_counted(make_executor: MakeExecutor) -> None:
    q = quota(2)
    reg = ToolRegistry()
    tries: list[int] = []

    @reg.tool(read_only=True, policies=[q], retry=RetryPolicy(max_retries=2, backoff_base=0.001))
    def flaky(n: int) -> int:
        tries.append(n)
        if len(tries) < 3:
            raise ConnectionError("try again")
        return n

    ex = make_executor(reg)
    first = ex.execute(ToolCall(name="flaky", arguments={"n": 1}))
    assert first.status == "ok" and first.attempts == 3
    assert q.used("flaky") == 1
    assert ex.execute(ToolCall(name="flaky", arguments={"n": 2})).status == "ok"
    third = ex.execute(ToolCall(name="flaky", arguments={"n": 3}))
    assert third.status == "rejected" and third.error_code is ErrorCode.QUOTA_EXCEEDED


def test_a_key_of_the_arguments_sees_them_parsed_at_submission(
    make_executor: MakeExecutor,
) -> None:
    """A quota is asked at submission, when a call from a model still holds
    its raw JSON text: its key function sees the arguments parsed all the same."""
    q = quota(1, key=lambda c: c.arguments["user"])  # type: ignore[index]
    reg, ran = counting_registry([q])
    ex = make_executor(reg)

    def raw(n: int, user: str) -> ToolCall:
        return ToolCall(name="work", arguments=f'{{"n": {n}, "user": "{user}"}}')

    assert ex.execute(raw(1, "ann")).status == "ok"
    assert ex.execute(raw(2, "bob")).status == "ok"
    again = ex.execute(raw(3, "ann"))
    assert again.status == "rejected" and again.error_code is ErrorCode.QUOTA_EXCEEDED
    assert ran == [1, 2]


def test_one_quota_object_is_one_budget_across_executors(make_executor: MakeExecutor) -> None:
    q = quota(2)
    reg, ran = counting_registry()
    first = make_executor(reg, policies=[q])
    second = make_executor(reg, policies=[q])
    assert first.execute(ToolCall(name="work", arguments={"n": 1})).status == "ok"
    assert second.execute(ToolCall(name="work", arguments={"n": 2})).status == "ok"
    assert second.execute(ToolCall(name="work", arguments={"n": 3})).status == "rejected"
    assert first.execute(ToolCall(name="work", arguments={"n": 4})).status == "rejected"
    assert ran == [1, 2]


# -- keys taken from secret arguments: asked before the arguments are masked -------------

SECRET = "sk-QUOTA-SECRET-42"


def search_registry(key: object) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[quota(1, key=key)])  # type: ignore[arg-type]
    def search(api_key: str) -> str:
        """Search."""
        return "x"

    return reg


@pytest.mark.parametrize(
    "arguments",
    [{"api_key": SECRET}, f'{{"api_key": "{SECRET}"}}'],  # as given, or a model's raw JSON
)
def test_a_failing_key_never_quotes_a_secret_argument(
    make_executor: MakeExecutor, arguments: object
) -> None:
    """At submission a key function's error text (int('sk-...')) would reach the
    result unmasked: only its type is told (review 10)."""
    import io

    from toolbus.observe import log_json

    ex = make_executor(search_registry(lambda c: int(c.arguments["api_key"])))
    buf = io.StringIO()
    handle = log_json(ex, buf)
    result = ex.execute(ToolCall(id="c", name="search", arguments=arguments))  # type: ignore[arg-type]
    handle.close()
    assert (result.status, result.error_code) == ("rejected", ErrorCode.TOOL_UNAVAILABLE)
    assert "(ValueError)" in (result.error or "")
    assert SECRET not in (result.error or "") and SECRET not in buf.getvalue()


@pytest.mark.parametrize(
    "key",
    [lambda c: c.arguments["api_key"], lambda c: c.arguments["api_key"][:10]],
)
def test_a_refusal_naming_a_secret_key_is_masked(make_executor: MakeExecutor, key: object) -> None:
    ex = make_executor(search_registry(key))
    assert ex.execute(ToolCall(name="search", arguments={"api_key": SECRET})).status == "ok"
    refused = ex.execute(ToolCall(name="search", arguments={"api_key": SECRET}))
    assert refused.error_code is ErrorCode.QUOTA_EXCEEDED
    assert "for '***'" in (refused.error or "") and SECRET[:10] not in (refused.error or "")


def test_an_approved_call_spends_the_quota_once(make_executor: MakeExecutor) -> None:
    """Review 9: the deferral did not spend the unit the approved call needs;
    a later call finds the budget spent by the one that ran."""
    q = quota(1)
    reg = ToolRegistry()
    sent: list[str] = []

    @reg.tool(policies=[q, requires_approval()])
    def send_email(to: str) -> str:
        sent.append(to)
        return "sent"

    ex = make_executor(reg)
    mail = ToolCall(id="e1", name="send_email", arguments={"to": "bob"})
    first = ex.execute(mail)
    assert first.status == "deferred" and first.approval_request is not None
    assert q.used("send_email") == 0
    assert ex.execute(mail).status == "deferred"  # asked again, still undecided: no unit
    approved = ex.execute(mail, approval=first.approval_request.approve())
    assert approved.status == "ok" and sent == ["bob"]
    other = ex.execute(ToolCall(id="e2", name="send_email", arguments={"to": "eve"}))
    assert other.status == "rejected" and other.error_code is ErrorCode.QUOTA_EXCEEDED


def test_calls_aborted_behind_a_deferred_call_give_their_units_back(
    make_executor: MakeExecutor,
) -> None:
    """A batch's later calls that would have waited for a deferred one end
    cancelled (ABORTED), unattempted: resubmitted with the approval, the whole
    batch runs within a budget of exactly its size."""
    q = quota(2)
    reg = ToolRegistry()

    @reg.tool(policies=[q, requires_approval()])
    def pay(amount: int) -> str:
        return "paid"

    @reg.tool(policies=[q])
    def log_it(text: str) -> str:
        return "logged"

    ex = make_executor(reg)
    calls = [
        ToolCall(id="p", name="pay", arguments={"amount": 5}),
        ToolCall(id="l", name="log_it", arguments={"text": "paid 5"}),
    ]
    first = ex.execute_batch(calls).results
    assert [r.status for r in first] == ["deferred", "cancelled"]
    assert first[1].error_code is ErrorCode.ABORTED and first[1].attempts == 0
    request = first[0].approval_request
    assert request is not None
    again = ex.execute_batch(calls, approvals={"p": request.approve()}).results
    assert [r.status for r in again] == ["ok", "ok"]


def test_an_approved_call_is_not_refused_by_the_quota_its_deferral_spent() -> None:
    """An approved call was refused QUOTA_EXCEEDED: its deferral had spent its quota (review 9)."""
    reg = ToolRegistry()

    @reg.tool(policies=[quota(1), requires_approval()])
    def send_email(to: str) -> str:
        return "sent"

    with Executor(reg) as ex:
        call = ToolCall(id="e1", name="send_email", arguments={"to": "bob"})
        first = ex.execute(call)
        assert first.status == "deferred"
        assert first.approval_request is not None
        again = ex.execute(call, approval=first.approval_request.approve())
        assert again.status == "ok", again.error  # QUOTA_EXCEEDED today


def test_a_repeated_call_id_gives_back_the_right_unit(make_executor: MakeExecutor) -> None:
    """A call that ended unanswered gave back the unit of another call with the
    same id (the oldest admission of that id), letting a key past its budget
    (found reviewing run_limit, issue 28): an admission is known by its call object."""
    import threading

    from tests.conftest import wait_until
    from toolbus.policies import requires_approval

    reg = ToolRegistry()
    release = threading.Event()

    @reg.tool(read_only=True)
    def slow(user: str) -> str:
        release.wait(30)
        return "x"

    @reg.tool(read_only=True, policies=[requires_approval()])
    def guarded(user: str) -> str:
        return "x"

    ex = make_executor(reg, policies=[quota(1, key=lambda c: c.arguments["user"])])
    try:
        running = ex.submit(ToolCall(id="c1", name="slow", arguments={"user": "a"}))
        wait_until(lambda: ex.stats().in_flight == 1, what="a's call running")
        deferred = ex.execute(ToolCall(id="c1", name="guarded", arguments={"user": "b"}))
        assert deferred.status == "deferred"
        again = ex.execute(ToolCall(id="c2", name="slow", arguments={"user": "a"}))
        assert again.error_code is ErrorCode.QUOTA_EXCEEDED
    finally:
        release.set()
    assert running.result(30).ok
