"""Review 9: repros of defects found in the policies / approvals / config / plugins work.

Each test asserts the behaviour the spec (issue 9) or the docs promise; every
defect here is fixed, so each is a regression test now.
"""

from __future__ import annotations

import asyncio
import math
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.config import ConfigError
from toolbus.policies import (
    Admit,
    BasePolicy,
    Delay,
    quota,
    rate_limit,
    requires_approval,
    spill,
)
from toolbus.tools import sequence, tool


def _registry(*policies: Any, read_only: bool = True) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=read_only, policies=list(policies))
    def f(x: int = 0) -> int:
        return x

    return reg


# -- 1. user policy code raising out of execute -----------------------------------------


class _TimeoutRaises(BasePolicy):
    def timeout(self, tool: Any, default: float | None) -> float | None:
        raise RuntimeError("boom")


class _AppliesRaises(BasePolicy):
    def applies_to(self, tool: Any) -> bool:
        raise RuntimeError("boom")


class _TimeoutIs(BasePolicy):
    def __init__(self, value: Any) -> None:
        self.value = value

    def timeout(self, tool: Any, default: float | None) -> Any:
        return self.value


# -- 2. on_result raising a BaseException: the call never ends ----------------------------


class _ResultRaises(BasePolicy):
    def on_result(self, call: ToolCall, result: Any, now: float) -> None:
        raise asyncio.CancelledError()  # e.g. it read a cancelled asyncio task's result


# -- 3. rate_limit: cancelled waiting calls keep their turns ------------------------------


@pytest.mark.timeout(60)
def test_cancelled_waiting_calls_do_not_hold_back_the_next_call() -> None:
    limit = rate_limit("5/second", max_wait=math.inf)
    ex = Executor(_registry(limit), timeout=None)

    async def main() -> float:
        task = asyncio.create_task(
            ex.aexecute_batch([ToolCall(name="f", arguments={"x": i}) for i in range(100)])
        )
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(1.5)  # a window and more: nothing runs, nothing waits
        t0 = time.monotonic()
        try:  # (the defect: it waits ~19 s for the cancelled calls' turns)
            await asyncio.wait_for(ex.aexecute(ToolCall(name="f", arguments={"x": 0})), 3)
        except TimeoutError:
            return math.inf
        return time.monotonic() - t0

    try:
        assert asyncio.run(main()) < 1.0
    finally:
        ex.close()


# -- 4. quota + requires_approval: the approved call is refused ---------------------------


def test_an_approved_call_is_not_refused_by_the_quota_its_deferral_spent() -> None:
    reg = ToolRegistry()

    @reg.tool(policies=[quota(1), requires_approval()])
    def send_email(to: str) -> str:
        return "sent"

    with Executor(reg) as ex:
        call = ToolCall(id="e1", name="send_email", arguments={"to": "bob"})
        first = ex.execute(call)
        assert first.status == "deferred"
        assert first.approval_request is not None
        again = ex.execute(call, approval=first.approval_request.approve())
        assert again.status == "ok", again.error  # QUOTA_EXCEEDED today


# -- 5. an executor's cache answers a tool's approval-guarded calls -----------------------


# -- 6. config: enabled=false and the file's policies bypassed through a sequence ---------


def test_a_tool_disabled_in_the_config_does_not_run_as_a_step(tmp_path: Path) -> None:
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool
    def code_exec(src: str) -> str:
        ran.append(src)
        return "executed"

    @reg.tool(read_only=True)
    def prep(src: str) -> str:
        return src

    reg.register(sequence("prep_and_run", [prep, code_exec]))
    path = tmp_path / "toolbus.toml"
    path.write_text('[tools."code_exec"]\nenabled = false  # disabled for security\n')
    with Executor.from_config(reg, path) as ex:
        assert ex.execute(ToolCall(name="code_exec", arguments={"src": "x"})).status == "rejected"
        ex.execute(ToolCall(name="prep_and_run", arguments={"src": "rm -rf /"}))
    assert ran == []  # ["rm -rf /"] today


def test_config_of_a_spilling_tool_and_read_artifact_together_is_accepted(tmp_path: Path) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[spill(store=tmp_path / "store", max_chars=1000)])
    def big(n: int) -> str:
        return "x" * n

    path = tmp_path / "toolbus.toml"
    path.write_text('[tools."big"]\ntimeout = 5\n[tools."read_artifact"]\ntimeout = 1\n')
    Executor.from_config(reg, path).close()  # ConfigError today: read_artifact "already registered"


@pytest.mark.parametrize(
    "body", ['journal = "/"', "x = " + "[" * 2000 + "]" * 2000], ids=["journal-dir", "deep"]
)
def test_config_errors_are_config_errors(tmp_path: Path, body: str) -> None:
    path = tmp_path / "toolbus.toml"
    path.write_text(body)
    with pytest.raises(ConfigError):  # IsADirectoryError / RecursionError today
        Executor.from_config(ToolRegistry(), path).close()


# -- 7. plugins: a broken one is fatal -----------------------------------------------------


@pytest.mark.parametrize("entry", ["gen_raises", "sys_exit"])
def test_a_broken_plugin_is_skipped(tmp_path: Path, entry: str, monkeypatch: Any) -> None:
    pkg = tmp_path / "review9plug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from toolbus import tool

            @tool
            def good() -> str:
                return "good"

            def gen_raises():
                yield good
                raise RuntimeError("half way")

            def sys_exit():
                raise SystemExit("a plugin that exits")
            """
        )
    )
    info = tmp_path / "review9plug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: review9plug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[review9.tools]\nx = review9plug:{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match="review9plug"):
        reg = ToolRegistry.from_entry_points(group="review9.tools")  # raises today
    assert len(reg.plugin_errors) == 1


# -- 8. the approval digest publishes a hash of masked secrets -----------------------------


# -- 9. a policy's decision runs on the attempt's deadline clock ---------------------------


class _SlowCheck(BasePolicy):
    name = "slow_check"

    async def admit(self, call: ToolCall, tool: Any, now: float) -> Admit:
        await asyncio.sleep(0.2)  # asks a remote service, say
        return Admit()


# -- 10. a policy that only delayed a call is told its result -------------------------------


class _InFlight(BasePolicy):
    """At most `n` calls in flight (the kind of policy extending.md invites)."""

    name = "in_flight"

    def __init__(self, n: int) -> None:
        self.n, self.count, self.lock = n, 0, threading.Lock()

    def admit(self, call: ToolCall, tool: Any, now: float) -> Any:
        with self.lock:
            if self.count < self.n:
                self.count += 1
                return Admit()
            return Delay(0.05)

    def on_result(self, call: ToolCall, result: Any, now: float) -> None:
        with self.lock:  # documented: told only for calls it admitted
            self.count -= 1


# -- 11. a sequence step that needs approval can never be approved -------------------------


def test_a_step_needing_approval_surfaces_its_request() -> None:
    @tool(read_only=True)
    def prep(x: int) -> int:
        return x

    @tool(policies=[requires_approval()])
    def danger(x: int) -> str:
        return "boom"

    reg = ToolRegistry()
    reg.register(sequence("seq", [prep, danger]))
    with Executor(reg) as ex:
        r = ex.execute(ToolCall(id="s1", name="seq", arguments={"x": 1}))
    # Today: status "error" (TOOL_ERROR), no approval_request; no decision can run it.
    assert r.status == "deferred" and r.approval_request is not None
