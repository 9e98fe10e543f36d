"""Run every example as its own process and check what it prints.

The examples are documentation; this keeps them working. Each one must exit 0
and print the lines that carry its point.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The slow tier (tests/README.md): each example run as a program of its own.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# The demo credential in examples/auth_injection.py; it must never be printed.
TOKEN = "tok_live_4f9a2c7e1b"

EXPECTED: dict[str, list[str]] = {
    "quickstart.py": [
        "call_2 get_weather: ok, 2 attempt(s)",
        "span execute_tool search_docs:",
        '"tool_call_id": "call_4", "content": "Saved: Pack sunglasses"',
        "Arguments are not valid JSON",
        "Error: Unknown tool 'book_flight'. Available tools: get_weather, search_docs, add_note "
        "(TOOL_NOT_FOUND)",
        "summary: 4/6 ok, 2 failed",
        "search_docs asked again: hit from the cache",
    ],
    "durable_agent.py": [
        "worker 1 died: SIGKILL while book_table ran",
        "replayed, not run again: get_weather({'city': 'Oslo'})",
        "replayed, not run again: get_weather({'city': 'Bergen'})",
        "in doubt: book_table (key dbos:plan-evening-1:8): the ledger has it, skipped",
        "final answer: Clear in Oslo; Maaemo at 8.",
        "the ledger: book_table ran 1 time(s)",
    ],
    "durable_restate.py": [
        "service 1 died: SIGKILL while book_table ran",
        "replayed, not run again: get_weather({'city': 'Oslo'})",
        "replayed, not run again: get_weather({'city': 'Bergen'})",
        "in doubt: book_table: the ledger has it (key restate:inv_",
        "final answer: Clear in Oslo; Maaemo at 8.",
        "the ledger: book_table ran 1 time(s)",
    ],
    "auth_injection.py": [
        "get_profile: ok output={'person_id': 'person-42'",
        "tool:executing get_profile: arguments={'identity': {'person_id': 'person-42', "
        "'bearer_token': '***'}}",
        "Authorization: Bearer ***",
        "events or results containing the token: 0",
        "get_profile: rejected output=None error='PermissionError: no signed-in session'",
        "get_time: ok output='12:00'",
        "arguments={'identity': {'person_id': '***', 'bearer_token': '***'}}",
        "events showing the person id: 0",
    ],
    "subclass_executor.py": [
        "[max_parallel]  batch of 4, mutating=True: limit 1",
        "[pre_execute]   search: added request_id=req-1000",
        "[post_execute]  search: cut output from 39 to 3",
        "[should_retry]  fetch_quote attempt 1 failed (ConnectionError): retry=True",
        "-> fetch_quote: ok after 2 attempt(s), 101.5",
        "[is_allowed]    delete_account: denied, role 'viewer' is read-only",
        "-> delete_account: rejected after 0 attempt(s), TOOL_NOT_ALLOWED",
        "metadata={'role': 'viewer'}",
        "lookup_customer attempt 1: {'email': '***'}",
    ],
    "observer.py": [
        "slow_report: timeout Tool 'slow_report' timed out after 0.2s",
        "index_documents: indexed 5/5 (100%)",
        "retry: attempt 2 of fetch_feed",
        "retry success: fetch_feed after 2 attempts",
        "timeout: slow_report after 0.2s",
        "fetch_feed: ok in 2 attempt(s)",
        "slow sink caught up: True",
    ],
    "mcp_client.py": [
        "Connected to MCP server 'mcp-time'; it offers:",
        "time_get_current_time (read-only; requires timezone)",
        "time_convert_time (read-only; requires source_timezone, time, target_timezone)",
        "Tools offered to the model: add_note, time_get_current_time, time_convert_time",
        "[bus] time_convert_time -> rejected",
        "UTC now is a ",
        "12:00 UTC is 21:00 in Asia/Tokyo (+9.0h)",
        "Error: Error executing tool get_current_time: Invalid timezone: "
        "'No time zone found with key Mars/Olympus' (TOOL_ERROR)",
        "Error: Invalid arguments for 'time_convert_time': arguments: source_timezone is "
        "required; arguments: target_timezone is required (INVALID_ARGUMENTS)",
        "Saved note: call Tokyo at 21:00",
        "summary: 3/5 ok, 2 failed, 4 read-only, 1 mutating",
        "server connection closed: True",
    ],
    "openai_agent.py": [
        "tools offered: get_weather, book_table, run_sql (strict: True)",
        "turn 1: get_weather -> ok, get_weather -> ok",
        "turn 2: book_table -> rejected",
        "[role=tool tool_call_id=call_bk1] Error: Invalid arguments for 'book_table': people: "
        "Input should be a valid integer, unable to parse string as an integer (INVALID_ARGUMENTS)",
        "[role=tool tool_call_id=call_bk2] Booked Ramiro for 2 at 20:00",
        "answer: Lisbon is warmer (19°C against 4°C in Oslo), so I booked Ramiro for 2 at 20:00.",
        "stopped: done after 4 model calls",
        "turn 1: run_sql -> ok, get_wether -> rejected",
        '[type=custom_tool_call_output call_id=call_sql1] [ { "name": "Oslo", "population": 717710 }',
        "[type=function_call_output call_id=call_wx3] Error: Unknown tool 'get_wether'. "
        "Did you mean 'get_weather'? Available tools: get_weather, book_table, run_sql "
        "(TOOL_NOT_FOUND)",
        "stopped: done after 3 model calls",
    ],
    "anthropic_agent.py": [
        "tools offered: get_weather, search_news, run_sql",
        "one user message with 2 tool_result blocks (2 ok):",
        '[tool_result toolu_bergen] { "city": "Bergen", "temperature": 7, "sky": "clear" }',
        "roles sent: user -> assistant -> user",
        "turn 1: search_news -> timeout, run_sql -> ok",
        "[tool_result toolu_news1] is_error=True Error: Tool 'search_news' timed out after 0.3s "
        "(EXECUTION_TIMEOUT)",
        '[tool_result toolu_sql] [ { "name": "Sognefjord", "length_km": 205 }',
        "turn 2: search_news -> ok",
        "answer: The longest fjords are the Sognefjord (205 km)",
        "stopped: done after 3 model calls",
    ],
    "langgraph_agent.py": [
        "tools offered: get_weather, search_flights, get_hotel_prices, book_flight",
        "the model sees search_flights with: origin, destination",
        "model asks for: get_weather, get_weather, search_flights, get_hotel_prices",
        '[call_wx2] get_weather success: {"city": "Lisbon", "celsius": 19}',
        "[call_fl1] search_flights success: TP1234 OSL->LIS 09:40, 189 EUR",
        "[call_ht1] get_hotel_prices error: Error: Tool 'get_hotel_prices' timed out after 0.5s",
        "[call_bk1] book_flight success: booked TP1234, seat 14C",
        "answer: Lisbon is 19°C against Oslo's 4°C: I booked TP1234, seat 14C.",
        "tool:executing search_flights arguments={'origin': 'OSL', 'destination': 'LIS', "
        "'api_key': '***'}",
        "turn 1, read-only, run in parallel: call_fl1, call_ht1, call_wx1, call_wx2",
        "call_bk1 (mutating) started after every call before it had ended: True",
        "events showing the API key: 0",
    ],
    "custom_actor.py": [
        "store_get    ok       Oslo",
        "store_get    ok       Bergen",
        "store_keys   ok       ['city', 'country']",
        "store_get    rejected Invalid arguments for 'store_get'",
        "store_put    calls=3 attempts=3 statuses={'ok': 3}",
        "store_get    calls=3 attempts=2 statuses={'ok': 2, 'rejected': 1}",
        "after a new executor started: country = Norway",
    ],
    "pydantic_ai_agent.py": [
        "tools offered: get_weather (parallel), search_news (parallel), book_table (sequential), "
        "price_in (parallel)",
        "turn 1: get_weather -> success: {'city': 'Oslo', 'temperature': 4}",
        "turn 1: get_weather -> success: {'city': 'Lisbon', 'temperature': 19}",
        "turn 1: search_news -> failed: Error: Tool 'search_news' timed out after 0.2s "
        "(EXECUTION_TIMEOUT)",
        "turn 1: book_table -> retried: Invalid arguments for 'book_table': people: Input should "
        "be a valid integer",
        "turn 2: book_table -> success: Booked Ramiro for 2 at 20:00",
        "turn 2: price_in -> success: 60.00 EUR",
        "answer: Lisbon is warmer (19°C); Ramiro is booked for 2.",
        "book_table as the bus saw it: {'restaurant': 'Ramiro', 'people': 2, 'api_key': '***'}",
        "events showing the key: 0",
    ],
    "openai_agents_agent.py": [
        "tools offered: get_weather, search_news, book_table, exchange_rate (strict: True)",
        "get_weather schema: {'title': 'Unit', 'type': ['string', 'null'], "
        "'description': '(default: \"celsius\")'}",
        'turn 1: wx1 -> { "city": "Oslo", "temperature": 4, "unit": "celsius" }',
        "turn 1: news1 -> Error: Tool 'search_news' timed out after 0.2s (EXECUTION_TIMEOUT)",
        "turn 1: bk1 -> Error: Invalid arguments for 'book_table': people: Input should be a "
        "valid integer, unable to parse string as an integer (INVALID_ARGUMENTS)",
        "turn 2: bk2 -> Booked Ramiro for 2 at 20:00",
        "turn 2: fx1 -> 11.5",
        "answer: Lisbon is warmer (19°C); Ramiro is booked for 2.",
        "exchange_rate attempts: [1, 2]",
        "book_table as the bus saw it: {'restaurant': 'Ramiro', 'people': 2, 'api_key': '***'}",
        "events showing the key: 0",
    ],
    "ray_tools.py": [
        "thumbnail: ok, ran on Ray: True",
        "  progress on this process's bus: cat.png: pass 1/3 (33%)",
        "  progress on this process's bus: cat.png: pass 3/3 (100%)",
        "fetch: 20/20 ok, concurrently on one actor: True",
        "stuck: timeout (EXECUTION_TIMEOUT), its actor killed: timeout",
        "segfault: error (TOOL_CRASHED)",
        "thumbnail again: ok",
        "second executor: ok",
        "Ray still up while an executor uses it: True",
        "Ray shut down with the last executor: True",
    ],
}

# Each bound is a hang guard, not a speed claim. ray_tools.py starts a local Ray
# and six actors; on an oversubscribed machine one actor start can take a minute.
TIMEOUTS = {"ray_tools.py": 540}
# Examples of an extra that may be absent: skipped, saying which.
NEEDS = {"ray_tools.py": "ray", "durable_agent.py": "dbos", "durable_restate.py": "restate"}
# Examples that drive a server from npm (installed into .cache/npm by the test command).
SERVERS = {
    "durable_restate.py": ROOT
    / ".cache/npm/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
}


def run_example(name: str) -> subprocess.CompletedProcess[str]:
    needs = NEEDS.get(name)
    if needs is not None and importlib.util.find_spec(needs) is None:
        pytest.skip(f"{name} needs {needs}: pip install 'toolbus[{needs}]'")
    server = SERVERS.get(name)
    if server is not None and not server.exists():
        pytest.skip(f"{name} needs {server.name} in .cache/npm (the test command installs it)")
    env = dict(os.environ)
    # Import the toolbus of this checkout even where it is not installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUTS.get(name, 120),
        check=False,
    )


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.timeout(TIMEOUTS.get(name, 120) + 60))
        for name in sorted(EXPECTED)
    ],
)
def test_example_runs(name: str) -> None:
    proc = run_example(name)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    missing = [line for line in EXPECTED[name] if line not in proc.stdout]
    assert not missing, f"{name} did not print {missing}:\n{proc.stdout}"
    assert "Traceback" not in proc.stderr, proc.stderr


def test_auth_example_never_prints_the_token() -> None:
    proc = run_example("auth_injection.py")
    assert proc.returncode == 0, proc.stderr
    assert TOKEN in (EXAMPLES / "auth_injection.py").read_text()  # the check is not vacuous
    assert TOKEN not in proc.stdout
    assert TOKEN not in proc.stderr
    assert "TOKEN LEAKED" not in proc.stdout
    assert proc.stdout.count("token never appeared in any event or result") == 2


def test_langgraph_example_never_prints_the_api_key() -> None:
    proc = run_example("langgraph_agent.py")
    assert proc.returncode == 0, proc.stderr
    assert "fl_live_93b1c7d2e8" in (EXAMPLES / "langgraph_agent.py").read_text()
    assert "fl_live_93b1c7d2e8" not in proc.stdout + proc.stderr


def test_subclass_example_never_prints_the_masked_email() -> None:
    proc = run_example("subclass_executor.py")
    assert proc.returncode == 0, proc.stderr
    assert "ada@example.com" not in proc.stdout
