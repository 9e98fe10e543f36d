"""OpenAI's and Anthropic's tool lists refuse, naming the tool, a name toolbus
allows (MCP's rule) but they do not (`^[a-zA-Z0-9_-]{1,64}$`): a '.' or more
than 64 characters. Sent as it was, the request failed, the other tools' too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from toolbus import FunctionTool, ToolRegistry
from toolbus.providers import anthropic
from toolbus.providers import openai as openai_format


def _noop() -> None:
    return None


RENDERERS: dict[str, tuple[str, Callable[[ToolRegistry], Any]]] = {
    "chat": ("OpenAI", openai_format.chat_tool_definitions),
    "responses": ("OpenAI", openai_format.responses_tool_definitions),
    "anthropic": ("Anthropic", anthropic.tool_definitions),
    "registry.to_openai": ("OpenAI", ToolRegistry.to_openai),
    "registry.to_anthropic": ("Anthropic", ToolRegistry.to_anthropic),
}


@pytest.mark.parametrize("renderer", list(RENDERERS))
@pytest.mark.parametrize(
    ("name", "problem"),
    [("admin.tools.list", "'.' is not one"), ("x" * 65, "it is 65 characters long")],
)
def test_a_name_the_provider_refuses_is_an_error_naming_the_tool(
    renderer: str, name: str, problem: str
) -> None:
    provider, render = RENDERERS[renderer]
    registry = ToolRegistry([FunctionTool(_noop, name="fine"), FunctionTool(_noop, name=name)])
    with pytest.raises(ValueError) as caught:
        render(registry)
    text = str(caught.value)
    assert text.startswith(f"tool {name[:39] + '…' if len(name) > 40 else name!r}: ")
    assert f"{provider} takes tool names of 1 to 64 ASCII letters, digits, '_' or '-'" in text
    assert problem in text


@pytest.mark.parametrize("renderer", list(RENDERERS))
def test_names_the_providers_take_are_rendered(renderer: str) -> None:
    _, render = RENDERERS[renderer]
    names = ["get_weather", "get-weather", "x" * 64]
    registry = ToolRegistry([FunctionTool(_noop, name=n) for n in names])
    assert len(render(registry)) == 3


def test_custom_tools_are_checked_too() -> None:
    registry = ToolRegistry()

    @registry.tool(name="run.sql", type="custom")
    def run_sql(query: str) -> str:
        return query

    with pytest.raises(ValueError, match=r"tool 'run\.sql': OpenAI takes"):
        openai_format.chat_tool_definitions(registry)
    with pytest.raises(ValueError, match=r"tool 'run\.sql': OpenAI takes"):
        openai_format.responses_tool_definitions(registry)
    with pytest.raises(ValueError, match=r"tool 'run\.sql': Anthropic takes"):
        anthropic.tool_definitions(registry)
