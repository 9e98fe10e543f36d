"""A call an MCP server made a task outlives the agent that made it: with a
journal, its task is recorded (`ToolContext.record_remote_task`), and after
the agent process is killed the same call, made again by a new process,
fetches the task's result instead of running the tool again; when the server
no longer has the task, the in-doubt rule decides.

The server runs in this process (uvicorn on a thread, `task_tools`), the
agent in a child process (`tests/mcp_servers/task_agent.py`), killed with
SIGKILL once the journal holds the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.conftest import wait_until
from tests.mcp_servers.serving import served_in_thread
from tests.mcp_servers.task_tools import open_gate, registry
from toolbus import ErrorCode, Executor, Journal, ToolResult
from toolbus.mcp._serve_http import http_app

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def server() -> Iterator[str]:
    with (
        Executor(registry, timeout=120) as executor,
        served_in_thread(http_app(registry, executor)) as url,
    ):
        yield url


def agent(url: str, journal: Path, gate: Path, *mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_servers.task_agent", url, str(journal), str(gate),
         *mode],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def result_of(proc: subprocess.Popen[str]) -> ToolResult:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return ToolResult.model_validate_json(out.strip().splitlines()[-1])


def newest(journal: Path) -> tuple[int, str | None]:
    """The newest record of the call: its number and its remote task."""
    with Journal(journal) as reading:
        record = reading.get("deploy-1")
    return (0, None) if record is None else (record.id, record.remote_task)


def recorded_task(journal: Path) -> str | None:
    return newest(journal)[1]


def killed_mid_task(url: str, journal: Path, gate: Path, after: int = 0) -> str:
    """Run the agent until the journal holds its call's task (on a record
    newer than `after`); kill it."""
    first = agent(url, journal, gate)
    try:
        # The tool runs: the journal has the call's intent by now (made before it ran).
        wait_until(Path(f"{gate}.started").exists, 60, "the tool to start")
        wait_until(
            lambda: newest(journal)[0] > after and recorded_task(journal) is not None,
            60,
            "the task in the journal",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    handle = recorded_task(journal)
    assert handle is not None
    return handle


def runs(gate: Path) -> int:
    return len(Path(f"{gate}.runs").read_text().splitlines())


def test_a_journaled_task_is_fetched_after_the_agent_is_killed(tmp_path: Path) -> None:
    journal, gate = tmp_path / "journal.db", tmp_path / "gate"
    with server() as url:
        handle = killed_mid_task(url, journal, gate)
        assert '"task"' in handle
        second = agent(url, journal, gate)
        open_gate(gate, "v2")
        result = result_of(second)
    assert result.ok and result.output == "deployed v2", result
    assert runs(gate) == 1, "the tool ran once"
    with Journal(journal) as reading:
        assert reading.in_doubt() == [], "the call in doubt was picked up"


def test_a_task_survives_two_crashes(tmp_path: Path) -> None:
    """The process that picked the task up is killed too: the third fetches it."""
    journal, gate = tmp_path / "journal.db", tmp_path / "gate"
    with server() as url:
        handle = killed_mid_task(url, journal, gate)
        first_record = newest(journal)[0]
        again = killed_mid_task(url, journal, gate, after=first_record)
        assert again == handle, "the same task, kept with the second process's record"
        third = agent(url, journal, gate)
        open_gate(gate, "v3")
        result = result_of(third)
    assert result.ok and result.output == "deployed v3", result
    assert runs(gate) == 1


def test_a_task_the_server_no_longer_has_falls_back_to_the_in_doubt_rule(
    tmp_path: Path,
) -> None:
    journal, gate = tmp_path / "journal.db", tmp_path / "gate"
    with server() as url:
        killed_mid_task(url, journal, gate)
    open_gate(gate, "v1")  # (the old server's tool ends)
    with server() as url:  # a new server: the task is gone with the old one
        result = result_of(agent(url, journal, gate, "never-rerun"))
    assert result.status == "error" and result.error_code == ErrorCode.IN_DOUBT, result
    assert runs(gate) == 1


class Proxy:
    """A TCP proxy to `port` on a thread of its own, which the test can cut
    (every connection closed, new ones refused) and mend (on the same port)."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.refused = threading.Event()  # a connection came while cut
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._links: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self._cut = False
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self._do(self._listen())

    def _do(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused.set()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        self._links |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._links -= {writer, up_writer}

    def cut(self) -> None:
        async def cut() -> None:
            self._cut = True
            for link in list(self._links):
                link.close()

        self._do(cut())

    def mend(self) -> None:
        async def mend() -> None:
            self._cut = False

        self._do(mend())

    def close(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for link in list(self._links):
                link.close()

        self._do(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)


def test_a_call_made_a_task_survives_a_lost_connection(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection is cut while the server runs the call's task (a
    mutating tool's: toolbus would not call it again): toolbus connects
    again and fetches the task by id; the tool ran once."""
    from toolbus import ToolCall, ToolRegistry
    from toolbus.mcp import connect_http

    caplog.set_level(logging.INFO, logger="toolbus.mcp")
    journal, gate = tmp_path / "journal.db", tmp_path / "gate"
    with server() as url:
        proxy = Proxy(int(url.rsplit(":", 1)[1].split("/")[0]))
        try:
            remote = ToolRegistry()
            with connect_http(f"http://127.0.0.1:{proxy.port}/mcp") as connection:
                connection.register(remote)
                with Executor(remote, journal=journal, timeout=120) as executor:
                    call = ToolCall(id="deploy-1", name="deploy", arguments={"gate": str(gate)})
                    future = executor.submit(call)
                    wait_until(lambda: recorded_task(journal) is not None, 60, "the task known")
                    proxy.cut()
                    assert proxy.refused.wait(60), "the client came back while cut"
                    proxy.mend()
                    open_gate(gate, "v3")
                    result = future.result(120)
        finally:
            proxy.close()
    assert result.ok and result.output == "deployed v3", result
    assert runs(gate) == 1
    assert "reconnected (session" in caplog.text, "the call's session was made again"
