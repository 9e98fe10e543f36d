"""Work a call runs elsewhere (`ToolContext.record_remote_task`), kept by
the journal and picked up by the call made again after a crash
(`Tool.knows_remote_task`, `toolbus/pipeline/_journaled.py`).

A call is left in doubt as a crash leaves it: recorded by an executor, then
its outcome taken away (its owner is gone: the executor was closed).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from toolbus import (
    ErrorCode,
    Executor,
    Journal,
    RetryPolicy,
    Tool,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    bus,
)
from toolbus.in_doubt import never_rerun

CALL = ToolCall(id="deploy-1", name="deploy", arguments={"env": "prod"}, idempotency_key="k1")


class Deploy(Tool):
    """Starts a deploy elsewhere; picks it up again after a crash."""

    name = "deploy"
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"env": {"type": "string"}},
    }

    def __init__(self, known: Any = True, again: bool = True) -> None:
        super().__init__()
        self.known = known
        self.again = again
        self.seen: list[str | None] = []
        self.asked = threading.Event()

    def run(self, params: dict[str, Any], ctx: ToolContext) -> str:
        self.seen.append(ctx.remote_task)
        if ctx.remote_task is None:
            ctx.record_remote_task(f"job-{len(self.seen)}")
            return "started"
        if self.again:
            ctx.record_remote_task(ctx.remote_task)  # (for another crash: a no-op)
        return f"fetched {ctx.remote_task}"

    def knows_remote_task(self, handle: str) -> Any:
        self.asked.set()
        if isinstance(self.known, Exception):
            raise self.known
        return self.known


def left_in_doubt(path: Path, call: ToolCall = CALL, handle: str | None = "job-1") -> None:
    """`call`, recorded with `handle` as its remote task and no outcome."""
    reg = ToolRegistry()
    reg.register(Deploy())
    with Executor(reg, journal=path) as executor:
        assert executor.execute(call).ok
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE calls SET status = NULL, result = NULL, ended = NULL, remote_task = ? "
            "WHERE call_id = ?",
            (handle, call.id),
        )
    with Journal(path) as journal:
        assert [r.call_id for r in journal.in_doubt()] == [call.id]


def executor_of(tool: Deploy, path: Path, **options: Any) -> Executor:
    reg = ToolRegistry()
    reg.register(tool)
    return Executor(reg, journal=path, **options)


def test_the_call_made_again_picks_its_work_up_and_keeps_it_for_another_crash(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    left_in_doubt(path)
    tool = Deploy()
    with executor_of(tool, path) as executor:
        result = executor.execute(CALL)
        assert result.ok and result.output == "fetched job-1", result
        assert executor.in_doubt() == [], "the record is acknowledged"
    assert tool.seen == ["job-1"]
    with Journal(path) as journal:
        newest = journal.get(CALL.id)
    assert newest is not None and newest.remote_task == "job-1", "recorded again"


def test_the_new_intent_holds_the_handle_before_the_old_record_is_let_go(
    tmp_path: Path,
) -> None:
    """A crash just after the pickup must not lose the work: the call's own
    record holds the handle from its intent on, whatever its tool does."""
    path = tmp_path / "journal.db"
    left_in_doubt(path)
    tool = Deploy(again=False)
    with executor_of(tool, path) as executor:
        assert executor.execute(CALL).output == "fetched job-1"
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT id, remote_task FROM calls ORDER BY id").fetchall()
    assert [handle for _, handle in rows] == ["job-1", "job-1"], rows


def test_a_call_cancelled_while_its_intent_is_written_leaves_the_work_in_doubt(
    tmp_path: Path,
) -> None:
    """It never picked the work up: the next call of the key does (the tool
    runs once), rather than finding nothing in doubt and starting over."""
    path = tmp_path / "journal.db"
    left_in_doubt(path)
    tool = Deploy()
    with executor_of(tool, path, journal_timeout=60) as executor:
        holder = sqlite3.connect(path, timeout=5, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the journal's write lock, held elsewhere
        try:
            handle = executor.submit(CALL)
            assert tool.asked.wait(30), "the work was checked: its intent comes next"
            handle.cancel()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert handle.result(30).error_code == ErrorCode.CANCELLED
        again = executor.execute(CALL)
    assert again.output == "fetched job-1" and tool.seen == ["job-1"], again


@pytest.mark.parametrize("handler", [None, never_rerun])
def test_work_no_longer_there_falls_back_to_the_in_doubt_rule(tmp_path: Path, handler: Any) -> None:
    path = tmp_path / "journal.db"
    left_in_doubt(path)
    tool = Deploy(known=False)
    with executor_of(tool, path, on_in_doubt=handler) as executor:
        result = executor.execute(CALL)
    if handler is None:  # runs again, as a call in doubt does without a handler
        assert result.ok and result.output == "started" and tool.seen == [None]
    else:
        assert result.error_code == ErrorCode.IN_DOUBT and tool.seen == []


@pytest.mark.parametrize("known", [RuntimeError("unreachable"), "yes", None])
def test_a_check_that_cannot_tell_runs_nothing(tmp_path: Path, known: Any) -> None:
    """A check that fails leaves the call in doubt (TOOL_UNAVAILABLE, try
    again); one that answers no bool is a no."""
    path = tmp_path / "journal.db"
    left_in_doubt(path)
    tool = Deploy(known=known)
    with executor_of(tool, path, on_in_doubt=never_rerun) as executor:
        result = executor.execute(CALL)
        if isinstance(known, Exception):
            assert result.error_code == ErrorCode.TOOL_UNAVAILABLE, result
            assert [r.call_id for r in executor.in_doubt()] == [CALL.id]
        else:
            assert result.error_code == ErrorCode.IN_DOUBT, result
    assert tool.seen == []


def test_a_call_with_other_arguments_under_the_key_does_not_take_the_work(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.db"
    left_in_doubt(path)
    tool = Deploy()
    other = CALL.model_copy(update={"arguments": {"env": "staging"}})
    with executor_of(tool, path) as executor:
        result = executor.execute(other)
    assert tool.seen == [None], "its own work, not the other call's"
    assert result.output == "started"


def test_a_retry_in_the_same_process_starts_its_own_work() -> None:
    """Only the call made again after a crash is handed a remote task: a
    retry's attempt before it was cancelled, or ended."""
    seen: list[str | None] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def poll(ctx: ToolContext) -> str:
        seen.append(ctx.remote_task)
        ctx.record_remote_task(f"job-{len(seen)}")
        if len(seen) == 1:
            raise ToolError("try again", retryable=True)
        return "done"

    with Executor(reg, retry=RetryPolicy(max_retries=1, backoff_base=0.01)) as executor:
        assert executor.execute(ToolCall(name="poll", arguments={})).ok
    assert seen == [None, None]


def test_a_handle_is_masked_in_the_in_doubt_event(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    left_in_doubt(path, handle="secret-task-id")
    told: list[Any] = []
    subscription = bus.subscribe(lambda _s, event, **_: told.append(event), bus.IN_DOUBT)
    try:
        with executor_of(Deploy(), path) as executor:
            executor.drain_events()
            assert executor.in_doubt()[0].remote_task == "secret-task-id"
    finally:
        subscription.close()
    assert told and all("secret-task-id" not in repr(e) for e in told)


def test_record_remote_task_refuses_what_is_not_a_handle() -> None:
    ctx = ToolContext(call_id="c", tool="t")
    for bad in ("", None, 3):
        with pytest.raises(ValueError, match="non-empty string"):
            ctx.record_remote_task(bad)  # type: ignore[arg-type]
