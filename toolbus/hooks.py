"""The executor's hooks: their defaults, and how sync and async hooks chain.

Each hook is a method of the `Executor` whose default applies the option of the
same purpose (`pre_call=[...]`, `post_call=[...]`, `authorize=`, `masker=`,
`concurrency=`, `retry=`). Override a method in a subclass, or pass the option.
Any hook but `max_parallel` may be `async def`: the pipeline awaits whatever a
hook hands back, with the caller's contextvars, on the loop its call runs on.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .masking import SecretKeys, mask_arguments
from .models import ToolCall, ToolResult
from .retry import AttemptFailure, RetryDecision

__all__ = ["ExecutorHooks", "PostCallHook", "PreCallHook"]

PreCallHook = Callable[[ToolCall], ToolCall | Awaitable[ToolCall]]
PostCallHook = Callable[[ToolCall, ToolResult], ToolResult | Awaitable[ToolResult]]


class ExecutorHooks:
    """The default hooks, driven by the executor's options (a part of `Executor`)."""

    parallel_limit: int
    _pre_call: tuple[PreCallHook, ...]
    _post_call: tuple[PostCallHook, ...]
    _authorize: Callable[[ToolCall], bool | Awaitable[bool]] | None
    _masker: Callable[[ToolCall], Any] | None
    _concurrency: Callable[[Sequence[ToolCall]], int] | None
    _secret_keys: SecretKeys

    def pre_execute(self, call: ToolCall) -> ToolCall | Awaitable[ToolCall]:
        """Before a call runs: may return a changed call; raising rejects it.

        May be overridden as `async def`; the `pre_call` hooks may be async."""
        out: ToolCall | Awaitable[ToolCall] = _chain(self._pre_call, call, lambda hook, c: hook(c))
        return out

    def is_allowed(self, call: ToolCall) -> bool | Awaitable[bool]:
        """Whether the call may run (after pre-call hooks); may be async.

        Only `True` admits it. `False` refuses it (`TOOL_NOT_ALLOWED`), and so
        does any other value, truthy or not (`None`, `"True"`, `1`, a dict):
        authorization fails closed."""
        return self._authorize(call) if self._authorize is not None else True

    def mask_arguments(self, call: ToolCall) -> Any:
        """The arguments as they may be published (events, logs); secrets hidden.

        The default hides values under secret-looking keys (the default names
        and this executor's `secret_keys`). Whatever this hides is also
        scrubbed from error texts and outputs; values the tool's schema marks
        secret (`Tool.secret_paths`) are hidden on top of it, whatever it returns.
        """
        if self._masker is not None:
            return self._masker(call)
        return mask_arguments(call.arguments, self._secret_keys)[0]

    def should_retry(self, call: ToolCall, failure: AttemptFailure) -> RetryDecision:
        """After a failed attempt: retry, and after how long?"""
        return failure.policy.decide(
            failure.state,
            read_only=failure.read_only,
            timed_out=failure.timed_out,
            retryable=failure.retryable,
        )

    def max_parallel(self, calls: Sequence[ToolCall]) -> int:
        """How many calls of this batch may run at once (never above `parallel_limit`)."""
        if self._concurrency is not None:
            return self._concurrency(calls)
        return self.parallel_limit

    def post_execute(
        self, call: ToolCall, result: ToolResult
    ) -> ToolResult | Awaitable[ToolResult]:
        """After a call ran (ok, error or timeout): may return a changed result; may be async."""
        out: ToolResult | Awaitable[ToolResult] = _chain(
            self._post_call, result, lambda hook, r: hook(call, r)
        )
        return out


def _chain(hooks: Sequence[Callable[..., Any]], value: Any, apply: Callable[..., Any]) -> Any:
    """`value` through each hook in turn; from the first async hook on, the rest
    run in a coroutine (which the pipeline awaits)."""
    if not hooks:
        return value
    for i, hook in enumerate(hooks):
        if inspect.iscoroutinefunction(hook):
            # Not called here: a coroutine made now would never be awaited if the
            # call were cancelled before the chain's coroutine started.
            return _chain_rest(hooks[i:], value, apply)
        out = apply(hook, value)
        if inspect.isawaitable(out):
            return _chain_rest(hooks[i + 1 :], value, apply, pending=out)
        value = out
    return value


async def _chain_rest(
    hooks: Sequence[Callable[..., Any]],
    value: Any,
    apply: Callable[..., Any],
    pending: Awaitable[Any] | None = None,
) -> Any:
    if pending is not None:
        value = await pending
    for hook in hooks:
        out = apply(hook, value)
        value = (await out) if inspect.isawaitable(out) else out
    return value
