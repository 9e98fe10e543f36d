"""`requires_approval`: the call does not run until a person approves its arguments."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..models import ToolCall
from ._protocol import ADMIT, BasePolicy, Decision, RequireApproval

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["requires_approval"]

log = logging.getLogger("toolbus")


# Lower case, as tenacity names its strategy classes: it reads as a call in a list.
class requires_approval(BasePolicy):
    """Every call (or those for which `when(call)` is not False; `when` may be
    async) waits for an approval of its exact arguments. `when` answers True
    or False: anything else (None, "no", 0) is a mistake, logged, and the call
    needs approval.

    Without one the call ends `deferred` with an `ApprovalRequest`
    (`result.approval_request`); with `request.approve()` passed back it runs;
    with `request.deny(reason)` it ends `rejected` (`TOOL_NOT_ALLOWED`). A
    decision for other arguments, or None, never runs it.
    """

    name = "requires_approval"
    # Asked before every other policy, the executor's included: a cache must
    # not answer, nor a limit count, a call that nobody approved.
    first = True

    def __init__(
        self,
        when: Callable[[ToolCall], bool | Awaitable[bool]] | None = None,
        *,
        reason: str = "",
    ) -> None:
        if when is not None and not callable(when):
            raise TypeError(f"requires_approval: when must be callable, got {when!r}")
        if not isinstance(reason, str):
            raise TypeError(f"requires_approval: reason must be a string, got {reason!r}")
        self.when = when
        self.reason = reason
        self._needed = RequireApproval(reason)

    def admit(self, call: ToolCall, tool: Tool, now: float) -> Decision | Awaitable[Decision]:
        if self.when is None:
            return self._needed
        needed = self.when(call)
        if inspect.isawaitable(needed):
            return self._decide_later(call, needed)
        return self._decide(call, needed)

    async def _decide_later(self, call: ToolCall, needed: Awaitable[Any]) -> Decision:
        return self._decide(call, await needed)

    def _decide(self, call: ToolCall, needed: Any) -> Decision:
        """Only False lets the call go without approval: True, and anything
        that is not a bool (None, "no", 0, an object), requires it."""
        if needed is False:
            return ADMIT
        if needed is not True:
            log.warning(
                "requires_approval: when returned %s, not True/False, for call %s of '%s': "
                "approval is required",
                type(needed).__name__,
                call.id,
                call.name,
            )
        return self._needed
