"""What toolbus writes into a durable engine for a call, and how it reads it back.

A call inside a workflow (DBOS) or a handler (Restate) takes one step,
`toolbus:<tool>`, whose output is the result the model read (`ToolResult` as
JSON text). A mutating call that is not idempotent takes a step before it,
`toolbus-intent:<tool>`, whose output names the call and its key: recorded
before the tool runs, it is what says, after a crash, that the call may have
run. Neither holds the call's arguments: an engine keeps step outputs for as
long as the run, and the arguments may hold secrets. (The run's own inputs
are the user's to mask.)

Both are JSON text, not objects for an engine's serializer, so a record reads
the same in any process and any later version of toolbus (`VERSION`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

import orjson

from ... import _json
from ...agent_runs import MAX_LENGTH as MAX_RUN_LENGTH
from ...journal._encode import bindable, result_json
from ...models import MAX_KEY_LENGTH, ToolResult

__all__ = [
    "VERSION",
    "call_key",
    "intent_record",
    "read_result",
    "result_record",
    "run_name",
    "step_name",
    "was_reasked",
]

VERSION = 1


def step_name(tool: str, *, intent: bool = False) -> str:
    """The step name of a call of `tool` (or of its intent). The engine checks
    it on replay: a run that asks for other calls than it did fails there.
    A lone surrogate in the name (a model's JSON `"\\udc80"`), which an
    engine's UTF-8 cannot hold, is written as its escape (`bindable`), and
    so is NUL (`"\\u0000"`), which Postgres's text cannot hold (`\\x00`)."""
    name = bindable(tool).replace("\x00", "\\x00")
    return f"toolbus-intent:{name}" if intent else f"toolbus:{name}"


def call_key(engine: str, run_id: str, position: int) -> str:
    """The idempotency key of the call at `position` of the run `run_id` (a
    DBOS workflow, a Restate invocation): the same for its first run and any
    run after a recovery."""
    key = f"{engine}:{run_id}:{position}"
    if len(key) <= MAX_KEY_LENGTH and key.isprintable():
        return key
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{engine}:sha256:{digest}:{position}"


def run_name(engine: str, run_id: str) -> str:
    """The agent run of the run `run_id` (a DBOS workflow, a Restate
    invocation): `<engine>:<run_id>`, the same on every run of it; an id too
    long for an agent run's name is hashed into it (never cut: two ids that
    differ only past the cut would share one run, its limits and halts)."""
    name = f"{engine}:{run_id}"
    if len(name) <= MAX_RUN_LENGTH:
        return name
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{engine}:sha256:{digest}"


def intent_record(call_id: str, tool: str, key: str, *, reasked: bool = False) -> str:
    """A call's intent: its tool is about to run. `reasked`: the call's result
    step holds a `deferred` result of an earlier run, and it was asked again.
    Lone surrogates (which JSON's UTF-8 cannot hold) are written escaped."""
    data: dict[str, Any] = {
        "toolbus": VERSION,
        "intent": bindable(tool),
        "call_id": bindable(call_id),
        "key": bindable(key),
    }
    if reasked:
        data["reasked"] = True
    return orjson.dumps(data).decode()


def was_reasked(record: Any) -> bool:
    """Whether an intent record says its call was asked again (see `intent_record`)."""
    if not isinstance(record, str):
        return False
    try:
        data = orjson.loads(record)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("reasked") is True


def result_record(result: ToolResult) -> str:
    """`result` as recorded: JSON text. What orjson cannot write (a lone
    surrogate: bytes decoded with `surrogateescape`; an integer past 64 bits)
    is written as the journal writes it (`result_json`): the surrogate as an
    escape (`\\udce9`), which `read_result` reads back as the character, so
    a replay gives the model the output it read the first time (one caveat:
    two lone surrogates that together make a UTF-16 pair come back as that
    one character). An output even that cannot write (a cycle) is recorded
    as its text: the record is always written."""
    # Python's dump, not pydantic's JSON one: that writes a metadata key
    # holding a lone surrogate as three U+FFFD, silently.
    try:
        return orjson.dumps({"toolbus": VERSION, "result": result.model_dump()}).decode()
    except Exception:  # any serializer's failure: the journal's writing, rare
        pass
    text, _ = result_json(result, sys.maxsize)
    if not text.startswith("{"):  # (its "<not JSON: ...>")
        shown = result.model_copy(update={"output": _text(result.output)})
        text, _ = result_json(shown, sys.maxsize)
    return f'{{"toolbus":{VERSION},"result":{text}}}'


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def read_result(record: Any) -> ToolResult:
    """The result recorded by `result_record`, marked replayed
    (`metadata["replayed"]`, `attempts` 0: it did not run now)."""
    if not isinstance(record, str):
        raise ValueError(f"not a toolbus record: {type(record).__name__}")
    try:
        data = _json.loads(record)
    except orjson.JSONDecodeError:
        # Written as the journal writes: a lone surrogate's escape, which the
        # stdlib reads back as the character (orjson refuses it).
        data = json.loads(record)
    if not isinstance(data, dict) or "result" not in data:
        raise ValueError("not a toolbus call record")
    if data.get("toolbus", 0) > VERSION:
        raise ValueError(
            f"this call was recorded by a newer toolbus (record version {data['toolbus']})"
        )
    result = ToolResult.model_validate(data["result"])
    return result.model_copy(
        update={"metadata": {**result.metadata, "replayed": True}, "attempts": 0}
    )
