"""The three provider formats the agent loop speaks: how to ask, what to read, what to append.

One class per API (OpenAI Chat Completions, the OpenAI Responses API,
Anthropic Messages), each a thin layer over the readers and writers of
`openai.py` and `anthropic.py`; `format_for` picks one by the client's type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..models import ToolCall, ToolResult
from ..tools import ToolRegistry
from . import anthropic as _anthropic
from . import openai as _openai
from ._common import ToolSource

__all__ = ["DEFAULT_MAX_TOKENS", "FORMATS", "Format", "format_for"]

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` sent to Anthropic (which requires it) when the caller gives none."""


class Format(Protocol):
    api: str

    def method(self, client: Any) -> Callable[..., Any]: ...

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]: ...

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]: ...

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]: ...

    def turn(self, response: Any) -> list[Any]: ...

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]: ...

    def text(self, response: Any) -> str: ...


class _Chat:
    api = "chat"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]:
        return _openai.chat_tool_definitions(source, strict=strict)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "model": model,
            "messages": history,
            **({"tools": tools} if tools else {}),
            **options,
        }

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _openai.chat_tool_calls(response)

    def turn(self, response: Any) -> list[Any]:
        return [_openai.chat_assistant_message(response)]

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return _openai.chat_tool_messages(results, max_length=limit)

    def text(self, response: Any) -> str:
        return _openai.chat_text(response)


class _Responses:
    api = "responses"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]:
        return _openai.responses_tool_definitions(source, strict=strict)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        return {"model": model, "input": history, **({"tools": tools} if tools else {}), **options}

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _openai.responses_tool_calls(response)

    def turn(self, response: Any) -> list[Any]:
        return _openai.responses_output_items(response)

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return _openai.responses_tool_outputs(results, response, max_length=limit)

    def text(self, response: Any) -> str:
        return _openai.responses_text(response)


class _Messages:
    api = "messages"

    def method(self, client: Any) -> Callable[..., Any]:
        return client.messages.create  # type: ignore[no-any-return]

    def definitions(self, source: ToolSource, strict: bool) -> list[Any]:
        return _anthropic.tool_definitions(source)

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]:
        options = {"max_tokens": DEFAULT_MAX_TOKENS, **options}
        return {
            "model": model,
            "messages": history,
            **({"tools": tools} if tools else {}),
            **options,
        }

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]:
        return _anthropic.tool_calls(response, registry=registry)

    def turn(self, response: Any) -> list[Any]:
        return [_anthropic.assistant_message(response)]

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]:
        return [_anthropic.tool_results_message(results, max_length=limit)]

    def text(self, response: Any) -> str:
        return _anthropic.message_text(response)


FORMATS: dict[str, Format] = {"chat": _Chat(), "responses": _Responses(), "messages": _Messages()}


def format_for(client: Any, api: str | None) -> Format:
    if api is None:
        packages = {cls.__module__.partition(".")[0] for cls in type(client).__mro__}
        if "anthropic" in packages:
            api = "messages"
        elif "openai" in packages:
            api = "chat"
        else:
            raise TypeError(
                f"cannot tell which API a {type(client).__name__} speaks;"
                " pass api='chat', 'responses' or 'messages'"
            )
    if api not in FORMATS:
        raise ValueError(f"unknown api {api!r}; expected 'chat', 'responses' or 'messages'")
    return FORMATS[api]
