"""An agent on OpenAI: Chat Completions (sync), then the Responses API (async).

Shows:
- exporting the registry's tools with strict schemas (`strict=True`: every
  field required, optional ones nullable; toolbus drops the nulls again before
  the tools see them);
- `run_agent`: each turn's tool calls run as one batch (the two weather
  lookups in parallel), results go back as one `tool` message per call;
- a malformed call coming back as an error the model reads and fixes;
- `arun_agent` with `AsyncOpenAI` on the Responses API: a custom tool that
  takes raw SQL, and an unknown tool answered with a hint.

Offline by default: the model's turns are recorded responses that the real
`openai` client receives through an `httpx2.MockTransport`. With `--live` and
OPENAI_API_KEY set, the same code talks to the API (model: OPENAI_MODEL,
default gpt-5.4-mini); the model then writes its own turns.

Run: python examples/openai_agent.py [--live]
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Literal

import httpx2
import openai

from toolbus import Executor, ToolRegistry
from toolbus.providers import AgentResult, arun_agent, run_agent
from toolbus.providers import openai as tb

LIVE = "--live" in sys.argv
MODEL = os.environ.get("OPENAI_MODEL", "gpt-5.4-mini") if LIVE else "toolbus-demo-model"

registry = ToolRegistry()


@registry.tool(read_only=True, timeout=5)
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, object]:
    """Current weather for a city."""
    celsius = {"Oslo": 4, "Lisbon": 19, "Bergen": 7}.get(city, 15)
    temperature = round(celsius * 9 / 5 + 32) if unit == "fahrenheit" else celsius
    return {"city": city, "temperature": temperature, "unit": unit}


@registry.tool
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant."""
    return f"Booked {restaurant} for {people} at 20:00"


@registry.tool(type="custom", read_only=True)
def run_sql(query: str) -> list[dict[str, object]]:
    """Run a read-only SQL query on the `cities` table (name, country, population)."""
    return [{"name": "Oslo", "population": 717710}, {"name": "Bergen", "population": 291940}]


# -- what the model said, recorded ---------------------------------------------------------


def completion(n: int, message: dict[str, Any]) -> dict[str, Any]:
    """A recorded Chat Completions response around `message`."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-demo{n}",
        "object": "chat.completion",
        "created": 1763812345 + n,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 150, "completion_tokens": 20, "total_tokens": 170},
    }


def function_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CHAT_TURNS = [
    completion(1, {"role": "assistant", "content": None, "tool_calls": [
        function_call("call_wx1", "get_weather", '{"city":"Oslo","unit":null}'),
        function_call("call_wx2", "get_weather", '{"city":"Lisbon","unit":null}'),
    ]}),
    completion(2, {"role": "assistant", "content": None, "tool_calls": [
        function_call("call_bk1", "book_table", '{"restaurant":"Ramiro","people":"two"}'),
    ]}),
    completion(3, {"role": "assistant", "content": None, "tool_calls": [
        function_call("call_bk2", "book_table", '{"restaurant":"Ramiro","people":2}'),
    ]}),
    completion(4, {"role": "assistant", "content": (
        "Lisbon is warmer (19°C against 4°C in Oslo), so I booked Ramiro for 2 at 20:00."
    )}),
]  # fmt: skip


def response(n: int, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A recorded Responses API response with these output items."""
    return {
        "id": f"resp_demo{n}",
        "object": "response",
        "created_at": 1763812400 + n,
        "status": "completed",
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


RESPONSES_TURNS = [
    response(1, [
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_sql1", "name": "run_sql",
         "input": "SELECT name, population FROM cities WHERE country = 'NO' "
                  "ORDER BY population DESC LIMIT 2"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_wx3", "name": "get_wether",
         "arguments": '{"city":"Oslo","unit":null}'},
    ]),
    response(2, [
        {"type": "function_call", "id": "fc_2", "call_id": "call_wx4", "name": "get_weather",
         "arguments": '{"city":"Oslo","unit":"celsius"}'},
    ]),
    response(3, [
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "annotations": [],
                      "text": "Oslo (717,710 people) is the biggest; it is 4°C there now."}]},
    ]),
]  # fmt: skip


def replay(turns: list[dict[str, Any]]) -> httpx2.MockTransport:
    """A transport that answers each request with the next recorded turn."""
    pending = list(turns)
    return httpx2.MockTransport(lambda request: httpx2.Response(200, json=pending.pop(0)))


# -- printing what happened -------------------------------------------------------------------


def show(run: AgentResult, results_of: Any) -> None:
    for turn, batch in enumerate(run.batches, start=1):
        print(f"turn {turn}: " + ", ".join(f"{r.name} -> {r.status}" for r in batch))
    print("what the model read back, in order:")
    for item in results_of(run.messages):
        text = item.get("content", item.get("output"))
        keys = " ".join(f"{k}={v}" for k, v in item.items() if k not in ("content", "output"))
        print(f"  [{keys}] {' '.join(text.split())}")
    print(f"answer: {run.text}")
    print(f"stopped: {run.stop_reason} after {run.turns} model calls")


def chat_results(messages: list[Any]) -> list[Any]:
    return [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]


def responses_results(items: list[Any]) -> list[Any]:
    kinds = ("function_call_output", "custom_tool_call_output")
    return [i for i in items if isinstance(i, dict) and i.get("type") in kinds]


# -- the two runs ---------------------------------------------------------------------------


def chat_client() -> openai.OpenAI:
    if LIVE:
        return openai.OpenAI()
    http = httpx2.Client(transport=replay(CHAT_TURNS))
    return openai.OpenAI(api_key="sk-offline", base_url="http://recorded/v1", http_client=http)


def async_client() -> openai.AsyncOpenAI:
    if LIVE:
        return openai.AsyncOpenAI()
    http = httpx2.AsyncClient(transport=replay(RESPONSES_TURNS))
    return openai.AsyncOpenAI(api_key="sk-offline", base_url="http://recorded/v1", http_client=http)


def chat_demo(executor: Executor) -> None:
    print("== Chat Completions (run_agent) ==")
    tools = tb.chat_tool_definitions(registry, strict=True)
    print(f"tools offered: {', '.join(_names(tools))} (strict: {_strict(tools)})")
    question = (
        "What's the weather in Oslo and Lisbon? Book a table for two at Ramiro if Lisbon is warmer."
    )
    with chat_client() as client:
        run = run_agent(
            client, model=MODEL, messages=question, executor=executor, tools=tools, strict=True
        )
    show(run, chat_results)


async def responses_demo(executor: Executor) -> None:
    print("== Responses API (arun_agent, async) ==")
    question = "Which are the two biggest Norwegian cities, and how warm is the biggest one now?"
    async with async_client() as client:
        run = await arun_agent(
            client,
            model=MODEL,
            messages=question,
            executor=executor,
            api="responses",
            strict=True,
            instructions="Use run_sql for data about cities.",
        )
    show(run, responses_results)


def _names(tools: list[Any]) -> list[str]:
    return [t.get("function", t.get("custom", {})).get("name", "?") for t in tools]


def _strict(tools: list[Any]) -> bool:
    return all(t["function"].get("strict") for t in tools if t["type"] == "function")


def main() -> None:
    if LIVE and not os.environ.get("OPENAI_API_KEY"):
        sys.exit("--live needs OPENAI_API_KEY")
    print(f"mode: {'live' if LIVE else 'offline, recorded responses'}; model {MODEL}")
    with Executor(registry, max_parallel=4, timeout=10) as executor:
        chat_demo(executor)
        asyncio.run(responses_demo(executor))


if __name__ == "__main__":
    main()
