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


@contextlib.contextmanager
def launched(path: Path, name: str) -> Iterator[Path]:
    """DBOS launched on an SQLite file at `path` (app `name`), destroyed after."""
    from dbos import DBOS

    DBOS.destroy(destroy_registry=True)
    DBOS(config={"name": name, "system_database_url": f"sqlite:///{path}", "log_level": "ERROR"})
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
