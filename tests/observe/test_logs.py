"""JSON log lines (and the audit log): written to a stream, a logger or a rotating file,
and parsed back."""

from __future__ import annotations

import functools
import io
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MakeExecutor
from toolbus import Executor, RetryPolicy, ToolCall, ToolError, ToolRegistry, bus
from toolbus.observe import ALL, JsonLog, log_json

SECRET = "sk-logs-29b8e4f1a7c6"


def make_registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def search(query: str, api_key: str = "") -> list[str]:
        """Search."""
        return [query]

    @registry.tool
    def fail(reason: str) -> str:
        raise ToolError(f"failed: {reason}")

    attempts: list[int] = []

    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=0.001))
    def flaky() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("once")
        return "ok"

    return registry


def parse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_one_line_per_event_with_every_field(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry(), name="logged")
    out = io.StringIO()
    handle = log_json(ex, out)
    assert isinstance(handle, JsonLog)
    ex.execute(ToolCall(id="s1", name="search", arguments={"query": "oslo", "api_key": SECRET}))
    ex.execute(ToolCall(id="f1", name="fail", arguments={"reason": "no"}))
    ex.execute_batch([ToolCall(id="u1", name="serch", arguments={"query": "x"})])
    ex.execute(ToolCall(id="r1", name="flaky"))
    handle.close()
    lines = parse(out.getvalue())
    assert SECRET not in out.getvalue()
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    for line in lines:
        assert line["executor"] == "logged"
        assert isinstance(line["timestamp"], float)
        assert line["signal"].startswith("tool:")
    by = {(line["signal"], line.get("call_id")): line for line in lines}

    executing = by[("tool:executing", "s1")]
    assert executing["tool"] == "search"
    assert executing["status"] == "running"
    assert executing["attempt"] == 1
    assert executing["arguments"] == {"query": "oslo", "api_key": "***"}

    finished = by[("tool:finished", "s1")]
    assert finished["status"] == "ok"
    assert finished["attempts"] == 1
    assert finished["error_code"] is None
    assert finished["arguments"] == {"query": "oslo", "api_key": "***"}
    assert "output" not in finished  # results' outputs are not logged
    assert finished["duration"] >= 0

    error = by[("tool:error", "f1")]
    assert (error["status"], error["error_code"], error["error"]) == (
        "error",
        "TOOL_ERROR",
        "failed: no",
    )
    assert by[("tool:finished", "f1")]["status"] == "error"

    rejected = by[("tool:rejected", "u1")]
    assert rejected["tool"] == "<unknown>"
    assert rejected["status"] == "rejected"
    assert rejected["error_code"] == "TOOL_NOT_FOUND"
    assert by[("tool:finished", "u1")]["tool"] == "<unknown>"
    assert by[("tool:finished", "u1")]["batch_id"] == by[("tool:batch-start", None)]["batch_id"]

    retry = by[("tool:retry-attempt", "r1")]
    assert (retry["status"], retry["attempt"], retry["previous_error"]) == (
        "retrying",
        2,
        "ConnectionError: once",
    )
    assert by[("tool:retry-success", "r1")]["attempts"] == 2


def test_calls_a_model_gave_one_id_stay_apart_by_run(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry())
    out = io.StringIO()
    handle = log_json(ex, out)
    for query in ("a", "b"):
        ex.execute(ToolCall(id="same", name="search", arguments={"query": query}))
    ex.drain_events()
    runs: dict[int, list[str]] = {}
    for line in parse(out.getvalue()):
        if line.get("call_id") == "same":
            runs.setdefault(line["run"], []).append(line["signal"])
    assert len(runs) == 2  # one number per submitted call, on every event of it
    for signals in runs.values():
        assert signals[0] == "tool:executing" and signals[-1] == "tool:finished"
    ex.execute_batch([ToolCall(id="b1", name="search", arguments={"query": "c"})])
    handle.close()
    lines = parse(out.getvalue())
    batch_start = next(line for line in lines if line["signal"] == "tool:batch-start")
    assert "run" not in batch_start  # a batch's own events are no call's


def test_binary_streams_and_loggers(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry())
    raw = io.BytesIO()
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test_observe_logs.audit")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    keep = Keep()
    logger.addHandler(keep)
    try:
        with log_json(ex, raw, signals=("tool:finished",)), log_json(ex, logger):
            ex.execute(ToolCall(id="b1", name="search", arguments={"query": "100%"}))
            ex.drain_events()
    finally:
        logger.removeHandler(keep)
    (line,) = parse(raw.getvalue().decode())
    assert (line["signal"], line["call_id"], line["status"]) == ("tool:finished", "b1", "ok")
    messages = [parse(r.getMessage())[0] for r in records]
    assert [m["signal"] for m in messages] == ["tool:executing", "tool:executed", "tool:finished"]
    assert messages[0]["arguments"] == {"query": "100%"}
    assert {r.levelno for r in records} == {logging.INFO}


def test_signals_all_includes_signals_defined_later(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry())
    out = io.StringIO()
    only = io.StringIO()
    assert repr(ALL) == "ALL"
    with log_json(ex, out), log_json(ex, only, signals=("tool:finished",)):
        name = "test-logs:cache-hit"

        @dataclass(frozen=True, slots=True)
        class CacheHit(bus.Event):
            tool: str
            key: str
            hits: int

        bus.define_signal(name, "A cache answered (tests/observe/test_logs.py).")
        assert ex.emitter.announce(name, CacheHit(tool="search", key="oslo", hits=3))
        ex.execute(ToolCall(id="c", name="search", arguments={"query": "q"}))
    lines = parse(out.getvalue())
    (hit,) = [line for line in lines if line["signal"] == name]
    assert (hit["tool"], hit["key"], hit["hits"]) == ("search", "oslo", 3)
    assert [line["signal"] for line in parse(only.getvalue())] == ["tool:finished"]


def test_fields_are_bounded(make_executor: MakeExecutor) -> None:
    ex = make_executor(make_registry())
    out = io.StringIO()
    with log_json(ex, out, signals=("tool:executing", "tool:error"), max_field_chars=50):
        ex.execute(ToolCall(id="big", name="search", arguments={"query": "x" * 10_000}))
        ex.execute(ToolCall(id="long", name="fail", arguments={"reason": "y" * 500}))
        ex.execute(ToolCall(id="small", name="search", arguments={"query": "z"}))
    lines = {line["call_id"]: line for line in parse(out.getvalue())}
    big = lines["big"]["arguments"]
    assert isinstance(big, str)  # too big: its JSON text, cut
    assert big.startswith('{"query":"xxxx')
    assert big.endswith("…[+9962 chars]")
    error = lines["long"]["error"]
    assert error == "failed: " + "y" * 42 + "…[+458 chars]"
    assert lines["small"]["arguments"] == {"query": "z"}
    assert all(len(line) < 400 for line in out.getvalue().splitlines())


def test_a_rotating_audit_log(make_executor: MakeExecutor, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ex = make_executor(make_registry(), name="audited")
    handle = log_json(ex, path, signals=("tool:finished",), max_bytes=2_000, backups=2)
    assert handle.path == str(path)
    for i in range(60):
        ex.execute(ToolCall(id=f"a{i}", name="search", arguments={"query": f"q{i}"}))
    handle.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]
    for f in files:
        assert 0 < f.stat().st_size <= 2_000
    # Oldest lines went with the dropped file; the ones kept are the latest, in order.
    kept = [
        line
        for f in (path.with_name("audit.jsonl.2"), path.with_name("audit.jsonl.1"), path)
        for line in parse(f.read_text())
    ]
    ids = [int(line["call_id"][1:]) for line in kept]
    assert ids == list(range(60 - len(ids), 60))
    assert {(line["executor"], line["status"], line["tool"]) for line in kept} == {
        ("audited", "ok", "search")
    }
    assert kept[-1]["arguments"] == {"query": "q59"}

    # Appends to an existing file; without max_bytes it never rotates.
    with log_json(ex, path, signals=("tool:finished",)):
        ex.execute(ToolCall(id="more", name="search", arguments={"query": "m"}))
    assert parse(path.read_text())[-1]["call_id"] == "more"
    assert len(list(tmp_path.iterdir())) == 3


def test_a_rotating_log_whose_file_was_removed_goes_on(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    """A rotating log whose file was removed or moved away (an operator
    cleaning up, a tool of its own rotating it) starts a new one when it
    rotates next, as logging's RotatingFileHandler does. Renaming the missing
    file failed with the file already closed: every line after was lost ("I/O
    operation on closed file", a receiver's failure)."""
    path = tmp_path / "audit.jsonl"
    ex = make_executor(make_registry())
    with log_json(ex, path, signals=("tool:finished",), max_bytes=600, backups=2):
        ex.execute(ToolCall(id="before", name="search", arguments={"query": "q"}))
        assert ex.drain_events()
        path.unlink()
        for i in range(6):
            ex.execute(ToolCall(id=f"after{i}", name="search", arguments={"query": "q"}))
            assert ex.drain_events()
    assert path.exists()
    assert parse(path.read_text())[-1]["call_id"] == "after5"


def test_no_backups_truncates(make_executor: MakeExecutor, tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    ex = make_executor(make_registry())
    with log_json(ex, str(path), max_bytes=600, backups=0):
        for i in range(10):
            ex.execute(ToolCall(id=f"t{i}", name="search", arguments={"query": "q"}))
    assert [f.name for f in tmp_path.iterdir()] == ["events.jsonl"]
    assert 0 < path.stat().st_size <= 600
    assert parse(path.read_text())[-1]["call_id"] == "t9"


def test_bad_options(make_executor: MakeExecutor, tmp_path: Path) -> None:
    ex = make_executor(make_registry())
    with pytest.raises(ValueError, match="needs a file path"):
        log_json(ex, io.StringIO(), max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes"):
        log_json(ex, tmp_path / "x", max_bytes=0)
    with pytest.raises(ValueError, match="backups"):
        log_json(ex, tmp_path / "x", backups=-1)
    with pytest.raises(ValueError, match="max_field_chars"):
        log_json(ex, io.StringIO(), max_field_chars=3)
    with pytest.raises(TypeError, match="target"):
        log_json(ex, 42)
    with pytest.raises(TypeError, match="tuple of names"):
        log_json(ex, io.StringIO(), signals="tool:finished")
    # (bytes were read as the numbers of their bytes: "no toolbus signal named 116")
    for signals in (b"tool:finished", None, 3):
        with pytest.raises(TypeError, match="tuple of names"):
            log_json(ex, io.StringIO(), signals=signals)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no toolbus signal"):
        log_json(ex, tmp_path / "y", signals=("tool:nope",))
    assert not (tmp_path / "y").exists() or (tmp_path / "y").stat().st_size == 0


def test_closing_writes_what_was_announced_before_and_nothing_after(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    ex = make_executor(make_registry())
    path = tmp_path / "log.jsonl"
    handle = log_json(ex, path)
    results = ex.execute_batch(
        [ToolCall(id=f"c{i}", name="search", arguments={"query": "q"}) for i in range(20)]
    )
    assert results.summary.succeeded == 20
    handle.close()  # no drain_events() before: close waits for what was announced
    handle.close()
    lines = parse(path.read_text())
    assert len([line for line in lines if line["signal"] == "tool:finished"]) == 20
    ex.execute(ToolCall(id="after", name="search", arguments={"query": "q"}))
    ex.drain_events()
    assert "after" not in path.read_text()


def test_two_executors_one_file_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "both.jsonl"
    out = io.StringIO()
    with Executor(make_registry(), name="one") as a, Executor(make_registry(), name="two") as b:
        with log_json(a, out), log_json(b, out):
            a.execute(ToolCall(id="x", name="search", arguments={"query": "q"}))
            b.execute(ToolCall(id="x", name="search", arguments={"query": "q"}))
    finished = [line for line in parse(out.getvalue()) if line["signal"] == "tool:finished"]
    assert sorted(line["executor"] for line in finished) == ["one", "two"]
    assert not path.exists()


def test_an_in_doubt_line_and_custom_fields(make_executor: MakeExecutor) -> None:
    from toolbus.journal import JournalRecord
    from toolbus.journal._records import JournalOwner

    ex = make_executor(make_registry(), name="journaled")
    owner = JournalOwner(session="s", pid=1, host="h", opened=1.0)
    record = JournalRecord(
        id=1,
        call_id="c9",
        tool="fail",
        arguments={"reason": "x", "token": "***"},
        idempotency_key="k",
        started=2.5,
        owner=owner,
        state="in_doubt",
    )
    with log_json(ex, io.StringIO()) as handle:
        line = json.loads(handle.line("tool:in-doubt", bus.InDoubt("c9", "fail", record, seq=4)))
    assert line["signal"] == "tool:in-doubt"
    assert (line["seq"], line["executor"], line["tool"], line["call_id"]) == (
        4,
        "journaled",
        "fail",
        "c9",
    )
    assert (line["arguments"], line["started"]) == ({"reason": "x", "token": "***"}, 2.5)
    assert "owner" not in line and "record" not in line


@pytest.mark.parametrize(
    "make_target",
    [
        tempfile.NamedTemporaryFile,  # a wrapper, not an io class: its mode says "rb+"
        tempfile.SpooledTemporaryFile,  # neither: "w+b"
        functools.partial(tempfile.NamedTemporaryFile, "w+"),  # a text one stays text
    ],
)
def test_binary_file_objects_that_are_no_io_class(
    make_executor: MakeExecutor, make_target: Any
) -> None:
    ex = make_executor(make_registry())
    with make_target() as target:
        handle = log_json(ex, target, signals=("tool:finished",))
        ex.execute(ToolCall(id="t", name="search", arguments={"query": "q"}))
        handle.close()
        target.seek(0)
        written = target.read()
    text = written.decode() if isinstance(written, bytes) else written
    (line,) = parse(text)
    assert line["call_id"] == "t"


def test_a_lone_surrogate_a_model_sent_keeps_its_line(make_executor: MakeExecutor) -> None:
    """orjson refuses a lone surrogate: it is written as U+FFFD, the line kept."""
    bad = json.loads('"t\\ud800"')  # valid JSON a model or provider may send
    ex = make_executor(make_registry(), name=json.loads('"ex\\udfff"'))
    out = io.StringIO()
    handle = log_json(ex, out, signals=("tool:finished",))
    ex.execute(ToolCall(id=bad, name=bad, arguments={"query": "q"}))
    handle.close()
    (unknown,) = parse(out.getvalue())
    assert (unknown["call_id"], unknown["tool"], unknown["executor"]) == (
        "t\ufffd",
        "<unknown>",
        "ex\ufffd",
    )
    assert "Unknown tool 't\ufffd'" in unknown["error"]


def test_handles_on_one_file_share_its_writer_and_size_limit(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    """Each handle counting the file's size alone would let it grow past the limit."""
    path = tmp_path / "shared.jsonl"
    a = make_executor(make_registry(), name="a")
    b = make_executor(make_registry(), name="b")
    ha = log_json(a, path, signals=("tool:finished",), max_bytes=1_500, backups=40)
    # Another name for the same file, another handle of the same executor: one writer.
    hb = log_json(
        b, tmp_path / "." / "shared.jsonl", signals=("tool:finished",), max_bytes=1_500, backups=40
    )
    hc = log_json(a, str(path), signals=("tool:finished",), max_bytes=1_500, backups=40)
    with pytest.raises(ValueError, match="must rotate it alike"):
        log_json(b, path, max_bytes=9_999)
    for i in range(30):
        a.execute(ToolCall(id=f"a{i}", name="search", arguments={"query": "q"}))
        b.execute(ToolCall(id=f"b{i}", name="search", arguments={"query": "q"}))
    ha.close()
    # hc's lines of a's calls are written by its own subscription, which may
    # lag ha's: wait for them, so that after-a is the file's last line.
    a.drain_events()
    b.execute(ToolCall(id="after-a", name="search", arguments={"query": "q"}))
    hb.close()
    hc.close()
    files = sorted(tmp_path.iterdir())
    assert len(files) > 2
    for f in files:
        assert 0 < f.stat().st_size <= 1_500, f.name
    lines = [line for f in files for line in parse(f.read_text())]
    assert len(lines) == 30 * 3 + 1  # a's calls twice (two handles), b's once, and the last
    assert parse(path.read_text())[-1]["call_id"] == "after-a"  # open until the last closed
    from toolbus.observe import _logs

    # The last handle closed the file (other tests' files may still be open).
    assert os.path.realpath(path) not in _logs._files


def test_log_json_close_does_not_wait_for_other_subscribers() -> None:
    """log_json's close() waited for every subscriber, a slow unrelated one too (review 10b).

    close() waits for "those announced before" (the handle's own events);
    it waits for every subscription's instead (`executor.drain_events`), so an
    unrelated slow subscriber makes it take the whole timeout (5 s), though
    every line of its own was written long before. Here the timeout is 30 s,
    far from the bound, so a loaded machine cannot blur the two.
    """
    import threading
    import time

    from toolbus import bus

    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def work() -> str:
        """Works."""
        return "ok"

    release = threading.Event()
    out = io.StringIO()
    with Executor(reg) as ex:
        slow = bus.subscribe(lambda sender, **kw: release.wait(60), sender=ex)
        try:
            with bus.Recorder(bus.FINISHED, sender=ex) as rec:
                handle = log_json(ex, out, signals=("tool:finished",))
                for i in range(3):
                    assert ex.execute(ToolCall(id=f"c{i}", name="work", arguments={})).ok
                rec.wait_for(bus.FINISHED, 3, timeout=5)
            started = time.monotonic()
            handle.close(30)
            took = time.monotonic() - started
        finally:
            release.set()
            slow.close()
    assert len(out.getvalue().splitlines()) == 3
    assert took < 10, f"close() took {took:.1f} s"
