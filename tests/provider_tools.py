"""What the provider tests share: recorded responses and the tools the model calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from toolbus import ToolContext, ToolError, ToolRegistry

FIXTURES = Path(__file__).parent / "fixtures" / "providers"
SECRET = "sk-live-9c41f7e2b8d3"


def load(name: str) -> dict[str, Any]:
    """A recorded response, as the API sent it."""
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def chat_call_lists() -> list[Any]:
    """A Chat completion's `tool_calls` list in every form a reader may be
    given it: SDK objects, dicts, a tuple, an iterator."""
    from openai.types.chat import ChatCompletion

    data = load("openai_chat_parallel")
    sdk_calls = ChatCompletion.model_validate(data).choices[0].message.tool_calls
    dict_calls = data["choices"][0]["message"]["tool_calls"]
    return [sdk_calls, dict_calls, tuple(dict_calls), iter(dict_calls)]


def wire(value: Any) -> Any:
    """`value` as JSON data, the way it goes over the wire (and proof that it can)."""
    return json.loads(json.dumps(value))


def make_registry(*, sql_rows: bool = False) -> ToolRegistry:
    """The tools of the recorded conversations; `sql_rows`: run_sql returns rows, not text."""
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def get_weather(
        city: str, unit: Literal["celsius", "fahrenheit"] = "celsius"
    ) -> dict[str, Any]:
        """Current weather for a city."""
        celsius = {"Oslo": 4, "Bergen": 15}.get(city, 20)
        temperature = round(celsius * 9 / 5 + 32) if unit == "fahrenheit" else celsius
        return {"city": city, "temperature": temperature, "unit": unit}

    @registry.tool
    def book_table(restaurant: str, people: int) -> str:
        """Book a table."""
        return f"Booked {restaurant} for {people}"

    @registry.tool(type="custom", read_only=True)
    def run_sql(query: str) -> Any:
        """Run a read-only SQL query."""
        if sql_rows:
            return [{"query": query, "name": "Oslo"}, {"name": "Bergen"}]
        return f"2 rows for: {query}"

    @registry.tool(read_only=True, timeout=0.1)
    def slow_report(ctx: ToolContext) -> str:
        """A report that takes too long (returns once the deadline cancels it)."""
        ctx.wait_cancelled(10)
        return "too late"

    @registry.tool
    def fetch_account(account: str, api_key: str) -> str:
        """Fetch an account; its error names the key it was given."""
        raise ToolError(f"account {account} refused key {api_key}", retryable=False)

    return registry
