"""Review 10: repros of bugs found in toolbus.observe and the CLI, still open.

Each test states what should happen and is marked xfail(strict=True) while
the bug stands: when a fix lands the test passes, the strict xfail fails, and
the marker is removed. The other repros of review 10 were fixed and moved,
as regression tests, next to what they test (test_observe_*.py,
test_policy_*.py, test_cli_commands.py).
"""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import httpx
import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from rich.console import Console

from toolbus import Executor, ToolCall, ToolRegistry, bus
from toolbus.observe import serve_status
from toolbus.observe._view import Board


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def work(delay: float = 0.0) -> str:
        """Works for a while."""
        time.sleep(delay)
        return "ok"

    return reg


# -- calls with the same id at the same time --------------------------------------


@pytest.mark.xfail(strict=True, reason="LiveState keys calls by (batch_id, call_id) only")
def test_live_state_shows_concurrent_calls_with_the_same_id() -> None:
    with Executor(_registry(), max_parallel=4) as ex, serve_status(ex) as srv:
        threads = [
            threading.Thread(
                target=ex.execute,
                args=(ToolCall(id="call_0", name="work", arguments={"delay": d}),),
            )
            for d in (0.8, 0.8)
        ]
        with bus.Recorder(bus.EXECUTING, sender=ex) as rec:
            for t in threads:
                t.start()
            rec.wait_for(bus.EXECUTING, 2, timeout=5)  # both calls are running
            ex.drain_events()
        rows = httpx.get(srv.url + "status").json()["state"]["in_flight"]
        for t in threads:
            t.join()
    assert len(rows) == 2


# -- the dashboard (live, toolbus top) -------------------------------------------


def _board(state: dict[str, Any]) -> Board:
    config = {"name": "x", "max_parallel": 1, "timeout": None, "retry": {}, "tools": []}
    base: dict[str, Any] = {
        "seq": 1,
        "totals": {},
        "in_flight": [],
        "recent": [],
        "errors": [],
        "tools": [],
    }
    return Board(config=config, state={**base, **state}, stats=None, now=time.time())


def test_the_board_draws_an_error_text_with_brackets() -> None:
    error = {
        "seq": 1,
        "timestamp": time.time(),
        "call_id": "[/x]",
        "batch_id": None,
        "tool": "[/]",
        "status": "error",
        "error_code": "TOOL_ERROR",
        "error": "see [/docs] for help",
        "duration": 0.1,
        "attempts": 1,
    }
    out = io.StringIO()
    Console(file=out, width=160).print(_board({"recent": [error], "errors": [error]}))
    assert "[/docs]" in out.getvalue()


def test_the_board_per_tool_columns_line_up() -> None:
    tool = {
        "tool": "t",
        "calls": 1,
        "ok": 1,
        "error": 0,
        "timeout": 0,
        "rejected": 0,
        "cancelled": 0,
        "deferred": 0,
        "in_flight": 0,
        "retries": 7,
        "p50": 0.5,
        "p95": 0.5,
        "p99": 0.5,
        "max": 0.5,
    }
    table = _board({"tools": [tool]})._tools()
    headers = [c.header for c in table.columns]
    assert len(headers) == len([c for c in table.columns if c.header])  # no column without a header
    retries = headers.index("retries")
    assert list(table.columns[retries].cells) == ["7"]
