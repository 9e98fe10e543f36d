"""kill -9 of an agent process in the middle of its batches: a new process
opening the journal lists exactly the calls that started and did not finish.

The agent is a real subprocess. It runs two batches of mutating calls from two
threads, plus a read-only call: in each batch some calls finish, one blocks
forever, and the calls after it never start (a mutating call is a barrier).
It prints a line as each blocking tool starts (its intent is on disk by then:
the tool only runs after the sync) and the keys its tools saw; the test kills
it once every blocking tool has started.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import IO

import pytest

import toolbus
from tests.conftest import wait_until
from toolbus import Executor, Journal, ToolCall, ToolContext, ToolRegistry, bus

# The slow tier (tests/README.md): agent processes killed mid-batch (kill -9).
pytestmark = pytest.mark.slow

AGENT = textwrap.dedent(
    """
    import sys
    import threading

    from toolbus import Executor, ToolCall, ToolContext, ToolRegistry

    journal = sys.argv[1]
    never = threading.Event()
    reg = ToolRegistry()


    said = threading.Lock()


    def say(*words):
        # One write per line, under a lock: print() from threads interleaves.
        with said:
            sys.stdout.write(" ".join(words) + "\\n")
            sys.stdout.flush()


    @reg.tool
    def write(item: str, ctx: ToolContext) -> str:
        say("key", ctx.call_id, ctx.idempotency_key)
        return f"wrote {item}"


    @reg.tool
    def hang(item: str, ctx: ToolContext) -> str:
        say("key", ctx.call_id, ctx.idempotency_key)
        say("started", ctx.call_id)
        never.wait()
        return "never"


    @reg.tool(read_only=True)
    def peek(item: str, ctx: ToolContext) -> str:
        say("started", ctx.call_id)
        never.wait()
        return "never"


    ex = Executor(reg, journal=journal, timeout=None)
    # A call whose id toolbus makes up: its key rests on tool and arguments only.
    ex.execute(ToolCall(name="write", arguments={"item": "generated"}))

    def call(cid, tool):
        return ToolCall(id=cid, name=tool, arguments={"item": cid})

    batches = [
        [call("a1", "write"), call("a2", "write"), call("a3", "hang"), call("a4", "write"),
         call("a5", "write")],
        [call("b1", "write"), call("b2", "hang"), call("b3", "write")],
    ]
    threads = [threading.Thread(target=ex.execute_batch, args=(b,)) for b in batches]
    threads.append(threading.Thread(target=ex.execute, args=(call("r1", "peek"),)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    """
)

BLOCKED = {"a3", "b2", "r1"}  # r1 is read-only: running, but never journaled
FINISHED = {"a1", "a2", "b1"}
NEVER_STARTED = {"a4", "a5", "b3"}


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    """The lines of `stream` as they come (None at its end), read on a thread."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _run_agent_and_kill(tmp_path: Path, journal: Path) -> dict[str, str]:
    """Start the agent, wait until its blocking calls have started, kill -9 it.
    Returns the idempotency key each of its tools saw, by call id."""
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(toolbus.__file__).parent.parent),
        "PYTHONUNBUFFERED": "1",
    }
    err = (tmp_path / "agent.err").open("w+")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(journal)],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    keys: dict[str, str] = {}
    started: set[str] = set()
    problem = ""
    try:
        lines = _lines(proc.stdout)
        while started != BLOCKED:
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                problem = f"the agent is stuck: started {sorted(started)}, keys {sorted(keys)}"
                break
            if line is None:
                problem = "the agent ended early"
                break
            word, *rest = line.split()
            if word == "started":
                started.add(rest[0])
            elif word == "key":
                keys[rest[0]] = rest[1]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        err.seek(0)
        stderr = err.read()
        err.close()
    assert not problem, f"{problem}; its stderr:\n{stderr}"
    assert proc.returncode == -signal.SIGKILL
    return keys


@pytest.mark.timeout(120)
def test_kill_9_mid_batch_leaves_exactly_the_started_calls_in_doubt(tmp_path: Path) -> None:
    path = tmp_path / "agent-journal.sqlite"
    agent_keys = _run_agent_and_kill(tmp_path, path)

    # A new process (here: this one) opens the journal.
    with Journal(path) as journal:
        doubt = journal.in_doubt()
        assert {r.call_id for r in doubt} == {"a3", "b2"}  # exactly those
        by_id = {r.call_id: r for r in journal.records()}
    (generated_id,) = (cid for cid in agent_keys if cid.startswith("call_"))
    assert set(by_id) == {"a3", "b2", *FINISHED, generated_id}
    for cid in FINISHED:
        assert by_id[cid].state == "ended" and by_id[cid].status == "ok"
    for cid in NEVER_STARTED | {"r1"}:
        assert cid not in by_id  # never started (or read-only): nothing recorded
    for r in doubt:
        assert r.state == "in_doubt" and r.status is None and r.attempts == ()
        assert r.tool == "hang" and r.arguments == {"item": r.call_id}
        assert r.owner.pid != os.getpid() and r.owner.closed is None
        assert r.idempotency_key == agent_keys[r.call_id]
    assert by_id["a3"].batch_id is not None and by_id["a3"].batch_id != by_id["b2"].batch_id

    # A new executor announces them as it starts, to receivers connected
    # without a sender, and lists them at any time.
    ran: list[tuple[str, str]] = []
    reg = ToolRegistry()

    @reg.tool
    def write(item: str, ctx: ToolContext) -> str:
        ran.append((ctx.call_id, ctx.idempotency_key))
        return f"wrote {item}"

    @reg.tool
    def hang(item: str, ctx: ToolContext) -> str:
        ran.append((ctx.call_id, ctx.idempotency_key))
        return f"redone {item}"

    with bus.Recorder(bus.IN_DOUBT) as rec, Executor(reg, journal=path) as ex:
        events = rec.wait_for(bus.IN_DOUBT, 2)
        assert sorted(e.call_id for e in events) == ["a3", "b2"]
        assert [r.call_id for r in ex.in_doubt()] == [r.call_id for r in doubt]

        # Keys are the same across the restart: the in-doubt call, redone with
        # the same id and arguments, sees the key the dead agent's tool saw.
        redo = ex.execute(ToolCall(id="a3", name="hang", arguments={"item": "a3"}))
        assert redo.ok and "replayed" not in redo.metadata
        assert ran[-1] == ("a3", agent_keys["a3"])
        # So do calls with ids toolbus made up (the id is left out of the key).
        ex.execute(ToolCall(name="write", arguments={"item": "generated"}))
        assert ran[-1][1] == agent_keys[generated_id]
        # A call that did finish is not run again: its recorded result comes back.
        replayed = ex.execute(ToolCall(id="a1", name="write", arguments={"item": "a1"}))
        assert replayed.metadata["replayed"] is True and replayed.output == "wrote a1"
        assert all(cid != "a1" for cid, _ in ran)

        # Dealt with: acknowledged, no longer in doubt (a3's old record is
        # still in doubt until acknowledged: redoing it is not knowing).
        journal = ex.journal
        assert journal is not None
        assert sorted(r.call_id for r in ex.in_doubt()) == ["a3", "b2"]
        assert journal.acknowledge("a3") == 1
        assert journal.acknowledge("b2") == 1
        assert ex.in_doubt() == []
    with bus.Recorder(bus.IN_DOUBT) as rec, Executor(reg, journal=path) as ex:
        ex.drain_events()
        assert rec.of(bus.IN_DOUBT) == []


EXITS_UNCLOSED = textwrap.dedent(
    """
    import sys
    import threading

    from toolbus import Executor, ToolCall, ToolRegistry

    reg = ToolRegistry()
    started = threading.Event()


    @reg.tool
    def write(item: str) -> str:
        return "ok"


    @reg.tool
    def hang(item: str) -> str:
        started.set()
        threading.Event().wait()


    ex = Executor(reg, journal=sys.argv[1], timeout=None)  # never closed
    threading.Thread(
        target=ex.execute, args=(ToolCall(id="h", name="hang", arguments={"item": "x"}),),
        daemon=True,
    ).start()
    started.wait()
    for i in range(20):
        ex.execute(ToolCall(id=f"w{i}", name="write", arguments={"item": str(i)}))
    # The interpreter exits here with the executor open, a call running and
    # the last outcome perhaps still queued (written at exit).
    """
)


def test_exit_without_close_writes_what_ended_and_leaves_the_rest_in_doubt(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent-journal.sqlite"
    script = tmp_path / "agent.py"
    script.write_text(EXITS_UNCLOSED)
    env = {**os.environ, "PYTHONPATH": str(Path(toolbus.__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, str(script), str(path)], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    with Journal(path) as journal:
        assert [r.call_id for r in journal.in_doubt()] == ["h"]
        records = journal.records()
    assert len(records) == 21
    assert all(r.status == "ok" for r in records if r.call_id != "h")


FORKS_A_CHILD = textwrap.dedent(
    """
    import multiprocessing
    import sys
    import threading
    import time

    from toolbus import Executor, ToolCall, ToolRegistry

    journal, report = sys.argv[1], sys.argv[2]
    reg = ToolRegistry()
    never = threading.Event()


    @reg.tool
    def pay(item: str) -> str:
        print("started", flush=True)
        never.wait()


    def background_job():
        # A forked copy of the agent: its journal writer is not here, so
        # recording fails at once instead of waiting for a thread that is gone.
        began = time.monotonic()
        flushed = ex.journal.flush(5)
        with open(report, "w") as f:
            f.write(f"{flushed} {time.monotonic() - began:.3f}")
        time.sleep(60)  # outlives the agent


    ex = Executor(reg, journal=journal, timeout=None)
    multiprocessing.get_context("fork").Process(target=background_job).start()
    ex.execute(ToolCall(id="pay-1", name="pay", arguments={"item": "x"}))
    """
)


@pytest.mark.timeout(60)
def test_a_forked_child_does_not_keep_the_agents_session_alive(tmp_path: Path) -> None:
    """The owner lock is the parent's alone: a child forked by the agent (a
    background job) that outlives it does not hide the agent's death."""
    path = tmp_path / "agent-journal.sqlite"
    report = tmp_path / "child.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(toolbus.__file__).parent.parent)}
    proc = subprocess.Popen(
        [sys.executable, "-c", FORKS_A_CHILD, str(path), str(report)],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"started"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        with Journal(path) as journal:  # the child still runs
            assert [r.call_id for r in journal.in_doubt()] == ["pay-1"]
        wait_until(lambda: report.exists() and bool(report.read_text()), 30, "the child's report")
        flushed, took = report.read_text().split()
        assert flushed == "False" and float(took) < 4  # at once, not flush(5)'s wait
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.stdout is not None:
            proc.stdout.close()
