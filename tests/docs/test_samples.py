"""Every Python sample in the README and the docs runs (tests/docs/samples.py):
each page's blocks in order, in one namespace, in a process of its own, as a
reader copying them would; a block that cannot run here says why on the page."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.samples import samples

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    page
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    if samples(page.read_text())
]

# The slow tier (tests/README.md): a process per page, servers and clients in it.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_samples_of_a_page_run(page: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.docs.samples", str(page)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_a_skipped_sample_says_why() -> None:
    for page in PAGES:
        for sample in samples(page.read_text()):
            assert sample.skip is None or sample.skip.strip(), f"{page.name}:{sample.line}"


def test_every_python_fence_is_a_sample() -> None:
    """Blocks fenced ```py, ```Python, with a title, with tildes or more
    backticks, or quoted, were never run, nor code after an include; a page
    holding only those dropped out of the test (issue 22's reviews)."""
    page = "\n".join(
        [
            "```py",
            "a = 1",
            "```",
            '```Python title="b.py"',
            "b = a + 1",
            "```",
            "- a list item:",
            "",
            "  ```python",
            "  c = b + 1",
            "  ```",
            "```bash",
            "echo not python",
            "```",
            "```python",
            '--8<-- "examples/quickstart.py:results"',
            "```",
        ]
    )
    page += "\n" + "\n".join(
        [
            "````python",  # four backticks, closed by five
            "d = c + 1",
            "`````",
            "~~~ { .python title='e.py' }",
            "e = d + 1",
            "~~~",
            "> ```python",
            "> f = e + 1",
            "> ```",
            "```python",
            "--8<-- 'examples/quickstart.py:results'",
            "g = f + 1",  # (after an include: still run)
            "```",
        ]
    )
    found = samples(page)
    assert [s.code for s in found[:3]] == ["a = 1\n", "b = a + 1\n", "c = b + 1\n"]
    assert found[3].code.startswith("print()\n")
    assert "--8<--" not in found[3].code and found[3].code.endswith('from the cache")\n')
    assert [s.code for s in found[4:7]] == ["d = c + 1\n", "e = d + 1\n", "f = e + 1\n"]
    assert found[7].code.startswith("print()\n") and found[7].code.endswith("g = f + 1\n")
    assert len(found) == 8
