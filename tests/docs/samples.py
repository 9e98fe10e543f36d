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
    # A Python fence, however it is written: backticks or tildes, three or
    # more; the language spelled `py`, `Python`, `python3`, or as a class
    # (`{ .python title="x.py" }`); indented (in a list item) or quoted (`>`).
    # Its code as the page renders it: without that indent or quote.
    r"^(?P<indent>[ \t>]*)(?P<fence>`{3,}|~{3,})[ \t]*"
    r"(?:(?:python3?|py)\b[^\n]*|\{[^}\n]*\.(?:python3?|py)\b[^}\n]*\})\n"
    r"(?P<code>.*?)^[ \t>]*(?P=fence)[`~]*[ \t]*$",  # (a closing fence may be longer)
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
        indent = m.group("indent")
        code = "".join(
            line.removeprefix(indent) if line.startswith(indent) else line.lstrip(" \t>")
            for line in m.group("code").splitlines(keepends=True)
        )
        found.append(Sample(line, included(code), m.group("why"), False))
    return found


_INCLUDE = re.compile(r"""^--8<-- (["'])(?P<path>[^"':]+)(?::(?P<section>[\w-]+))?\1[ \t]*$""")


def included(code: str) -> str:
    """`code` with each line that includes a file or a file's section
    (`--8<-- "examples/x.py:run"`, as the site's snippets extension reads it)
    replaced by what it includes."""
    out = []
    for line in code.splitlines(keepends=True):
        m = _INCLUDE.match(line.strip())
        if m is None:
            out.append(line)
            continue
        text = (ROOT / m["path"]).read_text()
        if m["section"]:
            start = text.index(f"--8<-- [start:{m['section']}]")
            text = text[text.index("\n", start) + 1 : text.index(f"--8<-- [end:{m['section']}]")]
            text = text[: text.rfind("\n") + 1]  # (the end marker's line is not code)
        out.append(text)
    return "".join(out)


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
