"""A tool's structured output holding a lone surrogate (a file name decoded
with `surrogateescape`) ends ok, kept as it is, as a text output is; what
writes it out writes U+FFFD, and masking applies to it as to any output."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import MakeExecutor
from toolbus import Executor, ToolCall, ToolOutput, ToolRegistry, bus, format_result_for_context

NAME = b"report-\xe9.txt".decode("utf-8", "surrogateescape")  # "report-\udce9.txt"
SECRET = "sk-test-the-account-key-123"


class Listing(BaseModel):
    names: list[str]


@dataclasses.dataclass
class Entry:
    name: str


def _registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def as_dict() -> dict[str, Any]:
        return {"names": [NAME, "plain"], "count": 2}

    @reg.tool(read_only=True)
    def as_list() -> list[Any]:
        return [NAME, {NAME: 1}]  # in a key too

    @reg.tool(read_only=True)
    def with_model() -> dict[str, Listing]:
        return {"listing": Listing(names=[NAME])}

    @reg.tool(read_only=True)
    def as_dataclass() -> list[Entry]:
        return [Entry(NAME)]

    @reg.tool(read_only=True)
    def with_long_integer() -> dict[str, Any]:
        return {"size": 2**70, "name": NAME}  # the integer first: the other fallback

    @reg.tool(read_only=True)
    def as_tool_output() -> ToolOutput:
        return ToolOutput(content={"name": NAME}, metadata={"from": NAME})

    @reg.tool
    def echo_key(api_key: str) -> dict[str, Any]:
        return {"name": NAME, "key": api_key, "said": f"{NAME} used {api_key}"}

    return reg


@pytest.fixture
def ex(make_executor: MakeExecutor) -> Executor:
    return make_executor(_registry(), timeout=10.0)


EXPECTED: dict[str, Any] = {
    "as_dict": {"names": [NAME, "plain"], "count": 2},
    "as_list": [NAME, {NAME: 1}],
    "with_model": {"listing": {"names": [NAME]}},
    "as_dataclass": [{"name": NAME}],
    "with_long_integer": {"size": 2**70, "name": NAME},
    "as_tool_output": {"name": NAME},
}


@pytest.mark.parametrize("tool", sorted(EXPECTED))
def test_a_structured_output_with_a_lone_surrogate_ends_ok_as_it_was(
    ex: Executor, tool: str
) -> None:
    """It ended `error` ("not JSON-serializable") although the tool had
    succeeded; a text output holding the same character ended ok (bug hunt)."""
    r = ex.execute(ToolCall(name=tool))
    assert (r.status, r.error) == ("ok", None)
    assert r.output == EXPECTED[tool]
    if tool == "as_tool_output":
        assert r.metadata == {"from": NAME}
    for metadata in (True, False):
        text = format_result_for_context(r, include_metadata=metadata)
        assert "report-\ufffd.txt" in text and NAME not in text
        text.encode()  # what a model's request is written in


def test_its_secrets_are_masked_everywhere_it_goes(ex: Executor) -> None:
    with bus.Recorder() as rec:
        r = ex.execute(ToolCall(name="echo_key", arguments={"api_key": SECRET}))
        ex.drain_events()
    assert r.status == "ok"
    assert r.output == {"name": NAME, "key": "***", "said": f"{NAME} used ***"}
    finished = [e for name, e in rec.events if name == "tool:finished"]
    assert [e.result.output for e in finished] == [r.output]
    text = format_result_for_context(r, include_metadata=False)
    assert SECRET not in text and "report-\ufffd.txt used ***" in text


def test_the_journal_replays_it_as_it_was(tmp_path: Path) -> None:
    runs: list[int] = []
    reg = ToolRegistry()

    @reg.tool
    def rename() -> dict[str, Any]:
        runs.append(1)
        return {"from": NAME, NAME: len(runs)}

    call = ToolCall(name="rename", idempotency_key="rename-1")
    with Executor(reg, journal=tmp_path / "j.sqlite") as ex:
        first = ex.execute(call)
    with Executor(reg, journal=tmp_path / "j.sqlite") as ex:
        again = ex.execute(call)
    assert first.status == again.status == "ok"
    assert first.output == again.output == {"from": NAME, NAME: 1}
    assert again.metadata.get("replayed") is True and len(runs) == 1


def test_an_external_tool_with_an_output_schema_takes_such_an_output() -> None:
    """`complete` refused it, "does not fit its output schema (it is not
    JSON)", though the same output from an untyped external tool, or from an
    ordinary tool, ended ok (review)."""
    reg = ToolRegistry()

    @reg.tool(external=True)
    def pick_file(question: str) -> dict[str, str]:
        """Ask a person to pick a file."""
        raise AssertionError("external: never run")

    with Executor(reg) as ex:
        asked = ex.execute(ToolCall(id="c1", name="pick_file", arguments={"question": "which?"}))
        assert asked.status == "deferred" and asked.approval_request is not None
        done = ex.complete(asked.approval_request, {"name": NAME, NAME: "x"})
        assert (done.status, done.error) == ("ok", None)
        assert done.output == {"name": NAME, NAME: "x"}
        # What does not fit the schema is still refused, and says where.
        asked = ex.execute(ToolCall(id="c2", name="pick_file", arguments={"question": "which?"}))
        assert asked.approval_request is not None
        wrong = ex.complete(asked.approval_request, {"name": NAME, "size": 1})
        assert wrong.status == "rejected" and "size should be of type string" in (wrong.error or "")


def test_an_answer_holding_one_is_refused_saying_why() -> None:
    """A decision is signed and sent as JSON: `answer` refuses an output
    UTF-8 cannot hold, and says it is the lone surrogate."""
    from toolbus.policies import requires_approval

    reg = ToolRegistry()

    @reg.tool(policies=[requires_approval()])
    def move(src: str) -> dict[str, str]:
        """Move a file."""
        return {"moved": src}

    with Executor(reg) as ex:
        asked = ex.execute(ToolCall(id="m1", name="move", arguments={"src": "a"}))
        assert asked.approval_request is not None
        with pytest.raises(TypeError, match="lone surrogate"):
            ex.answer(asked.approval_request, {"moved": NAME})
