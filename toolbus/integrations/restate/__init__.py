"""Durable agent turns on Restate (needs the `restate` extra:
`pip install 'toolbus[restate]'`).

Inside a Restate handler, every tool call is journaled through the handler's
context: when Restate retries the invocation (the service died, its
connection broke), finished calls return their journaled results without
running (`metadata["replayed"]`), and a mutating call that may have run is
never run twice silently (`toolbus.in_doubt`):

    import restate
    from toolbus.integrations.restate import durable

    tools = durable(executor, on_in_doubt=check_the_ledger)
    service = restate.Service("Agent")

    @service.handler()
    async def turn(ctx: restate.Context, calls: list[dict]) -> list[str]:
        batch = await tools.aexecute_batch(calls)
        return [r.output for r in batch.results]

`arun_agent` makes the whole agent loop durable: each model request and
approval is journaled too. `serve` serves the handlers over HTTP/2 cleartext,
as the Restate server calls them. See docs/durable.md.
"""

from .._turns.replies import ModelCallFailed
from ._agent import arun_agent
from ._durable import DurableExecutor, durable
from ._handler import handler_context
from ._serve import serve

__all__ = [
    "DurableExecutor",
    "ModelCallFailed",
    "arun_agent",
    "durable",
    "handler_context",
    "serve",
]
