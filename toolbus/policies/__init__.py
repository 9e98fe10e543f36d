"""Policies: what is decided about a call before it runs, composed like tenacity strategies.

Give them to one tool (`@registry.tool(policies=[...])`) or to every tool
(`Executor(policies=[...])`). See `_protocol.py` for when each part is asked,
and docs/extending.md for writing one.
"""

from ..approvals import ApprovalDecision, ApprovalRequest, arguments_digest
from ._adaptive import AdaptiveTimeout, adaptive_timeout
from ._approve import requires_approval
from ._cache import Cache, cache
from ._protocol import (
    Admit,
    BasePolicy,
    Decision,
    Delay,
    Policy,
    Reject,
    RequireApproval,
    Respond,
)
from ._signals import (
    CACHE_HIT,
    CIRCUIT_CLOSED,
    CIRCUIT_HALF_OPEN,
    CIRCUIT_OPEN,
    THROTTLED,
    CacheHit,
    CircuitChanged,
    Throttled,
    announce,
    call_timeout,
)
from ._spill import Spill, spill

__all__ = [
    "CACHE_HIT",
    "CIRCUIT_CLOSED",
    "CIRCUIT_HALF_OPEN",
    "CIRCUIT_OPEN",
    "THROTTLED",
    "AdaptiveTimeout",
    "Admit",
    "ApprovalDecision",
    "ApprovalRequest",
    "BasePolicy",
    "Cache",
    "CacheHit",
    "CircuitChanged",
    "Decision",
    "Delay",
    "Policy",
    "Reject",
    "RequireApproval",
    "Respond",
    "Spill",
    "Throttled",
    "adaptive_timeout",
    "announce",
    "arguments_digest",
    "cache",
    "call_timeout",
    "requires_approval",
    "spill",
]
