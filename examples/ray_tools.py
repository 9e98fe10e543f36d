"""Tools on Ray actors, behind the same Executor: results, progress, a kill, a crash.

The agent's process keeps everything but the tools themselves: hooks, masking,
retries, events. Here toolbus starts a local Ray itself (no session in this
process yet) and shuts it down when the last executor using it closes; on a
cluster, pass its address (`RayBackend("ray://head:10001")`, or run the agent
on a node of it and set RAY_ADDRESS).

- `thumbnail`: a sync tool, a pool of actors (one per call running at once);
  it reports progress, which reaches this process's bus.
- `fetch`: an async tool: one actor serves all its calls, concurrently.
- `stuck`: hangs; at its deadline its actor is killed (`tool:killed`) and replaced.
- `segfault`: its process dies; the call ends TOOL_CRASHED, the actor is replaced.

Needs Ray: pip install 'toolbus[ray]'. Run: python examples/ray_tools.py
"""

from __future__ import annotations

import asyncio
import os
import time

import ray

from toolbus import Executor, ToolCall, ToolContext, ToolRegistry, bus
from toolbus.backends import RayBackend

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local Ray: no token

# Options for the Ray that toolbus starts (ignored if this process already has one).
LOCAL = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}


def tools(backend: RayBackend) -> ToolRegistry:
    """The agent's tools, all on `backend` (defined here, they travel by value)."""
    registry = ToolRegistry()

    @registry.tool(backend=backend, read_only=True)
    def thumbnail(ctx: ToolContext, name: str, steps: int = 3) -> dict[str, object]:
        """Make a thumbnail (pretend), reporting progress."""
        for i in range(1, steps + 1):
            ctx.progress(f"{name}: pass {i}/{steps}", i / steps)
        return {"name": name, "size": [128, 128], "pid": os.getpid()}

    calls = {"running": 0, "peak": 0}  # travels with the tool: the actor's own count

    @registry.tool(backend=backend, read_only=True)
    async def fetch(url: str) -> dict[str, object]:
        """Fetch a URL (pretend)."""
        calls["running"] += 1
        calls["peak"] = max(calls["peak"], calls["running"])
        try:
            await asyncio.sleep(0.2)
        finally:
            calls["running"] -= 1
        return {"status": f"200 OK from {url}", "pid": os.getpid(), "peak": calls["peak"]}

    @registry.tool(backend=backend, read_only=True, timeout=1.0)
    def stuck() -> str:
        """Never returns."""
        time.sleep(3600)
        return "unreachable"

    @registry.tool(backend=backend)
    def segfault() -> str:
        """Dies the hard way."""
        os._exit(139)

    return registry


def main() -> None:
    agent = os.getpid()
    with bus.Recorder(bus.PROGRESS, bus.KILLED) as rec:
        executor = Executor(tools(RayBackend(init_options=LOCAL)), max_parallel=8)
        r = executor.execute(ToolCall(name="thumbnail", arguments={"name": "cat.png"}))
        print(f"thumbnail: {r.status}, ran on Ray: {r.output['pid'] != agent}")
        executor.drain_events()
        for p in rec.of(bus.PROGRESS):
            print(f"  progress on this process's bus: {p.message} ({p.fraction:.0%})")

        urls = [f"https://example.com/{i}" for i in range(20)]
        batch = executor.execute_batch([ToolCall(name="fetch", arguments={"url": u}) for u in urls])
        ok = [x.output for x in batch if x.ok]
        together = len({o["pid"] for o in ok}) == 1 and max(o["peak"] for o in ok) > 1
        print(f"fetch: {len(ok)}/20 ok, concurrently on one actor: {together}")

        r = executor.execute(ToolCall(name="stuck"))
        [killed] = rec.wait_for(bus.KILLED, timeout=10)
        print(f"stuck: {r.status} ({r.error_code}), its actor killed: {killed.reason}")

        r = executor.execute(ToolCall(name="segfault"))
        print(f"segfault: {r.status} ({r.error_code})")
        r = executor.execute(ToolCall(name="thumbnail", arguments={"name": "dog.png"}))
        print(f"thumbnail again: {r.status}")

        # A second executor shares this process's Ray session (one per process).
        other = Executor(tools(RayBackend(init_options=LOCAL)))
        r = other.execute(ToolCall(name="fetch", arguments={"url": "https://example.org"}))
        print(f"second executor: {r.status}")
        executor.close()
        print(f"Ray still up while an executor uses it: {ray.is_initialized()}")
        other.close()
        print(f"Ray shut down with the last executor: {not ray.is_initialized()}")


if __name__ == "__main__":
    main()
