"""The caller's contextvars reach hooks and tools; the async API never blocks its loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading

from tests.conftest import MakeExecutor
from toolbus import ToolCall, ToolRegistry, ToolResult

request_user: contextvars.ContextVar[str] = contextvars.ContextVar("request_user", default="-")


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def whoami(identity: dict[str, str] | None = None) -> dict[str, str]:
        return {"tool_sees": request_user.get(), "hook_injected": (identity or {}).get("user", "")}

    @reg.tool
    def write_as() -> str:
        return request_user.get()

    return reg


def _hooks(seen: list[tuple[str, str]]) -> dict[str, object]:
    def inject(call: ToolCall) -> ToolCall:
        seen.append(("pre", request_user.get()))
        if call.name != "whoami":
            return call
        return call.with_arguments(
            {**dict(call.arguments), "identity": {"user": request_user.get()}}
        )  # type: ignore[arg-type]

    def allow(call: ToolCall) -> bool:
        seen.append(("authorize", request_user.get()))
        return True

    def post(call: ToolCall, result: ToolResult) -> ToolResult:
        seen.append(("post", request_user.get()))
        return result

    return {"pre_call": [inject], "authorize": allow, "post_call": [post]}


def test_contextvars_reach_hooks_and_tools_single_call(make_executor: MakeExecutor) -> None:
    seen: list[tuple[str, str]] = []
    ex = make_executor(_registry(), **_hooks(seen))
    token = request_user.set("alice")
    try:
        r = ex.execute(ToolCall(name="whoami"))
    finally:
        request_user.reset(token)
    assert r.output == {"tool_sees": "alice", "hook_injected": "alice"}
    assert seen == [("pre", "alice"), ("authorize", "alice"), ("post", "alice")]


def test_contextvars_reach_every_call_of_a_batch(make_executor: MakeExecutor) -> None:
    seen: list[tuple[str, str]] = []
    ex = make_executor(_registry(), max_parallel=4, **_hooks(seen))
    results: dict[str, list[object]] = {}

    def agent(user: str) -> None:
        request_user.set(user)  # each thread is its own agent session
        batch = ex.execute_batch(
            [ToolCall(name="whoami") for _ in range(6)] + [ToolCall(name="write_as")]
        )
        results[user] = [r.output for r in batch]

    threads = [threading.Thread(target=agent, args=(u,)) for u in ("bob", "carol", "dave")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for user in ("bob", "carol", "dave"):
        assert results[user][:6] == [{"tool_sees": user, "hook_injected": user}] * 6
        assert results[user][6] == user
    assert {who for _, who in seen} == {"bob", "carol", "dave"}


async def test_contextvars_reach_async_api(make_executor: MakeExecutor) -> None:
    seen: list[tuple[str, str]] = []
    ex = make_executor(_registry(), **_hooks(seen))

    async def session(user: str) -> object:
        request_user.set(user)
        single = await ex.aexecute(ToolCall(name="whoami"))
        batch = await ex.aexecute_batch([ToolCall(name="whoami"), ToolCall(name="write_as")])
        return single.output, [r.output for r in batch]

    a, b = await asyncio.gather(session("erin"), session("frank"))
    assert a == ({"tool_sees": "erin", "hook_injected": "erin"},
                 [{"tool_sees": "erin", "hook_injected": "erin"}, "erin"])  # fmt: skip
    assert b[0] == {"tool_sees": "frank", "hook_injected": "frank"}


async def test_async_tools_see_the_context_too(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    async def whoami_async() -> str:
        await asyncio.sleep(0)
        return request_user.get()

    ex = make_executor(reg)
    request_user.set("grace")
    assert (await ex.aexecute(ToolCall(name="whoami_async"))).output == "grace"


async def test_event_loop_is_never_blocked(make_executor: MakeExecutor) -> None:
    """Tools and hooks wait for something only this loop can do: if the async API
    blocked the loop while they ran, they would time out instead of passing."""
    loop_turned = threading.Event()
    hook_waits = threading.Event()  # a call is under way, waiting for the loop
    reg = ToolRegistry()

    @reg.tool(read_only=True, timeout=5)
    def needs_the_loop(i: int) -> int:
        if not loop_turned.wait(5):
            raise RuntimeError("the event loop was blocked")
        return i

    def hook_needs_the_loop(call: ToolCall) -> ToolCall:
        hook_waits.set()
        if not loop_turned.wait(5):
            raise RuntimeError("the event loop was blocked")
        return call

    ex = make_executor(reg, max_parallel=8, pre_call=[hook_needs_the_loop])

    async def turn_the_loop() -> None:
        # Only once a call waits for it: the loop turns while the calls run.
        assert await asyncio.to_thread(hook_waits.wait, 10)
        loop_turned.set()

    single = asyncio.ensure_future(
        ex.aexecute(ToolCall(name="needs_the_loop", arguments={"i": -1}))
    )
    batch = asyncio.ensure_future(
        ex.aexecute_batch([ToolCall(name="needs_the_loop", arguments={"i": i}) for i in range(8)])
    )
    await turn_the_loop()
    r, b = await single, await batch
    assert r.output == -1
    assert [x.output for x in b] == list(range(8))
