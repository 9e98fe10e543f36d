"""Command tools: argv filled per element, limits, bounded output, and a process
group and session killed at the deadline; and ToolFailure, how a tool ends error
for good."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretBytes, SecretStr

from tests.conftest import MakeExecutor, wait_until
from toolbus import ErrorCode, Executor, RetryPolicy, ToolCall, ToolRegistry, bus
from toolbus.retry import AttemptFailure, RetryDecision
from toolbus.tools import CommandTool, ToolFailure

# The slow tier (tests/README.md): commands run and killed at their deadlines.
pytestmark = pytest.mark.slow

PY = sys.executable
# Prints its arguments as JSON on stdout, and "err" on stderr.
PRINT_ARGS = "import json, sys; print(json.dumps(sys.argv[1:])); print('err', file=sys.stderr)"
# Starts a grandchild that sleeps for ever, says who is who, and waits for it.
FORK_AND_HANG = 'echo $$ > "$1.leader"; sleep 1000 & echo $! > "$1.child"; wait'
RETRYING = RetryPolicy(max_retries=3, backoff_base=0.001, retry_on=(Exception,))


def _schema(**props: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": "string"} for k in props},
        "required": list(props),
    }


def _registry(*tools: CommandTool) -> ToolRegistry:
    reg = ToolRegistry()
    for t in tools:
        reg.register(t)
    return reg


def _hang_tool(timeout: float | None = None) -> CommandTool:
    return CommandTool(
        "hang", ["sh", "-c", FORK_AND_HANG, "sh", "{base}"], _schema(base=1),
        description="forks a grandchild and hangs", timeout=timeout,
    )  # fmt: skip


def _dead(pid: int) -> bool:
    """Gone, or a zombie that is not ours to reap (an orphan waiting for init:
    this machine's init does not reap orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone (while being read, even)
        return True
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return state == "Z" and int(ppid) != os.getpid()


def _wait_dead(*pids: int, timeout: float = 60.0) -> None:
    wait_until(lambda: all(_dead(p) for p in pids), timeout, f"processes {pids} gone")


def _written(path: Path) -> str:
    text = path.read_text().strip() if path.exists() else ""
    return text if text[-1:].isdigit() else ""


def _pid(path: Path, timeout: float = 60.0) -> int:
    """The pid the command wrote to `path`, once it has."""
    wait_until(lambda: bool(_written(path)), timeout, f"{path} written")
    return int(_written(path))


@pytest.fixture(params=["pidfd", "thread"])
def exits_seen_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A command's exit seen through a pidfd, or (as where there is none) by a thread."""
    if request.param == "thread":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfds here")
    return str(request.param)


# -- running and results ----------------------------------------------------------------


def test_ok_result_with_argv_filled_per_element(
    make_executor: MakeExecutor, tmp_path: Path, exits_seen_by: str
) -> None:
    marker = tmp_path / "pwned"
    tool = CommandTool(
        "args", [PY, "-c", PRINT_ARGS, "--city={city}", "{note}"], _schema(city=1, note=1),
        description="print args", read_only=True,
    )  # fmt: skip
    ex = make_executor(_registry(tool))
    note = f"; rm -rf x $(touch {marker}) `touch {marker}` | cat {{city}}"
    r = ex.execute(ToolCall(name="args", arguments={"city": "Oslo", "note": note}))
    assert r.status == "ok", r.error
    assert r.output == {
        "exit_code": 0,
        "stdout": f'["--city=Oslo", "{note}"]\n',  # one argument each, literally
        "stderr": "err\n",
        "truncated": False,
    }
    assert not marker.exists()  # no shell ever saw it


def test_pydantic_params_with_defaults_and_schema_defaults(make_executor: MakeExecutor) -> None:
    class Greet(BaseModel):
        who: str
        times: int = 2

    by_model = CommandTool("greet", ["echo", "{who}", "x{times:03d}"], Greet, description="greet")
    schema = {
        "type": "object",
        "properties": {"who": {"type": "string", "default": "world"}},
    }
    by_schema = CommandTool("hello", ["echo", "hello", "{who}"], schema, description="hi")
    assert by_model.schema["properties"]["who"]["type"] == "string"
    assert by_schema.to_openai()["function"]["parameters"] == schema
    ex = make_executor(_registry(by_model, by_schema))
    assert ex.execute(ToolCall(name="greet", arguments={"who": "a"})).output["stdout"] == "a x002\n"
    assert ex.execute(ToolCall(name="hello", arguments={})).output["stdout"] == "hello world\n"
    bad = ex.execute(ToolCall(name="greet", arguments={"who": "a", "times": "many"}))
    assert (bad.status, bad.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    nul = ex.execute(ToolCall(name="greet", arguments={"who": "a\0b"}))
    assert (nul.status, nul.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)


def test_direct_execute_without_an_executor() -> None:
    tool = CommandTool("e", ["echo", "{x}"], _schema(x=1), description="echo")
    r = tool.execute({"x": "hi"})
    assert (r.status, r.output["stdout"]) == ("ok", "hi\n")
    failed = CommandTool("f", ["sh", "-c", "exit 4"], None, description="f").execute({})
    assert (failed.status, failed.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert failed.metadata["exit_code"] == 4


class _Insistent(Executor):
    """Asks for a retry of every failure, up to four attempts."""

    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
        return RetryDecision(failure.attempt < 4, 0.001)


@pytest.mark.parametrize("insist", [False, True], ids=["policy", "hook"])
def test_nonzero_exit_is_a_tool_error_never_retried(insist: bool) -> None:
    tool = CommandTool(
        "fail", ["sh", "-c", "echo partial; echo 'bad input' >&2; exit 3"], None,
        description="fails", read_only=True,
    )  # fmt: skip
    ex = (_Insistent if insist else Executor)(_registry(tool), retry=RETRYING)
    try:
        with bus.Recorder(sender=ex) as rec:
            r = ex.execute(ToolCall(name="fail"))
            ex.drain_events()
    finally:
        ex.close()
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_ERROR, 1)
    assert "exited with code 3" in (r.error or "") and "bad input" in (r.error or "")
    assert r.metadata == {
        "exit_code": 3, "stdout": "partial\n", "stderr": "bad input\n", "truncated": False,
    }  # fmt: skip
    assert rec.of(bus.RETRY_ATTEMPT) == []
    assert [e.error_code for e in rec.of(bus.ERROR)] == [ErrorCode.TOOL_ERROR]


def test_output_is_bounded_and_the_command_never_blocks(make_executor: MakeExecutor) -> None:
    script = "import sys; sys.stdout.write('x' * 10_000_000); sys.stderr.write('é' * 5_000_000)"
    tool = CommandTool(
        "loud", [PY, "-c", script], None, description="10 MB each way",
        max_output_bytes=1001, timeout=30,
    )  # fmt: skip
    r = make_executor(_registry(tool)).execute(ToolCall(name="loud"))
    assert r.status == "ok", r.error
    assert r.output["stdout"] == "x" * 1001
    assert r.output["stderr"] == "é" * 500  # the cut half of a character is dropped
    assert r.output["truncated"] is True


def test_environment_is_only_env_and_inherited_names(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TB_SHARED", "shared")
    monkeypatch.setenv("TB_PRIVATE", "private")
    some = CommandTool(
        "some", ["env"], None, description="env",
        env={"TB_OWN": "own", "TB_SHARED": "overridden"}, inherit_env=["TB_PRIVATE", "TB_NOT_SET"],
    )  # fmt: skip
    everything = CommandTool("all", ["env"], None, description="env", inherit_env=True)
    nothing = CommandTool("none", ["env"], None, description="env")
    ex = make_executor(_registry(some, everything, nothing))
    lines = ex.execute(ToolCall(name="some")).output["stdout"].splitlines()
    assert sorted(lines) == ["TB_OWN=own", "TB_PRIVATE=private", "TB_SHARED=overridden"]
    lines = ex.execute(ToolCall(name="all")).output["stdout"].splitlines()
    assert {"TB_SHARED=shared", "TB_PRIVATE=private"} <= set(lines)
    assert ex.execute(ToolCall(name="none")).output["stdout"] == ""


def test_cwd_and_a_start_failure(make_executor: MakeExecutor, tmp_path: Path) -> None:
    here = CommandTool("pwd", ["pwd"], None, description="pwd", cwd=tmp_path)
    nowhere = CommandTool("lost", ["pwd"], None, description="pwd", cwd=tmp_path / "missing")
    ex = make_executor(_registry(here, nowhere))
    assert ex.execute(ToolCall(name="pwd")).output["stdout"] == f"{tmp_path}\n"
    r = ex.execute(ToolCall(name="lost"))
    assert (r.status, r.error_code) == ("error", ErrorCode.TOOL_ERROR)
    assert "working directory" in (r.error or "")


def test_processes_left_running_in_its_group_are_killed(
    make_executor: MakeExecutor, tmp_path: Path, exits_seen_by: str
) -> None:
    # The background sleep holds stdout open: without the kill, the read would hang.
    tool = CommandTool(
        "leaves", ["sh", "-c", 'sleep 1000 & echo $! > "$1"; echo done', "sh", "{path}"],
        _schema(path=1), description="leaves a job behind", timeout=30,
    )  # fmt: skip
    ex = make_executor(_registry(tool))
    path = tmp_path / "child"
    r = ex.execute(ToolCall(name="leaves", arguments={"path": str(path)}))
    assert r.status == "ok", r.error
    assert r.output["stdout"] == "done\n"
    _wait_dead(_pid(path))
    assert ex.stats().killed_workers == 0  # the call ended by itself: nothing was killed


# -- the kill ----------------------------------------------------------------------------


def test_command_and_grandchild_die_at_the_deadline(
    make_executor: MakeExecutor, tmp_path: Path, exits_seen_by: str
) -> None:
    ex = make_executor(_registry(_hang_tool(timeout=2.0)))
    base = tmp_path / "run"
    with bus.Recorder(sender=ex) as rec:
        r = ex.execute(ToolCall(id="h1", name="hang", arguments={"base": str(base)}))
        assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
        leader, child = _pid(Path(f"{base}.leader")), _pid(Path(f"{base}.child"))
        (killed,) = rec.wait_for(bus.KILLED)
        _wait_dead(leader, child)
        ex.drain_events()
    assert (killed.call_id, killed.pid, killed.reason) == ("h1", leader, "timeout")
    assert rec.of(bus.LATE_RESULT) == []  # killed: there is no late result
    stats = ex.stats()
    assert (stats.killed_workers, stats.late_results, stats.abandoned_total) == (1, 0, 0)


def test_the_whole_call_budget_kills_the_command(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ex = make_executor(_registry(_hang_tool(timeout=60)))
    base = tmp_path / "run"
    with bus.Recorder(sender=ex) as rec:
        r = ex.execute(
            ToolCall(id="b1", name="hang", arguments={"base": str(base)}), call_timeout=2.0
        )
        assert (r.status, r.error_code) == ("timeout", ErrorCode.DEADLINE_EXCEEDED)
        leader, child = _pid(Path(f"{base}.leader")), _pid(Path(f"{base}.child"))
        (killed,) = rec.wait_for(bus.KILLED)
        _wait_dead(leader, child)
    assert (killed.pid, killed.reason) == (leader, "timeout")


async def test_cancelling_the_caller_kills_the_group(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ex = make_executor(_registry(_hang_tool(timeout=60)))
    base = tmp_path / "run"
    with bus.Recorder(sender=ex) as rec:
        task = asyncio.ensure_future(
            ex.aexecute(ToolCall(id="c1", name="hang", arguments={"base": str(base)}))
        )
        child = await asyncio.to_thread(_pid, Path(f"{base}.child"))
        leader = await asyncio.to_thread(_pid, Path(f"{base}.leader"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        (killed,) = await asyncio.to_thread(rec.wait_for, bus.KILLED)
        (finished,) = await asyncio.to_thread(rec.wait_for, bus.FINISHED)
        await asyncio.to_thread(_wait_dead, leader, child)
    assert (killed.pid, killed.reason) == (leader, "cancelled")
    assert finished.result.status == "cancelled"
    assert ex.stats().killed_workers == 1


def test_closing_the_executor_kills_the_group(tmp_path: Path) -> None:
    ex = Executor(_registry(_hang_tool(timeout=60)))
    base = tmp_path / "run"
    results: list[Any] = []
    with bus.Recorder(bus.KILLED, sender=ex) as rec:
        caller = threading.Thread(
            target=lambda: results.append(
                ex.execute(ToolCall(name="hang", arguments={"base": str(base)}))
            )
        )
        caller.start()
        leader, child = _pid(Path(f"{base}.leader")), _pid(Path(f"{base}.child"))
        ex.close()
        caller.join(10)
        _wait_dead(leader, child)
    assert [r.status for r in results] == ["cancelled"]
    # Announced while the executor closes: delivered if the bus was still open.
    assert all((e.pid, e.reason) == (leader, "closed") for e in rec.of(bus.KILLED))


async def test_without_an_executor_cancel_and_close_kill_the_group(tmp_path: Path) -> None:
    tool = _hang_tool()
    # Cancelled: the CancelledError itself comes out, once the group is dead.
    base = tmp_path / "cancelled"
    task = asyncio.ensure_future(tool.aexecute({"base": str(base)}))
    leader = await asyncio.to_thread(_pid, Path(f"{base}.leader"))
    child = await asyncio.to_thread(_pid, Path(f"{base}.child"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _wait_dead(leader, child, timeout=1)  # dead and reaped before the cancellation came out
    # Closed mid-run (as when its task is dropped and collected): killed too.
    base = tmp_path / "closed"
    coro = tool.run(tool.parse({"base": str(base)}))
    coro.send(None)  # started; now waiting for it to exit
    leader = await asyncio.to_thread(_pid, Path(f"{base}.leader"))
    child = await asyncio.to_thread(_pid, Path(f"{base}.child"))
    coro.close()
    await asyncio.to_thread(_wait_dead, leader, child)


# -- limits ------------------------------------------------------------------------------


@pytest.fixture(params=["prlimit", "shim"])
def limits_via(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Limits set by util-linux's prlimit, or (as without it) by the exec shim."""
    if request.param == "prlimit":
        if shutil.which("prlimit") is None:
            pytest.skip("prlimit is not installed")
    else:
        which = shutil.which
        monkeypatch.setattr(
            shutil, "which", lambda cmd, *a, **k: None if cmd == "prlimit" else which(cmd, *a, **k)
        )
    return str(request.param)


def test_cpu_limit_gives_tool_crashed_naming_it(
    make_executor: MakeExecutor, limits_via: str
) -> None:
    spin = CommandTool(
        "spin", [PY, "-c", "while True: pass"], None, description="spins",
        cpu_limit_s=1, timeout=30, read_only=True,
    )  # fmt: skip
    assert (spin._prefix[0].endswith("prlimit")) is (limits_via == "prlimit")
    r = make_executor(_registry(spin), retry=RETRYING).execute(ToolCall(name="spin"))
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_CRASHED, 1)
    assert "cpu_limit_s=1" in (r.error or "")
    assert r.metadata["signal"] == "SIGXCPU"


def test_memory_limit_gives_an_error_naming_it(
    make_executor: MakeExecutor, limits_via: str
) -> None:
    hog = CommandTool(
        "hog", [PY, "-c", "x = bytearray(2_000_000_000)"], None, description="allocates 2 GB",
        memory_limit_mb=256, timeout=30,
    )  # fmt: skip
    fine = CommandTool(
        "fine", [PY, "-c", "x = bytearray(10_000_000); print(len(x))"], None,
        description="allocates 10 MB", memory_limit_mb=256, cpu_limit_s=5,
    )  # fmt: skip
    ex = make_executor(_registry(hog, fine))
    r = ex.execute(ToolCall(name="hog"))
    assert (r.status, r.attempts) == ("error", 1)
    assert "memory_limit_mb=256" in (r.error or "") and "MemoryError" in (r.error or "")
    assert ex.execute(ToolCall(name="fine")).output["stdout"] == "10000000\n"


# -- construction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "params", "options", "error", "words"),
    [
        (["no-such-program-xyz"], None, {}, ValueError, "not found on PATH"),
        (["echo", "{nope}"], _schema(city=1), {}, ValueError, "{nope}"),
        (["echo", "{}"], _schema(city=1), {}, ValueError, "positional"),
        (["echo", "{city"], _schema(city=1), {}, ValueError, "argv[1]"),
        (["{city}"], _schema(city=1), {}, ValueError, "argv[0]"),
        ("echo hi", None, {}, TypeError, "list of strings"),
        ([], None, {}, ValueError, "empty"),
        (["echo", 3], None, {}, TypeError, "argv[1]"),
        (["echo", "{c}"], {"type": "object", "properties": {"c": {}}}, {}, ValueError, "optional"),
        (["echo"], None, {"env": {"A": 1}}, TypeError, "env"),
        (["echo"], None, {"env": ["A=1"]}, TypeError, "env"),
        (["echo"], None, {"inherit_env": "PATH"}, TypeError, "inherit_env"),
        (["echo"], None, {"inherit_env": [None]}, TypeError, "inherit_env"),
        (["echo"], None, {"max_output_bytes": 0}, ValueError, "max_output_bytes"),
        (["echo"], None, {"memory_limit_mb": -1}, ValueError, "memory_limit_mb"),
        (["echo"], None, {"cpu_limit_s": "1"}, TypeError, "cpu_limit_s"),
        (["echo"], None, {"cwd": 3}, TypeError, "cwd"),
        (["echo"], 42, {}, TypeError, "params"),
    ],
)
def test_construction_errors_name_the_tool(
    argv: Any, params: Any, options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error) as info:
        CommandTool("broken", argv, params, description="d", **options)
    assert "'broken'" in str(info.value) and words in str(info.value)


def test_relative_and_absolute_programs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    tool = CommandTool("rel", ["./hello.sh"], None, description="d")
    assert tool.program == str(script)  # resolved when made, not in the command's cwd
    assert tool.execute({}).output["stdout"] == "hello\n"
    (tmp_path / "plain").write_text("")
    with pytest.raises(ValueError, match="not found"):
        CommandTool("plain", [str(tmp_path / "plain")], None, description="not executable")


# -- secrets -----------------------------------------------------------------------------


def test_secret_argument_never_published(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-live-5f3a9c"
    script = "import sys; print(sys.argv[1:]); print('rejected', sys.argv[1], file=sys.stderr)"
    leaky = CommandTool(
        "leaky", [PY, "-c", script, "--key={api_key}"], _schema(api_key=1, mode=1),
        description="prints its key", read_only=True,
    )  # fmt: skip
    failing = CommandTool(
        "failing", [PY, "-c", script + "; sys.exit(2)", "--key={api_key}"], _schema(api_key=1),
        description="fails with its key", read_only=True,
    )  # fmt: skip
    ex = make_executor(_registry(leaky, failing))
    caplog.set_level(logging.DEBUG, logger="toolbus")
    with bus.Recorder(sender=ex) as rec:
        ok = ex.execute(ToolCall(name="leaky", arguments={"api_key": secret, "mode": "x"}))
        bad = ex.execute(ToolCall(name="failing", arguments={"api_key": secret}))
        ex.drain_events()
    assert ok.status == "ok" and bad.status == "error"
    assert "--key=" in ok.output["stdout"] and "rejected" in (bad.error or "")
    for published in (repr(rec.events), ok.model_dump_json(), bad.model_dump_json(), caplog.text):
        assert secret not in published


def test_credentials_in_its_environment_are_never_published(
    make_executor: MakeExecutor, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The application's credentials go to a command through `env` or
    # `inherit_env` (not argv: any local user reads /proc/<pid>/cmdline).
    given, inherited = "envSECRET-abcdef-778899", "inheritedSECRET-5544"
    monkeypatch.setenv("TOOLBUS_TEST_DB_PASSWORD", inherited)
    script = 'echo "token $API_TOKEN and $TOOLBUS_TEST_DB_PASSWORD rejected in $REGION" >&2'
    tool = CommandTool(
        "cmd", ["sh", "-c", script + "; echo $API_TOKEN; exit 3", "{q}"], _schema(q=1),
        description="prints its credentials", env={"API_TOKEN": given, "REGION": "eu-west"},
        inherit_env=["TOOLBUS_TEST_DB_PASSWORD"], read_only=True,
    )  # fmt: skip
    ex = make_executor(_registry(tool))
    caplog.set_level(logging.DEBUG, logger="toolbus")
    with bus.Recorder(sender=ex) as rec:
        r = ex.execute(ToolCall(name="cmd", arguments={"q": "x"}))
        ex.drain_events()
    assert r.status == "error" and r.metadata["exit_code"] == 3
    # Scrubbed where they were printed; a variable not named as a secret is not.
    assert "token *** and *** rejected in eu-west" in r.metadata["stderr"]
    assert r.metadata["stdout"] == "***\n"
    for published in (repr(rec.events), r.model_dump_json(), caplog.text):
        assert given not in published and inherited not in published


def test_only_credentials_it_is_given_by_name_are_scrubbed(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not a short value (`false` is no credential), nor the whole environment
    # `inherit_env=True` passes on: each would garble what the model reads.
    monkeypatch.setenv("TOOLBUS_TEST_TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("TOOLBUS_TEST_PASSWORD_STORE_DIR", "/home/someone/.store")
    script = 'echo "$TOOLBUS_TEST_TOKENIZERS_PARALLELISM $TOOLBUS_TEST_PASSWORD_STORE_DIR $PIN"'
    tool = CommandTool(
        "cmd", ["sh", "-c", script, "{q}"], _schema(q=1), description="prints its environment",
        env={"PIN": "1234"}, inherit_env=True, read_only=True,
    )  # fmt: skip
    r = make_executor(_registry(tool)).execute(ToolCall(name="cmd", arguments={"q": "x"}))
    assert r.status == "ok" and r.output["stdout"] == "false /home/someone/.store 1234\n"


# -- ToolFailure -------------------------------------------------------------------------


def test_tool_failure_code_metadata_and_no_retry(make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()
    attempts: list[int] = []

    @reg.tool(read_only=True)
    def crashy(retry: bool) -> str:
        attempts.append(1)
        raise ToolFailure(
            "it fell over", code=ErrorCode.TOOL_CRASHED, metadata={"why": "x"}, retry=retry
        )

    class Insistent(_Insistent):
        pass

    ex = Insistent(reg, retry=RETRYING)
    try:
        r = ex.execute(ToolCall(name="crashy", arguments={"retry": False}))
        assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_CRASHED, 1)
        assert (r.error, r.metadata) == ("it fell over", {"why": "x"})
        # retry=True: the policy (here, a hook) decides, as for any failure.
        r = ex.execute(ToolCall(name="crashy", arguments={"retry": True}))
        assert (r.error_code, r.attempts) == (ErrorCode.TOOL_CRASHED, 4)
    finally:
        ex.close()
    assert len(attempts) == 5
    with pytest.raises(ValueError, match="TOOL_ERROR or TOOL_CRASHED"):
        ToolFailure("x", code=ErrorCode.EXECUTION_TIMEOUT)


def test_tool_failure_crash_of_a_mutating_tool_is_not_retried(
    make_executor: MakeExecutor,
) -> None:
    reg = ToolRegistry()

    @reg.tool
    def mutate() -> str:
        raise ToolFailure("died", code=ErrorCode.TOOL_CRASHED, retry=True)

    r = make_executor(reg, retry=RETRYING).execute(ToolCall(name="mutate"))
    assert (r.error_code, r.attempts) == (ErrorCode.TOOL_CRASHED, 1)


# -- secrets at toolbus's own cuts ---------------------------------------------------------

# Characters no event, id or number holds by chance.
SECRET = "Zq9#Wv8!Xk7@Jm6~Rp5+Ls4^Yt3&Bn2*Hc1=Gd0%"
# Writes its secret between the text before and after it, on stdout (or stderr).
PRINT = ["printf", "%s%s%s", "{before}", "{token}", "{after}"]
PRINT_ERR = ["sh", "-c", 'printf %s%s%s "$0" "$1" "$2" >&2; exit 3', *PRINT[2:]]


class _Token(BaseModel):
    token: SecretStr
    before: str = ""
    after: str = ""


def _parts(secret: str) -> list[str]:
    """Every piece of `secret` of 4 characters or more: none may be published."""
    return [secret[i:j] for i in range(len(secret)) for j in range(i + 4, len(secret) + 1)]


def _leaks(text: str, secret: str = SECRET) -> list[str]:
    return [p for p in _parts(secret) if p in text]


def test_a_secret_straddling_the_output_cut_leaves_no_part_of_it(
    make_executor: MakeExecutor,
) -> None:
    limit = 64
    tool = CommandTool(
        "leak_out", PRINT, _Token, description="prints its secret", max_output_bytes=limit,
        read_only=True,
    )  # fmt: skip
    ex = make_executor(_registry(tool))
    with bus.Recorder(sender=ex) as rec:
        # The secret before, across and after the cut, at every offset.
        for before in range(limit - len(SECRET) - 2, limit + 2):
            args = {"token": SECRET, "before": "A" * before}
            r = ex.execute(ToolCall(name="leak_out", arguments=args))
            out = r.output["stdout"]
            assert r.status == "ok" and _leaks(out) == [], (before, out)
            assert len(out.encode()) <= limit and r.output["truncated"] is (before + 40 > limit)
            assert out.startswith("A" * min(before, limit - 3))
        ex.drain_events()
    assert _leaks(repr(rec.events)) == []
    # Across the cut with room for the mask, the mask says something was there.
    r = tool.execute({"token": SECRET, "before": "A" * (limit - 10)})
    assert r.output["stdout"] == "A" * (limit - 10) + "***"


def test_the_stderr_tail_in_the_error_starts_at_no_end_of_a_secret(
    make_executor: MakeExecutor,
) -> None:
    tool = CommandTool("leak_err", PRINT_ERR, _Token, description="prints its secret, fails")
    ex = make_executor(_registry(tool))
    with bus.Recorder(sender=ex) as rec:
        # The error quotes the last 400 characters of stderr: that cut falls
        # inside the secret, at every offset, and the secret straddles
        # max_output_bytes too.
        for after in range(400 - len(SECRET) - 1, 402):
            args = {"token": SECRET, "after": "B" * after}
            r = ex.execute(ToolCall(name="leak_err", arguments=args))
            assert r.status == "error" and "exited with code 3" in (r.error or "")
            assert _leaks(r.model_dump_json()) == [], (after, r.error)
        ex.drain_events()
    assert _leaks(repr(rec.events)) == []
    r = ex.execute(ToolCall(name="leak_err", arguments={"token": SECRET, "after": "B" * 390}))
    assert (r.error or "").endswith("stderr ends: ***" + "B" * 390)


def test_secrets_the_executor_masks_by_name_and_nested_ones_are_cut_safely_too(
    make_executor: MakeExecutor,
) -> None:
    class Creds(BaseModel):
        user: str
        password: SecretStr

    class Login(BaseModel):
        creds: Creds
        before: str

    # `api_key` is a plain string: masked by the executor's masker (its name).
    by_name = CommandTool(
        "by_name", ["printf", "%s%s", "{before}", "{api_key}"], _schema(api_key=1, before=1),
        description="d", max_output_bytes=50,
    )  # fmt: skip
    nested = CommandTool(
        "nested", ["printf", "%s%s", "{before}", "{creds.password}"], Login,
        description="d", max_output_bytes=50,
    )  # fmt: skip
    # An argument made from a secret (here, quoted by !r) is a secret too.
    derived = CommandTool(
        "derived", ["printf", "%s%s", "{before}", "{token!r}"], _Token,
        description="d", max_output_bytes=50,
    )  # fmt: skip
    ex = make_executor(_registry(by_name, nested, derived))
    for n in range(8, 52, 3):
        before = "A" * n
        arguments: list[tuple[str, dict[str, Any]]] = [
            ("by_name", {"api_key": SECRET, "before": before}),
            ("nested", {"creds": {"user": "bob", "password": SECRET}, "before": before}),
            ("derived", {"token": SECRET, "before": before}),
        ]
        for name, args in arguments:
            r = ex.execute(ToolCall(name=name, arguments=args))
            assert r.status == "ok" and _leaks(r.output["stdout"]) == [], (name, n, r.output)
    r = ex.execute(ToolCall(name="derived", arguments={"token": SECRET, "before": "A" * 6}))
    assert r.output["stdout"] == "A" * 6 + "***"  # the quoted secret, whole


def test_redactor_cuts() -> None:
    from toolbus.tools._command_secrets import Redactor

    red = Redactor(["abcdefgh", "xyz"])  # "xyz": too short to be a credential
    text = "0123abcdefgh4567"
    assert red.head(text, 16) == "0123***4567"
    assert red.head(text, 8) == "0123***"  # straddles the cut: masked whole
    assert red.head(text, 5) == "0123"  # 1 character of it before the cut: dropped
    assert red.head("0123abcdXYZ", 8) == "0123***"  # a beginning of it left at the cut
    assert red.head("0123abcXYZ", 7) == "0123abc"  # 3 characters: not a secret
    assert red.tail("efgh0123", 8) == "efgh0123"  # not cut: nothing to say
    assert red.tail("abcdefgh0123", 8) == "***0123"  # cut: an end of it at the start
    assert red.tail("abcdefg0123", 7) == "efg0123"
    assert red.head("xyz", 3) == "xyz" and red.scrub("xyzabcdefgh") == "xyz***"
    # Many candidate beginnings, and none: the linear search, and no mask.
    many = Redactor(["ab" * 5000 + "c"])
    assert many.head("x" + "ab" * 40 + "d", 82) == "x" + "ab" * 40 + "d"
    assert many.head("x" + "ab" * 40, 81) == "x***"


# -- nested secrets in argv ----------------------------------------------------------------


def test_nested_secret_fields_pass_the_value_not_the_mask(make_executor: MakeExecutor) -> None:
    class Creds(BaseModel):
        user: str
        password: SecretStr

    class Params(BaseModel):
        creds: Creds
        keys: list[SecretStr]
        blobs: dict[str, SecretBytes]

    digest = "import hashlib, sys; print(*(hashlib.sha256(a.encode()).hexdigest() for a in sys.argv[1:]))"
    tool = CommandTool(
        "nested", [PY, "-c", digest, "{creds.user}", "{creds.password}", "{keys[1]}",
                   "--blob={blobs[b]}"],
        Params, description="hashes its arguments",
    )  # fmt: skip
    args = {
        "creds": {"user": "bob", "password": "hunter2-secret"},
        "keys": ["k-0-secret", "k-1-secret"],
        "blobs": {"b": "blob-secret"},
    }
    r = make_executor(_registry(tool)).execute(ToolCall(name="nested", arguments=args))
    assert r.status == "ok", r.error
    sent = ["bob", "hunter2-secret", "k-1-secret", "--blob=blob-secret"]
    assert r.output["stdout"].split() == [hashlib.sha256(a.encode()).hexdigest() for a in sent]


# -- argv bounds ---------------------------------------------------------------------------


class _Fmt(BaseModel):
    value: float
    digits: int


def test_format_specs_and_arguments_too_long_are_rejected_before_they_are_built(
    make_executor: MakeExecutor,
) -> None:
    fmt = CommandTool(
        "fmt", ["echo", "{value:.{digits}f}", "{value:>{digits}}"], _Fmt, description="d"
    )
    echo = CommandTool("echo", ["echo", "{text}"], _schema(text=1), description="d")
    ex = make_executor(_registry(fmt, echo))
    ok = ex.execute(ToolCall(name="fmt", arguments={"value": 1.5, "digits": 5}))
    assert ok.output["stdout"] == "1.50000   1.5\n"
    for digits in (10**6, 10**8, 10**30):
        start = time.monotonic()
        r = ex.execute(ToolCall(name="fmt", arguments={"value": 1.5, "digits": digits}))
        assert (r.status, r.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
        assert "argv[1] would be longer than 131071 bytes" in (r.error or "")
        assert "width or precision" in (r.error or "")
        # Loose (a loaded machine slows every call): what it rules out is a
        # field padded to 10**8 characters or more being built first.
        assert time.monotonic() - start < 5
    r = ex.execute(ToolCall(name="echo", arguments={"text": "x" * 131_072}))
    assert (r.status, r.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    assert "argv[1] would be longer than 131071 bytes" in (r.error or "")
    r = ex.execute(ToolCall(name="echo", arguments={"text": "é" * 65_536}))  # 131072 bytes
    assert r.error_code == ErrorCode.INVALID_ARGUMENTS
    r = ex.execute(ToolCall(name="echo", arguments={"text": "x" * 131_071}))
    assert r.status == "ok", r.error


def test_a_command_line_over_arg_max_is_rejected_and_e2big_is_not_retried(
    make_executor: MakeExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    arg_max = os.sysconf("SC_ARG_MAX")
    n = arg_max // 100_000 + 2  # arguments of 100 kB: over ARG_MAX in all
    tool = CommandTool(
        "many", ["echo", *["{text}"] * n], _schema(text=1), description="d", read_only=True
    )
    ex = make_executor(_registry(tool), retry=RETRYING)
    call = ToolCall(name="many", arguments={"text": "x" * 100_000})
    r = ex.execute(call)
    assert (r.status, r.error_code) == ("rejected", ErrorCode.INVALID_ARGUMENTS)
    assert f"ARG_MAX {arg_max}" in (r.error or "")
    # Should the system refuse it all the same: a clear error, not retried.
    monkeypatch.setattr("toolbus.tools._command.check_command_size", lambda *a: None)
    r = ex.execute(call)
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_ERROR, 1)
    assert "E2BIG" in (r.error or "") and "more than the system allows" in (r.error or "")


# -- limits, attributed --------------------------------------------------------------------


def test_sigxcpu_ignored_is_killed_at_the_hard_limit_and_named_so(
    make_executor: MakeExecutor, limits_via: str
) -> None:
    code = "import signal; signal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass"
    stubborn = CommandTool(
        "stubborn", [PY, "-c", code], None, description="ignores SIGXCPU",
        memory_limit_mb=256, cpu_limit_s=1, timeout=30, read_only=True,
    )  # fmt: skip
    killed = CommandTool(
        "killed", [PY, "-c", "import os; os.kill(os.getpid(), 9)"], None,
        description="SIGKILLs itself", memory_limit_mb=256, cpu_limit_s=5, timeout=30,
    )  # fmt: skip
    ex = make_executor(_registry(stubborn, killed), retry=RETRYING)
    r = ex.execute(ToolCall(name="stubborn"))
    assert (r.status, r.error_code, r.attempts) == ("error", ErrorCode.TOOL_CRASHED, 1)
    assert "went over cpu_limit_s=1" in (r.error or "")
    assert "memory_limit_mb" not in (r.error or "") and r.metadata["signal"] == "SIGKILL"
    # A SIGKILL well within its CPU time: not the CPU limit.
    r = ex.execute(ToolCall(name="killed"))
    assert r.error_code == ErrorCode.TOOL_CRASHED and "cpu_limit_s" not in (r.error or "")
    assert "may have gone over memory_limit_mb=256" in (r.error or "")


def test_limits_no_rlimit_can_hold_are_refused_when_made() -> None:
    for options, words in [
        ({"memory_limit_mb": 2**60}, "memory_limit_mb must be between 16 and 1099511627776"),
        ({"memory_limit_mb": 15}, "memory_limit_mb must be between 16 and"),
        ({"cpu_limit_s": 1e30}, "cpu_limit_s must be at most 2147483648 seconds"),
        ({"cpu_limit_s": 2.0**63}, "cpu_limit_s must be at most"),
    ]:
        with pytest.raises(ValueError, match="tool 'big'") as info:
            CommandTool("big", ["echo"], None, description="d", **options)
        assert words in str(info.value)
    fine = CommandTool(
        "fine", ["echo", "hi"], None, description="d",
        memory_limit_mb=16, cpu_limit_s=2.0**31,
    )  # fmt: skip
    assert fine.execute({}).output["stdout"] == "hi\n"


def test_a_loader_out_of_address_space_names_the_memory_limit() -> None:
    said = "sh: error while loading shared libraries: libc.so.6: failed to map segment"
    tool = CommandTool(
        "loader", ["sh", "-c", f"echo '{said}' >&2; exit 127"], None, description="d",
        memory_limit_mb=64,
    )  # fmt: skip
    r = tool.execute({})
    assert r.error_code == ErrorCode.TOOL_ERROR
    assert "exited with code 127; it may have gone over memory_limit_mb=64" in (r.error or "")


# -- descendants in process groups of their own (issue 21) -------------------------------

# coreutils `timeout`, not a session leader here, moves itself to a group of its
# own and starts its command there (a shell that says its pid, then becomes
# `sleep`); written once `timeout` has left the command's group.
UNDER_TIMEOUT = (
    'timeout 1000 sh -c \'echo $$ > "$1.sleep"; exec sleep 1000\' sh "$1" & '
    'echo $! > "$1.timeout"; wait'
)
# A child that calls setpgid(0, 0), then says its pid.
SETPGID = (
    "import os, sys, time; os.setpgid(0, 0); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(1000)"
)
WITH_SETPGID_CHILD = '"$2" -I -S -c "$3" "$1.child" & wait'
ESCAPES = {
    "timeout": (["sh", "-c", UNDER_TIMEOUT, "sh", "{base}"], ("timeout", "sleep")),
    "setpgid": (["sh", "-c", WITH_SETPGID_CHILD, "sh", "{base}", PY, SETPGID], ("child",)),
}


def _escape_tool(how: str, timeout: float | None = None) -> CommandTool:
    return CommandTool(
        f"escape_{how}", ESCAPES[how][0], _schema(base=1),
        description="starts processes that leave its group, and hangs", timeout=timeout,
    )  # fmt: skip


def _escaped(how: str, base: Path, timeout: float = 60.0) -> list[int]:
    """The pids the command wrote (once it has) for what left its group."""
    return [_pid(Path(f"{base}.{what}"), timeout) for what in ESCAPES[how][1]]


@pytest.mark.parametrize("how", ["timeout", "setpgid"])
def test_descendants_in_groups_of_their_own_die_at_the_deadline(
    make_executor: MakeExecutor, tmp_path: Path, how: str
) -> None:
    """`timeout 60 sleep 60` left `sleep` running past the deadline: `timeout`
    moves to a group of its own (issue 21)."""
    # 5 s: ample for the command to start what it starts and say so first,
    # however busy the machine (2 s was tight for a Python child's start).
    ex = make_executor(_registry(_escape_tool(how, timeout=5.0)))
    base = tmp_path / "run"
    with bus.Recorder(bus.KILLED, sender=ex) as rec:
        r = ex.execute(ToolCall(name=f"escape_{how}", arguments={"base": str(base)}))
        assert (r.status, r.error_code) == ("timeout", ErrorCode.EXECUTION_TIMEOUT)
        _wait_dead(*_escaped(how, base, timeout=1), timeout=60)
        (killed,) = rec.wait_for(bus.KILLED)  # announced once the kill is done
    assert killed.reason == "timeout"


def test_processes_left_running_in_groups_of_their_own_are_killed(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    """When the command exits by itself, what it left in its session dies too."""
    script = (
        f'{UNDER_TIMEOUT.removesuffix("; wait")}; while [ ! -s "$1.sleep" ]; do sleep 0.01; done'
    )
    tool = CommandTool(
        "leaves", ["sh", "-c", script, "sh", "{base}"], _schema(base=1),
        description="leaves `timeout` behind", timeout=60,
    )  # fmt: skip
    ex = make_executor(_registry(tool))
    base = tmp_path / "run"
    r = ex.execute(ToolCall(name="leaves", arguments={"base": str(base)}))
    assert r.status == "ok", r.error
    _wait_dead(*_escaped("timeout", base, timeout=1), timeout=60)
    assert ex.stats().killed_workers == 0  # the call ended by itself: nothing was killed


def test_closing_the_executor_kills_descendants_in_groups_of_their_own(tmp_path: Path) -> None:
    ex = Executor(_registry(_escape_tool("timeout"), _escape_tool("setpgid")))
    results: list[Any] = []
    callers = [
        threading.Thread(
            target=lambda c: results.append(ex.execute(c)),
            args=(ToolCall(name=f"escape_{how}", arguments={"base": str(tmp_path / how)}),),
        )
        for how in ESCAPES
    ]
    for caller in callers:
        caller.start()
    pids = [p for how in ESCAPES for p in _escaped(how, tmp_path / how)]
    ex.close()
    for caller in callers:
        caller.join(60)
    assert [r.status for r in results] == ["cancelled", "cancelled"]
    _wait_dead(*pids, timeout=60)


AGENT = """
import json, sys, threading
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.tools import CommandTool
argv, base = json.loads(sys.argv[1]), sys.argv[2]
schema = {"type": "object", "properties": {"base": {"type": "string"}}, "required": ["base"]}
registry = ToolRegistry()
registry.register(CommandTool("escape", argv, schema, description="escapes"))
call = ToolCall(name="escape", arguments={"base": base})
threading.Thread(target=Executor(registry, timeout=None).execute, args=(call,), daemon=True).start()
sys.stdin.readline()  # then exit, the executor unclosed, its command running
"""


@pytest.mark.parametrize("how", ["timeout", "setpgid"])
def test_the_agents_exit_kills_descendants_in_groups_of_their_own(tmp_path: Path, how: str) -> None:
    """An agent that exits (normally) with its executor unclosed and a command
    running: the command's session is killed as the interpreter exits."""
    base = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    agent = subprocess.Popen(
        [PY, "-c", AGENT, json.dumps(ESCAPES[how][0]), str(base)],
        cwd=root, stdin=subprocess.PIPE,
    )  # fmt: skip
    try:
        pids = _escaped(how, base)
        agent.communicate(b"exit\n", timeout=60)
    finally:
        agent.kill()
        agent.wait()
    assert agent.returncode == 0
    _wait_dead(*pids, timeout=60)
