"""The documentation site (mkdocs.yml) builds strictly: a broken link, a
missing page, a link to a heading that is not there or an unresolvable API
reference fails it; the tutorial's code is examples/quickstart.py's sections,
which tests/docs/test_samples.py runs in the page's order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the docs extra is not installed")
pytest.importorskip("material", reason="the docs extra is not installed")

ROOT = Path(__file__).resolve().parents[2]

# The slow tier (tests/README.md): a whole site build.
pytestmark = pytest.mark.slow


def test_the_site_builds_strictly_and_reads_offline(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Offline: plain file URLs between pages, and the search index beside them.
    index = (site / "index.html").read_text()
    assert 'href="tutorial.html"' in index
    assert (site / "search" / "search_index.js").exists()
    tutorial = (site / "tutorial.html").read_text()
    for part in ("def get_weather", "tool_calls = [", "chat_tool_messages", "ConsoleSpanExporter"):
        assert part in re.sub(r"<[^>]+>", "", tutorial), part  # the example's code, included
    changelog = (site / "changelog.html").read_text()
    assert 'href="reference.html#about-stability"' in changelog  # its docs/ links, for the site
    assert "ToolRegistry" in (site / "api.html").read_text()


def test_the_docs_speak_to_users_not_to_the_project() -> None:
    """Internal words leaked into the docs: "(seed 003)", "seed 004's dynamic
    timeout", the project's own issue numbers, other projects' unlinked ones
    ("pydantic-ai#8060") (issue 22)."""
    internal = re.compile(
        r"\bseed \d{3}\b|\bissues? \d+\b|\breview \d+\b|\bthe issue\b"
        # another project's issue number, unless it links to its source
        r"|(?<![\w./-])[a-z][\w-]*#\d+\b(?!\]\(https?://)"
    )
    # The changelog is a page of the site too (scripts/mkdocs_hooks.py).
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "CHANGELOG.md", ROOT / "README.md"]
    found = [
        f"{page.name}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if internal.search(line)
    ]
    assert found == []
