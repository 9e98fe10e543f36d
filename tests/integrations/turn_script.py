"""The scripted agent turn the kill runs drive, on either engine
(dbos_turn.py, restate_turn.py).

The model is scripted (the real `openai` client over a mock transport): its
turns depend only on the conversation so far, so every run, interrupted or
not, asks for the same calls. The tools write what they do to the effects
file (one line per side effect, flushed and fsynced), the count kept outside
the engine: a read-only `lookup`, an idempotent `put` and a mutating
`charge`. After the turn, two lone calls (a charge, a lookup) make its
receipt. The in-doubt handler reads the effects file: a charge whose key is
there did happen (skipped, with the output it gave); one that is not never
did (run again, under the same key).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx2

from tests.integrations.dbos_support import model_reply
from toolbus import ToolCall, ToolContext, ToolRegistry
from toolbus.in_doubt import InDoubtCall, Rerun, Skip

# What the model asks for, turn by turn: each turn's calls run as one batch.
SCRIPT: list[list[tuple[str, dict[str, Any]]]] = [
    [("lookup", {"city": "Oslo"}), ("lookup", {"city": "Bergen"}), ("charge", {"amount": 5})],
    [
        ("put", {"key": "plan", "value": "dinner"}),
        ("charge", {"amount": 7}),
        ("lookup", {"city": "Tromsø"}),
    ],
    [("charge", {"amount": 11}), ("lookup", {"city": "Bodø"})],
]
# The receipt's lone calls, after the turn.
RECEIPT = [("charge", {"amount": 13}), ("lookup", {"city": "Narvik"})]
# Each tool works a little, so that a kill lands inside the run more often than not.
WORK = 0.03

effects_path = Path(os.devnull)  # set by main()


def effect(line: str) -> None:
    with effects_path.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def lookup(city: str, ctx: ToolContext) -> str:
        time.sleep(WORK)
        effect(json.dumps({"tool": "lookup", "key": ctx.idempotency_key, "pid": os.getpid()}))
        return f"{city}: 4 degrees"

    @reg.tool(idempotent=True)
    def put(key: str, value: str, ctx: ToolContext) -> str:
        time.sleep(WORK)
        effect(json.dumps({"tool": "put", "key": ctx.idempotency_key, "pid": os.getpid()}))
        return f"stored {key}"

    @reg.tool()
    def charge(amount: int, ctx: ToolContext) -> str:
        time.sleep(WORK)
        effect(json.dumps({"tool": "charge", "key": ctx.idempotency_key, "pid": os.getpid()}))
        time.sleep(WORK)
        return f"charged {amount}"

    return reg


def charged(key: str) -> bool:
    if not effects_path.exists():
        return False
    for line in effects_path.read_text().splitlines():
        record = json.loads(line)
        if record.get("tool") == "charge" and record["key"] == key:
            return True
    return False


def on_in_doubt(call: InDoubtCall) -> Rerun | Skip:
    effect(json.dumps({"in_doubt": call.tool, "key": call.idempotency_key, "pid": os.getpid()}))
    if charged(call.idempotency_key):
        return Skip(f"charged {call.arguments['amount']}")
    return Rerun()


def reply(request: httpx2.Request) -> httpx2.Response:
    """The scripted model: its next turn, from how many turns it already had."""
    return model_reply(SCRIPT, request, "All done.")


async def areply(request: httpx2.Request) -> httpx2.Response:
    return reply(request)


def receipt_calls() -> list[ToolCall]:
    return [ToolCall(id=f"r{i}", name=n, arguments=a) for i, (n, a) in enumerate(RECEIPT)]
