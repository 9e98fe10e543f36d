"""What every observation surface stands on: executor names, submission hooks
(`Executor.on_submit`), the `<unknown>` label, and imports that stay lazy."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import subprocess
import sys
import threading

import pytest

from tests.concurrency_tools import finished, in_thread
from tests.conftest import MakeExecutor
from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.executor import Submission
from toolbus.observe import UNKNOWN_TOOL
from toolbus.observe._names import tool_label

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def echo(text: str) -> str:
        return text

    @reg.tool(read_only=True)
    async def aecho(text: str) -> str:
        return text

    return reg


def test_names_default_to_executor_n_in_order(make_executor: MakeExecutor) -> None:
    first = make_executor(registry())
    second = make_executor(registry())
    assert first.name.startswith("executor-")
    assert int(second.name.split("-")[1]) > int(first.name.split("-")[1])
    assert make_executor(registry(), name="billing").name == "billing"
    for bad in ("", "  ", 3):
        with pytest.raises(TypeError, match="name must be a non-empty string"):
            Executor(registry(), name=bad)  # type: ignore[arg-type]


def test_a_default_name_skips_the_names_of_live_executors(make_executor: MakeExecutor) -> None:
    """A name given explicitly that a default would repeat is skipped, while
    its executor lives (closed or not): two executors never share a default
    name, which a shared Prometheus registry would refuse (review 10b)."""
    n = int(make_executor(registry()).name.split("-")[1])
    given = [make_executor(registry(), name=f"executor-{n + k}") for k in (1, 2, 4)]
    given[1].close()  # closed, but alive: its name is still taken
    defaults = [make_executor(registry()).name for _ in range(3)]
    assert defaults == [f"executor-{n + 3}", f"executor-{n + 5}", f"executor-{n + 6}"]


def test_default_names_made_at_once_are_distinct() -> None:
    barrier = threading.Barrier(4)
    names: list[str] = []
    made: list[Executor] = []
    lock = threading.Lock()

    def make() -> None:
        barrier.wait(10)
        for _ in range(3):
            ex = Executor(registry())
            with lock:
                made.append(ex)
                names.append(ex.name)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for ex in made:
        ex.close()
    assert len(names) == 12 and len(set(names)) == 12


def test_an_executors_name_does_not_keep_it_alive() -> None:
    """The names in use are held weakly: an executor that is gone frees its name."""
    import gc
    import weakref

    from toolbus._executor._names import _named_executors

    ex = Executor(registry(), name="short-lived")
    ex.close()
    gone = weakref.ref(ex)
    del ex
    gc.collect()
    assert gone() is None
    assert "short-lived" not in {e.name for e in _named_executors}


def test_unknown_tool_label(make_executor: MakeExecutor) -> None:
    ex = make_executor(registry())
    assert tool_label(ex, "echo") == "echo"
    assert tool_label(ex, "ech0") == UNKNOWN_TOOL == "<unknown>"
    assert tool_label(ex, None) == UNKNOWN_TOOL


def test_on_submit_runs_in_the_callers_context_before_any_event(
    make_executor: MakeExecutor,
) -> None:
    ex = make_executor(registry())
    seen: list[tuple[Submission, str, str, int]] = []
    with bus.Recorder(sender=ex) as rec:

        def hook(submission: Submission) -> None:
            events = len(rec.events)
            seen.append((submission, request_id.get(), threading.current_thread().name, events))

        remove = ex.on_submit(hook)
        request_id.set("req-1")
        ex.execute(ToolCall(id="one", name="echo", arguments={"text": "secret-ish"}))
        request_id.set("req-2")
        ex.execute_batch(
            [
                ToolCall(id="b1", name="echo", arguments={"text": "a"}),
                ToolCall(id="b2", name="nope"),
            ]
        )
        remove()
        remove()  # twice: nothing
        ex.execute(ToolCall(id="unseen", name="echo", arguments={"text": "a"}))
        ex.drain_events()
        batch_id = rec.of(bus.BATCH_START)[0].batch_id
    (single, rid1, thread1, events1), (batch, rid2, thread2, _) = seen
    me = threading.current_thread().name
    assert (single.call_ids, single.batch_id, rid1, thread1, events1) == (
        ("one",),
        None,
        "req-1",
        me,
        0,
    )
    assert (batch.call_ids, batch.batch_id, rid2, thread2) == (("b1", "b2"), batch_id, "req-2", me)
    assert single.context.get(request_id) == "req-1"  # the copy the calls run in
    assert single.timestamp <= rec.of(bus.FINISHED)[0].timestamp
    assert not hasattr(single, "arguments")


async def test_on_submit_sees_each_async_tasks_context(make_executor: MakeExecutor) -> None:
    ex = make_executor(registry())
    seen: dict[str, str] = {}
    ex.on_submit(lambda s: seen.update(dict.fromkeys(s.call_ids, request_id.get())))

    async def task(n: int) -> None:
        request_id.set(f"task-{n}")
        await asyncio.sleep(0)
        await ex.aexecute(ToolCall(id=f"a{n}", name="aecho", arguments={"text": "x"}))
        await ex.aexecute_batch([ToolCall(id=f"b{n}", name="echo", arguments={"text": "x"})])

    await asyncio.gather(*(task(n) for n in range(5)))
    assert seen == {f"{p}{n}": f"task-{n}" for n in range(5) for p in "ab"}


@pytest.mark.parametrize(
    "exc", [RuntimeError, KeyboardInterrupt, SystemExit, asyncio.CancelledError, GeneratorExit]
)
def test_a_failing_hook_is_logged_and_the_calls_go_on(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, exc: type[BaseException]
) -> None:
    ex = make_executor(registry())
    calls: list[str] = []

    def broken(submission: Submission) -> None:
        raise exc("hook bug")

    ex.on_submit(broken)
    ex.on_submit(lambda s: calls.extend(s.call_ids))

    def three() -> list[str]:
        return [
            ex.execute(ToolCall(id=f"c{i}", name="echo", arguments={"text": "x"})).status
            for i in range(3)
        ]

    # Off the main thread (there a KeyboardInterrupt is Ctrl-C's: see below).
    with caplog.at_level(logging.ERROR, logger="toolbus.bus"):
        th, out = in_thread(three)
        assert finished(th, out) and out["r"] == ["ok"] * 3
    assert calls == ["c0", "c1", "c2"]  # the next hook still runs
    logged = [r for r in caplog.records if "broken" in r.getMessage()]
    assert len(logged) == 1  # the first failure; the rest are summed up later
    assert "hook bug" in logged[0].getMessage()
    with pytest.raises(TypeError, match="callable"):
        ex.on_submit("not a function")  # type: ignore[arg-type]


@pytest.mark.parametrize("str_error", [RuntimeError("cannot render"), SystemExit("str exits")])
def test_a_hook_raising_an_exception_that_cannot_be_described_is_logged_and_the_calls_go_on(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, str_error: BaseException
) -> None:
    """A hook's exception whose `__str__` failed made the report of it raise: from the
    second call on, `execute` raised that error instead of running the call (bug hunt
    5, the failure log of s7)."""

    class BadStr(Exception):
        def __str__(self) -> str:
            raise str_error

    ex = make_executor(registry())

    def broken(submission: Submission) -> None:
        raise BadStr()

    ex.on_submit(broken)

    def three() -> list[str]:
        return [
            ex.execute(ToolCall(id=f"c{i}", name="echo", arguments={"text": "x"})).status
            for i in range(3)
        ]

    with caplog.at_level(logging.ERROR, logger="toolbus.bus"):
        th, out = in_thread(three)
        assert finished(th, out) and out.get("r") == ["ok"] * 3, out
        ex.close()
    (summary,) = [r.getMessage() for r in caplog.records if "more times" in r.getMessage()]
    assert "broken raised 2 more times" in summary and "<exception str() failed>" in summary


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_a_hook_on_the_main_thread_reaches_the_caller(
    make_executor: MakeExecutor, exc: type[BaseException]
) -> None:
    # A signal's handler runs on the main thread, inside whatever it runs: a
    # hook there is interrupted by Ctrl-C, before any call is handed on. The
    # call never runs; the hooks saw it, so it ends (`cancelled`), once.
    ex = make_executor(registry())

    def interrupted(submission: Submission) -> None:
        raise exc()

    ex.on_submit(interrupted)
    with bus.Recorder(bus.FINISHED, bus.EXECUTING, sender=ex) as rec:
        with pytest.raises(exc):
            ex.execute(ToolCall(id="c", name="echo", arguments={"text": "x"}))
        (ended,) = rec.wait_for(bus.FINISHED)
    assert (ended.call_id, ended.result.status) == ("c", "cancelled")
    assert "its submission was interrupted" in (ended.result.error or "")
    assert rec.of(bus.EXECUTING) == []
    stats = ex.stats()
    assert (stats.submitted, stats.cancelled, stats.in_flight) == (1, 1, 0)


def test_importing_toolbus_observe_imports_no_exporter() -> None:
    code = (
        "import sys, toolbus, toolbus.observe\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'prometheus_client')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    plain = "import sys, toolbus\nassert 'toolbus.observe' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", plain], check=True, timeout=60)


def test_surfaces_need_the_bus(make_executor: MakeExecutor) -> None:
    from toolbus.observe import instrument_otel, instrument_prometheus, log_json

    ex = make_executor(registry(), name="quiet", publisher=bus.NullPublisher())
    for attach in (instrument_otel, instrument_prometheus, lambda e: log_json(e, sys.stderr)):
        with pytest.raises(ValueError, match="'quiet' sends its events to NullPublisher"):
            attach(ex)
    assert ex._submit_hooks == ()


def test_default_executor_name_never_repeats_a_name_in_use() -> None:
    """A default executor name could repeat a name given explicitly (review 10b).

    `executor-N` by default so two executors stay apart; a name given
    explicitly that matches the next default makes two executors share it
    (and the second is refused on a shared Prometheus registry).
    """
    first = Executor(ToolRegistry())
    n = int(first.name.rsplit("-", 1)[1])
    named = Executor(ToolRegistry(), name=f"executor-{n + 1}")
    default = Executor(ToolRegistry())
    try:
        assert default.name != named.name
    finally:
        for ex in (first, named, default):
            ex.close()
