"""The process backend: a call sent to a worker that died while idle, before it
read the call, never ran: it runs on another worker, never a crash."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from tests import process_tools as pt
from tests.conftest import MakeExecutor, wait_until
from toolbus import ToolCall
from toolbus.backends._procs import WorkerProcess

# The slow tier (tests/README.md): worker processes killed.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _dead(pid: int) -> bool:
    """Gone, or a zombie: either way its end of the socket is closed."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_worker_killed_after_the_call_was_sent_unread_is_not_a_crash(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while idle, just as a call was sent to it (it never read it): the
    call ended TOOL_CRASHED, not retried for a mutating tool (hunt 6)."""
    ex = make_executor(pt.registry, timeout=60)
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


def test_a_worker_dead_before_the_call_was_sent_is_not_a_crash(
    make_executor: MakeExecutor,
) -> None:
    """Dead while idle, before the agent's loop had seen it: the send's EPIPE
    was ignored and the call ended TOOL_CRASHED (hunt 6)."""
    ex = make_executor(pt.registry, timeout=60)
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
