"""Tools that run in worker processes (a module, so workers can import them)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

from toolbus import Injected, ToolContext, ToolRegistry, tool

registry = ToolRegistry()
tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
unshipped: contextvars.ContextVar[str] = contextvars.ContextVar("unshipped", default="none")


@registry.tool(backend="process", read_only=True)
def square(x: int) -> int:
    """Square a number."""
    return x * x


@registry.tool(backend="process")
def worker_pid() -> int:
    return os.getpid()


@registry.tool(backend="process")
def hang(pidfile: str = "") -> str:
    """Hang forever (after writing its pid, and that of a child it started)."""
    if pidfile:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
        Path(pidfile).write_text(f"{os.getpid()} {child.pid}")
    while True:
        time.sleep(1000)


@registry.tool(backend="process")
def exit_now(code: int = 7) -> None:
    os._exit(code)


@registry.tool(backend="process")
def fails() -> None:
    raise ValueError("bad input value")


@registry.tool(backend="process", memory_limit_mb=300)
def hog(mb: int) -> int:
    block = bytearray(mb * 1024 * 1024)
    return len(block)


@registry.tool(backend="process", cpu_limit_s=1)
def spin(seconds: float) -> float:
    """Burn `seconds` of CPU."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return time.process_time() - start


@registry.tool(backend="process", cpu_limit_s=1)
def spin_on(seconds: float) -> float:
    """Burn `seconds` of CPU, deaf to SIGXCPU: toolbus's CPU watch kills it."""
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    return _burn(seconds)


def _burn(seconds: float) -> float:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return time.process_time() - start


@registry.tool(backend="process")
def report(ctx: ToolContext) -> dict[str, object]:
    ctx.progress("halfway", 0.5, step=1)
    return {
        "key": ctx.idempotency_key,
        "attempt": ctx.attempt,
        "tenant": tenant.get(),
        "unshipped": unshipped.get(),
        "has_deadline": ctx.deadline is not None,
        "remaining": ctx.remaining,
    }


@registry.tool(backend="process")
async def add_one(x: int) -> int:
    return x + 1


@registry.tool(backend="process")
def unpicklable_result() -> object:
    return lambda: None


@registry.tool(backend="process")
def odd_names(structured: bool) -> object:
    """File names decoded with surrogateescape, alone or in a structure."""
    name = b"report-\xe9.txt".decode("utf-8", "surrogateescape")
    other = b"report-\xe8.txt".decode("utf-8", "surrogateescape")
    return {"names": [name, "\ud83d\ude00"], name: 1, other: 2} if structured else name


@registry.tool(backend="process")
def echo_injected(api_key: Annotated[str, Injected], structured: bool) -> object:
    """Echo an injected secret, as a careless tool might."""
    return {"said": f"key is {api_key}"} if structured else f"key is {api_key}"


@tool(backend="process", idempotent=True, retry=None)
def crash_once(marker: str, ctx: ToolContext) -> str:
    """Crash on the first attempt (a marker file says it happened), then succeed."""
    path = Path(marker)
    keys = path.with_suffix(".keys")
    with keys.open("a") as f:
        f.write(ctx.idempotency_key + "\n")
    if not path.exists():
        path.write_text("crashed")
        os._exit(3)
    return "ok"


@tool(backend="process")
def crash_mutating(marker: str) -> str:
    path = Path(marker)
    with path.open("a") as f:
        f.write("ran\n")
    os._exit(3)


@registry.tool(backend="process", read_only=True)
def stall() -> None:
    """Hang forever; read-only, so a batch runs many at once."""
    while True:
        time.sleep(1000)


# For the chaos test: process tools that take the chaos calls' `i`.
@tool(backend="process", read_only=True)
def chaos_echo(i: int) -> int:
    return i


@tool(backend="process", read_only=True, timeout=0.2)
def chaos_stall(i: int) -> int:
    while True:
        time.sleep(1000)


@tool(backend="process")
def chaos_crash(i: int) -> int:
    os._exit(i % 200 + 1)


@registry.tool(backend="process")
def fails_final(marker: str) -> None:
    from toolbus.models import ErrorCode
    from toolbus.tools import ToolFailure

    with Path(marker).open("a") as f:
        f.write("ran\n")
    raise ToolFailure("gave up", code=ErrorCode.TOOL_CRASHED, metadata={"k": 1})


@registry.tool(backend="process", read_only=True)
def bad_bytes() -> str:
    return b"\xff".decode()


@registry.tool(backend="process")
def pid_or_hang(hang: bool = False) -> int:
    """Its worker's pid; or hang forever (on a worker already warm)."""
    while hang:
        time.sleep(1000)
    return os.getpid()


@registry.tool(backend="process")
def pid_or_exit(code: int = 0) -> int:
    """Its worker's pid; or exit with `code` (on a worker already warm)."""
    if code:
        os._exit(code)
    return os.getpid()


@registry.tool(backend="process", read_only=True)
def rendezvous(folder: str, n: int) -> int:
    """Wait until `n` calls (this one included) have arrived in `folder`, each
    in its own worker, then return this worker's pid (so `n` workers are live)."""
    Path(folder, str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(os.listdir(folder)) < n and time.monotonic() < deadline:
        time.sleep(0.005)
    return os.getpid()


# Descendants that leave the worker's process group (issue 21): each tool starts
# them, writes the pids of the worker and of what it started to `pidfile` once
# every one of them is out of the worker's group, then hangs.


def _process_group(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[2])


def _child_of(pid: int) -> int:
    """The first child `pid` has, once it has one (bounded: the call's deadline
    comes first)."""
    deadline = time.monotonic() + 60
    children = Path(f"/proc/{pid}/task/{pid}/children")
    while time.monotonic() < deadline:
        found = children.read_text().split()
        if found:
            return int(found[0])
        time.sleep(0.001)  # poll interval of the wait
    raise TimeoutError(f"process {pid} started no child")


def _write_pids(pidfile: str, started: list[int]) -> None:
    mine = os.getpgrp()
    assert all(_process_group(p) != mine for p in started), "still in the worker's group"
    part = Path(f"{pidfile}.part")
    part.write_text(" ".join(map(str, [os.getpid(), *started])))
    part.replace(pidfile)  # whole or not at all


@registry.tool(backend="process")
def hang_under_timeout(pidfile: str) -> None:
    """Run `timeout 1000 sleep 1000` (coreutils `timeout`, not a session leader here,
    moves itself to a group of its own and starts `sleep` in it), then hang."""
    timer = subprocess.Popen(["timeout", "1000", "sleep", "1000"])
    _write_pids(pidfile, [timer.pid, _child_of(timer.pid)])
    while True:
        time.sleep(1000)


@registry.tool(backend="process")
def hang_with_setpgid_child(pidfile: str) -> None:
    """Start a child that calls `setpgid(0, 0)` (before it runs `sleep`), then hang."""
    child = subprocess.Popen(["sleep", "1000"], process_group=0)
    _write_pids(pidfile, [child.pid])
    while True:
        time.sleep(1000)


def ask(flight: str) -> str:
    """Asks a person: a question from another process is an error (issue 25)."""
    from toolbus.tools import InputRequired

    raise InputRequired(f"Which seat on {flight}?", source="the airline")


def log_mail(mail: str, ctx: ToolContext) -> str:
    """Logs the address it writes to (issue 29: written by the agent, scanned)."""
    ctx.log(f"writing to {mail}")
    return "written"


def log_odd_data(ctx: ToolContext) -> str:
    """Logs data JSON cannot hold: a cycle and a tuple key (issue 29's review)."""
    cycle: list[object] = []
    cycle.append(cycle)
    ctx.log("odd", cycle=cycle, pairs={(1, 2): "x"})
    return "logged"


@registry.tool(backend="process")
def huge_numbers(ctx: ToolContext) -> dict[str, int]:
    """Progress, a log message and a result holding integers past a double's range."""
    ctx.progress("counting", 0.5, count=10**400)
    ctx.log("counted", count=-(10**400))
    return {"n": 10**400, "pid": os.getpid()}


@registry.tool(backend="process")
def huge_fraction(ctx: ToolContext, sign: int = 1) -> int:
    """Report progress at a fraction past a float's range; its worker's pid."""
    ctx.progress("far", sign * 10**400)
    return os.getpid()


@registry.tool(backend="process")
def giant_with_surrogate(digits: int) -> dict[str, object]:
    """An integer of `digits` + 1 digits beside a lone surrogate; the worker's pid."""
    return {"n": 10**digits, "u": "\udce9", "pid": os.getpid()}


@registry.tool(backend="process")
def reports_bytes(ctx: ToolContext, api_key: Annotated[str, Injected]) -> str:
    """Report progress holding `api_key`'s bytes (a lone surrogate as the byte
    `surrogateescape` gives it)."""
    ctx.progress("working", 0.5, raw=api_key.encode("utf-8", "surrogateescape"))
    return "ok"


@registry.tool(backend="process")
def unreadable(what: str, ctx: ToolContext) -> int:
    """Send one message of kind `what` ("progress", "log", or "ok": the reply)
    that cannot be read (its last byte changed), and its worker's pid."""
    from toolbus.backends import _wire

    original = _wire.reply

    def garbled(message: dict[str, object], default: object = None) -> bytes:
        frame = original(message, default)
        if message.get("kind") != what:
            return frame
        _wire.reply = original  # once
        return frame[:-1] + b"!"

    _wire.reply = garbled  # type: ignore[assignment]
    ctx.progress("half", 0.5)
    ctx.log("logged")
    return os.getpid()


class _RetryableRaises(Exception):
    @property
    def retryable(self) -> bool:
        raise RuntimeError("no retryable here")


class _TextExits(Exception):
    def __str__(self) -> str:
        raise SystemExit("its text exits")


class _Hostile(Exception):
    def __getattribute__(self, name: str) -> object:
        if name in ("__class__", "__traceback__", "__context__", "__cause__",
                    "__suppress_context__", "with_traceback", "args", "__str__"):  # fmt: skip
            return object.__getattribute__(self, name)
        raise RuntimeError(f"no attribute {name}")


@registry.tool(backend="process")
def raises_oddly(how: str) -> int:
    """Raise an exception that fights being described (`how`), or return the pid."""
    errors = {"retryable": _RetryableRaises("boom"), "text": _TextExits(), "hostile": _Hostile("h")}
    if how in errors:
        raise errors[how]
    return os.getpid()


@registry.tool(backend="process", timeout=20)
async def leaves_work(marker: str) -> int:
    """Return at once, leaving a thread asleep and a task that, cancelled,
    writes `marker` and goes on sleeping; its worker's pid."""
    loop = asyncio.get_running_loop()
    loop.run_in_executor(None, time.sleep, 600)

    async def slow() -> None:
        try:
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            Path(marker).write_text("cancelled")
            await asyncio.sleep(600)

    _leftovers.append(loop.create_task(slow()))
    return os.getpid()


_leftovers: list[asyncio.Task[None]] = []
_calls = [0]


@registry.tool(backend="process", timeout=20)
async def leaves_a_task(fights: bool, leave: bool = True) -> int:
    """Leave a task behind (`leave`): one that, if it `fights`, ignores its
    cancellation and raises SystemExit once a later call runs on its loop (one
    that does not ends when cancelled); its worker's pid."""
    _calls[0] += 1
    mine = _calls[0]

    async def left() -> None:
        while _calls[0] == mine:
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                if not fights:
                    raise
        raise SystemExit(3)

    if leave:
        _leftovers.append(asyncio.get_running_loop().create_task(left()))
    for _ in range(5):
        await asyncio.sleep(0)  # whatever a task left earlier gets its turns
    return os.getpid()
