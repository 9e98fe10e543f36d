"""The process backend: what comes back from a worker, however odd, ends the
call as on threads, and spares the worker."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests import process_tools as pt
from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, ToolCall, bus

# The slow tier (tests/README.md): worker processes forked.
pytestmark = pytest.mark.slow


@pytest.fixture
def ex(make_executor: MakeExecutor) -> Executor:
    return make_executor(pt.registry, timeout=60)


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def test_integers_past_a_doubles_range_come_back_exact(
    ex: Executor, recorder: bus.Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """10**400 in a reply, a progress or a log message ended the call TOOL_CRASHED
    ("it was killed") and killed its worker: the agent could not read it (hunt 6)."""
    caplog.set_level(logging.INFO, logger="toolbus.tool")
    r = ex.execute(call("huge_numbers"))
    assert (r.status, r.error) == ("ok", None)
    assert isinstance(r.output, dict)
    assert r.output["n"] == 10**400
    again = ex.execute(call("huge_numbers"))
    assert isinstance(again.output, dict)
    assert again.output["pid"] == r.output["pid"]  # the same worker, spared
    ex.drain_events()
    (progress, _) = recorder.of(bus.PROGRESS)
    assert progress.data == {"count": 10**400}
    assert any(rec.getMessage().startswith("counted") for rec in caplog.records)


def test_an_integer_longer_than_python_reads_beside_a_surrogate_comes_back(
    ex: Executor,
) -> None:
    """The worker wrote it, the agent could not read it (`int()`'s 4300 digits):
    TOOL_ERROR, and a healthy worker replaced (review 60)."""
    r = ex.execute(call("giant_with_surrogate", digits=4400))
    assert (r.status, r.error) == ("ok", None)
    assert isinstance(r.output, dict)
    assert (r.output["n"] == 10**4400, r.output["u"]) == (True, "\udce9")
    again = ex.execute(call("giant_with_surrogate", digits=1))
    assert isinstance(again.output, dict) and again.output["pid"] == r.output["pid"]


@pytest.mark.parametrize("key", ["sk-live-\udce91234567890", "sk-live-pässwörd-123"])
def test_a_secret_in_bytes_of_progress_data_is_scrubbed(
    make_executor: MakeExecutor, recorder: bus.Recorder, key: str
) -> None:
    """The bytes cross as their repr (`\\xe9`), which no form of the secret
    the scrubber knew matched: published as they were (review 60). (A lone
    surrogate comes from os.environ, say: injected, no JSON argument.)"""
    ex = make_executor(pt.registry, timeout=60, inject={"api_key": lambda c: key})
    r = ex.execute(call("reports_bytes"))
    assert (r.status, r.error) == ("ok", None)
    ex.drain_events()
    (progress,) = recorder.of(bus.PROGRESS)
    assert progress.data == {"raw": "b'***'"}


@pytest.mark.parametrize("what", ["progress", "log"])
def test_an_unreadable_progress_or_log_message_is_dropped_not_the_call(
    ex: Executor, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One unreadable progress or log message ended its call as the final reply:
    TOOL_CRASHED, and a healthy worker killed (hunt 6)."""
    first = ex.execute(call("unreadable", what=what))
    assert (first.status, first.error) == ("ok", None)
    assert ex.execute(call("unreadable", what="none")).output == first.output  # same worker
    assert any(
        f"a {what} message of call {first.call_id} could not be read" in rec.getMessage()
        for rec in caplog.records
    )


@pytest.mark.parametrize("sign", [1, -1])
def test_a_fraction_past_a_floats_range_is_none_and_the_call_ends(
    make_executor: MakeExecutor, recorder: bus.Recorder, sign: int
) -> None:
    """`float(10**400)` raised in the worker's reader: the reply read with the
    progress was dropped, and a call with no timeout hung (review 60)."""
    ex = make_executor(pt.registry, timeout=None)
    r = ex.execute(call("huge_fraction", sign=sign), timeout=20)
    assert (r.status, r.error) == ("ok", None)
    ex.drain_events()
    assert [p.fraction for p in recorder.of(bus.PROGRESS)] == [None]  # as on threads
    assert ex.execute(call("huge_fraction"), timeout=20).output == r.output  # same worker


def test_a_message_that_fails_to_be_handled_is_dropped_alone(
    ex: Executor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever handling one progress message raises, the reply read in the
    same batch still ends the call (review 60)."""
    from toolbus.backends import _process_calls

    def fails(*_: object) -> None:
        raise RuntimeError("cannot publish")

    monkeypatch.setattr(_process_calls, "publish_progress", fails)
    r = ex.execute(call("huge_fraction"), timeout=20)
    assert (r.status, r.error) == ("ok", None)
    assert any(
        f"a progress message of call {r.call_id} could not be handled" in rec.getMessage()
        for rec in caplog.records
    )


def test_an_unreadable_reply_is_an_error_that_says_so(ex: Executor) -> None:
    """It was a crash, "it was killed", retried for idempotent tools (hunt 6)."""
    r = ex.execute(call("unreadable", what="ok"))
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert r.error is not None
    assert "its reply could not be read from its worker process" in r.error
    assert ex.execute(call("unreadable", what="none")).status == "ok"


@pytest.mark.parametrize(
    ("how", "error"),
    [
        ("retryable", "_RetryableRaises: boom"),  # its `retryable` raises
        ("text", "_TextExits"),  # its `__str__` raises SystemExit
        ("hostile", "_Hostile: h"),  # any attribute it is asked for raises
    ],
)
def test_an_exception_that_fights_being_described_is_the_tools_error(
    ex: Executor, how: str, error: str
) -> None:
    """Describing it killed the worker: TOOL_CRASHED, "exited with code 1" (hunt 6)."""
    pid = ex.execute(call("raises_oddly", how="none")).output
    r = ex.execute(call("raises_oddly", how=how))
    assert (r.status, r.error_code, r.error) == ("error", ErrorCode.TOOL_ERROR, error)
    assert ex.execute(call("raises_oddly", how="none")).output == pid  # the worker lives


def test_an_async_tool_that_returned_is_done_whatever_it_left_running(
    ex: Executor, tmp_path: Path
) -> None:
    """`asyncio.run` held the value until the tasks it left ended and the
    threads it started returned: the call timed out (hunt 6)."""
    marker = tmp_path / "cancelled"
    r = ex.execute(call("leaves_work", marker=str(marker)))
    assert (r.status, r.error) == ("ok", None)
    # What it left running is cancelled once the reply is sent.
    wait_until(marker.exists, what="the leftover task cancelled")
    # It swallowed that and sleeps on: the worker retired, the next call runs.
    again = ex.execute(call("leaves_work", marker=str(tmp_path / "again")))
    assert again.status == "ok"
    assert again.output != r.output


def test_a_task_left_that_ignores_its_cancellation_retires_its_worker(ex: Executor) -> None:
    """It stayed on the worker's loop and ran inside the next call, which ended
    TOOL_ERROR "SystemExit: 3", an error it never raised (review 60)."""
    a = ex.execute(call("leaves_a_task", fights=True))
    assert (a.status, a.error) == ("ok", None)
    b = ex.execute(call("leaves_a_task", fights=True, leave=False))
    assert (b.status, b.error) == ("ok", None)
    assert b.output != a.output  # a fresh worker


def test_a_task_left_that_ends_when_cancelled_spares_its_worker(ex: Executor) -> None:
    a = ex.execute(call("leaves_a_task", fights=False))
    b = ex.execute(call("leaves_a_task", fights=False))
    assert (a.status, b.status) == ("ok", "ok")
    assert b.output == a.output
