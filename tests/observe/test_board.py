"""The dashboard's board (`toolbus.observe._view.Board`, drawn by `live()` and
`toolbus top`), rendered in process with rich: what it draws of the records it
is given. The same board in a real terminal is test_live.py's.
"""

from __future__ import annotations

import io
import re
import time
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from rich.console import Console

from toolbus.observe._cells import clock
from toolbus.observe._view import Board


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
    """An error text with brackets ("see [/docs]") was read as rich markup (review 10)."""
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
    """The per-tool table had a column without a header, out of line (review 10)."""
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
    for narrow, name in ((False, "retries"), (True, "retry")):
        for table in _board({"tools": [tool]})._tools(narrow):
            headers = [c.header for c in table.columns]
            assert all(headers)  # no column without a header
        counts = _board({"tools": [tool]})._tools(narrow)[0]
        retries = [c.header for c in counts.columns].index(name)
        assert [str(c) for c in counts.columns[retries].cells] == ["7"]


def _drawn(board: Board) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(board)
    return out.getvalue()


def test_the_board_says_what_the_queued_calls_wait_for() -> None:
    """Beside `queued`, the per-queue counts: the executor's own when known
    (`stats().queues`), else those of the `tool:queued` events."""
    board = _board({"queues": {"db": 1}})
    assert "queued: 1 (db 1)" in _drawn(board)
    stats = {"queued": 5, "queues": {"max_parallel": 3, "[/x]": 2}}  # a name is not markup
    with_stats = Board(config=board.config, state=board.state, stats=stats, now=board.now)
    assert "queued: 5 (max_parallel 3, [/x] 2)" in _drawn(with_stats)
    nothing = Board(
        config=board.config, state=board.state, stats={"queued": 0, "queues": {}}, now=board.now
    )
    assert "queued" not in _drawn(nothing).split("In flight")[1].splitlines()[0]


@pytest.mark.parametrize("width", [60, 80, 120, 140])
def test_at_any_width_every_count_and_label_is_whole(width: int) -> None:
    """At 80x24 the counters read `submi…  in f…  qu…` and a tool's counts were
    cut to nothing (issue 22): a narrow board wraps its counters onto more
    rows and gives the per-tool and policy tables short labels, and at 60
    columns splits the counts once more. A failure keeps the start of its
    error and its time (names give way; review 22), and a breaker's circuit
    per key shows the key under a long tool name."""
    big = {"tool": "get_weather_forecast", "calls": 1234567, "ok": 1200000, "error": 1234}
    big |= {"timeout": 56, "rejected": 789, "cancelled": 10, "deferred": 2, "in_flight": 12}
    big |= {"retries": 3456, "p50": 0.012, "p95": 0.5, "p99": 1.2, "max": 30.1}
    now = time.time()
    policies = {
        "tools": [
            {"tool": "fetch", "breaker": "half-open", "throttled": 12345, "throttle_wait": 1.5}
            | {"cache_hits": 99999, "shared": 1234, "waiting": 3},
            {"tool": "search_the_docs", "breaker": "open", "throttled": 0, "cache_hits": 0},
        ],
        "breakers": [
            {"tool": "fetch", "state": "half-open", "failures": 5, "opened": 3},
            {"tool": "search_the_docs", "key": "tenant-globex", "state": "open"}
            | {"failures": 5, "opened": 1, "since": now - 3},
        ],
    }
    stats = {"submitted": 123456, "in_flight": 12, "queued": 345, "ok": 120000, "error": 1234}
    stats |= {"timeout": 56, "rejected": 789, "cancelled": 10, "deferred": 2, "retries": 3456}
    stats |= {"timeouts": 78, "abandoned_workers": 1, "abandoned_total": 5, "killed_workers": 2}
    stats |= {"late_results": 3, "events_dropped": 0}
    recent = [
        {"timestamp": now, "call_id": "call_0123456789abcdef", "tool": "lookup_order_history"}
        | {"status": "deferred", "error_code": "APPROVAL_REQUIRED", "attempts": 12, "duration": d}
        for d in (0.0003, 0.383, 12.5, 7203.0)
    ]
    flight = [{"call_id": "call_fedcba9876543210", "tool": "lookup_order_history"}]
    flight[0] |= {"attempt": 3, "state": "running", "started": now - 12.5, "detail": "x" * 90}
    failure = {"timestamp": now, "call_id": "call_Ks5nXd3EzDkh1FJ7y4hBq2Lm", "tool": "geocode"}
    failure |= {"status": "error", "error_code": "TOOL_ERROR", "attempts": 1, "duration": 0.2}
    failure["error"] = "Weather service busy: upstream answered 503 " + "and more " * 20
    state = {"tools": [big], "policies": policies, "recent": recent, "in_flight": flight}
    board = _board(state | {"errors": [failure]})
    board = Board(config=board.config, state=board.state, stats=stats, now=now)
    out = io.StringIO()
    Console(file=out, width=width, height=24).print(board)
    drawn = out.getvalue()
    lines = drawn.splitlines()
    assert max(len(line) for line in lines) <= width
    for line in map(str.rstrip, lines):  # no table cut at the right edge
        if line[:1] in "┏┃┡│└":
            assert line[-1] in "┓┃┩│┘", drawn
    counters = "submitted in flight queued ok error timeout rejected cancelled deferred retries"
    for word in [*counters.split(), "123456", "120000", "3456", "1/5", "99999 (1234", "12345"]:
        assert word in drawn
    # The tool's counts, whole and in order (in one row, or split over two tables).
    rows = [line for line in lines if "get_weather_forecast " in line]
    numbers = ["1234567", "1200000", "1234", "56", "789", "10", "2", "12", "3456"]
    assert [w for row in rows for w in row.split() if w.isdigit()][: len(numbers)] == numbers
    assert "…" not in "".join(line for line in lines if "get_weather" in line or "fetch" in line)
    # A call's numbers stay whole too (names give way): tries and time, elapsed.
    for time_taken in ("0.30 ms", "383 ms", "12.50 s", "120m03s"):
        assert re.search(rf"│ +12 │ +{time_taken} │", drawn), drawn
    assert re.search(r"│ +3 │ running │ 12\.50 s │", drawn), drawn
    # A failure: its time whole, and why it failed (names give way).
    failures = drawn.partition("Recent failures")[2]
    assert clock(now)[:12] in failures and "Weather service" in failures, failures
    # A circuit per key: its key, whatever the tool's name.
    assert "tenant-globex" in drawn.partition("Policies:")[2], drawn


def test_numbers_from_a_status_server_are_drawn_as_text() -> None:
    """`toolbus top` draws what another process sent: a count that is markup
    crashed the board (`[/x]`) or made a link."""
    board = _board({})
    stats = {"submitted": "[/x]", "in_flight": "[link=http://evil.example]1[/link]", "ok": 1}
    board = Board(config=board.config, state=board.state, stats=stats, now=board.now)
    drawn = _drawn(board)
    assert "[/x]" in drawn and "[link=http://evil.example]1[/link]" in drawn


@pytest.mark.parametrize("width", [60, 80, 120])
def test_keys_that_differ_at_their_end_stay_told_apart(width: int) -> None:
    """Two keys cut to their first 14 characters read the same
    (`key tenant-acme-p…` twice): a long key is cut in its middle."""
    keys = ["tenant-acme-production-eu-west-1", "tenant-acme-production-eu-west-2"]
    policies = {
        "tools": [{"tool": "search", "breaker": "open", "throttled": 0, "cache_hits": 0}],
        "breakers": [
            {"tool": "search", "key": key, "state": "open", "failures": 5, "opened": 1}
            for key in keys
        ],
    }
    out = io.StringIO()
    Console(file=out, width=width, height=40).print(_board({"policies": policies}))
    rows = [line for line in out.getvalue().splitlines() if "key tenant" in line]
    assert len(rows) == 2 and rows[0] != rows[1], rows
    assert rows[0].split("key ")[1].split()[0].endswith("west-1"), rows
