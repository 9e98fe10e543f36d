"""A pydantic-ai agent whose tool calls toolbus runs.

The three lines that change in a typical pydantic-ai agent:

    executor = Executor(registry, max_parallel=4, timeout=10)   # 1. an executor for the tools
    toolset = ToolbusToolset(registry, executor)                # 2. the registry as a toolset
    agent = Agent(model, toolsets=[toolset])                    # 3. toolsets=, not tools=

Shows:
- the tools pydantic-ai offers the model: read-only ones run in parallel,
  mutating ones are `sequential` (barriers, in the order the model gave them);
- an invalid call coming back as pydantic-ai's retry prompt, which the model
  fixes; a failure coming back as a failed tool result the model reads;
- a function described by pydantic-ai (`registry.add_pydantic_ai`) run by
  toolbus like any tool, with the schema pydantic-ai gives it;
- every call on toolbus's bus, its secret argument masked.

Offline: the model is pydantic-ai's `FunctionModel`, playing a scripted
conversation; the tools, the toolset and the agent are real.

Run: python examples/pydantic_ai_agent.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from toolbus import Executor, ToolRegistry, bus
from toolbus.integrations.pydantic_ai import ToolbusToolset

registry = ToolRegistry()


@registry.tool(read_only=True, timeout=5)
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    celsius = {"Oslo": 4, "Lisbon": 19}.get(city, 15)
    return {"city": city, "temperature": celsius}


@registry.tool(read_only=True, timeout=0.2)
async def search_news(topic: str) -> str:
    """Search the news (this one hangs: toolbus times it out)."""
    await asyncio.sleep(5)
    return "never"


@registry.tool
def book_table(restaurant: str, people: int, api_key: str) -> str:
    """Book a table at a restaurant (mutating: a barrier)."""
    return f"Booked {restaurant} for {people} at 20:00"


def price_in(amount: float, currency: str = "EUR") -> str:
    """Convert a price in NOK.

    Args:
        amount: The price in NOK.
        currency: The currency to convert to.
    """
    return f"{amount / 11.5:.2f} {currency}"


# A function described by pydantic-ai (its docstring's parameter descriptions
# included), run by toolbus like any other tool.
registry.add_pydantic_ai(price_in, read_only=True)

KEY = "sk-demo-5c4b3a2f1e"


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: what a real one would answer, turn by turn."""
    turn = sum(isinstance(m, ModelResponse) for m in messages) + 1
    if turn == 1:
        offered = [
            f"{t.name} ({'sequential' if t.sequential else 'parallel'})"
            for t in info.function_tools
        ]
        print("tools offered:", ", ".join(offered))
        return ModelResponse(
            parts=[
                ToolCallPart("get_weather", {"city": "Oslo"}, tool_call_id="wx1"),
                ToolCallPart("get_weather", {"city": "Lisbon"}, tool_call_id="wx2"),
                ToolCallPart("search_news", {"topic": "Lisbon"}, tool_call_id="news1"),
                ToolCallPart(
                    "book_table",
                    {"restaurant": "Ramiro", "people": "two", "api_key": KEY},
                    tool_call_id="bk1",
                ),
            ]
        )
    show(turn - 1, messages[-1])
    if turn == 2:
        return ModelResponse(
            parts=[
                ToolCallPart(
                    "book_table",
                    {"restaurant": "Ramiro", "people": 2, "api_key": KEY},
                    tool_call_id="bk2",
                ),
                ToolCallPart("price_in", {"amount": 690}, tool_call_id="px1"),
            ]
        )
    return ModelResponse(parts=[TextPart("Lisbon is warmer (19°C); Ramiro is booked for 2.")])


def show(turn: int, request: ModelMessage) -> None:
    assert isinstance(request, ModelRequest)
    for part in request.parts:
        if isinstance(part, RetryPromptPart):
            print(f"turn {turn}: {part.tool_name} -> retry prompt: {part.content}")
        elif isinstance(part, ToolReturnPart):
            print(f"turn {turn}: {part.tool_name} -> {part.outcome}: {part.content}")


async def main() -> None:
    events: list[Any] = []
    with bus.subscribe(lambda sender, event, signal: events.append(event), "tool:executing"):
        async with Executor(registry, max_parallel=4, timeout=10) as executor:
            agent = Agent(FunctionModel(model), toolsets=[ToolbusToolset(registry, executor)])
            result = await agent.run("Where is it warmer, Oslo or Lisbon? Book Ramiro for two.")
            print("answer:", result.output)
            executor.drain_events()
    bookings = [e for e in events if e.tool == "book_table"]
    print("book_table as the bus saw it:", bookings[-1].arguments)
    print("events showing the key:", sum(KEY in repr(e) for e in events))


if __name__ == "__main__":
    asyncio.run(main())
