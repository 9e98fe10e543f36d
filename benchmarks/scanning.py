"""Scenario 17: what the content scanner costs per KB of text.

The texts are the scanner's test corpora (`tests/scanning/corpus`): about 330
ordinary tool outputs (prose, JSON with ids and hashes, logs, listings), what
a scanner left on mostly sees, and 340 with planted secrets and personal data.
One operation scans a corpus once, two ways: as JSON text
(`ContentScanner.findings`), and as the executor scans a result, the parsed
value with every string in it (`ContentScanner.value`). The figure is the
process's CPU per KB of JSON text, for the fast matcher (hyperscan as the
prefilter) and the pure-`re` fallback in the same interleaved rounds. The goal
is an absolute one (µs of CPU per KB of ordinary output, as text), the other
figures beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import orjson

from toolbus.scanning import ContentScanner, hyperscan_available

from ._common import Ctx
from ._harness import Case, Runner, clock, interleave
from ._report import Table

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "scanning" / "corpus"
GOAL_US_PER_KB = 20.0
SMOKE_OUTPUTS = 30  # of each corpus, in smoke mode (a whole one takes half a second with `re`)


def _outputs(name: str) -> list[Any]:
    return [json.loads(line)["output"] for line in (CORPUS / name).read_text().splitlines()]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _scanning(scan_one: Callable[[Any], object], items: list[Any]) -> Runner:
    def scan(n: int) -> list[float]:
        t0 = clock()
        for _ in range(n):
            for item in items:
                scan_one(item)
        return [(clock() - t0) / n]

    return scan


def run(ctx: Ctx) -> None:
    outputs = {"ordinary": _outputs("ordinary.jsonl"), "planted": _outputs("planted.jsonl")}
    if ctx.scale.smoke:  # (a slice of each: a smoke run checks the scenario works, not its figures)
        outputs = {name: values[:SMOKE_OUTPUTS] for name, values in outputs.items()}
    corpora = {name: [_text(v) for v in values] for name, values in outputs.items()}
    kb = {name: sum(len(t.encode()) for t in texts) / 1024 for name, texts in corpora.items()}
    engines: list[Literal["hyperscan", "re"]] = ["hyperscan", "re"]
    if not hyperscan_available():
        engines = ["re"]
    scanners = {engine: ContentScanner(engine=engine) for engine in engines}
    cases = [
        Case(f"{engine} / {name}", _scanning(scanners[engine].findings, corpora[name]))
        for name in corpora
        for engine in engines
    ] + [
        Case(f"{engine} / {name} / value", _scanning(scanners[engine].value, outputs[name]))
        for name in outputs
        for engine in engines
    ]
    rounds = 3 if ctx.scale.smoke else 7
    stats = interleave(cases, rounds=rounds, budget_ms=ctx.scale.budget_ms)
    t = Table(
        "scanning each corpus once: per KB",
        ["engine / corpus (/ as a value)", "wall µs/KB", "CPU µs/KB"],
    )
    per_kb: dict[str, float] = {}
    for label, st in stats.items():
        size = kb[label.split(" / ")[1]]  # per KB of the corpus as JSON text
        per_kb[label] = st.cpu / 1000 / size
        t.add(label, f"{st.median / 1000 / size:.1f}", f"{per_kb[label]:.1f}")
        ctx.report.figure("scanning", label, {**st.summary(), "kb": size})
    t.notes.append(
        f"ordinary: {len(corpora['ordinary'])} tool outputs without a secret ({kb['ordinary']:.0f} "
        f"KB); planted: {len(corpora['planted'])} with 1 to 4 secrets or personal data each "
        f"({kb['planted']:.0f} KB), where every finding is confirmed by Python's re"
    )
    t.notes.append(
        "as a value: the parsed output, every string and key in it, as the executor scans a "
        "result (per KB of its JSON text)"
    )
    t.notes.append("both engines find the same things: tests/scanning/test_scanner.py")
    ctx.report.table(t)
    goal = ctx.report.goal("scan_per_kb")
    if "hyperscan / ordinary" in per_kb:
        fast = per_kb["hyperscan / ordinary"]
        shown = (
            f"{fast:.1f} µs/KB (re: {per_kb['re / ordinary']:.1f}; as a value "
            f"{per_kb['hyperscan / ordinary / value']:.1f}, re "
            f"{per_kb['re / ordinary / value']:.1f}; with planted secrets "
            f"{per_kb['hyperscan / planted']:.1f}, re {per_kb['re / planted']:.1f})"
        )
        goal.set(fast, shown, fast <= GOAL_US_PER_KB)
    else:
        ctx.report.note("hyperscan is not installed (the scan extra): only the fallback ran")
