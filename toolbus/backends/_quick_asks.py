"""Whether a call's policies are asked quickly: what lets a worker wake nobody while it asks.

A worker that takes a call with policies left to ask (`_thread_pool.py`,
"Asking first") holds back the tool's queue until the policies answer, which
is right only if nothing on the way can block: no code of the user's runs
before the policies answer, and the policies themselves never block. So the
call must be admitted already (asked again after a wait), or its admission
must be toolbus's own (no pre-call hook, authorizer or masker, no injected
value's provider, arguments validated without a validator of the user's);
and every policy must `never_blocks` (a rate limit kept in memory) or keep
`BasePolicy.admit`. Anything else asks with the cascade as before, so a hook
that makes a nested call of the same tool, or a policy that waits on the
network, never strands the calls queued behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..policies._protocol import BasePolicy
from ..tools import Tool

if TYPE_CHECKING:
    from ..pipeline import Run, Services

__all__ = ["QuickAsks"]

_VALIDATOR_KINDS = ("function-before", "function-after", "function-wrap", "function-plain")


class QuickAsks:
    """The test for one tool's calls (`ToolPool.asks_quickly`): made with its
    pool, it reads the executor's hooks live and remembers the last chain of
    policies it judged (a tool's calls share their plan's)."""

    __slots__ = ("_chain", "_chain_quick", "_services", "_validation_quick")

    def __init__(self, tool: Tool, services: Services) -> None:
        self._services = services
        self._validation_quick = _validation_is_quick(tool)
        self._chain: tuple[Any, ...] | None = None
        self._chain_quick = False

    def __call__(self, run: Run) -> bool:
        if not run.admitted:
            services = self._services
            if not (self._validation_quick and services.plain_admission):
                return False
            tool = run.tool
            if tool is not None and tool.injected and services.inject:
                return False
        chain = run.policies
        if chain is not self._chain:
            self._chain_quick = all(_never_blocks(p) for p in chain)
            self._chain = chain
        return self._chain_quick


def _never_blocks(policy: Any) -> bool:
    try:
        return getattr(policy, "never_blocks", False) is True or (
            getattr(type(policy), "admit", None) is BasePolicy.admit
        )
    except Exception:  # a flag that raises: not to be trusted
        return False


def _validation_is_quick(tool: Tool) -> bool:
    """True if validating `tool`'s arguments runs no code of the user's: its
    `parse` and `validate` are toolbus's, and its model has no validator
    functions (`AfterValidator`, `field_validator`, a custom type's)."""
    kind = type(tool)
    if getattr(kind, "parse", None) is not Tool.parse:
        return False
    if getattr(kind, "validate", None) is not Tool.validate:
        return False
    params = getattr(tool, "Params", None)
    if params is None:
        return True  # a JSON schema's validator, or a custom tool's text
    try:
        return not _has_validator(params.__pydantic_core_schema__)
    except Exception:
        return False


def _has_validator(node: Any) -> bool:
    if isinstance(node, dict):
        if node.get("type") in _VALIDATOR_KINDS:
            return True
        return any(_has_validator(v) for v in node.values())
    if isinstance(node, list | tuple):
        return any(_has_validator(v) for v in node)
    return False
