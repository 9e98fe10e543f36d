"""quota: a budget of calls, counted at submission, never overshot."""

from __future__ import annotations

import threading

import pytest

from tests.conftest import MakeExecutor
from tests.policy_clock import FakeClock, call, probe
from toolbus import ErrorCode, RetryPolicy, ToolCall, ToolRegistry
from toolbus.policies import Admit, Quota, Reject, quota


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
