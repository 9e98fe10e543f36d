"""Calls served as MCP tasks, driven by the SDK's own client (`task_client.py`)
in process, over HTTP (uvicorn) and over stdio (`toolbus mcp serve`), on each
protocol version: a long call polled to completion, cancelled mid-way,
listed and fetched (2025-11-25), kept from another session, expiring,
asking for input, and refused where the version says so.

The tools (`tests/mcp_servers/task_tools.py`) wait for files the test
makes, so a server in another process waits as one in this process does.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.conftest import wait_until, wait_until_async
from tests.mcp.task_client import Created, Tasks, answer_name, raw, send, task_call
from tests.mcp_servers.serving import served_in_thread
from tests.mcp_servers.task_tools import open_gate, registry
from toolbus import Executor, ToolResult
from toolbus.mcp import _server as server_module
from toolbus.mcp import build_server
from toolbus.mcp._serve_http import http_app
from toolbus.mcp._task_protocol import RELATED_TASK, TASKS_EXTENSION

ROOT = Path(__file__).resolve().parents[2]
TRANSPORTS = ["memory", "http", "stdio"]


@contextlib.asynccontextmanager
async def serving(transport: str, task_after: float = 1.0) -> AsyncIterator[Any]:
    """What a `Client` connects to: the server, its URL, or the command
    (`task_after` for the server in process only)."""
    if transport == "stdio":
        yield StdioServerParameters(
            command=sys.executable,
            args=["-c", "from toolbus.cli import main; main()", "mcp", "serve",
                  "tests.mcp_servers.task_tools:registry", "--timeout", "60"],
            cwd=str(ROOT), env={"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        return
    executor = Executor(registry, timeout=60)
    try:
        if transport == "memory":
            yield build_server(registry, executor, task_after=task_after)
        else:
            async with _http(executor) as url:
                yield url
    finally:
        await asyncio.to_thread(executor.close)


@contextlib.asynccontextmanager
async def _http(executor: Executor) -> AsyncIterator[str]:
    serving = served_in_thread(http_app(registry, executor))
    try:
        yield await asyncio.to_thread(serving.__enter__)
    finally:
        await asyncio.to_thread(serving.__exit__, None, None, None)


def legacy(target: Any) -> Client:
    return Client(target, mode="legacy", elicitation_callback=answer_name)


def modern(target: Any, tasks: Tasks | None = None) -> Client:
    extensions = [tasks] if tasks is not None else []
    return Client(
        target, mode="2026-07-28", extensions=extensions, elicitation_callback=answer_name
    )


async def appears(path: Path) -> None:
    await asyncio.to_thread(wait_until, path.exists, 30, f"{path.name} to appear")


# -- 2025-11-25 -----------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_2025_a_long_call_polled_listed_fetched_and_another_cancelled(
    transport: str, tmp_path: Path
) -> None:
    gate, other = tmp_path / "gate", tmp_path / "other"
    async with serving(transport) as target, legacy(target) as client:
        caps = client.server_capabilities
        assert caps is not None and caps.tasks is not None and caps.tasks.requests is not None
        listed = {t.name: t.execution for t in (await client.list_tools()).tools}
        assert listed["build"] is not None and listed["build"].task_support == "optional"
        assert listed["crawl"] is not None and listed["crawl"].task_support == "required"
        assert listed["quick"] is None
        task_id = await task_call(client, "build", {"gate": str(gate)}, ttl=60_000)
        await appears(Path(f"{gate}.started"))
        assert (await raw(client, "tasks/get", {"taskId": task_id}))["status"] == "working"
        assert [t["taskId"] for t in (await raw(client, "tasks/list", {}))["tasks"]] == [task_id]
        open_gate(gate, "docs")
        result = await raw(client, "tasks/result", {"taskId": task_id})
        assert result["content"][0]["text"] == "built docs" and result["isError"] is False
        assert result["_meta"][RELATED_TASK] == {"taskId": task_id}
        assert "resultType" not in result
        done = await raw(client, "tasks/get", {"taskId": task_id})
        assert (done["status"], done["ttl"]) == ("completed", 60_000)
        # Another, cancelled mid-way: the tool is told, the result says so.
        cancelled_id = await task_call(client, "build", {"gate": str(other)})
        await appears(Path(f"{other}.started"))
        assert (await raw(client, "tasks/cancel", {"taskId": cancelled_id}))[
            "status"
        ] == "cancelled"
        await appears(Path(f"{other}.cancelled"))
        stopped = await raw(client, "tasks/result", {"taskId": cancelled_id})
        assert stopped["isError"] is True and "CANCELLED" in stopped["content"][0]["text"]
        assert (await raw(client, "tasks/get", {"taskId": cancelled_id}))["status"] == "cancelled"
        with pytest.raises(MCPError) as ended:
            await raw(client, "tasks/cancel", {"taskId": cancelled_id})
        assert ended.value.error.code == types.INVALID_PARAMS


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_2025_a_question_failure_and_refusals(transport: str) -> None:
    async with serving(transport) as target, legacy(target) as client:
        asked = await task_call(client, "ask_name", {})
        assert (await raw(client, "tasks/result", {"taskId": asked}))["content"][0]["text"] == (
            "hello Ada"  # asked inside tasks/result, tied to the task
        )
        failing = await task_call(client, "fail", {"why": "no disk"})
        result = await raw(client, "tasks/result", {"taskId": failing})
        assert result["isError"] is True and "no disk" in result["content"][0]["text"]
        got = await raw(client, "tasks/get", {"taskId": failing})
        assert got["status"] == "failed" and "no disk" in got["statusMessage"]
        with pytest.raises(MCPError) as required:
            await client.call_tool("crawl", {"site": "x"})
        assert required.value.error.code == types.METHOD_NOT_FOUND
        with pytest.raises(MCPError) as forbidden:
            await raw(client, "tools/call", {"name": "quick", "arguments": {}, "task": {}})
        assert forbidden.value.error.code == types.METHOD_NOT_FOUND
        lint = await client.call_tool("lint", {"target": "x"})  # optional: either way
        assert lint.content[0].text == "linted x"  # type: ignore[union-attr]
        with pytest.raises(MCPError) as unknown:
            await raw(client, "tasks/get", {"taskId": "made-up"})
        assert unknown.value.error.code == types.INVALID_PARAMS


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_2025_another_session_cannot_read_list_or_cancel_a_task(
    transport: str, tmp_path: Path
) -> None:
    async with serving(transport) as target, legacy(target) as alice, legacy(target) as mallory:
        task_id = await task_call(alice, "build", {"gate": str(tmp_path / "gate")})
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(MCPError) as refused:
                await raw(mallory, method, {"taskId": task_id})
            assert refused.value.error.code == types.INVALID_PARAMS
            assert "not found" in refused.value.error.message.lower()
        assert (await raw(mallory, "tasks/list", {}))["tasks"] == []
        assert (await raw(alice, "tasks/get", {"taskId": task_id}))["status"] == "working"
        open_gate(tmp_path / "gate", "x")


async def test_2025_a_task_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    clock = {"ahead": 0.0}
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + clock["ahead"])
    async with serving("memory") as target, legacy(target) as client:
        task_id = await task_call(client, "lint", {"target": "x"}, ttl=5_000)
        assert (await raw(client, "tasks/result", {"taskId": task_id}))["isError"] is False
        clock["ahead"] = 6.0
        with pytest.raises(MCPError) as gone:
            await raw(client, "tasks/get", {"taskId": task_id})
        assert gone.value.error.code == types.INVALID_PARAMS
        assert (await raw(client, "tasks/list", {}))["tasks"] == []


# -- 2026-07-28 -----------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_2026_tasks_polled_answered_and_cancelled(transport: str, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    released: list[Path] = []  # the gate a task's first sight opens (only build's)

    def release() -> None:
        for opened in released:
            open_gate(opened, "docs")

    tasks = Tasks(on_task=release)
    async with serving(transport) as target, modern(target, tasks) as client:
        crawled = await client.call_tool("crawl", {"site": "x"})
        assert crawled.content[0].text == "crawled x"  # type: ignore[union-attr]
        assert tasks.seen[0] == "working" and tasks.seen[-1] == "completed"
        failed = await client.call_tool("fail", {"why": "no disk"})
        assert failed.is_error and "no disk" in failed.content[0].text  # type: ignore[union-attr]
        assert tasks.seen[-1] == "completed"  # (`failed` is for protocol errors)
        linted = await client.call_tool("lint", {"target": "x"})  # optional: either way
        assert linted.content[0].text == "linted x"  # type: ignore[union-attr]
        tasks.seen.clear()
        released.append(gate)  # (opened once a task is seen: the call runs until then)
        built = await client.call_tool("build", {"gate": str(gate)})  # optional and long: a task
        assert built.content[0].text == "built docs" and tasks.seen[0] == "working"  # type: ignore[union-attr]
        tasks.seen.clear()
        named = await client.call_tool("ask_name", {})
        assert named.content[0].text == "hello Ada" and "input_required" in tasks.seen  # type: ignore[union-attr]
        # Cancelled: the tool is told, the task says so.
        other = tmp_path / "other"
        session = client.session
        created = await session.call_tool("build", {"gate": str(other)}, allow_claimed=True)
        assert isinstance(created, Created)
        await appears(Path(f"{other}.started"))
        await send(session, "tasks/cancel", task_id=created.task_id)
        await appears(Path(f"{other}.cancelled"))
        assert (await send(session, "tasks/get", task_id=created.task_id)).status == "cancelled"
        for method in ("tasks/result", "tasks/list"):
            with pytest.raises(MCPError) as absent:
                await send(session, method, task_id=created.task_id)
            assert absent.value.error.code == types.METHOD_NOT_FOUND
        with pytest.raises(MCPError) as unknown:
            await send(session, "tasks/get", task_id="made-up")
        assert unknown.value.error.code == types.INVALID_PARAMS


@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_2026_a_client_without_the_extension(transport: str, tmp_path: Path) -> None:
    async with serving(transport) as target, modern(target) as client:
        with pytest.raises(MCPError) as undeclared:
            await client.call_tool("crawl", {"site": "x"})
        assert undeclared.value.error.code == -32021
        assert undeclared.value.error.data == {
            "requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}
        }
        gate = tmp_path / "gate"
        open_gate(gate, "y")
        built = await client.call_tool("build", {"gate": str(gate)})  # optional: answered as is
        assert built.content[0].text == "built y"  # type: ignore[union-attr]


async def test_2026_an_optional_tool_that_ends_in_time_is_answered_as_it_is() -> None:
    tasks = Tasks()
    async with serving("memory", task_after=120.0) as target, modern(target, tasks) as client:
        linted = await client.call_tool("lint", {"target": "x"})
        assert linted.content[0].text == "linted x" and tasks.seen == []  # type: ignore[union-attr]


def test_task_after_is_checked() -> None:
    with Executor(registry) as executor:
        for bad, error in ((-1, ValueError), ("1", TypeError), (float("nan"), ValueError)):
            with pytest.raises(error, match="task_after"):
                build_server(registry, executor, task_after=bad)  # type: ignore[arg-type]


# -- found by review ----------------------------------------------------------------


async def test_2025_tasks_result_returns_when_the_task_ends_with_a_question_unanswered() -> None:
    """The question was awaited with no end: tasks/result hung after the call
    had timed out. Two waiting ones asked the person twice."""
    asked: list[str] = []
    never = asyncio.Event()

    async def silent(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        await never.wait()
        raise AssertionError("never answered")

    executor = Executor(registry, timeout=1.0)
    try:
        server = build_server(registry, executor)
        async with Client(server, mode="legacy", elicitation_callback=silent) as client:
            task_id = await task_call(client, "ask_name", {})
            first, second = await asyncio.gather(
                raw(client, "tasks/result", {"taskId": task_id}),
                raw(client, "tasks/result", {"taskId": task_id}),
            )
            assert first == second and first["isError"] is True
            assert "TIMEOUT" in first["content"][0]["text"]
            assert asked == ["Your name?"]
    finally:
        never.set()
        await asyncio.to_thread(executor.close)


async def test_another_in_process_client_leaving_does_not_cancel_a_task(tmp_path: Path) -> None:
    """The server's lifespan is entered once per in-memory connection: its
    end cancelled every task."""
    gate = tmp_path / "gate"
    async with serving("memory") as target, legacy(target) as client:
        task_id = await task_call(client, "build", {"gate": str(gate)})
        await appears(Path(f"{gate}.started"))
        async with legacy(target):
            pass
        assert (await raw(client, "tasks/get", {"taskId": task_id}))["status"] == "working"
        open_gate(gate, "on")
        result = await raw(client, "tasks/result", {"taskId": task_id})
        assert result["content"][0]["text"] == "built on"


async def test_2026_a_request_cancelled_before_its_call_became_a_task_cancels_the_call(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    async with serving("memory", task_after=120.0) as target, modern(target, Tasks()) as client:
        calling = asyncio.ensure_future(client.call_tool("build", {"gate": str(gate)}))
        await appears(Path(f"{gate}.started"))
        calling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await calling
        await appears(Path(f"{gate}.cancelled"))


async def test_a_task_is_dropped_when_its_lifetime_ends_and_its_call_cancelled(
    tmp_path: Path,
) -> None:
    """Only a later request dropped it, and cancelled its call."""
    gate = tmp_path / "gate"
    async with serving("memory") as target, legacy(target) as client:
        task_id = await task_call(client, "build", {"gate": str(gate)}, ttl=1000)
        await appears(Path(f"{gate}.cancelled"))  # (a second on, by itself)
        with pytest.raises(MCPError) as gone:
            await raw(client, "tasks/get", {"taskId": task_id})
        assert gone.value.error.code == types.INVALID_PARAMS


async def test_2026_task_methods_need_the_extension_declared(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with serving("memory") as target:
        async with modern(target, Tasks()) as declared:
            created = await declared.session.call_tool(
                "wait_long", {"gate": str(gate)}, allow_claimed=True
            )
            assert isinstance(created, Created)
            async with modern(target) as undeclared:
                for method in ("tasks/get", "tasks/cancel"):
                    with pytest.raises(MCPError) as refused:
                        await send(undeclared.session, method, task_id=created.task_id)
                    assert refused.value.error.code == -32021
            open_gate(gate, "x")


async def test_when_no_task_can_be_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """An optional tool is answered as any call; a required one is refused
    clearly (it was -32603, an internal error)."""
    from toolbus.mcp._tasks import TaskTable

    monkeypatch.setattr(TaskTable, "create", lambda self, *a, **k: None)
    async with serving("memory", task_after=0.0) as target, modern(target, Tasks()) as client:
        linted = await client.call_tool("lint", {"target": "x"})
        assert linted.content[0].text == "linted x"  # type: ignore[union-attr]
        with pytest.raises(MCPError) as full:
            await client.call_tool("crawl", {"site": "x"})
        assert full.value.error.code == types.INVALID_REQUEST
        assert "too many tasks" in full.value.error.message


async def test_2026_an_optional_call_answered_as_it_is_keeps_its_progress_and_logs() -> None:
    progress: list[str | None] = []
    logs: list[Any] = []

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def noted(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async with serving("memory", task_after=120.0) as target:
        client = Client(
            target,
            mode="2026-07-28",
            extensions=[Tasks()],
            logging_callback=logged,
            log_level="info",
        )
        async with client:
            result = await client.call_tool("report", {}, progress_callback=noted)  # type: ignore[arg-type]
            assert result.content[0].text == "reported"  # type: ignore[union-attr]
    assert progress == ["halfway"] and any("reporting" in str(d) for d in logs)


async def test_2025_a_malformed_answer_is_a_cancel_asked_once() -> None:
    """A reply the SDK cannot read was taken for the request going away:
    the question was asked again in a tight loop."""
    asked: list[str] = []

    async def bogus(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult.model_construct(action="bogus")  # type: ignore[arg-type]  # (no client would send it)

    executor = Executor(registry, timeout=60)
    try:
        async with Client(build_server(registry, executor), mode="legacy",
                          elicitation_callback=bogus) as client:  # fmt: skip
            task_id = await task_call(client, "ask_name", {})
            result = await raw(client, "tasks/result", {"taskId": task_id})
            assert result["content"][0]["text"] == "cancel" and asked == ["Your name?"]
    finally:
        await asyncio.to_thread(executor.close)


async def test_2025_a_question_left_by_a_cancelled_tasks_result_is_asked_by_another() -> None:
    first_asked = asyncio.Event()
    calls: list[int] = []

    async def slow_then_quick(
        context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        calls.append(1)
        if len(calls) == 1:
            first_asked.set()
            await asyncio.Event().wait()  # (its request is cancelled meanwhile)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    executor = Executor(registry, timeout=60)
    try:
        async with Client(build_server(registry, executor), mode="legacy",
                          elicitation_callback=slow_then_quick) as client:  # fmt: skip
            task_id = await task_call(client, "ask_name", {})
            first = asyncio.ensure_future(raw(client, "tasks/result", {"taskId": task_id}))
            await first_asked.wait()
            second = asyncio.ensure_future(raw(client, "tasks/result", {"taskId": task_id}))
            first.cancel()
            result = await second
            assert result["content"][0]["text"] == "hello Ada" and len(calls) == 2
    finally:
        await asyncio.to_thread(executor.close)


async def test_ended_tasks_let_go_are_released() -> None:
    """Evicted tasks kept their timers (and so their request contexts) for their ttl."""
    executor = Executor(registry, timeout=60)
    try:
        server = build_server(registry, executor)
        served = server.get_request_handler("tasks/get").handler.__self__  # type: ignore[union-attr]
        async with Client(server, mode="legacy") as client:
            ids = []
            for n in range(120):  # each ended before the next (only ended ones make room)
                ids.append(await task_call(client, "lint", {"target": str(n)}))
                await raw(client, "tasks/result", {"taskId": ids[-1]})
            kept = served.table.all()
            assert len(kept) == 100
            assert all(t.peer is None for t in kept if t.terminal)
            with pytest.raises(MCPError):
                await raw(client, "tasks/get", {"taskId": ids[0]})
    finally:
        await asyncio.to_thread(executor.close)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_result_no_reply_can_carry_is_an_error_not_a_cancel(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every result the executor passes as JSON has a reply now (an integer of
    # more digits than Python prints included): the SDK's refusal of one is
    # made here, as the server's own failure to build it.
    made = server_module.call_result

    def refused(result: ToolResult, tool: Any = None) -> Any:
        if result.name == "huge" and result.ok:
            raise ValueError("no reply can carry it")
        return made(result, tool)

    monkeypatch.setattr(server_module, "call_result", refused)
    async with serving("memory") as target:
        if mode == "legacy":
            async with legacy(target) as client:
                task_id = await task_call(client, "huge", {})
                result = await raw(client, "tasks/result", {"taskId": task_id})
        else:
            # 2026-07-28: the server's own failure, so the task ends `failed`
            # with an error (a tool's error would be `completed`, isError).
            tasks = Tasks()
            async with modern(target, tasks) as client:
                result = (await client.call_tool("huge", {})).model_dump(by_alias=True)
            assert tasks.seen[-1] == "failed"
    assert result["isError"] is True
    assert "its result cannot be sent" in result["content"][0]["text"]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_tasks_status_message_follows_its_progress(mode: str, tmp_path: Path) -> None:
    """Neither version sends a task's progress as notifications: its
    `statusMessage` says the latest."""
    gate = tmp_path / "gate"
    async with serving("memory") as target:
        if mode == "legacy":
            async with legacy(target) as client:
                task_id = await task_call(client, "stage", {"gate": str(gate)})

                async def said() -> Any:
                    return (await raw(client, "tasks/get", {"taskId": task_id})).get(
                        "statusMessage"
                    )

                await wait_until_async(lambda: _is(said(), "compiling"), 30, "the message")
                open_gate(gate, "x")
                done = await raw(client, "tasks/result", {"taskId": task_id})
                assert done["content"][0]["text"] == "built x"
        else:
            async with modern(target, Tasks()) as client:
                session = client.session
                created = await session.call_tool("stage", {"gate": str(gate)}, allow_claimed=True)
                assert isinstance(created, Created)

                async def got() -> Any:
                    return (
                        await send(session, "tasks/get", task_id=created.task_id)
                    ).status_message

                await wait_until_async(lambda: _is(got(), "compiling"), 30, "the message")
                open_gate(gate, "x")


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)


@pytest.mark.parametrize(
    "answer",
    [
        "Ada",
        3,
        {},
        {"action": "maybe"},
        {"roots": []},
        {"action": "accept", "content": {"name": 7}},
    ],
)
async def test_2026_an_answer_that_cannot_be_used_is_refused_and_the_question_stays(
    answer: Any,
) -> None:
    """tasks/update refuses an unusable answer to a question it asked (-32602),
    taking none of its answers; the question can be answered again."""
    async with serving("memory") as target, modern(target, Tasks()) as client:
        session = client.session
        created = await session.call_tool("ask_name", {}, allow_claimed=True)
        assert isinstance(created, Created)

        async def asking() -> bool:
            got = await send(session, "tasks/get", task_id=created.task_id)
            return got.status == "input_required"

        await wait_until_async(asking, 30, "the question")
        (key,) = (await send(session, "tasks/get", task_id=created.task_id)).input_requests or {}
        with pytest.raises(MCPError) as refused:
            await send(session, "tasks/update", task_id=created.task_id,
                       input_responses={key: answer, "unasked": 1})  # fmt: skip
        assert (
            refused.value.error.code == types.INVALID_PARAMS and key in refused.value.error.message
        )
        still = await send(session, "tasks/get", task_id=created.task_id)
        assert still.status == "input_required" and key in (still.input_requests or {})
        good = {"action": "accept", "content": {"name": "Ada"}}
        await send(session, "tasks/update", task_id=created.task_id, input_responses={key: good})

        async def done() -> bool:
            got = await send(session, "tasks/get", task_id=created.task_id)
            return got.status == "completed"

        await wait_until_async(done, 30, "the task's end")
