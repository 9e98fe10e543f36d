"""Policies: what is decided about a call before it runs, composed like tenacity strategies.

Built in: `rate_limit`, `quota`, `circuit_breaker` (docs/policies.md).
Give them to one tool (`@registry.tool(policies=[...])`) or to every tool
(`Executor(policies=[...])`). See `_protocol.py` for when each part is asked,
and docs/extending.md for writing one.
"""

from ..approvals import ApprovalDecision, ApprovalRequest, arguments_digest
from ._breaker import CircuitBreaker, circuit_breaker
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
from ._quota import Quota, quota
from ._rate_limit import RateLimit, rate_limit
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
    "CircuitBreaker",
    "CircuitChanged",
    "Decision",
    "Delay",
    "Policy",
    "Quota",
    "RateLimit",
    "Reject",
    "RequireApproval",
    "Respond",
    "Throttled",
    "announce",
    "arguments_digest",
    "call_timeout",
    "circuit_breaker",
    "quota",
    "rate_limit",
]
