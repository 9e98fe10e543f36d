"""The process backend: a call sent to a worker that died while idle, before it
read the call, never ran: it runs on another worker, never a crash."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import process_tools as pt
from tests.conftest import MakeExecutor, wait_until
from toolbus import Executor, ToolCall
from toolbus.backends._direct import Direct
from toolbus.backends._procs import WorkerProcess

# The slow tier (tests/README.md): worker processes killed.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(params=["direct", "loop"])
def ex(request: pytest.FixtureRequest, make_executor: MakeExecutor) -> Iterator[Executor]:
    """An executor whose calls are sent from the dispatching thread (`_direct.py`),
    or, with a pre-call hook of its own, from its loop: each path checked."""
    started: list[str] = []
    original = Direct.start

    def start(self: Direct) -> None:
        started.append(self.job.run.call.id)
        original(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Direct, "start", start)
        hooks: dict[str, Any] = {} if request.param == "direct" else {"pre_call": [_same]}
        ex = make_executor(pt.registry, timeout=60, **hooks)
        yield ex
    assert bool(started) == (request.param == "direct")


def _same(call: ToolCall) -> ToolCall:
    return call


def _dead(pid: int) -> bool:
    """Gone, or a zombie: either way its end of the socket is closed."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_worker_killed_after_the_call_was_sent_unread_is_not_a_crash(
    ex: Executor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while idle, just as a call was sent to it (it never read it): the
    call ended TOOL_CRASHED, not retried for a mutating tool (hunt 6)."""
    first = ex.execute(ToolCall(name="worker_pid", arguments={})).output
    assert isinstance(first, int)
    sent = threading.Event()
    original_now, original_send = WorkerProcess.send_now, WorkerProcess.send

    def send_now(self: WorkerProcess, data: bytes) -> Any:
        done = original_now(self, data)
        sent.set()
        return done

    async def send(self: WorkerProcess, data: bytes) -> Any:
        done = await original_send(self, data)
        sent.set()
        return done

    monkeypatch.setattr(WorkerProcess, "send_now", send_now)
    monkeypatch.setattr(WorkerProcess, "send", send)
    os.kill(first, signal.SIGSTOP)  # alive, but it reads nothing more
    handle = ex.submit(ToolCall(name="worker_pid", arguments={}))
    assert sent.wait(60), "the call was never sent"
    os.kill(first, signal.SIGKILL)
    r = handle.result(timeout=60)
    assert (r.status, r.error, r.attempts) == ("ok", None, 1)
    assert r.output != first


# Sent from the dispatching thread: the loop path awaits the worker's pool
# first, and its loop sees the death meanwhile.
@pytest.mark.parametrize("ex", ["direct"], indirect=True)
def test_a_worker_dead_before_the_call_was_sent_is_not_a_crash(ex: Executor) -> None:
    """Dead while idle, before the agent's loop had seen it: the send's EPIPE
    was ignored and the call ended TOOL_CRASHED (hunt 6)."""
    first = ex.execute(ToolCall(name="worker_pid", arguments={})).output
    assert isinstance(first, int)
    held, hold = threading.Event(), threading.Event()

    def block() -> None:  # the loop sees no death, no reply, until released
        held.set()
        hold.wait(60)

    ex._loop._loop.call_soon_threadsafe(block)
    try:
        assert held.wait(60)
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: _dead(first), what="the worker dead")
        handle = ex.submit(ToolCall(name="worker_pid", arguments={}))
    finally:
        hold.set()
    r = handle.result(timeout=60)
    assert (r.status, r.error, r.attempts) == ("ok", None, 1)
    assert r.output != first
