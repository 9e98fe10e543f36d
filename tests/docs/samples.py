"""Run the Python samples of one Markdown page, as a reader would: in order,
in one namespace, each block after those before it.

    python -m tests.docs.samples docs/policies.md

A page prepares what its samples take for granted (a `registry`, an
`executor`, a model client on a recorded transport) in hidden blocks, and
can skip a block that cannot run here, saying why:

    <!-- sample: setup
    registry = ToolRegistry()
    -->

    <!-- sample: skip (a GPU node) -->
    ```python
    ...
    ```

A setup block is Python inside an HTML comment: it runs where it stands and
is not shown on the page. A block that includes a section of a file (the
tutorial's, of examples/quickstart.py) runs that section. The samples run in a temporary directory (files
they write land there); `ROOT` is the repository. Exit 1 naming the first
block that fails.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PART = re.compile(
    r"<!-- sample: setup\n(?P<setup>.*?)-->"
    r"|(?:<!-- sample: skip (?P<why>[^>]*?)-->\n)?"
    # A Python fence, however its language is spelled (`py`, `Python`, with
    # attributes such as a title), indented too (in a list item): its code
    # dedented as the page renders it.
    r"^(?P<indent>[ \t]*)```[ \t]*(?:python3?|py)\b[^\n]*\n(?P<code>.*?)^[ \t]*```",
    re.S | re.M | re.I,
)


@dataclass(frozen=True)
class Sample:
    line: int
    code: str
    skip: str | None  # why not, or None: it runs
    hidden: bool  # a setup block


def samples(text: str) -> list[Sample]:
    """The page's blocks in order (a snippet include, `--8<--`, as the code it includes)."""
    found = []
    for m in _PART.finditer(text):
        line = text[: m.start()].count("\n") + 1
        if m.group("setup") is not None:
            found.append(Sample(line, m.group("setup"), None, True))
            continue
        indent = len(m.group("indent"))
        code = "".join(line[indent:] for line in m.group("code").splitlines(keepends=True))
        if code.lstrip().startswith("--8<--"):
            code = included(code)
        found.append(Sample(line, code, m.group("why"), False))
    return found


_INCLUDE = re.compile(r'^--8<-- "(?P<path>[^":]+)(?::(?P<section>[\w-]+))?"$', re.M)


def included(block: str) -> str:
    """A block that includes a file's section (`--8<-- "examples/x.py:run"`,
    as the site's snippets extension reads it): that section's code."""
    parts = []
    for m in _INCLUDE.finditer(block):
        text = (ROOT / m["path"]).read_text()
        if m["section"]:
            start = text.index(f"--8<-- [start:{m['section']}]")
            text = text[text.index("\n", start) + 1 : text.index(f"--8<-- [end:{m['section']}]")]
            text = text[: text.rfind("\n") + 1]  # (the end marker's line is not code)
        parts.append(text)
    return "".join(parts)


def run(page: Path) -> int:
    # A module of its own, as a script would be (dataclasses look their module up).
    module = types.ModuleType("__sample__")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    namespace["ROOT"] = ROOT
    ran = 0
    with tempfile.TemporaryDirectory() as where:
        os.chdir(where)
        for sample in samples(page.read_text()):
            if sample.skip is not None:
                continue
            try:
                exec(compile(sample.code, f"{page.name}:{sample.line}", "exec"), namespace)
            except BaseException:
                what = "setup block" if sample.hidden else "sample"
                print(f"{page.name}:{sample.line}: the {what} failed:", file=sys.stderr)
                traceback.print_exc()
                return 1
            ran += not sample.hidden
    print(f"{page.name}: {ran} samples ran")
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]).resolve()))
