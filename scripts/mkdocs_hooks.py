"""MkDocs hooks for the documentation site (mkdocs.yml `hooks:`).

The Markdown files are written to read well on GitHub, where their links are
relative to the repository: `docs/reference.md` from CHANGELOG.md,
`../examples/x.py` from a guide. On the site those become the site's pages
and, for files that are not pages, the clone's own copy: the site is built
into `site/` at the clone's root, so `../examples/x.py` from a page is the
file itself, offline too. (Marked while MkDocs checks the links, which would
refuse a file outside `docs/`; made relative again in the finished page.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_OUTSIDE = "https://clone.invalid/"  # a file of the clone outside docs/ (see above)
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
# A page shows a section of a file outside docs/ (README.md's install notes):
# `<!-- site: README.md installing -->` on the page; in the file, the section
# runs from `<!-- site: installing ... -->` to `<!-- site: end -->`.
_INCLUDE = re.compile(r"<!-- site: (?P<file>[\w./-]+\.md) (?P<name>[\w-]+) -->")


def _section(path: Path, name: str) -> str:
    text = path.read_text()
    start = re.search(rf"<!-- site: {re.escape(name)}\b[^>]*-->\n", text)
    if start is None:
        raise ValueError(f"{path.name} has no section {name!r} for the site")
    end = text.index("<!-- site: end -->", start.end())
    return text[start.end() : end]


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The changelog page is CHANGELOG.md; each link to a file outside docs/
    is rewritten for the site."""
    root = Path(config["config_file_path"]).parent
    if page.file.src_uri == "changelog.md":
        markdown = (root / "CHANGELOG.md").read_text()
    markdown = _INCLUDE.sub(lambda m: _section(root / m["file"], m["name"]), markdown)

    def rewrite(match: re.Match[str]) -> str:
        target = match.group("target")
        if target.startswith("docs/"):  # CHANGELOG.md's links to the guides
            return f"]({target.removeprefix('docs/')})"
        if target in ("../CHANGELOG.md", "CHANGELOG.md"):
            return "](changelog.md)"
        if target.startswith("../") and not target.startswith("../docs/"):
            return f"]({_OUTSIDE}{target.removeprefix('../')})"
        return match.group(0)

    return _LINK.sub(rewrite, markdown)


def on_post_page(output: str, page: Any, config: Any) -> str:
    """A file of the clone outside docs/, relative to the page in site/."""
    return output.replace(_OUTSIDE, "../")
