"""Tools for the Ray backend's tests: made inside functions, so they reach Ray
actors by value (closures and all), never by import."""

from __future__ import annotations

import asyncio
import contextvars
import os
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

from toolbus import Injected, RetryPolicy, ToolContext, ToolRegistry
from toolbus.backends import Backend
from toolbus.tools import ToolFailure

tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")
unshipped: contextvars.ContextVar[str] = contextvars.ContextVar("unshipped", default="none")

RETRY = RetryPolicy(max_retries=3, backoff_base=0.01, jitter=0, retry_on=(ConnectionError,))


def contract_registry(backend: Backend | None) -> ToolRegistry:
    """The core contract's tools, sync and async, on `backend` (None: local)."""
    reg = ToolRegistry()
    on: dict[str, Any] = {"backend": backend} if backend is not None else {}

    @reg.tool(read_only=True, **on)
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @reg.tool(read_only=True, **on)
    async def aadd(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    @reg.tool(**on)
    def fail(x: int) -> None:
        raise ValueError(f"bad input {x}")

    @reg.tool(**on)
    async def afail(x: int) -> None:
        raise ToolFailure(f"no user {x}", metadata={"user": x})

    @reg.tool(read_only=True, timeout=0.5, **on)
    def sleepy(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    @reg.tool(read_only=True, timeout=0.5, **on)
    async def asleepy(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    @reg.tool(read_only=True, retry=RETRY, **on)
    def flaky(ctx: ToolContext) -> int:
        if ctx.attempt < 3:
            raise ConnectionError(f"attempt {ctx.attempt} failed")
        return ctx.attempt

    @reg.tool(read_only=True, retry=RETRY, **on)
    async def aflaky(ctx: ToolContext) -> int:
        if ctx.attempt < 2:
            raise ConnectionError(f"attempt {ctx.attempt} failed")
        return ctx.attempt

    @reg.tool(**on)  # mutating: a batch runs these one after another, in order
    def append(path: str, item: int) -> int:
        with open(path, "a") as f:
            f.write(f"{item}\n")
        return item

    @reg.tool(**on)
    async def aappend(path: str, item: int) -> int:
        with open(path, "a") as f:
            f.write(f"{item}\n")
        return item

    @reg.tool(read_only=True, **on)
    def span(seconds: float, meet: str = "") -> list[float]:
        """When it ran (CLOCK_MONOTONIC: one clock for every process here);
        with `meet`, it runs on until a second call has begun too."""
        began = time.monotonic()
        _arrive(meet)
        while not _met(meet, began):
            time.sleep(0.005)  # poll interval of the bounded wait (`_met`)
        time.sleep(seconds)  # tool under test: takes a while (a third call at once would show)
        return [began, time.monotonic()]

    @reg.tool(read_only=True, **on)
    async def aspan(seconds: float, meet: str = "") -> list[float]:
        began = time.monotonic()
        _arrive(meet)
        while not _met(meet, began):
            await asyncio.sleep(0.005)  # poll interval of the bounded wait (`_met`)
        await asyncio.sleep(seconds)  # tool under test: takes a while
        return [began, time.monotonic()]

    return reg


def _arrive(folder: str) -> None:
    """Say in `folder` (if any) that a call has begun."""
    if folder:
        Path(folder, uuid.uuid4().hex).touch()


def _met(folder: str, began: float) -> bool:
    """Whether two calls have begun in `folder` (none named: at once), or 20 s
    have passed since `began`: a bound, under the contract's 30 s timeout, so
    a call that never met a second one shows as a peak of one."""
    return not folder or len(os.listdir(folder)) >= 2 or time.monotonic() - began > 20


def _mark(path: Path, text: str) -> None:
    """Write `text` to `path` whole: a test that sees the file sees its text
    (one written in place exists, empty, before its text is in: stress run 14
    read a pid of '')."""
    part = path.with_name(f"{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def ray_registry(backend: Backend, marker_dir: str = "") -> ToolRegistry:
    """Tools only the Ray tests need: pids, hangs, deaths, progress, context."""
    reg = ToolRegistry()

    @reg.tool(backend=backend, read_only=True)
    def pid() -> int:
        return os.getpid()

    @reg.tool(backend=backend, read_only=True)
    async def apid() -> int:
        return os.getpid()

    @reg.tool(backend=backend, read_only=True, timeout=1.0)
    def hang(marker: str = "") -> int:
        if marker:  # it runs: the test may cancel it now
            _mark(Path(marker_dir, marker), str(os.getpid()))
        while True:
            time.sleep(1000)

    @reg.tool(backend=backend, read_only=True, timeout=0.5)
    async def ahang(marker: str) -> None:
        try:
            await asyncio.sleep(1000)
        except asyncio.CancelledError:
            _mark(Path(marker_dir, marker), "cancelled")  # the remote task saw it
            raise

    @reg.tool(backend=backend)
    def die(code: int = 3) -> None:
        os._exit(code)

    @reg.tool(backend=backend)
    async def adie(code: int = 3) -> None:
        os._exit(code)

    @reg.tool(backend=backend, read_only=True)
    def steps(ctx: ToolContext, n: int) -> int:
        for i in range(n):
            ctx.progress(f"step {i + 1}", (i + 1) / n, step=i + 1)
        return n

    @reg.tool(backend=backend, read_only=True)
    async def asteps(ctx: ToolContext, n: int) -> int:
        for i in range(n):
            ctx.progress(f"step {i + 1}", (i + 1) / n, step=i + 1)
            await asyncio.sleep(0)
        return n

    @reg.tool(backend=backend, read_only=True)
    def tell(ctx: ToolContext, api_key: str) -> str:
        ctx.log(f"using {api_key}", level="warning", key=api_key)
        return "told"

    @reg.tool(backend=backend, read_only=True)
    async def atell(ctx: ToolContext, api_key: str) -> str:
        ctx.log(f"using {api_key}", level="warning", key=api_key)
        return "told"

    @reg.tool(backend=backend, read_only=True)
    def report(ctx: ToolContext) -> dict[str, Any]:
        left = None if ctx.deadline is None else ctx.deadline - time.monotonic()
        return {
            "tenant": tenant.get(),
            "unshipped": unshipped.get(),
            "key": ctx.idempotency_key,
            "left": left,
            "pid": os.getpid(),
        }

    @reg.tool(backend=backend, read_only=True)
    async def areport() -> dict[str, str]:
        return {"tenant": tenant.get(), "unshipped": unshipped.get()}

    @reg.tool(backend=backend, read_only=True)
    def echo_injected(api_key: Annotated[str, Injected]) -> dict[str, str]:
        # Named here so that they travel with it (by value): its actor reads
        # its annotations (text, `from __future__ import annotations`).
        _ = (Annotated, Injected)
        return {"said": f"key is {api_key}"}  # as a careless tool might

    @reg.tool(backend=backend, read_only=True)
    def odd_names(ctx: ToolContext) -> dict[str, Any]:
        # File names decoded with surrogateescape; a context: the streamed reply.
        ctx.progress("listing")
        e9, e8 = (b.decode("utf-8", "surrogateescape") for b in (b"f\xe9.txt", b"f\xe8.txt"))
        return {e9: 1, e8: 2}

    @reg.tool(backend=backend)  # mutating: a crash is never retried
    def claim() -> int:
        return os.getpid()

    @reg.tool(backend=backend)
    async def aclaim() -> int:
        return os.getpid()

    @reg.tool(backend=backend, read_only=True)
    def huge(ctx: ToolContext) -> list[int]:
        """Progress, a log message and a result past a double's range."""
        ctx.progress("counting", 0.5, count=10**400)
        ctx.log("counted", count=-(10**400))
        return [10**400, -(10**400)]

    @reg.tool(backend=backend, read_only=True)
    async def ahuge() -> int:
        return 10**400

    @reg.tool(backend=backend, read_only=True)
    def unreadable(ctx: ToolContext, what: str) -> str:
        """Send one message of kind `what` ("progress", "log", or "ok": the
        reply) that cannot be read (its last byte changed)."""
        from toolbus.backends import _wire

        original = _wire.body

        def garbled(message: dict[str, Any], default: Any = None) -> bytes:
            data = original(message, default)
            if message.get("kind") != what:
                return data
            _wire.body = original  # once
            return data[:-1] + b"!"

        _wire.body = garbled
        ctx.progress("half", 0.5)
        ctx.log("logged")
        return "done"

    return reg
