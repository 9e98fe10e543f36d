"""Durable agent turns on DBOS (needs the `dbos` extra: `pip install 'toolbus[dbos]'`).

Inside a DBOS workflow, every tool call becomes a recorded step: after a
crash, DBOS runs the workflow again, finished calls return their recorded
results without running (`metadata["replayed"]`), and a mutating call that
may have run is never run twice silently (`toolbus.in_doubt`):

    from dbos import DBOS
    from toolbus.integrations.dbos import durable

    tools = durable(executor, on_in_doubt=check_the_ledger)

    @DBOS.workflow()
    def turn(calls):
        return tools.execute_batch(calls).results

`run_agent` and `arun_agent` make the whole agent loop durable: each model
request and approval is a step too, so a turn that died resumes where it was.

The core does not detect DBOS by itself: only calls made through the wrapper
are steps. See docs/durable.md.
"""

from ._agent import ModelCallFailed, arun_agent, run_agent
from ._durable import DurableExecutor, durable

__all__ = ["DurableExecutor", "ModelCallFailed", "arun_agent", "durable", "run_agent"]
