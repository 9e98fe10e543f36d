"""A small agent loop: call the model, run its tool calls as one batch, answer, repeat.

    from toolbus.providers import run_agent

    with Executor(registry) as executor:
        run = run_agent(OpenAI(), model="...", messages="Weather in Oslo?", executor=executor)
        print(run.text, run.stop_reason, [b.summary for b in run.batches])

`arun_agent` is the async twin (AsyncOpenAI, AsyncAnthropic). The provider
follows the client: an Anthropic client speaks Messages, an OpenAI client Chat
Completions unless `api="responses"`. Both drivers run the same turn logic
(`_turns`), which never does I/O itself: it yields "ask the model" and "run
these calls" steps, so the sync and async loops cannot drift apart.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..executor import Executor
from ..models import BatchResult, ToolCall, ToolResult
from ..tools import ToolRegistry
from . import anthropic as _anthropic
from . import openai as _openai
from ._common import DEFAULT_MAX_LENGTH

__all__ = ["AgentResult", "Api", "arun_agent", "run_agent"]

Api = Literal["chat", "responses", "messages"]
"""OpenAI Chat Completions, the OpenAI Responses API, or Anthropic Messages."""

DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` sent to Anthropic (which requires it) when the caller gives none."""


@dataclass(frozen=True)
class AgentResult:
    """How an agent run ended.

    `messages` is the whole conversation in the provider's format (for the
    Responses API, the `input` items): the messages given, then every model
    turn and every batch of tool results, ready to be extended and sent again.
    `response` is the last model response, as the SDK returned it. `batches`
    holds one `BatchResult` per turn that made tool calls, in order. `turns`
    counts model calls. `stop_reason` is `"done"` when the model answered
    without calling a tool, `"max_turns"` when the turn limit ended the run
    (the last turn's calls were run and answered, so the conversation can be
    resumed). `text` is the text of the last response.
    """

    messages: list[Any]
    response: Any
    batches: tuple[BatchResult, ...]
    turns: int
    stop_reason: Literal["done", "max_turns"]
    text: str


# -- one class per API: how to ask, what to read, what to append ---------------------


class _Format(Protocol):
    def method(self, client: Any) -> Callable[..., Any]: ...

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]: ...

    def request(
        self, model: str, history: list[Any], tools: list[Any], options: dict[str, Any]
    ) -> dict[str, Any]: ...

    def calls(self, response: Any, registry: ToolRegistry) -> list[ToolCall]: ...

    def turn(self, response: Any) -> list[Any]: ...

    def answers(self, response: Any, results: Sequence[ToolResult], limit: int) -> list[Any]: ...

    def text(self, response: Any) -> str: ...


class _Chat:
    def method(self, client: Any) -> Callable[..., Any]:
        return client.chat.completions.create  # type: ignore[no-any-return]

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]:
        return _openai.chat_tool_definitions(registry, strict=strict)

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
    def method(self, client: Any) -> Callable[..., Any]:
        return client.responses.create  # type: ignore[no-any-return]

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]:
        return _openai.responses_tool_definitions(registry, strict=strict)

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
    def method(self, client: Any) -> Callable[..., Any]:
        return client.messages.create  # type: ignore[no-any-return]

    def definitions(self, registry: ToolRegistry, strict: bool) -> list[Any]:
        return _anthropic.tool_definitions(registry)

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


_FORMATS: dict[str, _Format] = {"chat": _Chat(), "responses": _Responses(), "messages": _Messages()}


def _format_for(client: Any, api: Api | None) -> _Format:
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
    if api not in _FORMATS:
        raise ValueError(f"unknown api {api!r}; expected 'chat', 'responses' or 'messages'")
    return _FORMATS[api]


# -- the turn logic, shared by both drivers ------------------------------------------


@dataclass(frozen=True)
class _Ask:
    request: dict[str, Any]


@dataclass(frozen=True)
class _Run:
    calls: list[ToolCall]


@dataclass(frozen=True)
class _Settings:
    model: str
    tools: list[Any]
    options: dict[str, Any]
    registry: ToolRegistry
    strict: bool
    max_turns: int
    max_length: int


def _turns(
    fmt: _Format, history: list[Any], s: _Settings
) -> Generator[_Ask | _Run, Any, AgentResult]:
    """Up to `max_turns` model calls, each followed by one batch of its tool calls."""
    batches: list[BatchResult] = []
    response: Any = None
    for turn in range(1, s.max_turns + 1):
        response = yield _Ask(fmt.request(s.model, list(history), s.tools, s.options))
        history.extend(fmt.turn(response))
        calls = fmt.calls(response, s.registry)
        if s.strict:
            calls = _openai.drop_strict_nulls(calls, s.registry)
        if not calls:
            return AgentResult(history, response, tuple(batches), turn, "done", fmt.text(response))
        batch: BatchResult = yield _Run(calls)
        batches.append(batch)
        history.extend(fmt.answers(response, batch.results, s.max_length))
    text = fmt.text(response)
    return AgentResult(history, response, tuple(batches), s.max_turns, "max_turns", text)


def _start(
    client: Any,
    api: Api | None,
    messages: str | Sequence[Any],
    executor: Executor,
    *,
    model: str,
    tools: Sequence[Mapping[str, Any]] | None,
    strict: bool,
    max_turns: int,
    max_length: int,
    options: dict[str, Any],
) -> tuple[_Format, Generator[_Ask | _Run, Any, AgentResult]]:
    """Check the arguments, pick the format, and make the turn generator."""
    if max_turns < 1:
        raise ValueError("max_turns must be >= 1")
    if options.get("stream"):
        raise ValueError("the agent loop does not stream; leave `stream` out")
    fmt = _format_for(client, api)
    if tools is None:
        exported = fmt.definitions(executor.registry, strict)
    else:
        exported = [dict(t) for t in tools]
    history = [{"role": "user", "content": messages}] if isinstance(messages, str) else [*messages]
    settings = _Settings(
        model=model,
        tools=exported,
        options=options,
        registry=executor.registry,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
    )
    return fmt, _turns(fmt, history, settings)


# -- the drivers ----------------------------------------------------------------------


def run_agent(
    client: Any,
    *,
    model: str,
    messages: str | Sequence[Any],
    executor: Executor,
    tools: Sequence[Mapping[str, Any]] | None = None,
    api: Api | None = None,
    strict: bool = False,
    max_turns: int = 10,
    max_length: int = DEFAULT_MAX_LENGTH,
    **options: Any,
) -> AgentResult:
    """Run the model and its tool calls until it answers without calling a tool,
    or for at most `max_turns` model calls.

    Each turn sends the conversation with `executor`'s tools (or `tools`, sent
    as given), appends the model's turn, runs every tool call of the turn as
    one `execute_batch` and appends the results in the provider's format (one
    tool message per call for Chat, output items for Responses, one user
    message of `tool_result` blocks for Messages). Every toolbus guarantee
    holds: each call gets exactly one result, failures reach the model as
    readable text, outputs and error texts stay scrubbed of secrets.

    `client` is a sync `openai.OpenAI`-like or `anthropic.Anthropic`-like
    client; `api` overrides what its type implies. `messages` is the
    conversation so far, or one user message as a string; it is not changed.
    `strict=True` exports the tools with OpenAI strict schemas and removes the
    nulls strict mode makes the model send for the optional fields it leaves out. `max_length` caps
    each result's text. `options` go into every request (`temperature`,
    `system` or `max_tokens` for Anthropic, `instructions`, ...).
    Errors of the model API (the SDK's exceptions) propagate.
    """
    fmt, steps = _start(
        client,
        api,
        messages,
        executor,
        model=model,
        tools=tools,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
        options=options,
    )
    create = fmt.method(client)
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            if isinstance(step, _Ask):
                reply = create(**step.request)
                if inspect.isawaitable(reply):
                    _discard(reply)
                    raise TypeError("run_agent needs a sync client; use arun_agent")
            else:
                reply = executor.execute_batch(step.calls)
    except StopIteration as stop:
        result: AgentResult = stop.value
        return result
    finally:
        steps.close()


async def arun_agent(
    client: Any,
    *,
    model: str,
    messages: str | Sequence[Any],
    executor: Executor,
    tools: Sequence[Mapping[str, Any]] | None = None,
    api: Api | None = None,
    strict: bool = False,
    max_turns: int = 10,
    max_length: int = DEFAULT_MAX_LENGTH,
    **options: Any,
) -> AgentResult:
    """Async twin of `run_agent`, for `openai.AsyncOpenAI`-like and
    `anthropic.AsyncAnthropic`-like clients; tool calls run through
    `aexecute_batch`, so the event loop is never blocked. Cancelling the
    awaiting task cancels the batch in flight (its calls end `cancelled`).
    """
    fmt, steps = _start(
        client,
        api,
        messages,
        executor,
        model=model,
        tools=tools,
        strict=strict,
        max_turns=max_turns,
        max_length=max_length,
        options=options,
    )
    create = fmt.method(client)
    # Checked before anything is sent: calling a sync client's create() would
    # send a (billed) request and block the event loop. The SDKs wrap create()
    # in a sync decorator, so look through it.
    if not inspect.iscoroutinefunction(inspect.unwrap(create)):
        steps.close()
        raise TypeError("arun_agent needs an async client; use run_agent")
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            if isinstance(step, _Ask):
                pending = create(**step.request)
                if not inspect.isawaitable(pending):
                    raise TypeError("arun_agent needs an async client; use run_agent")
                reply = await pending
            else:
                reply = await executor.aexecute_batch(step.calls)
    except StopIteration as stop:
        result: AgentResult = stop.value
        return result
    finally:
        steps.close()


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
