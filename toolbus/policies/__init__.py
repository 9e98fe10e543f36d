"""Policies: what is decided about a call before it runs, composed like tenacity strategies.

Give them to one tool (`@registry.tool(policies=[...])`) or to every tool
(`Executor(policies=[...])`). See `_protocol.py` for when each part is asked,
and docs/extending.md for writing one.
"""

from ..approvals import ApprovalDecision, ApprovalRequest, arguments_digest
from ._approve import requires_approval
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

__all__ = [
    "CACHE_HIT",
    "CIRCUIT_CLOSED",
    "CIRCUIT_HALF_OPEN",
    "CIRCUIT_OPEN",
    "THROTTLED",
    "Admit",
    "ApprovalDecision",
    "ApprovalRequest",
    "BasePolicy",
    "CacheHit",
    "CircuitChanged",
    "Decision",
    "Delay",
    "Policy",
    "Reject",
    "RequireApproval",
    "Respond",
    "Throttled",
    "announce",
    "arguments_digest",
    "call_timeout",
    "requires_approval",
]
