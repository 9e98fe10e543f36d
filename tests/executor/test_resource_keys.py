"""`resource_keys` under real concurrency, through the public API: calls wait
only for earlier calls touching the same resource.

Overlap is proven with barriers and events inside the tools (a call that could
not run alongside another would time out waiting for it), order with facts the
tools record when they start; nothing sleeps to synchronise.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import ErrorCode, Executor, ToolCall, ToolRegistry, bus

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0  # seconds: only ever reached when the schedule is wrong


class Files:
    """A toy file system whose tools record what had happened when each call started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data: dict[str, str] = {}
        self.started: list[str] = []
        self.finished: list[str] = []
        self.seen_at_start: dict[str, tuple[list[str], list[str]]] = {}

    def enter(self, tag: str) -> None:
        with self.lock:
            self.seen_at_start[tag] = (list(self.started), list(self.finished))
            self.started.append(tag)

    def leave(self, tag: str) -> None:
        with self.lock:
            self.finished.append(tag)

    def finished_before(self, tag: str) -> list[str]:
        return self.seen_at_start[tag][1]

    def started_before(self, tag: str) -> list[str]:
        return self.seen_at_start[tag][0]


def _registry(files: Files, hooks: dict[str, Any]) -> ToolRegistry:
    """`write` and `read` keyed by path; `grep` reads anything; `hook(tag)` lets a
    test block or signal inside a call."""
    reg = ToolRegistry()

    def run_hook(tag: str) -> None:
        hook = hooks.get(tag)
        if hook is not None:
            hook()

    @reg.tool(resource_keys=("path",))
    def write(tag: str, data: str, path: str = "default") -> str:
        files.enter(tag)
        try:
            run_hook(tag)
            files.data[path] = data
            return data
        finally:
            files.leave(tag)

    @reg.tool(read_only=True, resource_keys=("path",))
    def read(tag: str, path: str) -> str:
        files.enter(tag)
        try:
            run_hook(tag)
            return files.data.get(path, "")
        finally:
            files.leave(tag)

    @reg.tool(read_only=True)
    def grep(tag: str) -> str:
        files.enter(tag)
        try:
            run_hook(tag)
            return ",".join(f"{k}={v}" for k, v in sorted(files.data.items()))
        finally:
            files.leave(tag)

    return reg


def _call(name: str, tag: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=tag, name=name, arguments={"tag": tag, **arguments})


def test_writes_to_distinct_paths_overlap(make_executor: MakeExecutor) -> None:
    files = Files()
    all_in = threading.Barrier(3, timeout=WAIT)  # passes only if the three run at once
    hooks = dict.fromkeys(("a", "b", "c"), all_in.wait)
    ex = make_executor(_registry(files, hooks), max_parallel=8)
    result = ex.execute_batch([_call("write", t, path=t, data=t.upper()) for t in ("a", "b", "c")])
    assert [r.status for r in result] == ["ok"] * 3, [r.error for r in result]
    assert files.data == {"a": "A", "b": "B", "c": "C"}


def test_writes_to_one_path_run_in_order(make_executor: MakeExecutor) -> None:
    files = Files()
    b_started = threading.Event()
    # a1 runs until b, a write after it to another path, has started: the
    # batch is not run one call at a time, yet a2 must wait for a1.
    hooks = {"a1": lambda: b_started.wait(WAIT) or pytest.fail("b never started"),
             "b": b_started.set}  # fmt: skip
    ex = make_executor(_registry(files, hooks), max_parallel=8)
    result = ex.execute_batch(
        [
            _call("write", "a1", path="a", data="1"),
            _call("write", "b", path="b", data="x"),
            _call("write", "a2", path="a", data="2"),
            _call("write", "a3", path="a", data="3"),
        ]
    )
    assert [r.status for r in result] == ["ok"] * 4, [r.error for r in result]
    assert "a1" not in files.finished_before("b")  # b overlapped a1
    assert "a1" in files.finished_before("a2")
    assert "a2" in files.finished_before("a3")
    assert files.data["a"] == "3"


def test_a_read_waits_only_for_an_earlier_write_of_its_path(make_executor: MakeExecutor) -> None:
    files = Files()
    files.data.update(a="old", b="B")
    b_read = threading.Event()
    # The write of a holds on until the read of b, after it in the batch, ran.
    hooks = {"wa": lambda: b_read.wait(WAIT) or pytest.fail("the read of b waited"),
             "rb": b_read.set}  # fmt: skip
    ex = make_executor(_registry(files, hooks), max_parallel=8)
    result = ex.execute_batch(
        [
            _call("write", "wa", path="a", data="new"),
            _call("read", "rb", path="b"),
            _call("read", "ra", path="a"),
        ]
    )
    assert [r.status for r in result] == ["ok"] * 3, [r.error for r in result]
    assert [r.output for r in result] == ["new", "B", "new"]  # the read of a saw the write
    assert "wa" in files.finished_before("ra")


def test_a_read_without_keys_waits_for_every_earlier_write(make_executor: MakeExecutor) -> None:
    files = Files()
    both_in = threading.Barrier(2, timeout=WAIT)
    ex = make_executor(_registry(files, {"wa": both_in.wait, "wb": both_in.wait}), max_parallel=8)
    result = ex.execute_batch(
        [
            _call("write", "wa", path="a", data="1"),
            _call("write", "wb", path="b", data="2"),
            _call("grep", "g"),
            _call("write", "wc", path="c", data="3"),  # after the grep: waits for it
        ]
    )
    assert [r.status for r in result] == ["ok"] * 4, [r.error for r in result]
    assert result[2].output == "a=1,b=2"
    assert {"wa", "wb"} <= set(files.finished_before("g"))
    assert "g" in files.finished_before("wc")


def test_a_call_with_a_missing_key_is_a_full_barrier(make_executor: MakeExecutor) -> None:
    files = Files()
    ex = make_executor(_registry(files, {}), max_parallel=8)
    result = ex.execute_batch(
        [
            _call("write", "wa", path="a", data="1"),
            _call("read", "rb", path="b"),
            _call("write", "missing", data="2"),  # no path: it could touch anything
            _call("write", "wc", path="c", data="3"),
            _call("read", "rd", path="d"),
        ]
    )
    assert [r.status for r in result] == ["ok"] * 5, [r.error for r in result]
    assert {"wa", "rb"} <= set(files.finished_before("missing"))
    assert files.started_before("missing") == files.finished_before("missing")
    for later in ("wc", "rd"):
        assert "missing" in files.finished_before(later)
    assert files.data["default"] == "2"


def test_unparseable_arguments_are_a_full_barrier(make_executor: MakeExecutor) -> None:
    files = Files()
    ex = make_executor(_registry(files, {}), max_parallel=8)
    result = ex.execute_batch(
        [
            _call("write", "wa", path="a", data="1"),
            ToolCall(id="bad", name="write", arguments='{"path": "b", '),
            _call("write", "wb", path="b", data="2"),
        ]
    )
    assert [r.status for r in result] == ["ok", "rejected", "ok"]
    assert result[1].error_code == ErrorCode.INVALID_ARGUMENTS
    assert "wa" in files.finished_before("wb")


def test_keys_are_read_from_the_arguments_as_submitted(make_executor: MakeExecutor) -> None:
    # A pre-call hook moves the write of a to b: the schedule still orders it by a.
    files = Files()
    a_done = threading.Event()
    ex = make_executor(
        _registry(files, {"w1": a_done.set}),
        max_parallel=8,
        pre_call=[lambda c: c.with_arguments({**c.arguments, "path": "b"}) if c.id == "w1" else c],
    )
    result = ex.execute_batch(
        [
            _call("write", "w1", path="a", data="1"),
            ToolCall(id="w2", name="write", arguments='{"tag": "w2", "path": "a", "data": "2"}'),
        ]
    )
    assert [r.status for r in result] == ["ok", "ok"], [r.error for r in result]
    assert "w1" in files.finished_before("w2")
    assert files.data == {"a": "2", "b": "1"}


def test_stop_on_error_aborts_what_waits_and_lets_the_rest_go(make_executor: MakeExecutor) -> None:
    files = Files()
    b_started = threading.Event()

    def fail_after_b() -> None:
        if not b_started.wait(WAIT):
            pytest.fail("b never started")
        raise RuntimeError("disk full")

    ex = make_executor(_registry(files, {"a1": fail_after_b, "b": b_started.set}), max_parallel=8)
    result = ex.execute_batch(
        [
            _call("write", "a1", path="a", data="1"),
            _call("write", "b", path="b", data="x"),
            _call("write", "a2", path="a", data="2"),
        ],
        stop_on_error=True,
    )
    assert [r.status for r in result] == ["error", "ok", "cancelled"]
    assert result[2].error_code == ErrorCode.ABORTED
    assert "a2" not in files.started


def test_groups_are_announced_for_keyed_reads(make_executor: MakeExecutor) -> None:
    files = Files()
    ex = make_executor(_registry(files, {}), max_parallel=8)
    with bus.Recorder(sender=ex) as rec:
        ex.execute_batch(
            [
                _call("write", "wa", path="a", data="1"),
                _call("read", "ra", path="a"),
                _call("read", "rb", path="b"),
            ]
        )
        ex.drain_events()
    (opened,) = rec.of(bus.PARALLEL_START)
    (closed,) = rec.of(bus.PARALLEL_COMPLETE)
    assert (opened.group, opened.count) == (1, 2)
    assert (closed.group, closed.success_count, closed.failure_count) == (1, 2, 0)


async def test_async_batches_order_by_key(make_executor: MakeExecutor) -> None:
    files = Files()
    all_in = threading.Barrier(2, timeout=WAIT)
    ex: Executor = make_executor(
        _registry(files, {"a1": all_in.wait, "b": all_in.wait}), max_parallel=8
    )
    result = await ex.aexecute_batch(
        [
            _call("write", "a1", path="a", data="1"),
            _call("write", "b", path="b", data="x"),
            _call("read", "ra", path="a"),
        ]
    )
    assert [r.status for r in result] == ["ok"] * 3, [r.error for r in result]
    assert result[2].output == "1"
    assert "a1" in files.finished_before("ra")
