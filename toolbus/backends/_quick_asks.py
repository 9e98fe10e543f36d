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

# The schema nodes pydantic validates in Rust, calling nothing of the user's
# (an enum's `_missing_`, a dataclass's `__post_init__`, a default factory, a
# nested model's hooks or a validator function would): anything else, and the
# arguments are not known to validate quickly.
_PLAIN_NODES = frozenset(
    {"any", "bool", "bytes", "default", "dict", "float", "frozenset", "int", "list",
     "literal", "model-field", "model-fields", "none", "nullable", "set", "str",
     "tuple", "union"}
)  # fmt: skip


class QuickAsks:
    """The test for one tool's calls (`ToolPool.asks_quickly`): made with its
    pool, it reads the executor's hooks live and remembers the last chain of
    policies it judged (a tool's calls share their plan's)."""

    __slots__ = ("_chain", "_chain_quick", "_params", "_params_quick", "_services")

    def __init__(self, tool: Tool, services: Services) -> None:
        self._services = services
        self._params: Any = _UNSEEN  # the model last judged, and what it was judged
        self._params_quick = False
        self._chain: tuple[Any, ...] | None = None
        self._chain_quick = False

    def __call__(self, run: Run) -> bool:
        if not run.admitted:
            services = self._services
            tool = run.tool
            if not services.plain_admission or tool is None:
                return False
            if tool.injected and services.inject:
                return False
            own = getattr(tool, "__dict__", ())
            if "parse" in own or "validate" in own:  # set on the tool itself
                return False
            if type(tool).parse is not Tool.parse or type(tool).validate is not Tool.validate:
                return False
            params = tool.Params
            if params is not self._params:  # (a tool's model can be set anew)
                self._params_quick = _validates_plainly(params)
                self._params = params
            if not self._params_quick:
                return False
        chain = run.policies
        if chain is not self._chain:
            self._chain_quick = all(_never_blocks(p) for p in chain)
            self._chain = chain
        return self._chain_quick


def _never_blocks(policy: Any) -> bool:
    try:
        if "admit" in getattr(policy, "__dict__", ()):
            return False  # an `admit` set on the object itself: nothing is known of it
        return getattr(policy, "never_blocks", False) is True or (
            getattr(type(policy), "admit", None) is BasePolicy.admit
        )
    except Exception:  # a flag that raises: not to be trusted
        return False


_UNSEEN = object()


def _validates_plainly(params: Any) -> bool:
    """True if validating arguments against `params` (a tool's pydantic model,
    or None: a JSON schema's validator, or a custom tool's text) runs no code
    of the user's: the model's schema holds plain nodes only."""
    if params is None:
        return True
    try:
        schema = params.__pydantic_core_schema__
        if schema.get("type") != "model" or "post_init" in schema:
            return False
        return _plain(schema["schema"])
    except Exception:
        return False


def _plain(node: Any) -> bool:
    if isinstance(node, dict):
        kind = node.get("type")
        if kind is not None and (kind not in _PLAIN_NODES or "default_factory" in node):
            return False
        return all(_plain(v) for v in node.values())
    if isinstance(node, list | tuple):
        return all(_plain(v) for v in node)
    return True
