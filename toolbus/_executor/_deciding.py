"""Decisions an executor mints on the approval requests it made.

`request.approve()` and `request.deny(...)` need nobody's secret: they can
only run, or refuse, the call that was asked about. An edit, an answer in the
tool's place, and a decision that expires or is used once are minted here,
under the executor's secret (its journal's, when it has one, so another
process on the same journal mints decisions this one takes): see
`toolbus.decisions`.
"""

from __future__ import annotations

from typing import Any

from ..approvals import ApprovalDecision, ApprovalRequest
from ..decisions import mint
from ..pipeline import Services

__all__ = ["Deciding"]


class Deciding:
    """The part of `Executor` that mints decisions and lists what waits for one."""

    _services: Services

    def pending(self) -> list[ApprovalRequest]:
        """The requests calls ended `deferred` with that wait for a decision,
        oldest first (masked, as published). With a journal, every process's
        on it, kept across restarts; without, this executor's (the last 10 000)."""
        return list(self._services.pending.list())

    def approve(
        self,
        request: ApprovalRequest,
        *,
        arguments: dict[str, Any] | None = None,
        decided_by: str | None = None,
        expires_in: float | None = None,
        single_use: bool = False,
    ) -> ApprovalDecision:
        """Approve `request`'s call; with `arguments`, approve it with those
        instead (an edit: validated, authorized and masked again when the call
        is submitted with the decision). `expires_in` seconds from now it ends
        `DECISION_EXPIRED`; `single_use`: it runs one call (a second use ends
        `DECISION_EXPIRED`). Off by default: a plain approval is good for every
        call of the same tool and arguments, as `request.approve()` is."""
        return mint(
            request,
            self._services.key_secret,
            arguments=arguments,
            decided_by=decided_by,
            expires_in=expires_in,
            single_use=single_use,
            where="Executor.approve",
        )

    def deny(
        self, request: ApprovalRequest, reason: str = "denied", *, decided_by: str | None = None
    ) -> ApprovalDecision:
        """Deny `request`'s call: it ends `rejected` (`TOOL_NOT_ALLOWED`), the
        model reading `reason`."""
        return mint(
            request,
            self._services.key_secret,
            approved=False,
            reason=reason,
            decided_by=decided_by,
            where="Executor.deny",
        )

    def answer(
        self,
        request: ApprovalRequest,
        output: Any,
        *,
        decided_by: str | None = None,
        expires_in: float | None = None,
        single_use: bool = False,
    ) -> ApprovalDecision:
        """Answer `request`'s call with `output` in its tool's place: it ends
        `ok` with that output (`attempts` 0, `metadata["decision"] ==
        "answer"`), the tool not run. The output must fit the tool's output
        schema, if it has one (checked when the call comes with it)."""
        return mint(
            request,
            self._services.key_secret,
            answered=True,
            output=output,
            decided_by=decided_by,
            expires_in=expires_in,
            single_use=single_use,
            where="Executor.answer",
        )
