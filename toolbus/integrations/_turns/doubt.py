"""A call found in doubt after a crash (its intent recorded, its result not),
as the rule of `toolbus.in_doubt` decides it, with its arguments masked as
its events show them.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from ...executor import Executor
from ...in_doubt import InDoubtCall, InDoubtHandler, Rerun, adecide, decide, in_doubt_result
from ...masking import mask_paths, published_arguments
from ...models import ToolCall, ToolResult
from ...tools import ArgumentError, parse_json_arguments

__all__ = ["adecided", "decided", "in_doubt_call", "masked_arguments"]


async def adecided(
    executor: Executor, handler: InDoubtHandler | None, call: ToolCall
) -> ToolResult | None:
    """For `call` in doubt: its result if it does not run again, else None.
    A sync handler runs in a thread (it may ask a ledger over the network):
    the loop it is called from serves other work meanwhile."""
    found = in_doubt_call(executor, call)
    if handler is not None and not _is_async(handler):
        decision = await asyncio.to_thread(decide, handler, found)
        return None if isinstance(decision, Rerun) else in_doubt_result(found, decision)
    decision = await adecide(handler, found)
    return None if isinstance(decision, Rerun) else in_doubt_result(found, decision)


def decided(
    executor: Executor, handler: InDoubtHandler | None, call: ToolCall
) -> ToolResult | None:
    """`adecided` on this thread (an async handler on a loop of its own)."""
    found = in_doubt_call(executor, call)
    decision = decide(handler, found)
    return None if isinstance(decision, Rerun) else in_doubt_result(found, decision)


def _is_async(handler: Any) -> bool:
    call = type(handler).__call__ if not inspect.isroutine(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def in_doubt_call(executor: Executor, call: ToolCall) -> InDoubtCall:
    """`call` as its in-doubt handler sees it (arguments masked)."""
    return InDoubtCall(
        call.id, call.name, masked_arguments(executor, call), call.idempotency_key or ""
    )


def masked_arguments(executor: Executor, call: ToolCall) -> Any:
    """The call's arguments as its events show them, for an in-doubt
    handler: None where nothing of them may be shown."""
    tool = executor.registry.get(call.name)
    if isinstance(call.arguments, str):  # the model's JSON text, read as admission reads it
        try:
            call = call.model_copy(update={"arguments": parse_json_arguments(call.arguments)})
        except ArgumentError:
            return None  # not JSON: never published
    raw = call.arguments
    try:
        masked = executor.mask_arguments(call)
        if asyncio.iscoroutine(masked):  # an async masker: nothing shown
            masked.close()
            return None
        paths = tool.secret_paths if tool is not None else ()
        masked, typed = mask_paths(masked, raw, paths) if paths else (masked, [])
        if masked is not raw:
            masked, _ = published_arguments(raw, masked, typed)
        return masked
    except Exception:  # a broken masker: nothing shown
        return None
