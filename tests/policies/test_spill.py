"""`policies.spill`: a result too long for the context is stored whole and paged back.

Directly, on a fake clock: what is spilled, what the model reads instead, the
artifact's file, its pages, its expiry and the store's pruning. Through an
executor: a 1 MB result is paged back whole with `read_artifact`, its handles
are checked, its name may not clash, and what is stored is scrubbed.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import DuplicateToolError, ToolCall, ToolRegistry, ToolResult
from toolbus.formatting import DEFAULT_MAX_LENGTH, format_result_for_context
from toolbus.policies import Spill, spill

CALL = ToolCall(id="c", name="dump", arguments={})


def _ok(output: Any, **extra: Any) -> ToolResult:
    return ToolResult(call_id="c", name="dump", status="ok", output=output, attempts=1, **extra)


def _text(n: int) -> str:
    return "".join(f"{i:06d}ü\n" for i in range(n // 8 + 1))[:n]


def _page_all(p: Spill, handle: str, now: float) -> str:
    parts, offset = [], 0
    while True:
        text, chars = p.read(handle, offset, p.page, now)
        parts.append(text)
        offset += len(text)
        if offset >= chars:
            return "".join(parts)


def test_short_results_and_failures_are_left_alone(tmp_path: Path) -> None:
    p = spill(store=tmp_path, max_chars=1000)
    assert p.on_result(CALL, _ok("x" * 1000), 0.0) is None
    failed = ToolResult(call_id="c", name="dump", status="error", error="e" * 5000)
    assert p.on_result(CALL, failed, 0.0) is None
    assert list(tmp_path.iterdir()) == []


def test_a_long_result_becomes_its_head_a_note_and_its_tail(tmp_path: Path) -> None:
    p = spill(store=tmp_path / "art", max_chars=1000)
    text = _text(50_000)
    out = p.on_result(CALL, _ok(text, metadata={"source": "db"}), 0.0)
    assert out is not None
    handle = out.metadata["artifact"]
    assert out.metadata["source"] == "db"
    preview = out.output
    assert len(preview) <= 1000
    head, _, rest = preview.partition("\n\n[... ")
    note, _, tail = rest.partition(" ...]\n\n")
    assert text.startswith(head) and text.endswith(tail) and len(head) > len(tail) > 0
    omitted = 50_000 - len(head) - len(tail)
    assert note.startswith(f"{omitted} characters omitted")
    assert f'read_artifact(handle="{handle}", offset={len(head)}, length=1000)' in note
    # As the model reads it: uncut by the provider writers' limit.
    assert format_result_for_context(out, include_metadata=False) == preview
    assert _page_all(p, handle, 1.0) == text


def test_the_artifact_is_a_private_file_in_a_private_directory(tmp_path: Path) -> None:
    store = tmp_path / "art"
    p = spill(store=store, max_chars=1000)
    out = p.on_result(CALL, _ok(_text(5000)), 0.0)
    assert out is not None
    path = store / f"{out.metadata['artifact']}.txt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert path.read_text("utf-8") == _text(5000)


def test_structured_output_is_spilled_as_the_text_the_model_reads(tmp_path: Path) -> None:
    p = spill(store=tmp_path, max_chars=1000)
    rows = [{"id": i, "name": f"row {i}"} for i in range(500)]
    result = _ok(rows)
    out = p.on_result(CALL, result, 0.0)
    assert out is not None
    whole = format_result_for_context(result, max_length=10**9, include_metadata=False)
    assert _page_all(p, out.metadata["artifact"], 0.0) == whole


def test_pages_are_at_most_max_chars_and_offsets_are_characters(tmp_path: Path) -> None:
    p = spill(store=tmp_path, max_chars=1000)
    text = "é" * 70_000 + "z" * 70_000  # more than one chunk, two bytes a character first
    out = p.on_result(CALL, _ok(text), 0.0)
    assert out is not None
    handle = out.metadata["artifact"]
    page, chars = p.read(handle, 69_990, 10**6, 0.0)
    assert chars == 140_000 and page == "é" * 10 + "z" * 990
    assert p.read(handle, 139_999, 5, 0.0) == ("z", 140_000)
    with pytest.raises(ValueError, match="outside"):
        p.read(handle, 140_000, 5, 0.0)
    with pytest.raises(ValueError, match="outside"):
        p.read(handle, -1, 5, 0.0)


@pytest.mark.parametrize(
    "handle", ["../../etc/passwd", "A" * 32, "0" * 31, "0" * 33, "", "0" * 32 + "/"]
)
def test_a_handle_names_an_artifact_and_nothing_else(tmp_path: Path, handle: str) -> None:
    p = spill(store=tmp_path, max_chars=1000)
    with pytest.raises(LookupError):
        p.read(handle, 0, 10, 0.0)


def test_artifacts_expire_and_are_pruned_when_the_next_is_written(tmp_path: Path) -> None:
    p = spill(store=tmp_path, max_chars=1000, ttl=60)
    first = p.write(_text(5000), 0.0)
    assert p.read(first, 0, 10, 59.9)[0] == _text(10)
    with pytest.raises(LookupError, match="expired"):
        p.read(first, 0, 10, 60.0)
    assert not (tmp_path / f"{first}.txt").exists()  # deleted when found expired
    second = p.write(_text(5000), 100.0)
    third = p.write(_text(5000), 170.0)  # the second expired at 160: pruned now
    assert {f.name for f in tmp_path.iterdir()} == {f"{third}.txt"}
    assert second != third


def test_files_an_earlier_process_left_are_swept_once_older_than_the_ttl(tmp_path: Path) -> None:
    old, young, other = (
        tmp_path / ("a" * 32 + ".txt"),
        tmp_path / ("b" * 32 + ".txt"),
        tmp_path / "notes.txt",
    )
    for f in (old, young, other):
        f.write_text("x")
    stale = time.time() - 120
    os.utime(old, (stale, stale))
    os.utime(other, (stale, stale))
    p = spill(store=tmp_path, max_chars=1000, ttl=60)
    kept = p.write("y" * 2000, 0.0)
    assert {f.name for f in tmp_path.iterdir()} == {young.name, other.name, f"{kept}.txt"}
    with pytest.raises(LookupError):  # a file is not a handle this policy gave out
        p.read("b" * 32, 0, 1, 0.0)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_chars": 999}, ValueError),
        ({"max_chars": 2000.0}, ValueError),
        ({"ttl": 0}, ValueError),
        ({"ttl": "1h"}, TypeError),
        ({"tool_name": "read artifact"}, ValueError),
        ({"tool_name": ""}, ValueError),
    ],
)
def test_bad_settings_are_refused(
    tmp_path: Path, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        spill(store=tmp_path, **options)


# -- through an executor ---------------------------------------------------------------


def _registry(policy: Spill, text: str) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[policy])
    def dump(q: str) -> str:
        return text

    return reg


def test_a_1mb_result_is_spilled_and_paged_back_whole(
    tmp_path: Path, make_executor: MakeExecutor
) -> None:
    text = _text(1_000_000)
    policy = spill(store=tmp_path)
    reg = _registry(policy, text)
    assert sorted(reg.names()) == ["dump", "read_artifact"]  # brought along by the policy
    ex = make_executor(reg)
    result = ex.execute({"id": "big", "name": "dump", "arguments": {"q": "all"}})
    assert result.ok and len(result.output) <= DEFAULT_MAX_LENGTH
    handle = result.metadata["artifact"]
    assert handle in result.output
    parts: list[str] = []
    offset = 0
    while True:
        page = ex.execute(
            {"id": f"p{offset}", "name": "read_artifact",
             "arguments": {"handle": handle, "offset": offset}}
        )  # fmt: skip
        assert page.ok and len(page.output) <= policy.page
        parts.append(page.output)
        offset = page.metadata["next_offset"]
        if page.metadata["done"]:
            break
    assert "".join(parts) == text


def test_an_unknown_handle_is_a_clear_error(tmp_path: Path, make_executor: MakeExecutor) -> None:
    ex = make_executor(_registry(spill(store=tmp_path), "x"))
    for handle, says in [("../secrets", "not an artifact handle"), ("f" * 32, "expired")]:
        r = ex.execute({"id": "r", "name": "read_artifact", "arguments": {"handle": handle}})
        assert r.status == "error" and says in (r.error or "")


def test_an_executor_spill_never_spills_its_own_pages(
    tmp_path: Path, make_executor: MakeExecutor
) -> None:
    policy = spill(store=tmp_path, max_chars=1000)
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def dump() -> str:
        return _text(20_000)

    ex = make_executor(reg, policies=[policy])
    assert "read_artifact" in reg
    handle = ex.execute({"id": "d", "name": "dump", "arguments": {}}).metadata["artifact"]
    page = ex.execute(
        {"id": "p", "name": "read_artifact", "arguments": {"handle": handle, "length": 5000}}
    )
    # A page of at most max_chars, never stored again as an artifact of its own.
    assert page.output == _text(1000)
    assert page.metadata == {
        "artifact": handle, "offset": 0, "next_offset": 1000, "chars": 20_000, "done": False
    }  # fmt: skip
    assert len(list(tmp_path.iterdir())) == 1


def test_an_executor_spill_registers_its_reader_into_the_registry_given(
    tmp_path: Path, make_executor: MakeExecutor
) -> None:
    """Documented (docs/policies.md, review 9): the registry passed gets
    read_artifact; an executor given a copy of its own leaves the original alone."""
    reg = ToolRegistry()
    reg.tool(read_only=True, name="dump")(lambda: _text(5000))
    own = ToolRegistry()
    own.merge(reg)
    make_executor(own, policies=[spill(store=tmp_path)])
    assert "read_artifact" in own and "read_artifact" not in reg
    make_executor(reg, policies=[spill(store=tmp_path / "b")])
    assert "read_artifact" in reg  # the caller's own registry: everyone holding it sees it


def test_a_name_clash_is_refused(tmp_path: Path, make_executor: MakeExecutor) -> None:
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def read_artifact(handle: str) -> str:
        return handle

    with pytest.raises(DuplicateToolError, match="read_artifact"):
        _registry_into(reg, spill(store=tmp_path))
    with pytest.raises(ValueError, match="read_artifact"):
        make_executor(reg, policies=[spill(store=tmp_path)])
    # Another name, no clash.
    _registry_into(reg, spill(store=tmp_path, tool_name="read_stored"))
    assert "read_stored" in reg


def test_one_spill_on_two_tools_brings_its_reader_once(tmp_path: Path) -> None:
    policy = spill(store=tmp_path)
    reg = ToolRegistry()
    for name in ("a", "b"):
        reg.tool(read_only=True, name=name, policies=[policy])(lambda: "x")
    assert sorted(reg.names()) == ["a", "b", "read_artifact"]
    with pytest.raises(DuplicateToolError):  # two spills, one name
        reg.tool(read_only=True, name="c", policies=[spill(store=tmp_path)])(lambda: "x")


def _registry_into(reg: ToolRegistry, policy: Spill) -> None:
    @reg.tool(read_only=True, policies=[policy])
    def dump() -> str:
        return "x"


def test_an_artifact_holds_only_what_was_published(
    tmp_path: Path, make_executor: MakeExecutor
) -> None:
    secret = "sk-live-very-secret-123456"
    reg = ToolRegistry()

    @reg.tool(read_only=True, policies=[spill(store=tmp_path, max_chars=1000)])
    def echo(api_key: str) -> str:
        return ("padding " * 1000) + f"key={api_key}"

    ex = make_executor(reg)
    r = ex.execute({"id": "e", "name": "echo", "arguments": {"api_key": secret}})
    assert r.ok and "artifact" in r.metadata
    [stored] = list(tmp_path.iterdir())
    body = stored.read_text("utf-8")
    assert secret not in body and body.startswith("padding ")
