"""MkDocs hooks for the documentation site (mkdocs.yml `hooks:`).

The Markdown files are written to read well on GitHub, where their links are
relative to the repository: `docs/reference.md` from CHANGELOG.md,
`../examples/x.py` from a guide. On the site those become the site's pages
and, for files that are not pages, the repository's copy.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_REPOSITORY = "https://github.com/toolbus/toolbus/blob/main/"
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The changelog page is CHANGELOG.md; each link to a file outside docs/
    is rewritten for the site."""
    if page.file.src_uri == "changelog.md":
        markdown = (Path(config["config_file_path"]).parent / "CHANGELOG.md").read_text()

    def rewrite(match: re.Match[str]) -> str:
        target = match.group("target")
        if target.startswith("docs/"):  # CHANGELOG.md's links to the guides
            return f"]({target.removeprefix('docs/')})"
        if target in ("../CHANGELOG.md", "CHANGELOG.md"):
            return "](changelog.md)"
        if target.startswith("../") and not target.startswith("../docs/"):
            return f"]({_REPOSITORY}{target.removeprefix('../')})"
        return match.group(0)

    return _LINK.sub(rewrite, markdown)
