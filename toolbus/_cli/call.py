"""`toolbus call module:registry TOOL --args JSON`: run one call through an
Executor; print its events and its result.

What it prints comes from the tool (its output, its errors) and from the
events: in text, every control character is written as `\\xNN`
(`for_terminal`), so a sequence a tool's text carries never reaches the
terminal; --json escapes them as JSON does (`write_json`).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from rich.table import Table
from rich.text import Text

from .. import _json, bus
from .._executor._plan import unknown_tool_message as _unknown_tool_message
from .._text import encodable, for_terminal
from ..executor import Executor
from ..formatting import format_result_for_context
from ..models import ToolCall, ToolResult
from ._common import EXIT_FAILED, EXIT_OK, console, load, usage_error, write_json

__all__ = ["call", "event_fields"]

# Fields every per-call event has; a line shows the rest.
_COMMON = frozenset({"seq", "timestamp", "call_id", "tool", "batch_id"})


def call(
    registry: Annotated[
        str,
        typer.Argument(
            help="The registry, as module:attribute (a ToolRegistry, or a function returning one)."
        ),
    ],
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    args: Annotated[
        str,
        typer.Option(
            "--args",
            "-a",
            help="The arguments, as a JSON object (as a model would send them), or the raw "
            "text for a free-text tool; '-' reads them from stdin.",
        ),
    ] = "{}",
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Seconds per attempt, unless the tool sets its own (0: none). "
            "Default: the Executor's, 30.",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print one JSON object, {result, events}, instead of text."),
    ] = False,
) -> None:
    """Run one call through an Executor, as an agent would; print its events and its
    result. Exit 0 when the call ended ok, 1 when it did not."""
    tools = load("call", registry)
    found = tools.get(tool)
    if found is None:
        usage_error("call", _unknown_tool_message(tool, tools.names()))
    text = sys.stdin.read() if args == "-" else args
    # A free-text (custom) tool takes the model's raw text as it is.
    arguments: dict[str, Any] | str = text if found.type == "custom" else _arguments(text)
    options: dict[str, Any] = {} if timeout is None else {"timeout": timeout or None}
    with Executor(tools, **options) as executor, bus.Recorder(sender=executor) as recorder:
        result = executor.execute(ToolCall(name=tool, arguments=arguments))
        executor.drain_events()
        events = sorted(recorder.events, key=lambda item: item[1].seq)
    if as_json:
        write_json(
            {
                "result": _jsonable(result),
                "events": [{"signal": name, **event_fields(e)} for name, e in events],
            }
        )
    else:
        _print(result, events)
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FAILED)


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = _json.loads(text)  # (as the executor reads a model's: integers of any size)
    except _json.JSONDecodeError as e:
        usage_error("call", f"--args is not valid JSON ({e.msg} at position {e.pos})")
    except RecursionError:  # (the stdlib's, rereading long integers nested deep)
        usage_error("call", "--args nests too deep")
    if not isinstance(value, dict):
        usage_error("call", f"--args must be a JSON object, got {type(value).__name__}")
    return value


def event_fields(event: bus.Event) -> dict[str, Any]:
    """An event's fields as JSON-able data (its values are masked already), but
    the private ones (`_run`: toolbus's own, not the event's data), which no
    surface shows: the rule of `toolbus.observe`'s records."""
    return {
        f.name: _jsonable(getattr(event, f.name))
        for f in dataclasses.fields(event)
        if not f.name.startswith("_")
    }


def _jsonable(value: Any) -> Any:
    # A model's Python dump first: its JSON one writes a metadata key holding
    # a lone surrogate as U+FFFDs, silently (two such keys become one).
    data = value.model_dump() if isinstance(value, BaseModel) else value
    try:
        return to_jsonable_python(data, fallback=repr)
    except ValueError:  # UnicodeEncodeError: a key holding a lone surrogate
        # (a tool's output, metadata, progress data): written as its escape
        # (`encodable`: keys stay apart), the rest as it was.
        return to_jsonable_python(encodable(data, _data), fallback=repr)


def _data(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    raise TypeError  # (encodable leaves it as it is)


def _print(result: ToolResult, events: list[tuple[str, bus.Event]]) -> None:
    out = console()
    start = events[0][1].timestamp if events else time.time()
    lines = Table.grid(padding=(0, 1))
    lines.add_column(justify="right", no_wrap=True, style="dim")
    lines.add_column(justify="right", no_wrap=True, style="dim")
    lines.add_column(no_wrap=True)
    lines.add_column(overflow="fold")
    for name, event in events:
        lines.add_row(
            f"#{event.seq}",
            f"{(event.timestamp - start) * 1000:.1f} ms",
            Text(for_terminal(name), style="bold"),
            Text(for_terminal(_detail(event), lines=True)),
        )
    out.rule(f"events ({len(events)}, masked, as subscribers receive them)", align="left")
    out.print(lines)
    status = "green" if result.ok else "red"
    attempts = f"{result.attempts} attempt" + ("" if result.attempts == 1 else "s")
    code = f" {result.error_code.value}" if result.error_code is not None else ""
    out.rule(
        f"result: [{status}]{result.status}{code}[/] · {attempts} · "
        f"{result.duration * 1000:.1f} ms · what the model reads:",
        align="left",
    )
    text = format_result_for_context(result, include_metadata=False)
    out.print(Text(for_terminal(text, lines=True)))


def _detail(event: bus.Event) -> str:
    if isinstance(event, bus.CallFinished):
        r = event.result
        return r.status + (f" {r.error_code.value}" if r.error_code is not None else "")
    parts = []
    for key, value in event_fields(event).items():
        if key in _COMMON:
            continue
        if isinstance(value, float):
            text = f"{value:.6g}"
        elif isinstance(value, str):
            text = value
        else:
            try:
                text = _json.dumps(value, default=str).decode()  # (integers of any size)
            except TypeError:  # (a lone surrogate, a structure nested too deep)
                text = repr(value)
        parts.append(f"{key}={text if len(text) <= 200 else text[:199] + '…'}")
    return " ".join(parts)
