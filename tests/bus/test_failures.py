"""Receivers' failures: contained, whatever the receiver or its exception does, and
reported under the receiver that failed."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Callable
from typing import Any

import pykka
import pytest

from tests.bus.echo import echo_call, echo_registry
from tests.conftest import MakeExecutor
from toolbus import bus
from toolbus.bus._failures import FailureLog


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# -- a custom publisher's wants ------------------------------------------------------------------


def test_a_publisher_whose_wants_raises_is_logged_and_goes_on_receiving(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    """A custom publisher whose `wants()` raised once never received another event;
    drain_events and close waited out their budget; the log named no publisher
    (bug hunt 5, s6)."""

    class Flaky:
        def __init__(self) -> None:
            self.asked = 0
            self.got: list[tuple[str, str]] = []

        def wants(self, name: str) -> bool:
            self.asked += 1
            if self.asked == 2:  # the first call's tool:executed
                raise RuntimeError("wants failed once")
            return True

        def publish(self, name: str, event: Any) -> None:
            self.got.append((name, event.call_id))

    publisher = Flaky()
    ex = make_executor(echo_registry(), publisher=publisher)
    with caplog.at_level(logging.ERROR, "toolbus.bus"):
        for i in range(5):
            ex.execute(echo_call(i))
        assert ex.drain_events(10)
    assert [c for n, c in publisher.got if n == bus.FINISHED] == [f"c{i}" for i in range(5)]
    assert len(publisher.got) == 14  # all but the one its wants raised on
    (line,) = _errors(caplog)
    assert "Flaky raised on tool:executed (in wants)" in line and "wants failed once" in line


# -- exceptions that cannot be described ---------------------------------------------------------


def _str_raises(error: BaseException) -> type[Exception]:
    class BadStr(Exception):
        def __str__(self) -> str:
            raise error

    return BadStr


class _NotAStr(Exception):
    def __str__(self) -> str:
        return 42  # type: ignore[return-value]  # noqa: PLE0307  # str() then raises TypeError


BAD_STR = [
    pytest.param(_str_raises(RuntimeError("cannot render")), id="str-raises"),
    pytest.param(_str_raises(SystemExit("str exits")), id="str-exits"),
    pytest.param(_str_raises(KeyboardInterrupt()), id="str-interrupts"),
    pytest.param(_NotAStr, id="str-not-a-str"),
]


@pytest.mark.parametrize("bad", BAD_STR)
def test_failure_log_never_raises(bad: type[Exception], caplog: pytest.LogCaptureFixture) -> None:
    """Reporting an exception whose `__str__` fails raised out of the report, and so
    out of delivery (bug hunt 5, s7)."""
    flog = FailureLog()

    def receiver() -> None:
        raise bad()

    escaped: list[BaseException] = []
    with caplog.at_level(logging.ERROR, "toolbus.bus"):
        for _ in range(3):
            try:
                receiver()
            except Exception as e:
                try:
                    flog.failed(receiver, "tool:finished", e)
                except BaseException as report_error:  # KeyboardInterrupt would end the run
                    escaped.append(report_error)
        flog.flush()
    assert escaped == []
    first, summary = _errors(caplog)
    assert "test_failure_log_never_raises.<locals>.receiver raised on tool:finished" in first
    assert "Traceback" in first and "in receiver" in first
    assert "raised 2 more times (last: BadStr: <exception str() failed>" in summary or (
        "raised 2 more times (last: _NotAStr: <exception str() failed>" in summary
    )


@pytest.mark.parametrize("bad", BAD_STR)
def test_a_receiver_raising_an_exception_that_cannot_be_described_goes_on_receiving(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, bad: type[Exception]
) -> None:
    """A receiver's exception whose `__str__` failed stopped its delivery for good:
    it got 2 of 20 events, drain_events waited out its budget (bug hunt 5, s7)."""
    ex = make_executor(echo_registry())
    got: list[str] = []

    def receiver(sender: Any, *, event: Any, signal: str) -> None:
        got.append(event.call_id)
        raise bad()

    with caplog.at_level(logging.ERROR, "toolbus.bus"):
        with bus.subscribe(receiver, bus.FINISHED, sender=ex):
            for i in range(6):
                ex.execute(echo_call(i))
            assert ex.drain_events(10)
        ex.close()
    assert got == [f"c{i}" for i in range(6)]
    assert ex.stats().events_dropped == 0
    _, summary = _errors(caplog)
    assert "raised 5 more times" in summary and "<exception str() failed>" in summary


class _Counter(pykka.ThreadingActor):
    use_daemon_thread = True

    def on_receive(self, message: Any) -> Any:
        return "alive"


@pytest.mark.parametrize("bad", BAD_STR)
def test_an_observer_actor_raising_an_exception_that_cannot_be_described_goes_on(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, bad: type[Exception]
) -> None:
    """An ObserverActor whose on_event raised an exception with a failing `__str__`
    was stopped by pykka at its second failure; with a BaseException from `__str__`
    pykka stopped every actor, the executor's supervisor too: every later call
    ended "cancelled: the executor is closed" (bug hunt 5, s8, s8b)."""

    class Failing(bus.ObserverActor):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def on_event(self, signal: str, sender: Any, event: bus.Event) -> None:
            self.seen.append(event.call_id)  # type: ignore[attr-defined]
            raise bad()

        def on_message(self, message: Any) -> Any:
            return list(self.seen)

    ex = make_executor(echo_registry())
    bystander = _Counter.start()
    observer = Failing.start()
    try:
        with caplog.at_level(logging.ERROR, "toolbus.bus"):
            with Failing.attach(observer, bus.FINISHED, sender=ex):
                results = [ex.execute(echo_call(i)) for i in range(4)]
                assert ex.drain_events(10)  # in its mailbox, ahead of the ask
                assert observer.ask("seen", timeout=10) == [f"c{i}" for i in range(4)]
                results.append(ex.execute(echo_call(4)))
                assert ex.drain_events(10)
            observer.stop(timeout=10)  # logs what the rate limit held back
        assert [r.status for r in results] == ["ok"] * 5
        assert bystander.ask("?", timeout=10) == "alive"
    finally:
        for ref in (observer, bystander):
            if ref.is_alive():
                ref.stop()
    first, summary = _errors(caplog)
    assert "Failing raised on tool:finished" in first
    assert "raised 4 more times" in summary and "<exception str() failed>" in summary


# -- receivers that share a name ----------------------------------------------------------------


def _make(error: BaseException) -> Callable[..., None]:
    def on_event(sender: Any, *, event: Any, signal: str) -> None:  # one qualified name for all
        raise error

    return on_event


def test_receivers_sharing_a_name_are_reported_apart(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    """Two receivers with one qualified name (closures of one factory) shared one
    failure record: the second one's error appeared in no log line (bug hunt 5, s29)."""
    ex = make_executor(echo_registry())
    metrics, audit = _make(KeyError("metrics backend down")), _make(PermissionError("refused"))
    with caplog.at_level(logging.ERROR, "toolbus.bus"):
        with (
            bus.subscribe(metrics, bus.FINISHED, sender=ex),
            bus.subscribe(audit, bus.FINISHED, sender=ex),
        ):
            for i in range(3):
                ex.execute(echo_call(i))
            assert ex.drain_events(10)
        ex.close()
    lines = _errors(caplog)
    name = "test_failures._make.<locals>.on_event"
    firsts = {line.split(" raised on ")[0]: line for line in lines if " raised on " in line}
    assert set(firsts) == {f"receiver tests.bus.{name}", f"receiver tests.bus.{name} #2"}
    assert {"KeyError" in line for line in firsts.values()} == {True, False}
    assert {"PermissionError" in line for line in firsts.values()} == {True, False}
    summaries = sorted(line for line in lines if "more times" in line)
    assert len(summaries) == 2 and all("raised 2 more times" in s for s in summaries)
    # Told apart by identity, yet held weakly: closed, the receivers are let go.
    refs = [weakref.ref(metrics), weakref.ref(audit)]
    del metrics, audit
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_a_bound_method_is_one_receiver(caplog: pytest.LogCaptureFixture) -> None:
    """A bound method is made anew at each lookup (blinker's weak receivers): its
    failures are still one receiver's, logged once then summarised."""

    class Sink:
        def on_event(self) -> None:
            raise RuntimeError("down")

    sink, flog = Sink(), FailureLog()
    with caplog.at_level(logging.ERROR, "toolbus.bus"):
        for _ in range(3):
            try:
                sink.on_event()
            except RuntimeError as e:
                flog.failed(sink.on_event, "tool:finished", e)
        flog.flush()
    first, summary = _errors(caplog)
    assert "Sink.on_event raised on tool:finished" in first
    assert "Sink.on_event raised 2 more times" in summary


class _BadNotes(Exception):
    @property
    def __notes__(self) -> list[str]:
        raise SystemExit("notes exit")  # traceback.format_exception lets this through


def test_failure_log_survives_an_exception_whose_notes_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first failure's traceback was written by `traceback.format_exception`,
    which raises what a `__notes__` property raises (bug hunt 5, s7)."""
    flog, escaped = FailureLog(), []

    def receiver() -> None:
        raise _BadNotes("boom")

    with caplog.at_level(logging.ERROR, "toolbus.bus"):
        try:
            receiver()
        except _BadNotes as e:
            try:
                flog.failed(receiver, "tool:finished", e)
            except BaseException as report_error:
                escaped.append(report_error)
    assert escaped == []
    (first,) = _errors(caplog)
    assert "Traceback" in first and "in receiver" in first and "_BadNotes: boom" in first


def test_bus_publisher_publish_survives_any_receiver_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`BusPublisher.publish` (receivers called in turn, on the calling thread) let the
    report of such an exception escape, and the next receivers went without."""
    from toolbus.bus._publisher import BusPublisher

    got: list[bus.Event] = []

    def broken(sender: Any, *, event: bus.Event) -> None:
        raise _BadNotes("boom")

    def fine(sender: Any, *, event: bus.Event) -> None:
        got.append(event)

    sender, sig = object(), bus.signal(bus.FINISHED)
    sig.connect(broken, sender=sender, weak=False)
    sig.connect(fine, sender=sender, weak=False)
    escaped: list[str] = []
    try:
        with caplog.at_level(logging.ERROR, "toolbus.bus"):
            BusPublisher(sender).publish(bus.FINISHED, bus.Event())
    except BaseException as e:  # kept as a name: pytest could not write its chain out
        escaped.append(type(e).__name__)
    finally:
        sig.disconnect(broken)
        sig.disconnect(fine)
    assert escaped == []
    assert len(got) == 1
    # (Only its own: a receiver of every sender's tool:finished that another
    # test left connected in this process is told of this event too.)
    (line,) = [m for m in _errors(caplog) if ".<locals>.broken" in m]
    assert "test_bus_publisher_publish_survives_any_receiver_failure.<locals>.broken" in line
    assert "_BadNotes: boom" in line
