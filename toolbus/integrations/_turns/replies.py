"""What the agent loop records in a durable engine besides calls: the model's
responses and the approver's answers (`toolbus.providers._steps.Steps`).

A model response is recorded as what the SDK sends back of it (`plain`), as
JSON: the loop then reads that JSON on the first run and after a recovery
alike, so both build the same conversation. An approver's answers are
recorded as what each decided, not the decisions themselves (each bound by
its digest to the process that asked): after a recovery the question is asked
again, and the recorded answer applied to it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from ...approvals import ApprovalDecision, ApprovalRequest, InputAnswer, InputRequest
from ...providers._approvals import decision
from ...providers._common import plain
from .records import VERSION

__all__ = ["ModelCallFailed", "answers_record", "read_answers", "read_record", "reply_record"]


class ModelCallFailed(Exception):
    """The model's API failed inside a durable run. The engine records this
    (the SDK error's type and message), not the SDK's own exception, which
    holds the request: the whole conversation. The SDK's error is its
    `__cause__`, in the process it happened in."""


def _dumps(data: Any) -> str:
    """`data` as JSON text. A lone surrogate (a model's JSON `"\\udce9"`
    decodes to one), which orjson refuses, is written escaped by the stdlib,
    and `read_record` takes it back: the loop reads what the plain loop
    would have read."""
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        try:
            return json.dumps(data)
        except ValueError:  # (a cycle: the first error says what)
            pass
        raise


def reply_record(reply: Any) -> str:
    """The model's response as recorded: what the SDK sends back of it (`plain`:
    its wire names, without SDK-only fields), as JSON."""
    try:
        return _dumps({"toolbus": VERSION, "reply": plain(reply)})
    except TypeError as e:
        raise TypeError(
            f"the model's response ({type(reply).__name__}) cannot be recorded as JSON: {e}"
        ) from None


def answers_record(requests: Sequence[ApprovalRequest], answers: Sequence[Any]) -> str:
    """The approver's answers as recorded: what each decided, not the decision
    itself (bound by its digest to the process that asked: after a recovery
    the question is asked again, and the answer applied to it)."""
    shown: list[dict[str, Any]] = []
    for request, answer in zip(requests, answers, strict=True):
        if isinstance(answer, InputAnswer):
            shown.append({"input": answer.action, "data": answer.data})
        elif isinstance(answer, ApprovalDecision):
            # A decision on other arguments (another request's digest) decides
            # nothing here: recorded as such, it is refused again on replay.
            shown.append(
                {
                    "approved": answer.approved,
                    "reason": answer.reason,
                    "matches": answer.digest == request.digest,
                }
            )
        elif isinstance(answer, bool):
            shown.append({"approved": answer, "reason": None})
        else:  # denied, as the loop denies it (and logs why)
            shown.append({"approved": False, "reason": decision(request, answer).reason})
    return _dumps({"toolbus": VERSION, "answers": shown})


def read_record(record: Any, key: str) -> Any:
    data = None
    if isinstance(record, str):
        try:
            data = orjson.loads(record)
        except orjson.JSONDecodeError:
            data = json.loads(record)  # (a lone surrogate's escape: see `_dumps`)
    if not isinstance(data, dict) or key not in data:
        raise ValueError(f"not a toolbus record of {key}")
    if data.get("toolbus", 0) > VERSION:
        raise ValueError(f"this step was recorded by a newer toolbus (version {data['toolbus']})")
    return data[key]


def read_answers(requests: Sequence[ApprovalRequest], record: Any) -> list[Any]:
    """The recorded answers, applied to `requests` (asked again after a recovery)."""
    answers: list[Any] = []
    for request, a in zip(requests, read_record(record, "answers"), strict=True):
        if "input" in a:
            if not isinstance(request, InputRequest):
                answers.append(request.deny("the recorded answer was to another question"))
            elif a["input"] == "accept":
                answers.append(request.accept(a.get("data")))
            elif a["input"] == "decline":
                answers.append(request.decline())
            else:
                answers.append(request.cancel())
        elif a.get("matches") is False:  # a decision on other arguments, as it was
            answers.append(
                ApprovalDecision(digest="", approved=bool(a["approved"]), reason=a.get("reason"))
            )
        elif a["approved"]:
            answers.append(True)
        else:
            answers.append(request.deny(a["reason"]) if a.get("reason") else False)
    return answers
