"""The content scanner on every surface: planted secrets and personal data in what
a tool returns, raises, reports as progress and is given, and none of it in what
toolbus publishes or stores.

A registered tool hands back documents of tests/scanning/corpus/planted.jsonl
(free text, logs, JSON objects and arrays, nested) and documents made at random
from a printed seed (`TOOLBUS_SCAN_SEED` replays one), each in one way (`MODES`):
as its output, in a progress report, in an exception's message, in a first
attempt's failure that is retried, in a post-call hook's failure (logged with
its traceback), or in its arguments (under `note`, a key masking leaves alone).
Each document goes one way only, so a value found on a surface tells which way
it went out. The planted values are never given to the executor as known
secrets: only the scanner can hide them.

Then no planted value is on any surface: the bus events, the JSON log lines and
toolbus's own log records, the OpenTelemetry spans, the journal (its records
and its file's bytes), the status server (/status and the /events history), and
the MCP server's replies to the SDK's client. The caller's own `ToolResult` is
scanned only with `to_model=True`. Cards and IBANs whose check digits are wrong
come through unchanged everywhere. `block` on results and on arguments, and
`hash`, each on an executor of their own. All of it with `engine="re"` and
`engine="hyperscan"` (skipped without hyperscan).

The values the scanner once missed (found by writing this file) each have a
test of their own at its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import io
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson
import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("mcp")
pytest.importorskip("starlette", reason="the web extra is not installed")

from mcp import Client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.conftest import MakeExecutor
from tests.scanning import generate as g
from tests.scanning.generate import KINDS, Output, Pairs, Planter
from toolbus import (
    ErrorCode,
    Executor,
    Journal,
    RetryPolicy,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    bus,
)
from toolbus.journal import JournalRecord
from toolbus.mcp import build_server
from toolbus.observe import instrument_otel, log_json, serve_status
from toolbus.policies import requires_approval
from toolbus.scanning import ContentScanner, hyperscan_available
from toolbus.tools import ToolFailure

SEED = int(os.environ.get("TOOLBUS_SCAN_SEED", time.time_ns() % 2**32))
"""The seed of the generated documents: printed, and in every failure's message."""

Engine = Literal["re", "hyperscan"]
ENGINES = [
    pytest.param("re", id="re"),
    pytest.param(
        "hyperscan",
        id="hyperscan",
        marks=pytest.mark.skipif(
            not hyperscan_available(), reason="hyperscan is not installed (the scan extra)"
        ),
    ),
]

MODES = ("return", "progress", "raise", "flaky", "hook", "note", "invalid")
"""How a document goes out: the tool returns it; reports it as progress (the message
as text, the data as it is) and returns "done"; raises ValueError with it (or
ToolFailure, with it in its message and, as it is, in its metadata); raises
ConnectionError with it on its first attempt and is retried; returns, and a
post-call hook raises with it; or it is the call's `note` argument, as text (with
`invalid`, beside an argument that fails validation, so the call is rejected)."""

MCP_MODES = ("mcp", "mcp-raise")
"""Called by the MCP SDK's client: progress (to a client that asks) and the output;
or an error."""

CORPUS_DOCS_PER_MODE = 8  # at least: more where needed to cover every kind and shape
GENERATED_PER_MODE = 3
CORPUS_DECOYS = 10
GENERATED_DECOYS = 4
TIMEOUT = 30.0  # hang guards: generous, a busy machine is slow


# -- the documents ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Doc:
    """A document the tool hands out, and what is planted in it (or, for a decoy,
    the values with wrong check digits it holds)."""

    id: str
    mode: str
    output: Output
    planted: Pairs
    decoys: Pairs = dataclasses.field(default_factory=list)


@cache
def _corpus() -> tuple[dict[str, Any], ...]:
    text = (g.CORPUS_DIR / "planted.jsonl").read_text(encoding="utf-8")
    return tuple(json.loads(line) for line in text.splitlines())


def _shape(output: object) -> str:
    return "text" if isinstance(output, str) else "json"


def _assign(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Corpus documents for each mode, chosen in file order, each used once: every
    mode first gets documents until it has every kind and both shapes (text and
    JSON), then more, round-robin, until each has `CORPUS_DOCS_PER_MODE`."""
    unused = list(records)
    chosen: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    wanted = {m: {*KINDS, "text", "json"} for m in MODES}
    while any(wanted.values()):
        for mode in MODES:
            if not wanted[mode]:
                continue
            for record in unused:
                has = {kind for kind, _ in record["planted"]} | {_shape(record["output"])}
                if has & wanted[mode]:
                    wanted[mode] -= has
                    chosen[mode].append(record)
                    unused.remove(record)
                    break
            else:
                raise AssertionError(f"the corpus cannot cover {wanted[mode]} for {mode}")
    for mode in MODES:
        while len(chosen[mode]) < CORPUS_DOCS_PER_MODE:
            chosen[mode].append(unused.pop(0))
    return chosen


@cache
def documents() -> tuple[Doc, ...]:
    """The planted documents of every mode (corpus, then generated from `SEED`),
    then the decoys (returned, and given as a note)."""
    records = list(_corpus())
    planted = [r for r in records if r["planted"]]
    decoys = [r for r in records if "decoys" in r]
    docs: list[Doc] = []
    for mode, chosen in _assign(planted).items():
        for r in chosen:
            pairs = [(k, v) for k, v in r["planted"]]
            docs.append(Doc(f"{mode}:{r['id']}", mode, r["output"], pairs))
    planter = Planter(SEED)
    for mode in (*MODES, *MCP_MODES):
        # The first of each mode holds a card, an IBAN and a key at least.
        for i in range(1 if mode in MCP_MODES else GENERATED_PER_MODE):
            if i == 0:
                secret = planter.rng.choice([k for k in g.SECRET_KINDS if k != "generic_secret"])
                kinds = ("card", "iban", secret, planter.rng.choice(g.PERSONAL_KINDS))
                output, pairs = planter.document(4, kinds=kinds)
            else:
                output, pairs = planter.document(planter.rng.randint(1, 4))
            docs.append(Doc(f"{mode}:g{i}", mode, output, pairs))
    chosen_decoys = decoys[:: len(decoys) // CORPUS_DECOYS][:CORPUS_DECOYS]
    outputs = [(r["id"], r["output"], [(k, v) for k, v in r["decoys"]]) for r in chosen_decoys]
    for i in range(GENERATED_DECOYS):
        output, pairs = planter.decoy_document(2)
        outputs.append((f"g{i}", output, pairs))
    for mode in ("return", "note"):
        for name, output, pairs in outputs:
            docs.append(Doc(f"decoy-{mode}:{name}", mode, output, [], pairs))
    return tuple(docs)


@cache
def docs_by_id() -> Mapping[str, Doc]:
    return {d.id: d for d in documents()}


def as_text(output: Output) -> str:
    """How a document shows in a message or a note: a text as it is, JSON as JSON."""
    return output if isinstance(output, str) else json.dumps(output, indent=1)


# -- what must not be seen --------------------------------------------------------------------


def fragments(value: str) -> set[str]:
    """What of `value` must not be seen: itself, as a JSON string and a Python repr
    would write it, and each line of a PEM block's body."""
    forms = {value, json.dumps(value)[1:-1], repr(value)[1:-1]}
    if "\n" in value:
        forms |= {line for line in value.splitlines() if len(line) >= 16 and "-----" not in line}
    return forms


def planted(mode: str | None = None) -> list[tuple[Doc, str, str]]:
    """(document, kind, value) of every planted value the scanner is to find (of
    the documents of `mode`, or all)."""
    return [
        (d, kind, value)
        for d in documents()
        if mode is None or d.mode == mode
        for kind, value in d.planted
    ]


def leaks(text: str | bytes, values: Iterable[tuple[Doc, str, str]]) -> list[str]:
    """Where any of `values` is in `text`: its kind, document and a short excerpt."""
    found: list[str] = []
    for doc, kind, value in values:
        for form in fragments(value):
            if isinstance(text, bytes):
                at = text.find(form.encode())
                if at < 0:
                    continue
                shown = text[max(0, at - 60) : at + len(form) + 30].decode("utf-8", "replace")
            else:
                at = text.find(form)
                if at < 0:
                    continue
                shown = text[max(0, at - 60) : at + len(form) + 30]
            excerpt = shown.replace(form, "<VALUE>")
            found.append(f"{kind} of {doc.id} (seed {SEED}): ...{excerpt}...")
            break
    return found


def assert_no_leak(where: str, text: str | bytes, mode: str | None) -> None:
    values = planted(mode)
    assert values, f"nothing planted for {mode}"
    found = leaks(text, values)
    assert not found, f"{len(found)} planted values on {where}:\n" + "\n".join(found[:20])


# -- the tool -------------------------------------------------------------------------------


def make_registry(ran: list[str], outputs: Mapping[str, Output] | None = None) -> ToolRegistry:
    """The tool `emit`, handing out the documents (or `outputs`, by id); `ran`
    gets the id of every document it was called for."""
    registry = ToolRegistry()

    # Mutating, so that the journal records its calls; a ConnectionError is retried once.
    @registry.tool(retry=RetryPolicy(max_retries=1, backoff_base=0.001, jitter=0))
    def emit(doc: str, mode: str, ctx: ToolContext, note: str = "", count: int = 0) -> Any:
        """Hands out a document, as `mode` says."""
        ran.append(doc)
        output = copy.deepcopy(outputs[doc] if outputs else docs_by_id()[doc].output)
        text = as_text(output)
        if mode in ("progress", "mcp"):
            ctx.progress(f"read so far: {text}", 0.5, detail=output)
            return "done" if mode == "progress" else output
        if mode in ("raise", "mcp-raise"):
            if doc[-1] in "02468":  # half of them: the output in the result's metadata too
                raise ToolFailure(f"upstream refused: {text}", metadata={"upstream": output})
            raise ValueError(f"upstream refused the request: {text}")
        if mode == "flaky":
            if ctx.attempt == 1:
                raise ConnectionError(f"connection reset while reading: {text}")
            return "read on the second attempt"
        if mode == "note":  # the tool gets the note as it was sent
            return "noted" if note == text else "the note was changed on its way"
        if mode == "hook":
            return "noted"
        return output

    return registry


def post_call(call: ToolCall, result: ToolResult) -> ToolResult:
    """A post-call hook that fails on the documents of mode "hook", saying what it read."""
    args = call.arguments
    if isinstance(args, dict) and args.get("mode") == "hook":
        output = docs_by_id()[args["doc"]].output
        raise RuntimeError(f"could not post-process: {as_text(output)}")
    return result


def call_of(doc: Doc) -> ToolCall:
    args: dict[str, Any] = {"doc": doc.id, "mode": doc.mode}
    if doc.mode in ("note", "invalid"):
        args["note"] = as_text(doc.output)
    if doc.mode == "invalid":
        args["count"] = "many"  # not an integer: the call is rejected
    return ToolCall(id=f"call-{doc.id}", name="emit", arguments=args)


# -- the surfaces ---------------------------------------------------------------------------


class LogCapture(logging.Handler):
    """toolbus's log records, formatted with their tracebacks, and their raw parts."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.texts: list[str] = []
        self.guard = threading.Lock()  # (not `lock`: the handler's own)

    def emit(self, record: logging.LogRecord) -> None:
        text = "\n".join([self.format(record), repr(record.msg), repr(record.args)])
        with self.guard:
            self.texts.append(text)


def event_text(signal: str, event: bus.Event) -> str:
    """An event in full: its repr and every field as JSON (a result as pydantic dumps it)."""
    fields: dict[str, Any] = {"signal": signal}
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        fields[f.name] = value.model_dump(mode="json") if isinstance(value, ToolResult) else value
    return f"{event!r}\n{json.dumps(fields, default=repr)}"


def span_text(exporter: InMemorySpanExporter) -> str:
    out: list[str] = []
    for span in exporter.get_finished_spans():
        attributes = dict(span.attributes or {})
        out.append(f"{span.name}\n{attributes!r}\n{json.dumps(attributes, default=repr)}")
        out.append(repr(span.status.description))
        for e in span.events:
            out.append(f"{e.name} {dict(e.attributes or {})!r}")
        out.append(span.to_json())
    return "\n".join(out)


def sse_history(http: httpx.Client, latest: int) -> str:
    """The /events stream from the start of the server's history up to `latest`."""
    deadline = time.monotonic() + TIMEOUT
    lines: list[str] = []
    with http.stream("GET", "/events?since=0") as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data:") and orjson.loads(line[5:]).get("seq", 0) >= latest:
                return "\n".join(lines)
            assert time.monotonic() < deadline, "the history did not arrive"
    raise AssertionError("the stream ended early")


@dataclasses.dataclass
class McpReply:
    result: str  # the CallToolResult as JSON
    is_error: bool
    progress: list[str]


async def mcp_calls(
    registry: ToolRegistry, executor: Executor, docs: list[Doc]
) -> dict[str, McpReply]:
    """Each document's call through `build_server` and the SDK's client (asking for progress)."""
    replies: dict[str, McpReply] = {}
    async with Client(build_server(registry, executor)) as client:
        for doc in docs:
            seen: list[str] = []

            async def on_progress(
                progress: float, total: float | None, message: str | None, seen: list[str] = seen
            ) -> None:
                seen.append(f"{progress} {total} {message}")

            result = await client.call_tool(
                "emit", {"doc": doc.id, "mode": doc.mode}, progress_callback=on_progress
            )
            replies[doc.id] = McpReply(result.model_dump_json(), result.is_error, seen)
    return replies


@dataclasses.dataclass
class Rig:
    """One executor's run of every document, and what each surface then held."""

    engine: Engine
    to_model: bool
    results: dict[str, ToolResult]  # by document id: the caller's copies
    ran: list[str]
    events: list[tuple[str, bus.Event]]
    events_text: str
    log_lines: str
    log_records: str
    spans: str
    journal_records: list[JournalRecord]
    journal_text: str
    journal_bytes: bytes
    status: str
    sse: str
    mcp: dict[str, McpReply]


def build_rig(engine: Engine, to_model: bool, where: Path, stack: contextlib.ExitStack) -> Rig:
    """An executor with the scanner and every surface watching it, run on every
    document; what it published and stored is read once all of it was delivered."""
    print(f"scan seed {SEED} (TOOLBUS_SCAN_SEED={SEED} replays it)")
    ran: list[str] = []
    registry = make_registry(ran)
    journal = where / f"journal-{engine}-{to_model}.sqlite"
    ex = stack.enter_context(
        Executor(
            registry,
            name=f"scan-{engine}-{'model' if to_model else 'published'}",
            scanner=ContentScanner(engine=engine, to_model=to_model),
            journal=journal,
            post_call=[post_call],
            timeout=TIMEOUT,
        )
    )
    assert ex.journal is not None
    recorder = stack.enter_context(bus.Recorder(sender=ex))
    lines = io.StringIO()
    stack.enter_context(log_json(ex, lines, max_field_chars=10**7))
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    stack.callback(tracer_provider.shutdown)
    stack.callback(instrument_otel(ex, tracer_provider, capture_content=True).close)
    capture = LogCapture()
    toolbus_log = logging.getLogger("toolbus")
    stack.callback(toolbus_log.setLevel, toolbus_log.level)
    toolbus_log.setLevel(logging.DEBUG)
    toolbus_log.addHandler(capture)
    stack.callback(toolbus_log.removeHandler, capture)
    server = stack.enter_context(serve_status(ex, history=10_000))
    http = stack.enter_context(httpx.Client(base_url=server.url, timeout=TIMEOUT))

    docs = [d for d in documents() if d.mode not in MCP_MODES]
    batch = ex.execute_batch([call_of(d) for d in docs])
    results = {d.id: r for d, r in zip(docs, batch.results, strict=True)}
    mcp_docs = [d for d in documents() if d.mode in MCP_MODES]
    replies = asyncio.run(mcp_calls(registry, ex, mcp_docs))

    assert ex.drain_events(TIMEOUT), "the events were not delivered"
    assert ex.journal.flush(TIMEOUT), "the journal was not written"
    status = http.get("/status")
    assert status.status_code == 200
    sse = sse_history(http, status.json()["server"]["latest"])
    with Journal(journal) as reader:
        records = reader.records()
    files = sorted(p for p in where.iterdir() if p.name.startswith(journal.name) and p.is_file())
    assert any(p.name.endswith("-wal") for p in files)  # read while the WAL holds it all
    with capture.guard:
        log_records = "\n".join(capture.texts)
    events = list(recorder.events)
    return Rig(
        engine=engine,
        to_model=to_model,
        results=results,
        ran=ran,
        events=events,
        events_text="\n".join(event_text(s, e) for s, e in events),
        log_lines=lines.getvalue(),
        log_records=log_records,
        spans=span_text(exporter),
        journal_records=records,
        journal_text="\n".join(f"{r!r}\n{r.model_dump_json()}" for r in records),
        journal_bytes=b"".join(p.read_bytes() for p in files),
        status=status.text,
        sse=sse,
        mcp=replies,
    )


@pytest.fixture(scope="module")
def rigs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Engine, bool], Rig]]:
    """Each (engine, to_model) rig, made the first time a test asks for it and kept
    for the module (so a random test order builds each once); all closed at the end."""
    made: dict[tuple[Engine, bool], Rig | Exception] = {}
    where = tmp_path_factory.mktemp("surfaces")
    with contextlib.ExitStack() as stack:

        def get(engine: Engine, to_model: bool) -> Rig:
            key = (engine, to_model)
            if key not in made:
                try:
                    made[key] = build_rig(engine, to_model, where, stack)
                except Exception as e:  # once: every test of it fails the same
                    made[key] = e
            found = made[key]
            if isinstance(found, Exception):
                raise found
            return found

        yield get


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    value: Engine = request.param
    return value


@pytest.fixture
def rig(rigs: Callable[[Engine, bool], Rig], engine: Engine) -> Rig:
    """The executor whose scanner leaves the caller's copy alone (`to_model=False`)."""
    return rigs(engine, False)


@pytest.fixture
def model_rig(rigs: Callable[[Engine, bool], Rig], engine: Engine) -> Rig:
    """The executor whose scanner scans the caller's copy too (`to_model=True`)."""
    return rigs(engine, True)


ALL_MODES = pytest.mark.parametrize("mode", [*MODES, *MCP_MODES])


# -- the workload did what it says ----------------------------------------------------------------


def test_the_documents_cover_every_kind_in_every_mode() -> None:
    for mode in MODES:
        docs = [d for d in documents() if d.mode == mode and d.planted]
        assert {k for d in docs for k, _ in d.planted} == set(KINDS), mode
        assert {_shape(d.output) for d in docs} == {"text", "json"}, mode
    assert len({d.id for d in documents()}) == len(documents())


def test_every_call_ended_as_its_mode_says(rig: Rig) -> None:
    expected = {
        "return": "ok",
        "progress": "ok",
        "raise": "error",
        "flaky": "ok",
        "hook": "error",
        "note": "ok",
        "invalid": "rejected",
    }
    for doc_id, result in rig.results.items():
        mode = docs_by_id()[doc_id].mode
        assert result.status == expected[mode], (doc_id, result)
        if mode == "flaky":
            assert result.attempts == 2
        if mode == "note":
            assert result.output == "noted", doc_id
    assert set(rig.ran) >= {d for d, r in rig.results.items() if r.status != "rejected"}
    assert rig.mcp.keys() == {d.id for d in documents() if d.mode in MCP_MODES}
    # What was to be published was: the notes (scanned), also of rejected calls, the
    # progress reports, and the post-call hooks' failures.
    published_args = {
        e.call_id: e.arguments
        for _, e in rig.events
        if isinstance(e, bus.CallFinished | bus.CallRejected)
    }
    progress = {e.call_id for _, e in rig.events if isinstance(e, bus.Progress)}
    for doc in documents():
        call_id = f"call-{doc.id}"
        if doc.mode in ("note", "invalid") and doc.planted:
            assert "[REDACTED:" in published_args[call_id]["note"], doc.id
        if doc.mode == "progress":
            assert call_id in progress, doc.id
        if doc.mode == "hook":
            assert f"post-call hook failed for call {call_id}" in rig.log_records, doc.id


# -- 1. the bus events ---------------------------------------------------------------------------


@ALL_MODES
def test_no_planted_value_in_bus_events(rig: Rig, mode: str) -> None:
    signals = {s for s, _ in rig.events}
    assert signals >= {bus.EXECUTING, bus.PROGRESS, bus.ERROR, bus.RETRY_ATTEMPT, bus.REJECTED}
    assert_no_leak("the bus events", rig.events_text, mode)


# -- 2. the logs ---------------------------------------------------------------------------------


@ALL_MODES
def test_no_planted_value_in_json_log_lines(rig: Rig, mode: str) -> None:
    assert "tool:finished" in rig.log_lines and "tool:retry-attempt" in rig.log_lines
    assert_no_leak("the JSON log lines", rig.log_lines, mode)


@ALL_MODES
def test_no_planted_value_in_toolbus_log_records(rig: Rig, mode: str) -> None:
    assert "post-call hook failed" in rig.log_records  # a traceback was logged
    assert "Traceback" in rig.log_records
    assert_no_leak("toolbus's log records", rig.log_records, mode)


# -- 3. OpenTelemetry ----------------------------------------------------------------------------


@ALL_MODES
def test_no_planted_value_in_spans(rig: Rig, mode: str) -> None:
    assert "gen_ai.tool.call.result" in rig.spans and "gen_ai.tool.call.arguments" in rig.spans
    assert_no_leak("the OpenTelemetry spans", rig.spans, mode)


# -- 4. the journal ------------------------------------------------------------------------------


@ALL_MODES
def test_no_planted_value_in_journal_records(rig: Rig, mode: str) -> None:
    journaled = {r.call_id for r in rig.journal_records}
    admitted = {f"call-{d}" for d, r in rig.results.items() if r.status != "rejected"}
    assert admitted <= journaled
    assert_no_leak("the journal's records", rig.journal_text, mode)


@ALL_MODES
def test_no_planted_value_in_journal_file(rig: Rig, mode: str) -> None:
    assert_no_leak("the journal's file", rig.journal_bytes, mode)


# -- 5. the status server ------------------------------------------------------------------------


@ALL_MODES
def test_no_planted_value_in_the_status_json(rig: Rig, mode: str) -> None:
    state = json.loads(rig.status)["state"]
    assert state["errors"] and state["recent"]  # error texts and results are shown
    assert_no_leak("/status", rig.status, mode)


@ALL_MODES
def test_no_planted_value_in_the_status_event_history(rig: Rig, mode: str) -> None:
    assert "tool:progress" in rig.sse and "tool:finished" in rig.sse
    assert_no_leak("/events", rig.sse, mode)


def test_a_retried_attempts_error_is_published_scanned(rig: Rig) -> None:
    """A retried attempt's error is published scanned, whatever the model's copy is."""
    retries = [e for _, e in rig.events if isinstance(e, bus.RetryAttempt)]
    assert {e.call_id for e in retries} == {
        f"call-{d.id}" for d in documents() if d.mode == "flaky"
    }
    assert_no_leak("tool:retry-attempt", "\n".join(e.previous_error for e in retries), "flaky")


# -- 6. MCP -------------------------------------------------------------------------------------


def _mcp_progress(rig: Rig) -> str:
    return "\n".join(m for reply in rig.mcp.values() for m in reply.progress)


def test_no_planted_value_in_mcp_progress(rig: Rig) -> None:
    assert _mcp_progress(rig)
    assert_no_leak("the MCP progress notifications", _mcp_progress(rig), "mcp")


@pytest.mark.parametrize("to_model", [False, True], ids=["published", "to-model"])
@pytest.mark.parametrize("mode", MCP_MODES)
def test_no_planted_value_in_mcp_replies(
    rigs: Callable[[Engine, bool], Rig], engine: Engine, to_model: bool, mode: str
) -> None:
    """A reply leaves the process: scanned whatever `to_model` says."""
    replies = rigs(engine, to_model).mcp
    mine = [r for d, r in replies.items() if docs_by_id()[d].mode == mode]
    assert mine and all(r.is_error is (mode == "mcp-raise") for r in mine)
    text = "\n".join(r.result for r in mine)
    assert "[REDACTED:" in text
    assert_no_leak("the MCP server's replies", text, mode)


# -- 7. the caller's copy ------------------------------------------------------------------------


def test_with_to_model_false_the_caller_gets_what_the_tool_returned(rig: Rig) -> None:
    """The model's copy is left alone: every planted value is in it (which also shows
    that `leaks` sees a value in the serializations the surface tests search)."""
    for mode in ("return", "raise", "hook"):
        mine = [r for d, r in rig.results.items() if docs_by_id()[d].mode == mode]
        text = "\n".join(f"{r!r}\n{r.model_dump_json()}" for r in mine)
        assert len(leaks(text, planted(mode))) == len(planted(mode)), mode
    for doc in documents():
        result = rig.results.get(doc.id)
        if result is None or not doc.planted:
            continue
        if doc.mode == "return":
            assert result.output == doc.output, doc.id
        elif doc.mode in ("raise", "hook"):
            assert result.error is not None and as_text(doc.output) in result.error, doc.id


@pytest.mark.parametrize("mode", ["return", "raise", "hook", "flaky", "progress", "note"])
def test_with_to_model_true_the_caller_gets_it_scanned(model_rig: Rig, mode: str) -> None:
    results = {d: r for d, r in model_rig.results.items() if docs_by_id()[d].mode == mode}
    assert results
    text = "\n".join(r.model_dump_json() for r in results.values())
    assert_no_leak("the caller's results", text, mode)
    if mode in ("return", "raise", "hook"):
        assert "[REDACTED:" in text
    # ... and what it published, as with to_model=False.
    assert_no_leak("the bus events", model_rig.events_text, mode)


# -- decoys: wrong check digits, never flagged ----------------------------------------------------


def _decoys(mode: str) -> list[Doc]:
    return [d for d in documents() if d.decoys and d.mode == mode]


def _missing(text: str, docs: list[Doc]) -> list[str]:
    return [
        f"{kind} {value!r} of {doc.id}"
        for doc in docs
        for kind, value in doc.decoys
        if not any(form in text for form in fragments(value))
    ]


def test_decoys_come_back_unchanged_on_every_surface(rig: Rig, model_rig: Rig) -> None:
    returned, noted = _decoys("return"), _decoys("note")
    assert len(returned) == len(noted) == CORPUS_DECOYS + GENERATED_DECOYS
    for r in (rig, model_rig):
        for doc in returned:
            assert r.results[doc.id].output == doc.output, doc.id  # the caller's copy
    finished = {e.call_id: e for _, e in rig.events if isinstance(e, bus.CallFinished)}
    for doc in returned:
        assert finished[f"call-{doc.id}"].result.output == doc.output, doc.id
    for doc in noted:
        assert finished[f"call-{doc.id}"].arguments["note"] == as_text(doc.output), doc.id
    journaled = {r.call_id: r for r in rig.journal_records}
    for doc in returned:
        record = journaled[f"call-{doc.id}"]
        assert record.result is not None and record.result.output == doc.output, doc.id
    both = [*returned, *noted]
    for where, text in {
        "the events": rig.events_text,
        "the JSON log lines": rig.log_lines,
        "the spans": rig.spans,
        "the journal": rig.journal_text,
        "/events": rig.sse,
    }.items():
        assert not _missing(text, both), (where, _missing(text, both))


# -- block ----------------------------------------------------------------------------------------


def _blockable() -> list[Doc]:
    """A few documents of the corpus and of the seed, every kind among them."""
    docs: list[Doc] = []
    kinds: set[str] = set()
    for doc in documents():
        if doc.mode == "return" and not {k for k, _ in doc.planted} <= kinds:
            docs.append(doc)
            kinds |= {k for k, _ in doc.planted}
    assert kinds == set(KINDS)
    return docs


def test_block_on_results_withholds_the_result(
    make_executor: MakeExecutor, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="toolbus")
    ran: list[str] = []
    ex = make_executor(
        make_registry(ran), scanner=ContentScanner(default="block", engine=engine), timeout=TIMEOUT
    )
    docs = _blockable()
    with bus.Recorder(sender=ex) as recorder:
        results = [ex.execute(call_of(d)) for d in docs]
        assert ex.drain_events(TIMEOUT)
    assert sorted(ran) == sorted(d.id for d in docs)  # each tool ran
    for doc, result in zip(docs, results, strict=True):
        assert result.status == "rejected", doc.id
        assert result.error_code is ErrorCode.CONTENT_BLOCKED, doc.id
        assert result.output is None and result.error is not None
        assert "ran, but its result holds" in result.error
    values = [(d, k, v) for d in docs for k, v in d.planted]
    text = "\n".join(
        [
            *(r.model_dump_json() for r in results),
            *(event_text(s, e) for s, e in recorder.events),
            caplog.text,
            *(repr(r.args) for r in caplog.records),
        ]
    )
    assert not leaks(text, values), leaks(text, values)
    assert len(recorder.of(bus.REJECTED)) == len(docs)


def test_block_on_arguments_never_runs_the_tool(
    make_executor: MakeExecutor, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="toolbus")
    ran: list[str] = []
    ex = make_executor(
        make_registry(ran), scanner=ContentScanner(default="block", engine=engine), timeout=TIMEOUT
    )
    docs = [dataclasses.replace(d, mode="note") for d in _blockable()]
    with bus.Recorder(sender=ex) as recorder:
        results = [ex.execute(call_of(d)) for d in docs]
        assert ex.drain_events(TIMEOUT)
    assert ran == []  # not one call reached the tool
    assert not recorder.of(bus.EXECUTING)
    for doc, result in zip(docs, results, strict=True):
        assert result.status == "rejected", doc.id
        assert result.error_code is ErrorCode.CONTENT_BLOCKED, doc.id
        assert result.error is not None and "was not called" in result.error
    values = [(d, k, v) for d in docs for k, v in d.planted]
    text = "\n".join(
        [
            *(r.model_dump_json() for r in results),
            *(event_text(s, e) for s, e in recorder.events),
            caplog.text,
            *(repr(r.args) for r in caplog.records),
        ]
    )
    assert not leaks(text, values), leaks(text, values)
    rejected = recorder.of(bus.REJECTED)
    assert all("[REDACTED:" in e.arguments["note"] for e in rejected)  # published, scanned


# -- hash -----------------------------------------------------------------------------------------

_TAG = re.compile(r"\[([a-z_]+):([0-9a-f]{16})\]")


def test_hash_gives_one_tag_for_one_value(make_executor: MakeExecutor, engine: Engine) -> None:
    planter = Planter(SEED + 1)
    email, card = planter.email(), planter.card()
    outputs: dict[str, Output] = {
        "a": f"Contact {email}, paid with {card}.",
        "b": {"customer": {"mail": email}, "note": f"card {card} on file"},
    }
    ex = make_executor(
        make_registry([], outputs),
        scanner=ContentScanner(default="hash", engine=engine, to_model=True),
        timeout=TIMEOUT,
    )
    tags: dict[str, list[tuple[str, str]]] = {}
    with bus.Recorder(sender=ex) as recorder:
        for name in outputs:
            for n in (1, 2):
                call = ToolCall(id=f"{name}{n}", name="emit", arguments={"doc": name, "mode": "-"})
                result = ex.execute(call)
                assert result.ok, result
                text = json.dumps(result.output)
                assert email not in text and card not in text, f"seed {SEED + 1}"
                tags[call.id] = _TAG.findall(text)
        assert ex.drain_events(TIMEOUT)
    assert tags["a1"] == tags["a2"] and tags["b1"] == tags["b2"]
    assert {k for k, _ in tags["a1"]} == {"email", "card"}
    assert set(tags["a1"]) == set(tags["b1"])  # the same value, wherever it is
    published = [json.dumps(e.result.output) for e in recorder.of(bus.FINISHED)]
    assert len(published) == 4
    assert all(set(_TAG.findall(p)) == set(tags["a1"]) for p in published)


# -- the scanner's own misses, pinned --------------------------------------------------------------


def test_an_openai_key_ending_in_a_dash_is_found(engine: Engine) -> None:
    key = "sk-proj-" + "Ab3" * 24 + "Cd" + "T3BlbkFJ" + "xY9" * 24 + "z-"
    assert key.endswith("-") and len(key) == 164
    scanner = ContentScanner(engine=engine)
    assert key not in scanner.text(f"the key is {key} for now")
    assert key not in json.dumps(scanner.value({"model": "gpt", "value": key}))


def test_a_secret_under_a_numbered_secret_key_in_json_text_is_found(engine: Engine) -> None:
    value = "SC=xwnU6YXfx8MEkkbtuXVQYWmxP8yHS5hTsBG"
    scanner = ContentScanner(engine=engine)
    assert value not in scanner.text(json.dumps({"secret": "x", "secret_2": value}, indent=1))


@pytest.mark.parametrize(
    "text",
    [
        "write to truelove@example.org today",
        "mail falsetto.singer@example.com",
        "password: Tr8x!falseQ2z9Lm",
        "key ghp_Q7xK2mLp9RtV4bN8wS3yD6fH1jFaLsE0zUcW",
    ],
)
def test_a_value_that_starts_with_true_or_holds_false_is_found(engine: Engine, text: str) -> None:
    """Each is found by a scanner without that one allow-list pattern."""
    scanner = ContentScanner(engine=engine)
    assert scanner.findings(text), f"nothing found in {text!r}"


def test_a_secret_of_letters_only_is_found(engine: Engine) -> None:
    value = "ZfmPrMVfFiiakJtNuDwLhLHXiNFXbZHhZcnwVozm"  # TOOLBUS_SCAN_SEED=494
    scanner = ContentScanner(engine=engine)
    assert value not in scanner.text(f"SecretAccessKey: {value}")


def test_a_secret_starting_with_my_is_found(engine: Engine) -> None:
    value = "mylKW__xH406A4fZ7XS0wi4O"  # TOOLBUS_SCAN_SEED=1211
    scanner = ContentScanner(engine=engine)
    assert value not in scanner.text(f"The staging secret: {value} (do not share).")


def test_block_on_arguments_holds_whatever_the_masker_does(make_executor: MakeExecutor) -> None:
    """The block is decided on the arguments the tool would get (but for the
    secrets declared as such), not on what a masker of the user's returns."""
    ran: list[str] = []
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def pay(note: str) -> str:
        ran.append(note)
        return "paid"

    def summarizing(call: ToolCall) -> str:
        return "a payment"

    def raising(call: ToolCall) -> str:
        raise RuntimeError("masker down")

    scanner = ContentScanner(engine="re", actions={"card": "block"})
    for masker in (summarizing, raising):
        ex = make_executor(reg, scanner=scanner, masker=masker)
        result = ex.execute(ToolCall(name="pay", arguments={"note": "pay 4111111111111111"}))
        assert (result.status, result.error_code) == ("rejected", ErrorCode.CONTENT_BLOCKED)
    assert ran == []


def test_a_spilled_artifact_holds_the_scanned_text(
    make_executor: MakeExecutor, tmp_path: Path
) -> None:
    """`spill` stores results on disk (`stores_results`): with `to_model=False`
    it was handed the model's unscanned copy and wrote it to its file (found
    by review). It gets what is published now, and the model's preview is the
    scanned text, as a journal's replay is."""
    from toolbus.policies import spill

    planter = Planter(SEED + 2)
    email, card = planter.email(), planter.card()
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def report() -> str:
        return f"customer {email} paid with {card}\n" + "ordinary line of text\n" * 200

    store = tmp_path / "artifacts"
    ex = make_executor(
        registry,
        scanner=ContentScanner(to_model=False),
        policies=[spill(store=store, max_chars=1000)],
        timeout=TIMEOUT,
    )
    result = ex.execute(ToolCall(name="report", arguments={}))
    assert result.ok and "artifact" in result.metadata, result
    assert email not in str(result.output) and card not in str(result.output)
    (artifact,) = store.iterdir()
    stored = artifact.read_text()
    assert email not in stored and card not in stored, f"seed {SEED + 2}"
    assert "[REDACTED:email]" in stored and stored.count("ordinary line") == 200


def test_block_redacts_toolbus_own_answer_about_a_call_that_never_ran(
    make_executor: MakeExecutor, engine: Engine
) -> None:
    """A block is about what a tool returned: in toolbus's own answer about a
    call that never ran (an unknown tool's name, a deferral's or a denial's
    reason) the finding is redacted and the answer stands; a deferred call
    stays answerable. (Once each became "ran, but its result holds ...".)"""
    mail = "finance@acme.example"
    registry = ToolRegistry()

    @registry.tool(policies=[requires_approval(reason=f"ask {mail}")])
    def refund(order: str) -> str:
        """Refunds an order."""
        return "refunded"

    ex = make_executor(registry, scanner=ContentScanner(actions={"email": "block"}, engine=engine))
    with bus.Recorder(sender=ex) as recorder:
        unknown = ex.execute(ToolCall(name=f"lookup {mail}", arguments={}))
        deferred = ex.execute(ToolCall(id="r1", name="refund", arguments={"order": "A-17"}))
        assert deferred.approval_request is not None
        denied = ex.execute(
            ToolCall(id="r1", name="refund", arguments={"order": "A-17"}),
            approval=deferred.approval_request.deny(f"write to {mail}"),
        )
        assert ex.drain_events(TIMEOUT)
    assert unknown.error_code is ErrorCode.TOOL_NOT_FOUND
    assert (deferred.status, deferred.error_code) == ("deferred", ErrorCode.APPROVAL_REQUIRED)
    assert denied.error_code is ErrorCode.TOOL_NOT_ALLOWED
    published = [e.result for e in recorder.of(bus.FINISHED)]
    assert [r.error_code for r in published] == [
        ErrorCode.TOOL_NOT_FOUND,
        ErrorCode.APPROVAL_REQUIRED,
        ErrorCode.TOOL_NOT_ALLOWED,
    ]
    assert all(mail not in (r.error or "") for r in published)
    assert published[1].approval_request == deferred.approval_request
