"""Decisions beyond yes and no, minted under an executor's secret.

A plain approval or denial names the digest of the arguments it decides
(`ApprovalRequest.approve()`), and that is enough: it can only ever run the
call that was asked about. An edit (run the call with other arguments) or an
answer (end it with an output, the tool not run) could run anything, and a
decision that expires or is single use could be replayed with those fields
stripped; so those are good only when minted by the executor that asked (or
another process holding its journal, whose secret it shares): `mint` makes
one with an HMAC over all its fields (`mac`), `verify` checks it in constant
time. Seeing a published request, or a decision, is never enough to forge one.

Pure: minting reads the clock and draws an id; the rest is a function of the
decision and the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
import uuid
from typing import Any

from . import _json
from .approvals import ApprovalDecision, ApprovalRequest, ExternalRequest, InputRequest

__all__ = ["Minting", "decision_mac", "mint", "must_be_minted", "verify"]

# Keeps decision MACs apart from every other HMAC under the same secret.
_DOMAIN = b"toolbus decision\0"


def decision_mac(decision: ApprovalDecision, secret: bytes) -> str:
    """HMAC-SHA256 (hex), under `secret`, of every field of `decision` but its `mac`."""
    if not isinstance(secret, bytes):
        raise TypeError(f"decision_mac: secret must be bytes, got {type(secret).__name__}")
    fields = decision.model_dump(mode="json", exclude={"mac"})
    fields["_type"] = type(decision).__name__
    return hmac.new(secret, _DOMAIN + _json.canonical(fields), hashlib.sha256).hexdigest()


def verify(decision: ApprovalDecision, secret: bytes) -> bool:
    """Whether `decision` carries the MAC `secret` gives it (constant time);
    False for one whose fields cannot even be read as a decision's."""
    given = decision.mac
    if not isinstance(given, str):
        return False
    try:
        expected = decision_mac(decision, secret)
    except Exception:  # a model_construct'ed one with fields no decision has
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def mint(
    request: ApprovalRequest,
    secret: bytes,
    *,
    approved: bool = True,
    reason: str | None = None,
    arguments: dict[str, Any] | str | None = None,
    answered: bool = False,
    output: Any = None,
    decided_by: str | None = None,
    expires_in: float | None = None,
    single_use: bool = False,
    where: str = "decision",
) -> ApprovalDecision:
    """A decision on `request`, signed with `secret`. Checked here, with a
    `TypeError` or `ValueError` naming `where`: `arguments` a JSON object,
    `output` JSON-able, `expires_in` a number of seconds > 0, an edit or an
    answer only for an approval request (a question's answer is the
    request's own `accept`)."""
    if not isinstance(request, ApprovalRequest):
        kind = type(request).__name__
        raise TypeError(f"{where}: request must be an ApprovalRequest, got {kind}")
    if isinstance(request, InputRequest):
        raise TypeError(f"{where}: a question (InputRequest) is answered with its accept/decline")
    if isinstance(request, ExternalRequest) and (
        arguments is not None or (approved and not answered)
    ):
        raise TypeError(
            f"{where}: an external tool's request is answered (answer) or refused (deny): "
            "its tool never runs"
        )
    if arguments is not None:
        if not isinstance(arguments, dict | str):
            raise TypeError(
                f"{where}: arguments must be a dict (a free-text tool's: a string), "
                f"got {type(arguments).__name__}"
            )
        _json_able(arguments, "arguments", where)
    if answered:
        _json_able(output, "output", where)
    if decided_by is not None and not isinstance(decided_by, str):
        raise TypeError(f"{where}: decided_by must be a string, got {type(decided_by).__name__}")
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"{where}: reason must be a string, got {type(reason).__name__}")
    now = time.time()
    expires_at = None
    if expires_in is not None:
        if (
            isinstance(expires_in, bool)
            or not isinstance(expires_in, int | float)
            or not math.isfinite(expires_in)
            or expires_in <= 0
        ):
            raise ValueError(f"{where}: expires_in must be seconds > 0, got {expires_in!r}")
        expires_at = now + float(expires_in)
    if not isinstance(single_use, bool):
        raise TypeError(f"{where}: single_use must be True or False, got {single_use!r}")
    decision = ApprovalDecision(
        digest=request.digest,
        approved=approved,
        reason=reason,
        decided_by=decided_by,
        decided_at=now,
        arguments=arguments,
        answered=answered,
        output=output if answered else None,
        expires_at=expires_at,
        single_use=single_use,
        decision_id=uuid.uuid4().hex,
    )
    return decision.model_copy(update={"mac": decision_mac(decision, secret)})


def _json_able(value: Any, name: str, where: str) -> None:
    try:
        _json.dumps(value)
    except (TypeError, ValueError) as e:  # orjson's JSONEncodeError is a TypeError
        why = str(e)
        if _json.SURROGATES in why:
            # Unlike a tool's output (or `complete`'s), which is kept as it is:
            # a decision is a signed record, made to be sent and stored as
            # JSON, and UTF-8 cannot hold the character.
            why = (
                "a string holds a lone surrogate, such as a file name decoded with "
                "surrogateescape, which a decision, sent and stored as JSON, cannot carry"
            )
        raise TypeError(f"{where}: {name} must be JSON values ({why})") from None


def must_be_minted(decision: ApprovalDecision) -> bool:
    """Whether `decision` is good only with a valid `mac`, read from its
    fields (not from anything a subclass of it may say of itself)."""
    return ApprovalDecision.must_be_minted.fget(decision)  # type: ignore[attr-defined,no-any-return]


class Minting:
    """`approve`, `deny` and `answer`: decisions minted under one secret (an
    executor's, or its journal's, which every executor on the journal takes)."""

    # Who mints, for the errors: "Executor" or "Journal".
    _minter = "decisions"

    def _decision_secret(self) -> bytes:
        raise NotImplementedError

    def approve(
        self,
        request: ApprovalRequest,
        *,
        arguments: dict[str, Any] | str | None = None,
        decided_by: str | None = None,
        expires_in: float | None = None,
        single_use: bool = False,
    ) -> ApprovalDecision:
        """Approve `request`'s call; with `arguments`, approve it with those
        instead (an edit: validated, authorized and masked again when the call
        is submitted with the decision; a free-text tool's, a string).
        `expires_in` seconds from now it ends `DECISION_EXPIRED`; `single_use`:
        it runs one call (a second use ends `DECISION_EXPIRED`). Off by
        default: a plain approval is good for every call of the same tool and
        arguments, as `request.approve()` is."""
        return mint(
            request,
            self._decision_secret(),
            arguments=arguments,
            decided_by=decided_by,
            expires_in=expires_in,
            single_use=single_use,
            where=f"{self._minter}.approve",
        )

    def deny(
        self, request: ApprovalRequest, reason: str = "denied", *, decided_by: str | None = None
    ) -> ApprovalDecision:
        """Deny `request`'s call: it ends `rejected` (`TOOL_NOT_ALLOWED`), the
        model reading `reason`."""
        return mint(
            request,
            self._decision_secret(),
            approved=False,
            reason=reason,
            decided_by=decided_by,
            where=f"{self._minter}.deny",
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
            self._decision_secret(),
            answered=True,
            output=output,
            decided_by=decided_by,
            expires_in=expires_in,
            single_use=single_use,
            where=f"{self._minter}.answer",
        )
