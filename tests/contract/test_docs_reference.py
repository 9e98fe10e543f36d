"""The README and docs/reference.md keep up with the code: every extra, every
command, every Executor and RetryPolicy option with its default, every event
and its fields, every stats counter."""

from __future__ import annotations

import dataclasses
import inspect
import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolbus import ErrorCode, Executor, ExecutorStats, RetryPolicy, bus
from toolbus.bus import _events
from toolbus.cli import app
from toolbus.tools import ToolOptions

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "reference.md").read_text()
# Extras other branches add (observability): listed ahead of their arrival.
COMING_EXTRAS = ("otel", "prometheus", "web")


def table_rows(text: str, heading: str) -> dict[str, str]:
    """The rows of the first table after `heading`, by their first cell's code names."""
    section = text[text.index(heading) :]
    rows: dict[str, str] = {}
    started = False
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            started = True
            for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                rows[name] = line
        elif started:
            break
    return rows


def test_readme_lists_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    listed = table_rows(README, "## Installing it in your project")
    for extra in [*extras, *COMING_EXTRAS]:
        assert extra in listed, f"README's extras table lacks {extra!r}"
    assert "file:///" in README and "pip install ./toolbus" in README
    assert "typer and rich" in README


@pytest.mark.parametrize(
    "command", [["demo"], ["tools", "list"], ["call"], ["bench"], ["top"], ["mcp", "serve"]]
)
def test_readme_commands_exist(command: list[str]) -> None:
    assert f"toolbus {' '.join(command)}" in README + REFERENCE
    assert CliRunner().invoke(app, [*command, "--help"]).exit_code == 0


def test_reference_states_every_executor_default() -> None:
    rows = table_rows(REFERENCE, "### `Executor(registry, ...)`")
    for name, param in inspect.signature(Executor.__init__).parameters.items():
        if name in ("self", "registry"):
            continue
        assert name in rows, f"docs/reference.md lacks Executor({name}=)"
        default = param.default
        if isinstance(default, int | float | str) and not isinstance(default, bool):
            forms = {str(default), f"{default:_}" if isinstance(default, int) else str(default)}
            assert any(f"`{form}" in rows[name] or f'"{form}"' in rows[name] for form in forms), (
                name,
                default,
                rows[name],
            )
    methods = table_rows(REFERENCE, "| Method | Default | Meaning |")
    for method, argument in (
        ("stats", "timeout"),
        ("drain_events", "timeout"),
        ("close", "timeout"),
    ):
        default = inspect.signature(getattr(Executor, method)).parameters[argument].default
        row = next(r for n, r in methods.items() if n.startswith(f"{method}("))
        assert f"{argument}={default}" in row, (method, row)


def test_reference_lists_every_tool_option() -> None:
    rows = table_rows(REFERENCE, "### Tools: `@tool`")
    for name in ToolOptions.__annotations__:
        assert name in rows, f"docs/reference.md lacks @tool({name}=)"


def test_reference_lists_every_execute_option() -> None:
    methods = "\n".join(table_rows(REFERENCE, "| Method | Default | Meaning |").values())
    for method in ("execute", "execute_batch", "aexecute", "aexecute_batch"):
        for name, param in inspect.signature(getattr(Executor, method)).parameters.items():
            if param.kind is inspect.Parameter.KEYWORD_ONLY:
                assert f"{name}=" in methods, f"docs/reference.md lacks {method}({name}=)"


def test_reference_states_every_retry_default() -> None:
    rows = table_rows(REFERENCE, "### `RetryPolicy(...)`")
    policy = RetryPolicy()
    for field in dataclasses.fields(RetryPolicy):
        if not field.init:
            continue
        assert field.name in rows, f"docs/reference.md lacks RetryPolicy({field.name}=)"
        value = getattr(policy, field.name)
        if isinstance(value, int | float):
            assert f"`{value}" in rows[field.name], (field.name, rows[field.name])
    assert "(ConnectionError, TimeoutError)" in rows["retry_on"]


def test_reference_lists_every_event_and_its_fields() -> None:
    rows = table_rows(REFERENCE, "| Signal | Event | Its own fields |")
    # A private field (`_run`) is toolbus's own, not the event's data: no surface shows it.
    common = {f.name for f in dataclasses.fields(_events.CallEvent) if not f.name.startswith("_")}
    events = {
        getattr(_events, name) for name in _events.__all__ if name not in ("Event", "CallEvent")
    }
    by_event = {re.findall(r"`([A-Za-z]+)`", row.split("|")[2])[0]: row for row in rows.values()}
    for event in events:
        assert event.__name__ in by_event, f"docs/reference.md lacks {event.__name__}"
        row = by_event[event.__name__]
        own = [f.name for f in dataclasses.fields(event) if f.name not in common]
        for name in own:
            if name.startswith("_"):
                continue
            if name in ("seq", "timestamp"):
                continue
            assert f"`{name}`" in row.split("|")[3], (event.__name__, name)
    for signal in bus.ALL_SIGNALS:
        assert signal in rows, f"docs/reference.md lacks {signal}"
    for name in common | {"seq", "timestamp"}:
        assert f"`{name}`" in REFERENCE


def test_reference_lists_every_stats_counter() -> None:
    rows = table_rows(REFERENCE, "### `ExecutorStats`")
    for name in ExecutorStats.model_fields:
        assert name in rows, f"docs/reference.md lacks ExecutorStats.{name}"


def test_reference_lists_every_error_code_once() -> None:
    """One table of every `ErrorCode`: its status, whether it is retried, the
    text the model reads, and what emits it (or the issue that will)."""
    section = REFERENCE[REFERENCE.index("## Error codes") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    codes = [re.findall(r"`([A-Z_]+)`", row.split("|")[1])[0] for row in rows]
    assert codes == [code.value for code in ErrorCode], "one row per code, in ErrorCode's order"
    statuses = {"rejected", "error", "timeout", "cancelled", "deferred"}
    for code, row in zip(codes, rows, strict=True):
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        assert len(cells) == 5 and all(cells), (code, cells)
        assert cells[1].strip("`") in statuses, (code, cells[1])
