"""Modules stay small enough to read: the facade stays a facade.

`executor.py` is the public API and nothing else (issue 18 brought it to 500
lines or fewer); no module passes 600 lines; one over 400 says in its module
docstring why it is one piece (the words "one piece"), so the next person to
add to it knows whether to split it instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "toolbus"
FACADE_LIMIT = 600
MODULE_LIMIT = 600
EXPLAIN_ABOVE = 400


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_executor_facade_stays_small() -> None:
    lines = _lines(PACKAGE / "executor.py")
    assert lines <= FACADE_LIMIT, (
        f"toolbus/executor.py has {lines} lines (limit {FACADE_LIMIT}): it is the facade; "
        "put the new job in a module of its own (toolbus/_executor/) and call it from there"
    )


def test_no_module_passes_the_limit() -> None:
    over = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := _lines(p)) > MODULE_LIMIT
    }
    assert not over, f"modules over {MODULE_LIMIT} lines: {over}"


def test_a_long_module_says_why_it_is_one_piece() -> None:
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if _lines(path) <= EXPLAIN_ABOVE:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "one piece" not in doc.lower():
            unexplained.append(str(path.relative_to(PACKAGE.parent)))
    assert not unexplained, (
        f"modules over {EXPLAIN_ABOVE} lines whose docstring does not say why they are "
        f"one piece (split them, or say so): {unexplained}"
    )
