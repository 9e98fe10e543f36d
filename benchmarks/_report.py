"""What a run produces: tables per scenario, goals, figures for JSON, series for plots.

Tables print as soon as a scenario has them (plain text, so CI logs keep
them); the same tables become the Markdown results section.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What a run prints fits a terminal this wide (the Markdown tables keep their rows whole).
WIDTH = 100
_GAP = "  "
_NARROWEST = 12
_WORDIEST = 24  # a longer word may be broken to fit
MD_START = "<!-- benchmarks:results:start -->"
MD_END = "<!-- benchmarks:results:end -->"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([str(c) for c in cells])

    def text(self, width: int = WIDTH) -> str:
        """The table as plain text within `width` columns: the widest columns
        give way first, their cells wrapped onto more lines."""
        rows = [self.columns, *self.rows]
        widths = [max(1, *(len(r[i]) for r in rows)) for i in range(len(self.columns))]
        _fit(widths, width, rows)

        def lines(cells: list[str]) -> list[str]:
            wrapped = [textwrap.wrap(c, w) or [""] for c, w in zip(cells, widths, strict=True)]
            out = []
            for k in range(max(len(parts) for parts in wrapped)):
                parts = [p[k] if k < len(p) else "" for p in wrapped]
                first = parts[0].ljust(widths[0])
                rest = [c.rjust(w) for c, w in zip(parts[1:], widths[1:], strict=True)]
                out.append(_GAP.join([first, *rest]).rstrip())
            return out

        out = [*_wrap(f"-- {self.title}", width), *lines(self.columns)]
        out.append(_GAP.join("-" * w for w in widths))
        for row in self.rows:
            out += lines(row)
        for n in self.notes:
            out += _wrap(n, width, "   ")
        return "\n".join(out)

    def markdown(self) -> str:
        def esc(s: str) -> str:
            return s.replace("|", "\\|")

        out = [f"**{self.title}**", ""]
        out.append("| " + " | ".join(esc(c) for c in self.columns) + " |")
        out.append("|" + "|".join(["---"] + ["---:"] * (len(self.columns) - 1)) + "|")
        out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out)


def _fit(widths: list[int], width: int, rows: list[list[str]]) -> None:
    """Narrow the widest of `widths` (in place) until they fit in `width` with
    their gaps: first no column below its longest word (words stay whole),
    then none below `_NARROWEST` (a table that cannot fit stays wider)."""
    room = width - len(_GAP) * (len(widths) - 1)
    words = [
        min(_WORDIEST, max((len(w) for r in rows for w in r[i].split()), default=0))
        for i in range(len(widths))
    ]
    for floors in (words, [_NARROWEST] * len(widths)):
        while sum(widths) > room:
            i = max(range(len(widths)), key=lambda k: widths[k] - floors[k])
            if widths[i] <= max(floors[i], 1):
                break
            widths[i] -= 1


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent) or [""]


@dataclass
class Goal:
    """One target of the issue: measured against `target`, pass or miss."""

    key: str
    text: str
    target: str
    scenario: str
    measured: str = "not run"
    passed: bool | None = None
    value: float | None = None

    def set(self, value: float, shown: str, passed: bool) -> None:
        if math.isnan(value):
            self.measured, self.passed, self.value = "n/a", None, None
            return
        self.value, self.measured, self.passed = value, shown, passed

    def skip(self, why: str) -> None:
        self.measured, self.passed = why, None

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "MISS", None: "–"}[self.passed]


@dataclass
class Section:
    key: str
    header: str
    tables: list[Table] = field(default_factory=list)
    seconds: float = 0.0


class Report:
    def __init__(self, *, smoke: bool, goals: list[Goal]) -> None:
        self.smoke = smoke
        self.sections: list[Section] = []
        self.goals = {g.key: g for g in goals}
        self.figures: dict[str, dict[str, Any]] = {}
        self.series: dict[str, Any] = {}  # raw data for the plots
        self.meta = machine_meta(smoke)

    def begin(self, key: str, header: str) -> Section:
        s = Section(key, header)
        self.sections.append(s)
        print(f"\n=== {header} ===", flush=True)
        return s

    def table(self, table: Table) -> None:
        self.sections[-1].tables.append(table)
        print(table.text() + "\n", flush=True)

    def note(self, text: str, indent: str = "   ") -> None:
        print("\n".join(_wrap(text, WIDTH, indent)), flush=True)

    def figure(self, scenario: str, name: str, value: Any) -> None:
        self.figures.setdefault(scenario, {})[name] = value

    def goal(self, key: str) -> Goal:
        return self.goals[key]

    # -- the end of the run ----------------------------------------------------

    def goals_table(self) -> Table:
        title = "Goals" + (" (smoke mode: counts too small to judge; none is checked)" * self.smoke)
        t = Table(title, ["goal", "measured", "target", "result"])
        for g in self.goals.values():
            # A smoke run's figures say the scenario ran, not whether a goal is met.
            verdict = "not checked" if self.smoke and g.passed is not None else g.verdict
            t.add(g.text, g.measured, g.target, verdict)
        return t

    def misses(self) -> list[Goal]:
        return [g for g in self.goals.values() if g.passed is False]

    def to_json(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "scenarios": {
                s.key: {"header": s.header, "seconds": s.seconds, **self.figures.get(s.key, {})}
                for s in self.sections
            },
            "goals": [
                {
                    "key": g.key,
                    "goal": g.text,
                    "target": g.target,
                    "measured": g.measured,
                    "value": g.value,
                    "passed": g.passed,
                }
                for g in self.goals.values()
            ],
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")

    def markdown(self, plots: list[Path] | None = None, plots_base: Path | None = None) -> str:
        m = self.meta
        out = [
            MD_START,
            "",
            f"Run on {m['date']} ({'smoke' if self.smoke else 'full'} mode): "
            f"{m['cpus']} CPUs, Python {m['python']}, {m['platform']}, "
            f"toolbus {m['toolbus']} at `{m['commit']}`; "
            f"load average {m['load_start']} at the start, {m.get('load_end', '?')} "
            f"at the end; {m.get('seconds', 0):.0f} s in all.",
            "",
            "Command: `" + m["command"] + "`",
            "",
            self.goals_table().markdown(),
        ]
        for s in self.sections:
            out += ["", f"#### {s.header}", ""]
            out += [t.markdown() + "\n" for t in s.tables]
        for p in plots or []:
            rel = os.path.relpath(p, plots_base) if plots_base else str(p)
            out += [f"![{p.stem}]({rel})", ""]
        out += ["", MD_END]
        return "\n".join(out)

    def write_markdown(self, path: Path, plots: list[Path]) -> None:
        """Replace the results section between the markers, or write the file."""
        text = self.markdown(plots, path.resolve().parent)
        if path.exists():
            old = path.read_text()
            if MD_START in old and MD_END in old:
                head, _, rest = old.partition(MD_START)
                _, _, tail = rest.partition(MD_END)
                path.write_text(head + text + tail)
                return
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def machine_meta(smoke: bool) -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        commit = (commit or "?") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        commit = "?"
    import toolbus

    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "mode": "smoke" if smoke else "full",
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "toolbus": toolbus.__version__,
        "commit": commit,
        "load_start": load_average(),
        "command": "python -m benchmarks " + " ".join(sys.argv[1:]),
    }


def load_average() -> str:
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"
