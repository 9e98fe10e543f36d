"""An OpenAI Agents SDK agent whose tool calls toolbus runs.

The three lines that change in a typical Agents SDK agent:

    executor = Executor(registry, max_parallel=4, timeout=10)   # 1. an executor for the tools
    tools = function_tools(registry, executor)                  # 2. the registry as FunctionTools
    agent = Agent(name="assistant", tools=tools)                # 3. those tools in the agent

Shows:
- the tools the model is offered, with strict schemas (optional fields
  nullable; toolbus drops the nulls again, so defaults apply);
- a hung tool timed out by toolbus, its error coming back to the model as the
  tool's output (never an exception that ends the run), and an invalid call
  coming back as an error the model fixes;
- an SDK `@function_tool` run by toolbus (`registry.add_openai_agents`), with
  toolbus's retries: it fails once, then succeeds;
- every call on toolbus's bus, its secret argument masked.

Offline: the model is a fake `agents.models.interface.Model` playing a
scripted conversation (as the SDK's own tests do); the Runner, the tools and
the executor are real.

Run: python examples/openai_agents_agent.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.usage import Usage

from toolbus import Executor, RetryPolicy, ToolRegistry, bus
from toolbus.integrations.openai_agents import function_tools

registry = ToolRegistry()


@registry.tool(read_only=True, timeout=5)
def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """Current weather for a city."""
    return {"city": city, "temperature": {"Oslo": 4, "Lisbon": 19}.get(city, 15), "unit": unit}


@registry.tool(read_only=True, timeout=0.2)
async def search_news(topic: str) -> str:
    """Search the news (this one hangs: toolbus times it out)."""
    await asyncio.sleep(5)
    return "never"


@registry.tool
def book_table(restaurant: str, people: int, api_key: str) -> str:
    """Book a table at a restaurant."""
    return f"Booked {restaurant} for {people} at 20:00"


attempts = [0]


@function_tool
def exchange_rate(currency: str) -> float:
    """NOK per unit of a currency (the upstream drops the first request)."""
    attempts[0] += 1
    if attempts[0] == 1:
        raise ConnectionError("connection reset by peer")
    return {"EUR": 11.5, "USD": 10.6}[currency]


# An SDK tool run by toolbus, with toolbus's retries and timeouts.
registry.add_openai_agents(
    exchange_rate, read_only=True, retry=RetryPolicy(max_retries=2, backoff_base=0.01)
)

KEY = "sk-demo-5c4b3a2f1e"


class ScriptedModel(Model):
    """The SDK's Model interface, answering from a script: what a real model
    would answer, turn by turn. It prints what each tool call returned."""

    def __init__(self) -> None:
        self.turn = 0
        self.read: set[str] = set()

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.turn += 1
        if self.turn == 1:
            strict = all(t.strict_json_schema for t in tools)
            print("tools offered:", ", ".join(t.name for t in tools), f"(strict: {strict})")
            print("get_weather schema:", tools[0].params_json_schema["properties"]["unit"])
        else:
            for item in input:
                if not isinstance(item, dict) or item.get("type") != "function_call_output":
                    continue
                if item["call_id"] not in self.read:  # the input is the whole conversation
                    self.read.add(item["call_id"])
                    text = " ".join(item["output"].split())
                    print(f"turn {self.turn - 1}: {item['call_id']} -> {text}")
        output = {
            1: [
                function_call("get_weather", {"city": "Oslo", "unit": None}, call_id="wx1"),
                function_call("get_weather", {"city": "Lisbon", "unit": None}, call_id="wx2"),
                function_call("search_news", {"topic": "Lisbon"}, call_id="news1"),
                function_call(
                    "book_table",
                    {"restaurant": "Ramiro", "people": "two", "api_key": KEY},
                    call_id="bk1",
                ),
            ],
            2: [
                function_call(
                    "book_table",
                    {"restaurant": "Ramiro", "people": 2, "api_key": KEY},
                    call_id="bk2",
                ),
                function_call("exchange_rate", {"currency": "EUR"}, call_id="fx1"),
            ],
        }.get(self.turn, [assistant_message("Lisbon is warmer (19°C); Ramiro is booked for 2.")])
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("offline example: not streamed")


async def main() -> None:
    events: list[Any] = []
    with bus.subscribe(lambda sender, event, signal: events.append(event), "tool:executing"):
        async with Executor(registry, max_parallel=4, timeout=10) as executor:
            agent = Agent(
                name="assistant", model=ScriptedModel(), tools=function_tools(registry, executor)
            )
            result = await Runner.run(
                agent,
                "Where is it warmer? Book Ramiro for two.",
                run_config=RunConfig(tracing_disabled=True),
            )
            print("answer:", result.final_output)
            executor.drain_events()
    fx = [e.attempt for e in events if e.tool == "exchange_rate"]
    print("exchange_rate attempts:", fx)
    bookings = [e for e in events if e.tool == "book_table"]
    print("book_table as the bus saw it:", bookings[-1].arguments)
    print("events showing the key:", sum(KEY in repr(e) for e in events))


if __name__ == "__main__":
    asyncio.run(main())
