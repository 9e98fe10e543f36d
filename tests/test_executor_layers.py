"""The executor layer (toolbus/executor.py, toolbus/_executor/) imports no
surface above it, not even deferred inside a function; `Executor.from_config`
reaches `toolbus.config` through the seam that layer fills as it is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import toolbus
import toolbus.config._apply
from toolbus._executor import _from_config

PACKAGE = Path(toolbus.__file__).resolve().parent
ABOVE = ("observe", "providers", "mcp", "integrations", "config", "demo", "_cli", "cli", "__main__")


def _runtime_imports(path: Path) -> list[str]:
    """The absolute names of the modules `path` imports, `if TYPE_CHECKING:` blocks left out."""
    module = "toolbus." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    package = module.rsplit(".", 1)[0]
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for part in child.orelse:
                    visit(part)
                continue
            if isinstance(child, ast.Import):
                found.extend(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = package.split(".")
                if child.level > 1:
                    base = base[: len(base) - (child.level - 1)]
                name = ".".join([*base, child.module or ""]) if child.level else child.module
                found.append((name or "").rstrip("."))
                found.extend(f"{name}.{alias.name}".strip(".") for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_the_executor_layer_imports_no_surface_above_it() -> None:
    files = [PACKAGE / "executor.py", *sorted((PACKAGE / "_executor").glob("*.py"))]
    upward = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in files
        for name in _runtime_imports(path)
        if name.split(".")[:2] in (["toolbus", above] for above in ABOVE)
    ]
    assert upward == []


def test_config_installs_the_reader_from_config_uses() -> None:
    assert _from_config._reader is toolbus.config._apply.executor_options
