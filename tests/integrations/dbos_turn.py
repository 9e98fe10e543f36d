"""A worker process that runs one durable agent run on DBOS, for the kill runs.

    python -m tests.integrations.dbos_turn run|recover DB_URL EFFECTS WORKFLOW_ID [async]

`run` launches DBOS and starts the workflow (printing `ready` first, so the
test can kill it at a random moment of the run); `recover` launches DBOS,
which recovers the workflow left pending, and waits for it. Both print the
run's final conversation as one JSON line, `transcript <json>`, how long
the run took (`ran <seconds>`: for `run`, from its `ready` to its
transcript), then the workflow's steps (`steps <json>`: position, name,
when it was recorded).

The turn is turn_script.py's (a scripted model; tools that write what they
do to EFFECTS; an in-doubt handler that reads it). Its receipt's two lone
calls are made with `execute` in the sync workflow (the one-thread path),
`aexecute` in the async one.
"""

from __future__ import annotations

import asyncio
import faulthandler
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import openai
from dbos import DBOS, SetWorkflowID

from tests.integrations import dbos_support, turn_script
from tests.integrations.turn_script import areply, on_in_doubt, receipt_calls, registry, reply
from toolbus import Executor
from toolbus.integrations.dbos import arun_agent, durable, run_agent

executor = Executor(registry())
tools = durable(executor, on_in_doubt=on_in_doubt)


@DBOS.workflow()
def agent_run(question: str) -> list[Any]:
    with openai.OpenAI(
        api_key="sk-test",
        base_url="http://toolbus.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(reply)),
        max_retries=0,
    ) as client:
        result = run_agent(
            client,
            model="scripted",
            messages=question,
            executor=executor,
            on_in_doubt=on_in_doubt,
        )
    receipt = [tools.execute(c).output for c in receipt_calls()]
    return [*result.messages, {"receipt": receipt}]


@DBOS.workflow()
async def agent_run_async(question: str) -> list[Any]:
    async with openai.AsyncOpenAI(
        api_key="sk-test",
        base_url="http://toolbus.test/v1",
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(areply)),
        max_retries=0,
    ) as client:
        result = await arun_agent(
            client,
            model="scripted",
            messages=question,
            executor=executor,
            on_in_doubt=on_in_doubt,
        )
    receipt = [(await tools.aexecute(c)).output for c in receipt_calls()]
    return [*result.messages, {"receipt": receipt}]


def main(argv: list[str]) -> int:
    # A worker that hangs says where, before the test gives up on it.
    faulthandler.dump_traceback_later(90, exit=True)
    mode, url, effects, workflow_id = argv[:4]
    turn_script.effects_path = Path(effects)
    use_async = len(argv) > 4 and argv[4] == "async"
    DBOS(config=dbos_support.config("toolbus-kill-runs", url))
    dbos_support.poll_queue_often()
    DBOS.launch()
    try:
        began = time.monotonic()
        if mode == "run":
            print("ready", flush=True)
        elif DBOS.get_workflow_status(workflow_id) is not None:
            # DBOS recovers it as it launches; this waits for that run to end.
            handle = DBOS.retrieve_workflow(workflow_id)
            messages = handle.get_result(polling_interval_sec=dbos_support.POLL)
        if mode == "run" or DBOS.get_workflow_status(workflow_id) is None:
            # (Killed before the workflow began: it is started, as an agent would.)
            with SetWorkflowID(workflow_id):
                if use_async:
                    messages = asyncio.run(agent_run_async("Plan the evening"))
                else:
                    messages = agent_run("Plan the evening")
        print("transcript " + json.dumps(messages, sort_keys=True), flush=True)
        print(f"ran {time.monotonic() - began:.3f}", flush=True)
        steps = [
            {
                "id": step["function_id"],
                "name": step["function_name"],
                "completed_ms": step["completed_at_epoch_ms"],
            }
            for step in DBOS.list_workflow_steps(workflow_id)
        ]
        print("steps " + json.dumps(steps), flush=True)
    finally:
        executor.close()
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
