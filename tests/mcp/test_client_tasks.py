"""toolbus's client calling an MCP server's tools as tasks (`connect(tasks=...)`),
against toolbus's own server (`tests/mcp_servers/task_tools.py`), on each
protocol version (the legacy one by the initialize handshake, `use_peer`),
in process and over stdio: the result fetched, the call's timeout cancelling
the task on the server, a question answered by the connection's handler,
and the connection's choice of which calls are tasks."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor, wait_until
from tests.mcp_servers.peers import use_peer
from tests.mcp_servers.serving import served_in_thread
from tests.mcp_servers.task_tools import open_gate
from tests.mcp_servers.task_tools import registry as served
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.mcp import MCPConnection, build_server, connect, connect_stdio
from toolbus.mcp._serve_http import http_app

ROOT = Path(__file__).resolve().parents[2]
PEERS = ["in-process", "in-process-legacy", "stdio", "stdio-legacy", "http", "http-legacy"]


def name_please(request: Any) -> Any:
    return request.accept({"name": "Ada"})


def connected(peer: str, server_side: Executor | None, **options: Any) -> Any:
    options.setdefault("elicitation", name_please)
    if peer.startswith("in-process"):
        assert server_side is not None
        return connect(build_server(served, server_side, task_after=0.2), **options)
    if peer.startswith("http"):
        assert server_side is not None
        return _over_http(server_side, **options)
    args = ["-c", "from toolbus.cli import main; main()", "mcp", "serve",
            "tests.mcp_servers.task_tools:registry", "--timeout", "60"]  # fmt: skip
    return connect_stdio(
        sys.executable, args, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)}, **options
    )


@contextlib.contextmanager
def _over_http(server_side: Executor, **options: Any) -> Iterator[MCPConnection]:
    """A connection to `served` over HTTP (uvicorn on a thread)."""
    with (
        served_in_thread(http_app(served, server_side, task_after=0.2)) as url,
        connect(url, **options) as conn,
    ):
        yield conn


@pytest.mark.parametrize("peer", PEERS)
def test_tools_called_as_tasks(
    peer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_executor: MakeExecutor
) -> None:
    use_peer(peer, monkeypatch)
    server_side = Executor(served, timeout=60) if not peer.startswith("stdio") else None
    try:
        with connected(peer, server_side, tasks="always") as conn:
            local = ToolRegistry()
            conn.register(local)
            ex = make_executor(local, timeout=60)
            crawl = ex.execute(ToolCall(name="crawl", arguments={"site": "x"}))
            assert crawl.output == "crawled x", crawl
            named = ex.execute(ToolCall(name="ask_name", arguments={}))
            assert named.output == "hello Ada", named
            failed = ex.execute(ToolCall(name="fail", arguments={"why": "no disk"}))
            assert failed.status == "error" and "no disk" in (failed.error or "")
            # A long one: its result fetched once the gate opens.
            gate = tmp_path / "gate"
            handle = ex.submit(ToolCall(name="build", arguments={"gate": str(gate)}))
            wait_until(Path(f"{gate}.started").exists, what="the build to start")
            open_gate(gate, "docs")
            assert handle.result(60).output == "built docs"
            # The call's timeout cancels the task on the server: its tool is told.
            other = tmp_path / "other"
            stopped = ex.execute(
                ToolCall(name="wait_long", arguments={"gate": str(other)}), timeout=1.0
            )
            assert stopped.status == "timeout"
            wait_until(Path(f"{other}.cancelled").exists, what="the task to be cancelled")
    finally:
        if server_side is not None:
            server_side.close()


def test_tasks_never_leaves_a_required_tool_refused(
    monkeypatch: pytest.MonkeyPatch, make_executor: MakeExecutor
) -> None:
    use_peer("in-process-legacy", monkeypatch)
    with (
        Executor(served, timeout=60) as server_side,
        connected("in-process-legacy", server_side, tasks="never") as conn,
    ):
        local = ToolRegistry()
        conn.register(local)
        r = make_executor(local).execute(ToolCall(name="crawl", arguments={"site": "x"}))
        assert r.status == "error" and "must be called as a task" in (r.error or "")


def test_tasks_is_checked() -> None:
    with Executor(served) as server_side, pytest.raises(ValueError, match="'auto', 'always'"):
        connect(build_server(served, server_side), tasks="sometimes")  # type: ignore[arg-type]


# -- a server's odd task answers (found by review) --------------------------------------


def odd_call(odd: Any, make_executor: MakeExecutor, **options: Any) -> Any:
    with connect(odd.server, **options) as conn:
        local = ToolRegistry()
        conn.register(local)
        result = make_executor(local, timeout=30).execute(ToolCall(name="slow", arguments={}))
        wait_until(lambda: odd.cancels == ["t1"], what="the task to be cancelled")
    return result


def task_state(status: str, **more: Any) -> dict[str, Any]:
    from tests.mcp_servers.odd_tasks import NOW

    return {"taskId": "t1", "status": status, "createdAt": NOW, "lastUpdatedAt": NOW,
            "ttlMs": 60_000, "pollIntervalMs": 10, **more}  # fmt: skip


def test_a_task_status_no_task_can_have_is_an_error_and_the_task_cancelled(
    make_executor: MakeExecutor,
) -> None:
    from tests.mcp_servers.odd_tasks import OddTasks

    odd = OddTasks(lambda n: task_state("working") if n < 2 else task_state("exploded"))
    r = odd_call(odd, make_executor)
    assert r.status == "error" and "no status a task can have ('exploded')" in (r.error or "")


def test_a_task_asking_without_end_is_stopped_and_paced(make_executor: MakeExecutor) -> None:
    """It was polled flat out (5 000 rounds in 2 s) while the call lasted."""
    from tests.mcp_servers.odd_tasks import OddTasks

    def asks(n: int) -> dict[str, Any]:
        question = {"method": "elicitation/create",
                    "params": {"mode": "form", "message": f"q{n}?",
                               "requestedSchema": {"type": "object", "properties": {}}}}  # fmt: skip
        return task_state("input_required", inputRequests={f"k{n}": question})

    odd = OddTasks(asks)
    r = odd_call(odd, make_executor, elicitation=lambda request: request.accept({}))
    assert r.status == "error" and "asked for input more than 10 times" in (r.error or "")
    assert len(odd.updates) == 10 and odd.gets == 11


def test_a_task_asking_what_is_not_offered_is_an_error(make_executor: MakeExecutor) -> None:
    from tests.mcp_servers.odd_tasks import OddTasks

    sampling = {"method": "sampling/createMessage",
                "params": {"messages": [], "maxTokens": 5}}  # fmt: skip
    odd = OddTasks(lambda n: task_state("input_required", inputRequests={"s": sampling}))
    r = odd_call(odd, make_executor)
    assert r.status == "error" and odd.updates == []


@pytest.mark.parametrize(
    ("protocol", "speaks"), [("2025-11-25", "2025-11-25"), ("auto", "2026-07-28")]
)
def test_a_connection_speaks_the_protocol_asked(protocol: Any, speaks: str) -> None:
    """`connect(protocol=)`: a required tool's call is a task on either."""
    with (
        Executor(served, timeout=60) as server_side,
        connect(build_server(served, server_side), protocol=protocol) as conn,
    ):
        assert conn.status().protocol_version == speaks
        tools = ToolRegistry()
        conn.register(tools)
        with Executor(tools, timeout=60) as executor:
            result = executor.execute(ToolCall(name="crawl", arguments={"site": "a.example"}))
    assert result.ok and result.output == "crawled a.example", result


def test_the_protocol_asked_is_checked() -> None:
    for wrong in ("2024-11-05", "2026-07-28", None):
        with pytest.raises(ValueError, match="protocol must be 'auto' or '2025-11-25'"):
            connect("http://127.0.0.1:9/mcp", protocol=wrong)  # type: ignore[typeddict-item]


def test_a_polled_tasks_status_messages_are_the_calls_progress(
    tmp_path: Path, make_executor: MakeExecutor
) -> None:
    """2026-07-28: each new `statusMessage` of the task is a `tool:progress`."""
    from toolbus import bus

    gate = tmp_path / "gate"
    said = threading.Event()

    def progress(_sender: Any, event: Any, **_: Any) -> None:
        if event.message == "compiling":
            said.set()

    with (
        Executor(served, timeout=60) as server_side,
        connected("in-process", server_side) as conn,
    ):
        local = ToolRegistry()
        conn.register(local)
        ex = make_executor(local, timeout=60)
        subscription = bus.subscribe(progress, bus.PROGRESS, sender=ex)
        try:
            handle = ex.submit(ToolCall(name="stage", arguments={"gate": str(gate)}))
            assert said.wait(30), "the task's status message came as progress"
            open_gate(gate, "it")
            assert handle.result(60).output == "built it"
        finally:
            subscription.close()
