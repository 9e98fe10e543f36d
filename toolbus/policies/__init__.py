"""Policies: what is decided about a call before it runs, composed like tenacity strategies.

Built in: `rate_limit`, `quota`, `run_limit`, `guardrail`, `circuit_breaker`, `cache`, `spill`,
`adaptive_timeout`, `requires_approval` (docs/policies.md).
Give them to one tool (`@registry.tool(policies=[...])`) or to every tool
(`Executor(policies=[...])`). See `_protocol.py` for when each part is asked,
and docs/extending.md for writing one.
"""

from ..approvals import ApprovalDecision, ApprovalRequest, arguments_digest
from ._adaptive import AdaptiveTimeout, adaptive_timeout
from ._approve import requires_approval
from ._breaker import CircuitBreaker, circuit_breaker
from ._cache import Cache, cache
from ._guardrail import (
    GUARDRAIL_TRIPPED,
    Guardrail,
    GuardrailTripped,
    Pass,
    Refuse,
    Replace,
    Trip,
    Verdict,
    guardrail,
)
from ._protocol import (
    Admit,
    BasePolicy,
    Decision,
    Delay,
    Halt,
    Policy,
    Reject,
    RequireApproval,
    Respond,
)
from ._quota import Quota, quota
from ._rate_limit import RateLimit, rate_limit
from ._run_limit import RunLimit, run_limit
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
    scrub,
    time_left,
)
from ._spill import Spill, spill

__all__ = [
    "CACHE_HIT",
    "CIRCUIT_CLOSED",
    "CIRCUIT_HALF_OPEN",
    "CIRCUIT_OPEN",
    "GUARDRAIL_TRIPPED",
    "THROTTLED",
    "AdaptiveTimeout",
    "Admit",
    "ApprovalDecision",
    "ApprovalRequest",
    "BasePolicy",
    "Cache",
    "CacheHit",
    "CircuitBreaker",
    "CircuitChanged",
    "Decision",
    "Delay",
    "Guardrail",
    "GuardrailTripped",
    "Halt",
    "Pass",
    "Policy",
    "Quota",
    "RateLimit",
    "Refuse",
    "Reject",
    "Replace",
    "RequireApproval",
    "Respond",
    "RunLimit",
    "Spill",
    "Throttled",
    "Trip",
    "Verdict",
    "adaptive_timeout",
    "announce",
    "arguments_digest",
    "cache",
    "call_timeout",
    "circuit_breaker",
    "guardrail",
    "quota",
    "rate_limit",
    "requires_approval",
    "run_limit",
    "scrub",
    "spill",
    "time_left",
]
