"""A durable agent run on DBOS: the worker dies mid-turn, DBOS picks the run up.

Shows:
- `toolbus.integrations.dbos.run_agent` inside a DBOS workflow: every model
  request and every tool call is a recorded step;
- a crash at the worst moment: a table was booked (the side effect
  happened), and the process died (SIGKILL) before the result was recorded;
- the recovery: DBOS runs the workflow again; the model is not asked again
  for the turn it answered, the weather lookups return their recorded
  results without running (`metadata["replayed"]`), and the booking, in
  doubt, is not run twice: the in-doubt handler finds it in the restaurant's
  ledger (by its idempotency key) and skips it with what the model should read.

Offline: the model is scripted (the real `openai` client over a mock
transport), the engine is DBOS on SQLite in a temporary directory.

Run: python examples/durable_agent.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx2
import openai
from dbos import DBOS, SetWorkflowID

from toolbus import Executor, ToolContext, ToolRegistry, bus
from toolbus.in_doubt import InDoubtCall, Rerun, Skip
from toolbus.integrations.dbos import run_agent

WORKFLOW = "plan-evening-1"
LEDGER = Path(os.environ.get("LEDGER", os.devnull))  # the restaurant's bookings

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
        os.kill(os.getpid(), signal.SIGKILL)  # the worst moment: booked, not recorded
    return f"Booked {restaurant} for {people}"


def booked(key: str) -> bool:
    lines = LEDGER.read_text().splitlines() if LEDGER.exists() else []
    return any(json.loads(line)["key"] == key for line in lines)


def on_in_doubt(call: InDoubtCall) -> Rerun | Skip:
    """A booking that may have happened: ask the ledger, by the call's key."""
    if booked(call.idempotency_key):
        say(f"in doubt: {call.tool} (key {call.idempotency_key}): the ledger has it, skipped")
        args = call.arguments
        return Skip(f"Booked {args['restaurant']} for {args['people']}")
    say(f"in doubt: {call.tool}: not in the ledger, booked now")
    return Rerun()


TURNS = [
    [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Bergen"})],
    [("book_table", {"restaurant": "Maaemo", "people": 2})],
]


def model(request: httpx2.Request) -> httpx2.Response:
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


@DBOS.workflow()
def plan_evening(question: str) -> str:
    http = httpx2.Client(transport=httpx2.MockTransport(model))
    with openai.OpenAI(
        api_key="sk-offline", base_url="http://model.test/v1", http_client=http
    ) as client:
        run = run_agent(
            client, model="scripted", messages=question, executor=executor, on_in_doubt=on_in_doubt
        )
    return run.text


def worker(database: str) -> None:
    """One process of the agent: start the run, or (after a crash) let DBOS recover it."""

    def on_finished(sender: Any, event: bus.CallFinished, **_: Any) -> None:
        if event.result.metadata.get("replayed"):
            say(f"replayed, not run again: {event.tool}({event.arguments})")

    replayed = bus.subscribe(on_finished, bus.FINISHED)
    DBOS(config={"name": "durable-agent", "system_database_url": database, "log_level": "ERROR"})
    DBOS.launch()  # recovers the runs a dead process left pending
    try:
        if DBOS.get_workflow_status(WORKFLOW) is None:
            with SetWorkflowID(WORKFLOW):
                answer = plan_evening("Weather in Oslo and Bergen, and book Maaemo for two")
        else:
            answer = DBOS.retrieve_workflow(WORKFLOW).get_result()
        executor.drain_events()
        say(f"final answer: {answer}")
    finally:
        replayed.close()
        executor.close()
        DBOS.destroy()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        database = f"sqlite:///{Path(tmp) / 'dbos.sqlite'}"
        env = {**os.environ, "LEDGER": str(Path(tmp) / "ledger.jsonl")}
        me = [sys.executable, __file__, "--worker", database]
        print("worker 1: starts the run")
        first = subprocess.run(me, env={**env, "CRASH_AFTER_BOOKING": "1"}, check=False)
        if first.returncode == -signal.SIGKILL:
            print("worker 1 died: SIGKILL while book_table ran")
        print("worker 2: DBOS recovers the run")
        second = subprocess.run(me, env=env, check=False)
        bookings = Path(env["LEDGER"]).read_text().splitlines()
        print(f"the ledger: book_table ran {len(bookings)} time(s)")
        return second.returncode


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1])
    else:
        sys.exit(main())
