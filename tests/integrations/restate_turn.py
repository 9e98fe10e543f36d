"""A Restate service that runs one durable agent turn, for the kill runs.

    python -m tests.integrations.restate_turn PORT EFFECTS

It serves `KillRuns/turn` on PORT (`toolbus.integrations.restate.serve`,
in this process: a `kill -9` of it is the service dying) and prints
`serving` once it answers. The turn is the scripted one of turn_script.py
(three turns of the model, then the receipt's two lone calls, `aexecute`);
its answer is the run's final conversation.
"""

from __future__ import annotations

import asyncio
import faulthandler
import sys
from pathlib import Path
from typing import Any

import httpx2
import openai
import restate

from tests.integrations import turn_script
from tests.integrations.turn_script import areply, on_in_doubt, receipt_calls, registry
from toolbus import Executor
from toolbus.integrations.restate import arun_agent, durable, serve

executor = Executor(registry())
tools = durable(executor, on_in_doubt=on_in_doubt)
service = restate.Service("KillRuns")


@service.handler()
async def turn(ctx: restate.Context, question: str) -> list[Any]:
    async with openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="http://toolbus.test/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(areply)),
        max_retries=0,
    ) as client:
        result = await arun_agent(client, model="scripted", messages=question, executor=tools)
    receipt = [(await tools.aexecute(c)).output for c in receipt_calls()]
    return [*result.messages, {"receipt": receipt}]


def main(argv: list[str]) -> int:
    # A service that hangs says where, before the test gives up on it.
    faulthandler.dump_traceback_later(150, exit=True)
    port, effects = int(argv[0]), argv[1]
    turn_script.effects_path = Path(effects)
    print("serving", flush=True)
    try:
        asyncio.run(serve(service, port=port))
    finally:
        executor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
