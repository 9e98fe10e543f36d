"""A durable agent turn in a Restate service: the service dies mid-turn,
Restate retries the invocation against it restarted.

Shows:
- `toolbus.integrations.restate.arun_agent` inside a Restate handler: every
  model request and every tool call is journaled through the handler's
  context (`ctx.run`);
- a crash at the worst moment: a table was booked (the side effect
  happened), and the service died (SIGKILL) before the result was journaled;
- the retry: Restate calls the handler again with its journal; the model is
  not asked again for the turn it answered, the weather lookups return their
  journaled results without running (`metadata["replayed"]`), and the
  booking, in doubt, is not run twice: the in-doubt handler finds it in the
  restaurant's ledger (by its idempotency key) and skips it.

Offline: the model is scripted (the real `openai` client over a mock
transport); the engine is the real Restate server on loopback ports, from
npm (`npm install @restatedev/restate-server`; the test command installs it
into .cache/npm) or wherever `RESTATE_SERVER` points.

Run: python examples/durable_restate.py
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import restate

from toolbus import Executor, ToolContext, ToolRegistry, bus
from toolbus.in_doubt import InDoubtCall, Rerun, Skip
from toolbus.integrations.restate import arun_agent, serve

LEDGER = Path(os.environ.get("LEDGER", os.devnull))  # the restaurant's bookings
NPM_BINARY = (
    Path(__file__).resolve().parents[1]
    / ".cache/npm/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"
)

registry = ToolRegistry()


def say(line: str) -> None:
    """One write per line: tools, the model and the bus print from other threads."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@registry.tool(read_only=True)
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    say(f"  [tool] get_weather({city}) runs")
    return f"{city}: 4 degrees, clear"


@registry.tool()
def book_table(restaurant: str, people: int, ctx: ToolContext) -> str:
    """Book a table (not idempotent: each call books one)."""
    with LEDGER.open("a") as ledger:
        ledger.write(json.dumps({"key": ctx.idempotency_key, "restaurant": restaurant}) + "\n")
    say(f"  [tool] book_table({restaurant}, {people}) booked, key {ctx.idempotency_key}")
    if os.environ.get("CRASH_AFTER_BOOKING"):
        os.kill(os.getpid(), signal.SIGKILL)  # the worst moment: booked, not journaled
    return f"Booked {restaurant} for {people}"


def booked(key: str) -> bool:
    lines = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    return any(json.loads(line)["key"] == key for line in lines)


def on_in_doubt(call: InDoubtCall) -> Rerun | Skip:
    """A booking that may have happened: ask the ledger, by the call's key."""
    if booked(call.idempotency_key):
        say(f"in doubt: {call.tool}: the ledger has it (key {call.idempotency_key}), skipped")
        args = call.arguments
        return Skip(f"Booked {args['restaurant']} for {args['people']}")
    say(f"in doubt: {call.tool}: not in the ledger, booked now")
    return Rerun()


TURNS = [
    [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Bergen"})],
    [("book_table", {"restaurant": "Maaemo", "people": 2})],
]


async def model(request: httpx2.Request) -> httpx2.Response:
    """The scripted model: its next turn, from how many it already had."""
    turn = sum(1 for m in json.loads(request.content)["messages"] if m["role"] == "assistant")
    message: dict[str, Any] = {"role": "assistant", "content": "Clear in Oslo; Maaemo at 8."}
    if turn < len(TURNS):
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(TURNS[turn])
            ],
        }
    say(f"  [model] turn {turn + 1} answered")
    return httpx2.Response(
        200,
        json={
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": 1_800_000_000,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        },
    )


executor = Executor(registry)
agent = restate.Service("Agent")


@agent.handler()
async def plan_evening(ctx: restate.Context, question: str) -> str:
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(model))
    async with openai.AsyncOpenAI(
        api_key="sk-offline", base_url="http://model.test/v1", http_client=http
    ) as client:
        run = await arun_agent(
            client, model="scripted", messages=question, executor=executor, on_in_doubt=on_in_doubt
        )
    return run.text


def service(port: int) -> None:
    """The service's process: serve `Agent` until stopped (or killed)."""

    def on_finished(sender: Any, event: bus.CallFinished, **_: Any) -> None:
        if event.result.metadata.get("replayed"):
            say(f"replayed, not run again: {event.tool}({event.arguments})")

    replayed = bus.subscribe(on_finished, bus.FINISHED)
    try:
        asyncio.run(serve(agent, port=port))
    finally:
        replayed.close()
        executor.close()


# -- the Restate server, and the service's processes, for the demo ------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited ({proc.returncode})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.02)  # polling a process that is starting
    raise SystemExit(f"{what} did not answer in time")


def restate_server(data: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """restate-server on loopback ports: its process, ingress and admin URLs."""
    binary = os.environ.get("RESTATE_SERVER") or shutil.which("restate-server")
    binary = binary or (str(NPM_BINARY) if NPM_BINARY.exists() else None)
    if binary is None:
        raise SystemExit(
            "the Restate server is not installed: npm install @restatedev/restate-server "
            "(or set RESTATE_SERVER to its binary)"
        )
    ingress, admin, fabric = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "RESTATE_LISTEN_MODE": "tcp",
        "RESTATE_BIND_ADDRESS": f"127.0.0.1:{fabric}",
        "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{fabric}/",
        "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress}",
        "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
        "RESTATE_DISABLE_TELEMETRY": "true",
        "RESTATE_DEFAULT_NUM_PARTITIONS": "2",
        "RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL": "100ms",
        "RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL": "1s",
        "RESTATE_LOG_FILTER": "error",
    }
    proc = subprocess.Popen(
        [binary, "--base-dir", str(data), "--no-logo"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(f"http://127.0.0.1:{admin}/health", proc, "restate-server")
    wait_for(f"http://127.0.0.1:{ingress}/restate/health", proc, "restate-server")
    return proc, f"http://127.0.0.1:{ingress}", f"http://127.0.0.1:{admin}"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        server, ingress, admin = restate_server(Path(tmp))
        port = free_port()
        env = {**os.environ, "LEDGER": str(Path(tmp) / "ledger.jsonl")}
        me = [sys.executable, __file__, "--service", str(port)]
        try:
            print("service 1: serves the turn")
            first = subprocess.Popen(me, env={**env, "CRASH_AFTER_BOOKING": "1"})
            wait_for(f"http://127.0.0.1:{port}/health", first, "the service")
            httpx.post(f"{admin}/deployments", json={"uri": f"http://127.0.0.1:{port}"})
            sent = httpx.post(
                f"{ingress}/Agent/plan_evening/send",
                json="Weather in Oslo and Bergen, and book Maaemo for two",
                headers={"idempotency-key": "plan-evening-1"},
            )
            invocation = sent.json()["invocationId"]
            if first.wait(60) == -signal.SIGKILL:
                print("service 1 died: SIGKILL while book_table ran")
            print("service 2: Restate retries the invocation against it")
            second = subprocess.Popen(me, env=env)
            answer = httpx.get(f"{ingress}/restate/invocation/{invocation}/attach", timeout=60)
            print(f"final answer: {answer.json()}")
            second.terminate()
            second.wait(30)
        finally:
            server.terminate()
            server.wait(30)
        bookings = Path(env["LEDGER"]).read_text().splitlines()
        print(f"the ledger: book_table ran {len(bookings)} time(s)")
        return 0 if answer.status_code == 200 else 1


if __name__ == "__main__":
    if "--service" in sys.argv:
        service(int(sys.argv[sys.argv.index("--service") + 1]))
    else:
        sys.exit(main())
