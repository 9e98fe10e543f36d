"""The MCP client and the spec's later features: structured output checked
against `outputSchema`, the four tool annotations, cancellation.

Peers: the `mcp` SDK's `MCPServer` and low-level `Server`
(tests/mcp_servers/spec_server.py), in-process and over stdio, each with the
2026-07-28 protocol and with the initialize handshake of earlier versions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

pytest.importorskip("mcp")

from tests.conftest import MakeExecutor
from tests.mcp_servers import spec_server
from tests.mcp_servers.peers import PEERS, SOME_PEERS, SPEC, connect_spec, use_peer
from tests.mcp_servers.scripted import Peer
from toolbus import Executor, RetryPolicy, ToolCall, ToolRegistry
from toolbus.mcp import (
    MCPConnection,
    MCPOutputError,
    connect,
    connect_stdio,
    mcp_tool,
    tool_annotations,
)
from toolbus.mcp._output import OutputCheck
from toolbus.models import ErrorCode

# The slow tier (tests/README.md): MCP servers started as subprocesses.
pytestmark = pytest.mark.slow

WIRE_TAP = str(Path(__file__).parents[1] / "mcp_servers" / "wire_tap.py")


def call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def registry_of(conn: MCPConnection, **options: Any) -> ToolRegistry:
    registry = ToolRegistry()
    conn.register(registry, **options)
    return registry


@pytest.fixture(params=SOME_PEERS)
def peer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    use_peer(request.param, monkeypatch)
    spec_server.reset()
    spec_server.reset_lowlevel()
    yield request.param
    spec_server.reset()


@pytest.fixture(params=PEERS)
def any_peer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every peer: cancellation travels differently in each."""
    use_peer(request.param, monkeypatch)
    spec_server.reset()
    yield request.param
    spec_server.reset()


# -- structured output ----------------------------------------------------------------------


def test_structured_output_is_the_output(peer: str, make_executor: MakeExecutor) -> None:
    with connect_spec(peer) as conn:
        weather = next(t for t in conn.tools() if t.name == "weather")
        assert weather.spec.output_schema is not None
        assert weather.spec.output_schema["required"] == ["temperature", "conditions"]
        result = make_executor(registry_of(conn), timeout=10).execute(call("weather", city="Oslo"))
    assert result.status == "ok", result.error
    assert result.output == {"temperature": 21.5, "conditions": "sunny"}


SHAPE_ERRORS = {
    "wrong_type": "field 'temperature' should be of type number",
    "missing_field": "field 'conditions' is missing (required)",
    "nested_wrong": "field 'hourly[1]' should be of type number",
    "extra_field": "field 'secret' is not allowed (no additional properties)",
    "no_structure": "it sent no structuredContent",
}


def test_structured_content_off_its_schema_is_an_error_naming_the_field(
    peer: str, make_executor: MakeExecutor
) -> None:
    with connect_spec(peer, lowlevel=True) as conn:
        executor = make_executor(registry_of(conn), timeout=10)
        good = executor.execute(call("good_shape"))
        bad = {tool: executor.execute(call(tool)) for tool in SHAPE_ERRORS}
    assert good.status == "ok", good.error
    assert good.output == {"temperature": 21.5, "conditions": "sunny"}
    for tool, detail in SHAPE_ERRORS.items():
        assert bad[tool].status == "error"
        assert bad[tool].error_code is ErrorCode.TOOL_ERROR
        assert bad[tool].error == (
            "MCP server 'spec-lowlevel' returned structured content that does not match "
            f"the tool's outputSchema: {detail}"
        )
        # The rule is named, never the value the server sent.
        assert not {"warm", "hunter2", "two"} & set((bad[tool].error or "").split("'"))


def test_a_tool_whose_output_schema_is_unusable_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="toolbus.mcp"),
        connect(spec_server.lowlevel) as conn,
    ):
        names = {t.name for t in conn.tools()}
    assert "good_shape" in names and "bad_schema" not in names
    assert "tool 'bad_schema' left out, its schema is not usable" in caplog.text


def test_output_check_of_its_own() -> None:
    # What toolbus checks where the SDK did not (a result it never validated).
    check = OutputCheck(spec_server.SHAPE, server="s")
    check.check(
        types.CallToolResult(content=[], structured_content=spec_server.RESULTS["good_shape"])
    )
    check.check(types.CallToolResult(content=[], is_error=True))  # an error promises nothing
    with pytest.raises(MCPOutputError, match=r"field 'hourly\[1\]' should be of type number$"):
        check.check(
            types.CallToolResult(content=[], structured_content=spec_server.RESULTS["nested_wrong"])
        )
    with pytest.raises(MCPOutputError, match="it sent no structuredContent"):
        check.check(types.CallToolResult(content=[]))
    with pytest.raises(MCPOutputError, match=r"the structured content should be of type object$"):
        check.check(types.CallToolResult(content=[], structured_content=[1]))


# -- annotations ------------------------------------------------------------------------------


def test_annotations(peer: str) -> None:
    with connect_spec(peer) as conn:
        tools = {t.name: t for t in conn.tools()}
        trusting = {t.name: t for t in conn.tools(idempotent_hints=True)}
        wary = conn.tools(read_only_hints=False)
    # destructiveHint: true makes a tool mutating, whatever readOnlyHint says.
    assert tools["wipe"].annotations == {"readOnlyHint": True, "destructiveHint": True}
    assert not tools["wipe"].read_only
    assert tools["browse"].read_only and tools["weather"].read_only
    assert not tools["hang"].read_only  # no annotations: mutating
    # openWorldHint is kept; absent, it is true (the spec's default).
    assert tools["browse"].open_world is False
    assert tools["weather"].open_world is True
    # idempotentHint counts only where the connection trusts hints.
    assert tools["put_once"].annotations["idempotentHint"] is True
    assert not tools["put_once"].idempotent
    assert trusting["put_once"].idempotent
    assert not trusting["weather"].idempotent  # no hint
    assert not any(t.read_only for t in wary)
    # Kept for serving them on: `toolbus mcp serve` of these tools says the same.
    assert (tools["wipe"].destructive, tools["put_once"].destructive) == (True, False)
    assert tools["weather"].destructive is None  # read-only
    assert tools["weather"].output_schema == tools["weather"].spec.output_schema
    served = tool_annotations(tools["wipe"])
    assert (served.read_only_hint, served.destructive_hint) == (False, True)
    served = tool_annotations(trusting["put_once"])
    assert (served.destructive_hint, served.idempotent_hint) == (False, True)
    assert mcp_tool(tools["weather"]).output_schema == tools["weather"].spec.output_schema
    assert tool_annotations(tools["browse"]).open_world_hint is False


def test_trusted_idempotent_hint_lets_a_timed_out_call_be_retried(
    peer: str, make_executor: MakeExecutor
) -> None:
    retry = RetryPolicy(max_retries=1, backoff_base=0.01)
    with connect_spec(peer) as conn:
        executor = make_executor(registry_of(conn), timeout=0.5, retry=retry)
        first = executor.execute(call("put_once", key="k"))  # hangs: never retried
    assert (first.status, first.attempts) == ("timeout", 1)
    spec_server.reset()
    with connect_spec(peer, idempotent_hints=True) as conn:
        assert next(t for t in conn.tools() if t.name == "put_once").idempotent
        # 5 s: the retry runs under the same timeout as the hung attempt and
        # must end ok (a round trip can take longer than 0.5 s on a busy machine).
        executor = make_executor(registry_of(conn), timeout=5, retry=retry)
        again = executor.execute(call("put_once", key="k"))  # hangs, then is retried
    assert (again.status, again.attempts, again.output) == ("ok", 2, {"result": "stored k"})


# -- cancellation ----------------------------------------------------------------------------

# How long a call of `hang` runs before its deadline cancels it: long enough
# that its request has reached the server and its handler runs, however loaded
# the machine, or the server has nothing to cancel and counts none (0.5 s was
# not, under stress-ng: stress run 9 of session 40, slow-tier seed in its log).
HANG_DEADLINE = 5.0


def test_a_timeout_cancels_the_request_on_the_server(
    any_peer: str, make_executor: MakeExecutor
) -> None:
    with connect_spec(any_peer) as conn:
        executor = make_executor(registry_of(conn), timeout=HANG_DEADLINE)
        hung = executor.execute(call("hang"))
        # Only the hanging call is held to its deadline: the question that follows
        # may take longer on a busy machine (stress run H of session 36).
        seen = executor.execute(call("cancels", at_least=1), timeout=60)
        assert conn.status().drops == 0  # the server answered the health check
    assert hung.status == "timeout"
    assert seen.output == {"result": 1}


def test_the_whole_call_budget_cancels_the_request_on_the_server(
    any_peer: str, make_executor: MakeExecutor
) -> None:
    with connect_spec(any_peer) as conn:
        executor = make_executor(registry_of(conn), timeout=30)
        hung = executor.execute(call("hang"), call_timeout=HANG_DEADLINE)
        seen = executor.execute(call("cancels", at_least=1))
    assert (hung.status, hung.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)
    assert seen.output == {"result": 1}


@pytest.mark.parametrize("era", ["stdio", "stdio-legacy"])
def test_the_server_receives_notifications_cancelled(
    era: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_executor: MakeExecutor
) -> None:
    use_peer(era, monkeypatch)
    wire = tmp_path / "client-to-server.jsonl"
    with connect_stdio(sys.executable, [WIRE_TAP, str(wire), SPEC]) as conn:
        executor = make_executor(registry_of(conn), timeout=HANG_DEADLINE)
        assert executor.execute(call("hang")).status == "timeout"
        # (Only the hanging call is held to its deadline, as above.)
        seen = executor.execute(call("cancels", at_least=1), timeout=60)
        assert seen.output == {"result": 1}
    sent = [json.loads(line) for line in wire.read_text().splitlines()]
    (hang,) = [m for m in sent if m.get("method") == "tools/call" and m["params"]["name"] == "hang"]
    cancelled = [m for m in sent if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancelled] == [hang["id"]]


async def test_cancelling_the_caller_cancels_the_request_on_the_server(any_peer: str) -> None:
    conn = await asyncio.to_thread(connect_spec, any_peer)
    try:
        async with Executor(registry_of(conn), timeout=30) as executor:
            task = asyncio.ensure_future(executor.aexecute(call("hang")))
            arrived = await executor.aexecute(call("hangs", at_least=1))
            assert arrived.output == {"result": 1}  # the server is running it
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            seen = await executor.aexecute(call("cancels", at_least=1))
    finally:
        await conn.aclose()
    assert seen.output == {"result": 1}


def test_a_tool_whose_schema_the_server_fixes_is_registered() -> None:
    """A tool left out for a bad output schema stayed out after the server fixed it (review 12)."""
    peer = Peer()
    peer.tool("fixme", output_schema={"type": "object", "properties": {"x": {"type": 42}}})
    registry = ToolRegistry()
    with connect(peer.server) as conn:
        conn.register(registry)
        assert "fixme" not in registry  # left out, with a warning: as documented
        peer.tool("fixme", output_schema={"type": "object"})  # the server fixes it
        conn.refresh()
        assert "fixme" in registry


def test_register_checks_idempotent_hints() -> None:
    """tools() took a truthy non-bool idempotent_hints ("false") as trusting the hints (review 12)."""
    peer = Peer()
    peer.tool("t")
    with connect(peer.server) as conn:
        with pytest.raises(TypeError):
            conn.tools(idempotent_hints="false")  # type: ignore[arg-type]  # truthy: trusts them


def test_a_catastrophic_output_schema_pattern_does_not_stall_other_tools(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A catastrophic output schema pattern (ReDoS) stalled the loop past the call's timeout
    (review 12)."""
    import subprocess

    from toolbus.mcp import _output

    # The match (in a child process) made to outlast the call by far: 32 "a"s
    # backtrack for minutes, and the child may run 120 s. So a call that ended
    # with the match, not at its 1 s timeout, could not pass the bounds below
    # however loaded the machine. The children are killed when the test is done.
    children: list[subprocess.Popen[bytes]] = []
    test_over = threading.Event()

    class Subprocess:
        TimeoutExpired = subprocess.TimeoutExpired

        @staticmethod
        def run(args: list[str], *, input: bytes, timeout: float, **_: Any) -> Any:
            with subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            ) as child:
                children.append(child)
                if test_over.is_set():  # started after the test killed the others
                    child.kill()
                try:
                    out, err = child.communicate(input, timeout=timeout)
                except subprocess.TimeoutExpired:
                    child.kill()
                    raise
            return subprocess.CompletedProcess(args, child.returncode, out, err)

    monkeypatch.setattr(_output, "subprocess", Subprocess)
    monkeypatch.setattr(_output, "PATTERN_SECONDS", 120)
    peer = Peer()
    peer.tool(
        "redos",
        output_schema={
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},
        },
    )
    peer.results["redos"] = types.CallToolResult(
        content=[], structured_content={"a": "a" * 32 + "!"}
    )
    registry = ToolRegistry()

    ticking = threading.Event()
    redos_over = threading.Event()

    @registry.tool(read_only=True, timeout=60)
    async def tick() -> float:
        """Ticks on the executor's loop until the redos call has ended."""
        ticking.set()
        gaps, last = [], time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            if redos_over.is_set():
                return max(gaps)

    try:
        with connect(peer.server) as conn:
            conn.register(registry)
            with Executor(registry, timeout=1) as executor:
                ticks: dict[str, Any] = {}
                thread = threading.Thread(
                    target=lambda: ticks.setdefault("r", executor.execute(ToolCall(name="tick")))
                )
                thread.start()
                assert ticking.wait(5)  # the loop's ticks are being measured
                started = time.monotonic()
                result = executor.execute(ToolCall(name="redos"))
                took = time.monotonic() - started
                redos_over.set()
                thread.join()
    finally:
        redos_over.set()
        test_over.set()
        for child in list(children):
            child.kill()
    assert result.status in ("timeout", "error")
    assert took < 10, f"a 1 s timeout ended after {took:.1f}s"
    assert ticks["r"].output < 5, f"a local async tool stalled {ticks['r'].output:.1f}s"


def test_a_risky_pattern_is_still_checked_out_of_process() -> None:
    """A risky output schema pattern, checked out of process, must still be checked (review 12)."""
    from toolbus.mcp._output import OutputCheck, risky_pattern

    assert risky_pattern("^(a+)+$")
    assert not risky_pattern("^[a-z]+$")
    check = OutputCheck(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}},
        server="s",
    )
    check.check(types.CallToolResult(content=[], structured_content={"a": "aaa"}))
    with pytest.raises(Exception, match=r"does not satisfy|does not match"):
        check.check(types.CallToolResult(content=[], structured_content={"a": "b"}))


_WRAPPED_INT = {
    "type": "object",
    "properties": {"result": {"type": "integer"}},
    "required": ["result"],
}


@pytest.mark.parametrize(
    ("marked", "unwrap", "output", "schema"),
    [
        (True, None, 7, {"type": "integer"}),  # toolbus's server marked it: unwrapped
        (False, None, {"result": 7}, _WRAPPED_INT),  # another server's: as sent
        (False, True, 7, {"type": "integer"}),  # ... unless the connection says so
        (True, False, {"result": 7}, {**_WRAPPED_INT, "x-toolbus-wrapped": True}),
    ],
)
def test_a_wrapped_output_is_unwrapped_when_marked_or_asked(
    marked: bool, unwrap: bool | None, output: Any, schema: dict[str, Any]
) -> None:
    """A tool declared `-> int` came back through `toolbus mcp serve` and
    toolbus's client as `{"result": 7}` (issue 22): a schema toolbus's server
    wrapped is marked, and the client unwraps it; for another server's
    wrapped schema (indistinguishable from a tool that really returns
    `{"result": ...}`) it is the connection's choice."""
    peer = Peer()
    declared = {**_WRAPPED_INT, "x-toolbus-wrapped": True} if marked else _WRAPPED_INT
    peer.tool("count", output_schema=declared)
    peer.results["count"] = types.CallToolResult(
        content=[types.TextContent(text="7")], structured_content={"result": 7}
    )
    registry = ToolRegistry()
    with connect(peer.server, unwrap_results=unwrap) as conn:
        conn.register(registry)
        tool = registry.get("count")
        assert tool is not None and tool.output_schema == schema
        with Executor(registry) as executor:
            result = executor.execute(ToolCall(name="count"))
    assert (result.status, result.output) == ("ok", output)


def test_connect_checks_unwrap_results() -> None:
    with pytest.raises(TypeError, match="unwrap_results must be True, False or None"):
        connect(Peer().server, unwrap_results="yes")  # type: ignore[arg-type]
