"""Approvals: a call that waits for a person's decision, bound to its exact arguments.

A tool guarded by `toolbus.policies.requires_approval` does not run at first:
its call ends `deferred` (code `APPROVAL_REQUIRED`) with an `ApprovalRequest`.
Whoever decides answers with `request.approve()` or `request.deny(reason)`, and
the caller submits the same call again with that `ApprovalDecision`. The
decision names the digest of the arguments the model sent, so it approves
exactly those: a decision for other arguments, a missing one or None never
runs the call (the pydantic-ai#8060 case).

The digest is an HMAC-SHA256 under the executor's secret (its journal's, when
it has one), not a plain SHA-256: requests are published (in `tool:finished`
events, logs, a UI), and a plain hash of arguments that hold a secret of few
possible values (a PIN, a short token) gives the secret back to whoever hashes
the candidates. Keyed, it reveals nothing without the secret. So a decision
is good for the executor that asked for it, or any executor on the same
journal (after a restart too), and for no other.

A plain decision is not single-use, nor bound to the call's id: it approves a
tool and exact arguments, and whoever holds it may submit those again, as
often as they like, under any call id. Keep it as you would the permission
itself. The executor mints decisions that do more (an edit, an answer, expiry,
single use: `toolbus.decisions`).

A tool may also stop for input only a person can give (an MCP server's
question, asked while no one is there to answer): it raises
`toolbus.tools.InputRequired`, and its call ends `deferred` (code
`INPUT_REQUIRED`) with an `InputRequest`, an `ApprovalRequest` that says what
is asked. Its answers (`accept(data)`, `decline()`, `cancel()`; `approve()` is
an accept of the form as offered, `deny()` a decline) are `InputAnswer`s,
passed back as decisions are; the tool reads the answer from its context
(`ToolContext.answer`) when the call runs again. Its digest binds the tool,
the arguments and the tool's own `state` (what it needs to go on), so an
answer is good for that question of that tool's call with those arguments
and no other. Like a decision it is not single-use: sent again, it answers
again (a toolbus server lets a suspended call be resumed once; another
server may run its tool again for it).

Pure data, no threads: the models are frozen and serialisable, so a request can
be shown in a UI, stored, and answered from another process.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from . import _json

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "ExternalRequest",
    "InputAnswer",
    "InputRequest",
    "arguments_digest",
    "external_digest",
    "input_digest",
]


class ApprovalDecision(BaseModel):
    """A decision on one request: pass it back with `execute(call, approval=...)`
    or `execute_batch(calls, approvals={call_id: ...})`.

    `kind` says what it decides: `"approve"` (run the call as asked), `"deny"`
    (`reason` is what the model reads), `"edit"` (run it with `arguments`
    instead, validated again) or `"answer"` (end it with `output`, the tool
    not run). `decided_by` and `decided_at` (epoch seconds) say who decided
    and when. An edit, an answer, and any decision that `expires_at` or is
    `single_use` must be minted by the executor that asked (or another
    holding its journal): `executor.approve(request, ...)`, `deny`, `answer`;
    its `mac`, under that executor's secret, binds every field, so a
    published request is never enough to forge one (`toolbus.decisions`).
    """

    model_config = ConfigDict(frozen=True)

    digest: str
    approved: bool
    reason: str | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    arguments: dict[str, Any] | str | None = None
    answered: bool = False
    output: Any = None
    expires_at: float | None = None
    single_use: bool = False
    decision_id: str | None = None
    mac: str | None = None

    @property
    def kind(self) -> Literal["approve", "deny", "edit", "answer"]:
        """What it decides (see the class)."""
        if self.approved is not True:
            return "deny"
        if self.answered:
            return "answer"
        return "edit" if self.arguments is not None else "approve"

    @property
    def must_be_minted(self) -> bool:
        """Whether it is good only with a valid `mac` (it does more than approve or deny)."""
        return (
            self.arguments is not None
            or self.answered
            or self.expires_at is not None
            or self.single_use
        )


class ApprovalRequest(BaseModel):
    """What a deferred call asks for: `arguments_masked` is what a person
    reviews (secrets masked); `digest` binds the decision to the arguments."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    tool: str
    arguments_masked: Any = None
    digest: str

    def approve(self, *, decided_by: str | None = None) -> ApprovalDecision:
        """Approve these arguments: the call runs when submitted with this
        decision. (An edit, an answer, expiry and single use: the executor's
        `approve`, `answer`.)"""
        return ApprovalDecision(
            digest=self.digest, approved=True, decided_by=decided_by, decided_at=time.time()
        )

    def deny(self, reason: str = "denied", *, decided_by: str | None = None) -> ApprovalDecision:
        """Deny it: the call ends `rejected` (`TOOL_NOT_ALLOWED`) with `reason`."""
        return ApprovalDecision(
            digest=self.digest,
            approved=False,
            reason=reason,
            decided_by=decided_by,
            decided_at=time.time(),
        )


class InputAnswer(ApprovalDecision):
    """An answer to an `InputRequest`: what the person did (`action`) and, for
    an accept, the data they gave. Pass it back as a decision is:
    `execute(call, approval=...)` or `execute_batch(calls, approvals={call_id:
    ...})`; the tool gets it as `ToolContext.answer`.

    `approved` is always True: whatever the person answered, the call goes on
    with the answer (the tool decides what a decline means).
    """

    action: Literal["accept", "decline", "cancel"]
    data: dict[str, Any] | None = None
    state: str
    covers_approval: bool = False
    """The call had been approved when it asked: this answer carries that
    approval on (bound by the digest), so it is not asked for again."""


class InputRequest(ApprovalRequest):
    """What a call that ended `deferred` with `INPUT_REQUIRED` asks for.

    `source` says who asks (an MCP server's name); `message` is the question;
    `requested_schema` is the JSON Schema of the answer's data (a form).
    `state` is the tool's own, handed back with the answer.
    """

    source: str
    message: str
    requested_schema: dict[str, Any] | None = None
    state: str
    covers_approval: bool = False
    """The call ran under a person's approval when it asked (see `InputAnswer`)."""

    def accept(self, data: dict[str, Any] | None = None) -> InputAnswer:
        """Answer with `data` (None: the form as offered, its defaults filled
        in by whoever sends it on)."""
        return self._answer("accept", data)

    def decline(self) -> InputAnswer:
        """The person said no."""
        return self._answer("decline", None)

    def cancel(self) -> InputAnswer:
        """The person dismissed the question without answering."""
        return self._answer("cancel", None)

    def approve(self, *, decided_by: str | None = None) -> InputAnswer:
        """As `accept()`: an approval of the call is an accept of the form as offered."""
        return self.accept().model_copy(update={"decided_by": decided_by})

    def deny(self, reason: str = "denied", *, decided_by: str | None = None) -> InputAnswer:
        """As `decline()` (`reason` is not sent: MCP has no place for it)."""
        return self.decline().model_copy(update={"decided_by": decided_by})

    def _answer(self, action: str, data: dict[str, Any] | None) -> InputAnswer:
        if data is not None and not isinstance(data, dict):
            raise TypeError(f"an accept's data must be a dict or None, got {type(data).__name__}")
        return InputAnswer(
            digest=self.digest,
            approved=True,
            action=action,
            data=data,
            state=self.state,
            covers_approval=self.covers_approval,
        )


class ExternalRequest(ApprovalRequest):
    """What the call of an external tool (`@tool(external=True)`) ended
    `deferred` (`INPUT_REQUIRED`) with: its result comes from outside toolbus
    (a person, another service). Supply it with `executor.complete(request,
    output)`, or pass `executor.answer(request, output)` as the call's decision
    when it is submitted again (`run_agent`'s resume does). `mac` shows the
    executor that made it (it is checked by `complete`)."""

    mac: str = ""


# Keeps approval digests apart from the other HMACs under the same secret
# (idempotency keys): one can never be taken for the other.
_DOMAIN = b"toolbus approval\0"


def arguments_digest(tool: str, arguments: dict[str, Any] | str, *, secret: bytes) -> str:
    """HMAC-SHA256 (hex), under `secret`, of the tool's name and its canonical
    arguments as the model sent them: a JSON text is parsed first, so spacing
    and key order do not matter.

    The executor signs its requests with its own secret (its journal's, when it
    has one); keyed, a published digest does not give away the arguments, even
    a secret one of few possible values."""
    return _call_mac("arguments_digest", _DOMAIN, tool, arguments, secret).hexdigest()


_INPUT_DOMAIN = b"toolbus input\0"


_EXTERNAL_DOMAIN = b"toolbus external\0"


def external_digest(tool: str, arguments: dict[str, Any] | str, *, secret: bytes) -> str:
    """HMAC-SHA256 (hex), under `secret`, of an external tool's name and the
    call's canonical arguments: what an answer to its `ExternalRequest` names."""
    return _call_mac("external_digest", _EXTERNAL_DOMAIN, tool, arguments, secret).hexdigest()


def request_mac(request: ApprovalRequest, secret: bytes) -> str:
    """HMAC-SHA256 (hex), under `secret`, of a request's call id, tool, digest
    and masked arguments (what its completion is published with)."""
    mac = hmac.new(secret, b"toolbus request\0", hashlib.sha256)
    for part in (request.call_id, request.tool, request.digest):
        mac.update(part.encode("utf-8", "surrogatepass"))
        mac.update(b"\0")
    mac.update(_json.canonical(request.arguments_masked))
    return mac.hexdigest()


def input_digest(
    tool: str,
    arguments: dict[str, Any] | str,
    state: str,
    *,
    secret: bytes,
    covers_approval: bool = False,
) -> str:
    """HMAC-SHA256 (hex), under `secret`, of the tool's name, its canonical
    arguments, the tool's `state` and whether the call ran approved: what
    binds an `InputAnswer` to the question of one call (a state altered in
    transit, or an approval claimed, matches nothing)."""
    mac = _call_mac("input_digest", _INPUT_DOMAIN, tool, arguments, secret)
    mac.update(b"\0")
    mac.update(state.encode("utf-8", "surrogatepass"))
    if covers_approval:
        mac.update(b"\0approved")
    return mac.hexdigest()


def _call_mac(
    who: str, domain: bytes, tool: str, arguments: dict[str, Any] | str, secret: bytes
) -> hmac.HMAC:
    """An HMAC under `secret`, in `domain`, of a tool's name and canonical arguments."""
    if not isinstance(secret, bytes):
        raise TypeError(f"{who}: secret must be bytes, got {type(secret).__name__}")
    mac = hmac.new(secret, domain, hashlib.sha256)
    mac.update(tool.encode("utf-8", "surrogatepass"))
    mac.update(b"\0")
    mac.update(_json.canonical(arguments))
    return mac


def digest_matches(given: object, expected: str) -> bool:
    """Whether a decision's `given` digest is `expected`, compared in constant
    time (anything but a string matches nothing)."""
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def check_approval(value: Any, option: str = "approval") -> ApprovalDecision | None:
    """`execute(approval=...)`: None or an `ApprovalDecision`; else TypeError.

    Anything else (a dict of the same fields, a request instead of its
    decision) would only ever defer the call again, silently."""
    if value is None or isinstance(value, ApprovalDecision):
        return value
    hint = (
        " (pass request.approve() or request.deny(...))"
        if isinstance(value, ApprovalRequest)
        else ""
    )
    raise TypeError(
        f"{option} must be an ApprovalDecision or None, got {type(value).__name__}{hint}"
    )


def check_approvals(value: Any) -> Mapping[str, ApprovalDecision | None]:
    """`execute_batch(approvals=...)`: None or a mapping of call ids to
    decisions (or None); else TypeError naming `approvals`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(
            "approvals must be a mapping of call ids to ApprovalDecision, got "
            f"{type(value).__name__}"
        )
    for call_id, decision in value.items():
        check_approval(decision, f"approvals[{call_id!r}]")
    return value
