"""Agent frameworks' own tool-execution paths, measured beside toolbus in the same run.

- OpenAI Agents SDK (`openai-agents`): a `@function_tool` invoked the way its
  Runner invokes every call of a turn, `FunctionTool.on_invoke_tool(ToolContext,
  json_arguments)`, one task per call, gathered. A sync function runs in
  `asyncio.to_thread` (the loop's default pool), an async one on the loop.
- pydantic-ai (`pydantic-ai-slim`): an `Agent` driven by a `FunctionModel` that
  asks for one tool call, then answers; the same agent answering at once is the
  reference, so the difference is what one tool call costs there (the tool, and
  the model turn it takes to hand its result back).

Each peer is optional (`pip install -e '.[bench]'`): without its package the case
is skipped, with the reason in the table and printed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

Invoke = Callable[[int], object]


def _skipped(package: str) -> str:
    return f"skipped ({package} not installed: install .[bench])"


def agents_gather(
    loop: asyncio.AbstractEventLoop, calls: int, *, is_async: bool
) -> tuple[Invoke | None, str]:
    """`calls` noop invocations of an Agents SDK function tool, gathered on `loop`; or why not.

    One operation is the whole gather. A `ToolContext` is built per call, as the
    SDK's Runner does.
    """
    try:
        from agents import function_tool
        from agents.tool_context import ToolContext
    except ImportError:
        return None, _skipped("openai-agents")

    if is_async:

        async def oa_anoop(i: int) -> int:
            """Return i."""
            return i

        tool = function_tool(oa_anoop)
    else:

        def oa_noop(i: int) -> int:
            """Return i."""
            return i

        tool = function_tool(oa_noop)

    arguments = [json.dumps({"i": k}) for k in range(calls)]
    name, invoke_tool = tool.name, tool.on_invoke_tool

    async def gather() -> list[Any]:
        return await asyncio.gather(
            *(
                invoke_tool(
                    ToolContext(None, tool_name=name, tool_call_id=f"call_{k}", tool_arguments=a),
                    a,
                )
                for k, a in enumerate(arguments)
            )
        )

    def invoke(i: int) -> object:
        return loop.run_until_complete(gather())

    try:
        out = invoke(0)
    except Exception as e:  # an SDK version this does not know how to drive
        return None, f"skipped ({type(e).__name__}: {e})"
    if out != list(range(calls)):
        return None, f"skipped (unexpected results: {out!r})"
    return invoke, ""


def pydantic_ai_turns(
    loop: asyncio.AbstractEventLoop,
) -> tuple[tuple[Invoke, Invoke] | None, str]:
    """(a run with one tool call, the same run without it) of a pydantic-ai Agent; or why not.

    The model is a `FunctionModel` (no network): with the tool, its first turn
    asks for `pa_noop(i=1)` with raw JSON arguments and its second answers; without,
    it answers at once. The tool is sync, like toolbus's noop.
    """
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import (
            ModelMessage,
            ModelResponse,
            TextPart,
            ToolCallPart,
            ToolReturnPart,
        )
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None, _skipped("pydantic-ai-slim")

    def one_call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("pa_noop", '{"i": 1}', tool_call_id="call_1")])

    def no_call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("done")])

    with_tool: Any = Agent(FunctionModel(one_call))
    without_tool: Any = Agent(FunctionModel(no_call))

    def pa_noop(i: int) -> int:
        """Return i."""
        return i

    with_tool.tool_plain(pa_noop)

    def runner(agent: Any) -> Invoke:
        def invoke(i: int) -> object:
            return loop.run_until_complete(agent.run("go"))

        return invoke

    a, b = runner(with_tool), runner(without_tool)
    try:
        ran: Any = a(0)
        plain: Any = b(0)
        returned = [
            p.content
            for m in ran.all_messages()
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "pa_noop"
        ]
        if returned != [1] or ran.output != "done" or plain.output != "done":
            return None, f"skipped (the tool did not run as expected: {returned!r})"
    except Exception as e:  # a pydantic-ai version this does not know how to drive
        return None, f"skipped ({type(e).__name__}: {e})"
    return (a, b), ""


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Stop the loop's default pool (the Agents SDK's sync tools ran there), then the loop."""
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()
