"""What the DBOS tests share: DBOS launched on SQLite for a module, its cells
read back, and a
scripted model (Chat Completions, for the real `openai` client over a mock
transport) whose turns depend only on the conversation so far."""

from __future__ import annotations

import base64
import contextlib
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2

Turns = list[list[tuple[str, dict[str, Any]]]]

POLL = 0.05
"""How often DBOS looks, in the tests, for what it polls for (every second by
default): a forked or recovered workflow in its internal queue, a workflow's
result asked through a handle (`get_result(polling_interval_sec=POLL)`), and
its notification listener's flag (which `DBOS.destroy` waits on). How soon
an awaited state is seen, never whether: each is still waited for."""


def config(name: str, url: str) -> dict[str, Any]:
    """The DBOS config of a test's app `name` on the system database at `url`."""
    return {
        "name": name,
        "system_database_url": url,
        "log_level": "ERROR",
        "notification_listener_polling_interval_sec": POLL,
    }


def poll_queue_often() -> None:
    """DBOS's internal queue (a forked or recovered workflow is run from it)
    polled every `POLL` seconds, not every second. Its interval is no option
    of DBOS's: a private attribute, left alone if a DBOS release renames it
    (the tests are then only slower). Call it after `DBOS(config=...)`."""
    try:
        from dbos._dbos import _get_or_create_dbos_registry

        queue = _get_or_create_dbos_registry().get_internal_queue()
    except (ImportError, AttributeError):
        return
    if isinstance(getattr(queue, "_polling_interval_sec", None), float):
        queue._polling_interval_sec = POLL


@contextlib.contextmanager
def launched(path: Path, name: str) -> Iterator[Path]:
    """DBOS launched on an SQLite file at `path` (app `name`), destroyed after."""
    from dbos import DBOS

    DBOS.destroy(destroy_registry=True)
    DBOS(config=config(name, f"sqlite:///{path}"))
    poll_queue_often()
    DBOS.launch()
    try:
        yield path
    finally:
        DBOS.destroy(destroy_registry=True)


def steps_of(workflow_id: str) -> list[tuple[int, str]]:
    """The workflow's recorded steps: (position, name)."""
    from dbos import DBOS

    return [(s["function_id"], s["function_name"]) for s in DBOS.list_workflow_steps(workflow_id)]


def call(cid: str, name: str, **args: Any) -> Any:
    """A `ToolCall` of `name` with `args`."""
    from toolbus import ToolCall

    return ToolCall(id=cid, name=name, arguments=args)


def readable(cell: Any) -> str:
    """A cell as text, DBOS's own encoding undone: step outputs are pickled,
    then base64 (a secret inside would not show in the raw text)."""
    text = repr(cell)
    if isinstance(cell, str):
        try:
            text += repr(pickle.loads(base64.b64decode(cell, validate=True)))
        except Exception:
            pass
    return text


def model_reply(turns: Turns, request: httpx2.Request, answer: str = "done") -> httpx2.Response:
    """The model's next turn: the calls of `turns[n]` for the nth turn, then `answer`."""
    turn = sum(1 for m in json.loads(request.content)["messages"] if m["role"] == "assistant")
    message: dict[str, Any] = {"role": "assistant", "content": answer}
    if turn < len(turns):
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{turn}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(turns[turn])
            ],
        }
    return httpx2.Response(
        200,
        json={
            "id": f"chatcmpl-{turn}",
            "object": "chat.completion",
            "created": 1_800_000_000,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        },
    )
