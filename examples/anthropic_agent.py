"""An agent on Anthropic's Messages API: one turn by hand, then `arun_agent`.

Shows:
- the building blocks, by hand: `tool_calls` reads the `tool_use` blocks,
  one `execute_batch` runs them (in parallel: both are read-only), and
  `tool_results_message` answers them all in one user message, right after the
  assistant message, as Anthropic requires;
- `arun_agent` with `AsyncAnthropic`: a search that times out comes back as
  a `tool_result` with `is_error: true`, the model narrows its query and
  tries again; a custom tool receives the model's raw SQL text.

Offline by default: the model's turns are recorded responses that the real
`anthropic` client receives through an `httpx2.MockTransport`. With `--live`
and ANTHROPIC_API_KEY set, the same code talks to the API (model:
ANTHROPIC_MODEL, default claude-haiku-4-5); the model then writes its own turns.

Run: python examples/anthropic_agent.py [--live]
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import anthropic
import httpx2

from toolbus import Executor, ToolContext, ToolRegistry
from toolbus.providers import anthropic as tb
from toolbus.providers import arun_agent

LIVE = "--live" in sys.argv
MODEL = os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5") if LIVE else "toolbus-demo-model"

registry = ToolRegistry()


@registry.tool(read_only=True, timeout=5)
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city, in °C."""
    return {"city": city, "temperature": {"Oslo": 4, "Bergen": 7}.get(city, 15), "sky": "clear"}


@registry.tool(read_only=True, timeout=0.3)
def search_news(query: str, ctx: ToolContext, days: int = 30) -> list[str]:
    """Search news articles of the last `days` days (slow for long periods)."""
    if days > 30:
        ctx.wait_cancelled(5)  # an archive search: outlives its 0.3 s deadline
    return [f"Fjord ferry timetable changes ({query})", "New cycling route along the Sognefjord"]


@registry.tool(type="custom", read_only=True)
def run_sql(query: str) -> list[dict[str, object]]:
    """Run a read-only SQL query on the `fjords` table (name, length_km)."""
    return [{"name": "Sognefjord", "length_km": 205}, {"name": "Hardangerfjord", "length_km": 179}]


# -- what the model said, recorded ---------------------------------------------------------


def message(n: int, stop: str, *content: dict[str, Any]) -> dict[str, Any]:
    """A recorded Messages API response with these content blocks."""
    return {
        "id": f"msg_demo{n}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 400, "output_tokens": 60},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(block_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": block_id, "name": name, "input": arguments}


BY_HAND = [
    message(1, "tool_use",
        text("I'll look up both cities."),
        tool_use("toolu_oslo", "get_weather", city="Oslo"),
        tool_use("toolu_bergen", "get_weather", city="Bergen")),
    message(2, "end_turn", text("Bergen is 3°C warmer than Oslo; both are clear.")),
]  # fmt: skip

LOOP = [
    message(3, "tool_use",
        tool_use("toolu_news1", "search_news", query="fjords", days=3650),
        tool_use("toolu_sql", "run_sql",
                 input="SELECT name, length_km FROM fjords ORDER BY length_km DESC LIMIT 2")),
    message(4, "tool_use",
        text("The archive search timed out; I'll search the last week only."),
        tool_use("toolu_news2", "search_news", query="fjords", days=7)),
    message(5, "end_turn", text(
        "The longest fjords are the Sognefjord (205 km) and the Hardangerfjord (179 km). "
        "This week: ferry timetable changes and a new cycling route along the Sognefjord.")),
]  # fmt: skip


def replay(turns: list[dict[str, Any]]) -> httpx2.MockTransport:
    """A transport that answers each request with the next recorded turn."""
    pending = list(turns)
    return httpx2.MockTransport(lambda request: httpx2.Response(200, json=pending.pop(0)))


def sync_client() -> anthropic.Anthropic:
    if LIVE:
        return anthropic.Anthropic()
    http = httpx2.Client(transport=replay(BY_HAND))
    return anthropic.Anthropic(api_key="sk-offline", base_url="http://recorded", http_client=http)


def async_client() -> anthropic.AsyncAnthropic:
    if LIVE:
        return anthropic.AsyncAnthropic()
    http = httpx2.AsyncClient(transport=replay(LOOP))
    return anthropic.AsyncAnthropic(
        api_key="sk-offline", base_url="http://recorded", http_client=http
    )


def show_results(reply: dict[str, Any]) -> None:
    """Print a user message of tool_result blocks, one line per block."""
    for block in reply["content"]:
        flag = "is_error=True " if block["is_error"] else ""
        content = " ".join(block["content"].split())
        print(f"  [{block['type']} {block['tool_use_id']}] {flag}{content}")


# -- one turn by hand -------------------------------------------------------------------------


def by_hand(executor: Executor) -> None:
    print("== by hand: tool_calls -> execute_batch -> tool_results_message ==")
    tools = tb.tool_definitions(registry)
    print(f"tools offered: {', '.join(t['name'] for t in tools)}")
    messages: list[Any] = [{"role": "user", "content": "Is it warmer in Oslo or in Bergen?"}]
    with sync_client() as client:
        reply = client.messages.create(model=MODEL, max_tokens=1024, messages=messages, tools=tools)
        while reply.stop_reason == "tool_use":
            batch = executor.execute_batch(tb.tool_calls(reply, registry=registry))
            results = tb.tool_results_message(batch)
            ok = batch.summary.succeeded
            print(f"one user message with {len(batch)} tool_result blocks ({ok} ok):")
            show_results(dict(results))
            messages += [tb.assistant_message(reply), results]
            reply = client.messages.create(
                model=MODEL, max_tokens=1024, messages=messages, tools=tools
            )
    print(f"answer: {tb.message_text(reply)}")
    print(f"roles sent: {' -> '.join(m['role'] for m in messages)}")


# -- the loop, async --------------------------------------------------------------------------


async def with_the_loop(executor: Executor) -> None:
    print("== arun_agent with AsyncAnthropic ==")
    async with async_client() as client:
        run = await arun_agent(
            client,
            model=MODEL,
            messages="What are Norway's two longest fjords, and what fjord news is there?",
            executor=executor,
            system="Use run_sql for facts about fjords and search_news for news.",
            max_tokens=1024,
        )
    for turn, batch in enumerate(run.batches, start=1):
        print(f"turn {turn}: " + ", ".join(f"{r.name} -> {r.status}" for r in batch))
    for reply in run.messages:
        if reply["role"] == "user" and isinstance(reply["content"], list):
            show_results(reply)
    print(f"answer: {run.text}")
    print(f"stopped: {run.stop_reason} after {run.turns} model calls")


def main() -> None:
    if LIVE and not os.environ.get("ANTHROPIC_API_KEY"):
        sys.exit("--live needs ANTHROPIC_API_KEY")
    print(f"mode: {'live' if LIVE else 'offline, recorded responses'}; model {MODEL}")
    with Executor(registry, max_parallel=4, timeout=10) as executor:
        by_hand(executor)
        asyncio.run(with_the_loop(executor))


if __name__ == "__main__":
    main()
