"""The agent's reading of a worker process's messages (`_procs.WorkerProcess`),
without a process: a socket pair stands for the worker's connection."""

from __future__ import annotations

import asyncio
import mmap
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from toolbus.backends import _wire
from toolbus.backends._procs import WorkerProcess


@pytest.fixture
async def pair() -> AsyncIterator[tuple[WorkerProcess, socket.socket, list[dict[str, Any]]]]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker = WorkerProcess(0, ours, asyncio.get_running_loop(), zygote=None)  # type: ignore[arg-type]
    got: list[dict[str, Any]] = []
    worker.seq = 7
    worker.on_message = got.append
    yield worker, theirs, got
    worker.close()
    theirs.close()


async def test_what_a_worker_sent_before_its_end_was_seen_is_read_first(
    pair: tuple[WorkerProcess, socket.socket, list[dict[str, Any]]],
) -> None:
    """Its zygote's death seen first, a reply already in its socket was dropped:
    the call ended TOOL_CRASHED though its tool had returned (hunt 6)."""
    worker, theirs, got = pair
    theirs.sendall(_wire.reply({"seq": 7, "kind": "progress", "message": "half"}))
    theirs.sendall(_wire.reply({"seq": 7, "kind": "ok", "output": 1}))
    worker.gone()  # as a zygote's `gone` calls it, before the reader has run
    assert [m["kind"] for m in got] == ["progress", "ok", "eof"]


async def test_an_unreadable_message_says_its_kind_when_its_start_does(
    pair: tuple[WorkerProcess, socket.socket, list[dict[str, Any]]],
) -> None:
    """Any unreadable message was taken for the call's reply: one progress
    message ended the call TOOL_CRASHED (hunt 6)."""
    worker, theirs, got = pair
    for frame in (
        _wire.reply({"seq": 7, "kind": "progress", "message": "half"})[:-1] + b"!",
        _wire.reply({"seq": 6, "kind": "log", "message": "old"})[:-1] + b"!",  # stale
        b"\x00\x00\x00\x00\x00\x00\x00\x03abc",
    ):
        theirs.sendall(frame)
    worker.gone()
    assert [(m["kind"], m.get("of")) for m in got] == [
        ("garbled", "progress"),
        ("garbled", ""),  # no start to read: the call's, its reply for all one knows
        ("eof", None),
    ]


async def test_whether_a_worker_read_its_requests_is_read_from_its_count() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    count = mmap.mmap(-1, 8)
    worker = WorkerProcess(0, ours, loop, zygote=None, mark=count)  # type: ignore[arg-type]
    try:
        assert worker.reached()
        assert await worker.send(b"a request")
        assert not worker.reached()  # sent, not read
        count[:8] = (1).to_bytes(8, sys.byteorder)  # the worker read it
        assert worker.reached()
        theirs.close()
        assert not worker.send_now(b"x" * 1_000_000)  # nothing can reach it: never ran
        assert not worker.reached()
        assert not worker.alive
    finally:
        worker.close()
