"""Priorities through the public API, under real concurrency: `execute*(..., priority=N)`.

A blocker tool holds the only slot (released with an Event) while batches
queue up; the tools record the order they start in."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import MakeExecutor, wait_until
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.executor import Submission


class Scene:
    """A registry whose tools record when they start; `blocker` waits for `gate`."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.blocking = threading.Event()
        self.registry = reg = ToolRegistry()

        @reg.tool(read_only=True)
        def blocker() -> str:
            self.record("blocker")
            self.blocking.set()
            assert self.gate.wait(10), "the test never opened the gate"
            return "blocker"

        @reg.tool(read_only=True, max_concurrency=1)
        def narrow(tag: str) -> str:
            self.record(tag)
            if tag == "narrow-blocker":
                self.blocking.set()
                assert self.gate.wait(10), "the test never opened the gate"
            return tag

        @reg.tool(read_only=True)
        def read(tag: str) -> str:
            self.record(tag)
            return tag

        @reg.tool
        def write(tag: str) -> str:
            self.record(tag)
            return tag

    def record(self, tag: str) -> None:
        with self.lock:
            self.started.append(tag)


def _calls(*tags: str, prefix: str = "") -> list[ToolCall]:
    """`r:x` a read, `w:x` a write, `n:x` a narrow call, each tagged x."""
    names = {"r": "read", "w": "write", "n": "narrow"}
    out = []
    for tag in tags:
        kind, name = tag.split(":")
        out.append(ToolCall(id=f"{prefix}{name}", name=names[kind], arguments={"tag": name}))
    return out


@pytest.fixture
def scene() -> Iterator[Scene]:
    s = Scene()
    yield s
    s.gate.set()  # whatever happened, nothing stays blocked


def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)), daemon=True)
    t.start()
    return t, out


def _queued(ex: Executor, n: int) -> None:
    wait_until(lambda: ex.stats().queued == n, what=f"{n} calls queued")


def test_high_priority_batch_overtakes_earlier_low_ones(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = make_executor(scene.registry, max_parallel=1, timeout=30)
    blocker, _ = _in_thread(ex.execute, ToolCall(id="b", name="blocker"))
    assert scene.blocking.wait(5)
    # Low batches first: the second has a barrier (only its first read is eligible).
    low1, low1_out = _in_thread(ex.execute_batch, _calls("r:l1a", "r:l1b"))
    _queued(ex, 2)
    low2, low2_out = _in_thread(ex.execute_batch, _calls("r:l2a", "w:l2w", "r:l2b"), priority=-1)
    _queued(ex, 3)
    single, _ = _in_thread(ex.execute, _calls("r:single")[0])  # priority 0, after low1
    _queued(ex, 4)
    high, high_out = _in_thread(
        ex.execute_batch, _calls("r:h1", "w:hw", "r:h2", "r:h3"), priority=5
    )
    _queued(ex, 5)
    scene.gate.set()
    for t in (blocker, low1, low2, single, high):
        t.join(10)
        assert not t.is_alive()
    assert scene.started == [
        "blocker",
        # The high batch, in its own barrier order: h1, then the write, then the rest.
        "h1", "hw", "h2", "h3",
        # Then priority 0, first come first served; then -1 in its barrier order.
        "l1a", "l1b", "single",
        "l2a", "l2w", "l2b",
    ]  # fmt: skip
    for out in (low1_out, low2_out, high_out):
        assert all(r.status == "ok" for r in out[0])
    assert [r.output for r in high_out[0]] == ["h1", "hw", "h2", "h3"]


def test_priority_orders_a_tools_waiting_queue(make_executor: MakeExecutor, scene: Scene) -> None:
    # Room in max_parallel, none in the tool's max_concurrency: the calls wait
    # in the tool's queue, where priority orders them too.
    ex = make_executor(scene.registry, max_parallel=8, timeout=30)
    blocker, _ = _in_thread(ex.execute, _calls("n:narrow-blocker")[0])
    assert scene.blocking.wait(5)
    threads = []
    for i, (tag, priority) in enumerate([("n:low1", 0), ("n:low2", 0), ("n:high", 2)]):
        t, _ = _in_thread(ex.execute_batch, _calls(tag), priority=priority)
        threads.append(t)
        _queued(ex, i + 1)
    scene.gate.set()
    for t in (blocker, *threads):
        t.join(10)
        assert not t.is_alive()
    assert scene.started == ["narrow-blocker", "high", "low1", "low2"]


def test_async_high_priority_batch_overtakes_earlier_low_ones(
    make_executor: MakeExecutor, scene: Scene
) -> None:
    ex = make_executor(scene.registry, max_parallel=1, timeout=30)

    async def main() -> list[Any]:
        blocker = asyncio.create_task(ex.aexecute(ToolCall(id="b", name="blocker")))
        assert await asyncio.to_thread(scene.blocking.wait, 5)
        tasks: list[asyncio.Task[Any]] = [blocker]
        for calls, priority in [
            (_calls("r:l1a", "w:l1w", "r:l1b"), 0),
            (_calls("r:l2a"), 0),
            (_calls("r:h1", "w:hw", "r:h2"), 3),
        ]:
            tasks.append(asyncio.create_task(ex.aexecute_batch(calls, priority=priority)))
            await asyncio.sleep(0)  # the task runs up to its first await: submitted
        tasks.append(asyncio.create_task(ex.aexecute(_calls("r:single")[0], priority=1)))
        await asyncio.sleep(0)  # (the same: submitted, as the count below checks)
        assert ex.stats().queued == 4  # one eligible call per batch, and the single one
        scene.gate.set()
        return await asyncio.wait_for(asyncio.gather(*tasks), 10)

    results = asyncio.run(main())
    # l1w becomes eligible only when l1a is done: it then joins priority 0
    # behind l2a, which was waiting already (a barrier decides when a call may
    # go, priority where it waits).
    assert scene.started == ["blocker", "h1", "hw", "h2", "single", "l1a", "l2a", "l1w", "l1b"]
    assert results[3].results[1].output == "hw"


def test_nested_call_inherits_its_callers_priority(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    ex: Executor

    @reg.tool(read_only=True)
    def leaf() -> str:
        return "leaf"

    @reg.tool(read_only=True)
    def outer(own: int | None = None) -> str:
        nested = ex.execute(ToolCall(id="inner", name="leaf"), priority=own)
        return str(nested.output)

    ex = make_executor(reg, max_parallel=2)
    seen: list[Submission] = []
    ex.on_submit(seen.append)
    assert ex.execute(ToolCall(id="o1", name="outer"), priority=7).output == "leaf"
    batch = ex.execute_batch([ToolCall(id="o2", name="outer", arguments={"own": -3})])
    assert batch[0].output == "leaf"
    got = [(s.call_ids, s.priority) for s in seen]
    assert got == [(("o1",), 7), (("inner",), 7), (("o2",), 0), (("inner",), -3)]


@pytest.mark.parametrize("bad", [True, False, 1.0, "1", [1]])
def test_priority_must_be_an_integer(make_executor: MakeExecutor, scene: Scene, bad: Any) -> None:
    ex = make_executor(scene.registry)
    call = ToolCall(id="r", name="read", arguments={"tag": "x"})
    with pytest.raises(TypeError, match="priority"):
        ex.execute(call, priority=bad)
    with pytest.raises(TypeError, match="priority"):
        ex.execute_batch([call], priority=bad)
    with pytest.raises(TypeError, match="priority"):
        ex.execute_batch([], priority=bad)  # checked even with nothing to run
    with pytest.raises(TypeError, match="priority"):
        asyncio.run(ex.aexecute(call, priority=bad))
    with pytest.raises(TypeError, match="priority"):
        asyncio.run(ex.aexecute_batch([call], priority=bad))
    assert ex.stats().submitted == 0  # nothing was submitted
    assert scene.started == []


def test_priority_accepts_any_integer(make_executor: MakeExecutor, scene: Scene) -> None:
    ex = make_executor(scene.registry)
    call = ToolCall(id="r", name="read", arguments={"tag": "x"})
    for priority in (0, -5, 10**30):
        assert ex.execute(call, priority=priority).ok
        assert ex.execute_batch([call], priority=priority)[0].ok
