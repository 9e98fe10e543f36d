"""The layers import downward only (docs/architecture.md, "Layers").

Every import that can run counts: module-level ones, deferred ones inside
functions, and `importlib.import_module` / `__import__` with a fixed name.
Only imports under `if TYPE_CHECKING:` may point up: they never run.
Importing `a.b.c` runs the packages `a.b` and `a` first, so it counts as
importing each of them too, except the root `toolbus` package, which Python
has always run before any of its submodules (and which sits on top).

A lower layer that needs something from above gets it through a seam that the
upper layer fills (`toolbus/_seams.py`), never through an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "toolbus"

# Bottom to top. A module belongs to the layer of its longest listed prefix.
# Keep in step with the layer table of docs/architecture.md.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "ground: data, errors, options",
        (
            "toolbus._json",
            "toolbus._keywords",
            "toolbus._errors",
            "toolbus._output",
            "toolbus._options",
            "toolbus._sync",
            "toolbus._text",
            "toolbus._tokens",
            "toolbus._version",
            "toolbus._seams",
            "toolbus._asgi",
            "toolbus._process_group",
            "toolbus.approvals",
            "toolbus.models",
        ),
    ),
    (
        "pure decisions",
        (
            "toolbus.masking",
            "toolbus.retry",
            "toolbus.formatting",
            "toolbus.calls",
            "toolbus.hooks",
            "toolbus.scheduling",
        ),
    ),
    ("the bus", ("toolbus.bus",)),
    ("policies", ("toolbus.policies",)),
    ("tools", ("toolbus.tools",)),
    ("the journal", ("toolbus.journal",)),
    ("one call's steps", ("toolbus.pipeline",)),
    ("backends", ("toolbus.backends",)),
    ("the scheduler and actors", ("toolbus.actors",)),
    (
        "the executor",
        ("toolbus._records", "toolbus._setup", "toolbus._executor", "toolbus.executor"),
    ),
    ("observe", ("toolbus.observe",)),
    ("providers", ("toolbus.providers",)),
    ("mcp", ("toolbus.mcp",)),
    ("integrations", ("toolbus.integrations",)),
    ("config", ("toolbus.config",)),
    ("demo", ("toolbus.demo",)),
    ("the command line", ("toolbus._cli", "toolbus.cli", "toolbus.__main__")),
    ("the package", ("toolbus", "toolbus._wiring")),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of `module`'s layer (its longest listed prefix)."""
    best, length = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = i, len(prefix)
    if best < 0:
        raise LookupError(
            f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md)"
        )
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    deferred: bool  # inside a function or class body: runs when that code runs


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.found: list[tuple[str, int, bool]] = []
        self._depth = 0

    def _absolute(self, level: int, name: str | None) -> str:
        if level == 0:
            return name or ""
        base = self.module.split(".")
        if not self.is_package:
            base.pop()
        base = base[: len(base) - (level - 1)]
        return ".".join([*base, name] if name else base)

    def _add(self, target: str, line: int) -> None:
        self.found.append((target, line, self._depth > 0))

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:  # the `else:` of a TYPE_CHECKING block runs
                self.visit(child)
            return
        self.generic_visit(node)

    def _nested(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _nested
    visit_ClassDef = _nested

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node.level, node.module)
        for alias in node.names:
            # `from pkg import name`: a submodule if there is one, else pkg's attribute.
            self._add(f"{base}.{alias.name}", node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in {"import_module", "__import__"} and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                target = first.value
                if target.startswith(".") and len(node.args) > 1:
                    package = node.args[1]
                    if isinstance(package, ast.Constant) and isinstance(package.value, str):
                        level = len(target) - len(target.lstrip("."))
                        anchor = package.value.split(".")
                        anchor = anchor[: len(anchor) - (level - 1)]
                        target = ".".join([*anchor, target.lstrip(".")])
                self._add(target, node.lineno)
        self.generic_visit(node)


def _existing(target: str) -> str | None:
    """The toolbus module `target` names (dropping a trailing attribute name)."""
    while target and target not in MODULES:
        if "." not in target:
            return None
        target = target.rsplit(".", 1)[0]
    return target or None


def imports() -> Iterator[Import]:
    """Every import of a toolbus module by a toolbus module that can run."""
    for module, path in MODULES.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), str(path)))
        for target, line, deferred in visitor.found:
            if not target.startswith("toolbus"):
                continue
            found = _existing(target)
            if found is None or found == module:
                continue
            # Importing a.b.c runs the packages a.b and a.b.c's own code: all
            # count. The root counts only when it is what is imported (`import
            # toolbus`, `from toolbus import __version__`): reading the top's names.
            parts = found.split(".")
            for n in range(1 if len(parts) == 1 else 2, len(parts) + 1):
                yield Import(module, ".".join(parts[:n]), line, deferred)


def test_every_module_has_a_layer() -> None:
    missing = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError as e:
            missing.append(str(e))
    assert not missing, "\n".join(missing)


def test_imports_point_down_only() -> None:
    upward = sorted(
        {
            f"{i.source}:{i.line} imports {i.target}{' (deferred)' if i.deferred else ''}: "
            f"'{LAYERS[layer_of(i.source)][0]}' sits below '{LAYERS[layer_of(i.target)][0]}'"
            for i in imports()
            if layer_of(i.target) > layer_of(i.source)
        }
    )
    assert not upward, (
        "these imports point up the layer order (tests/contract/test_layers.py, docs/architecture.md); "
        "give the lower layer a seam the upper one fills (toolbus/_seams.py) or move the code:\n"
        + "\n".join(upward)
    )


def test_no_import_cycle_between_modules_at_import_time() -> None:
    """Module-level imports form no cycle (a cycle works only by the order
    Python happens to meet the modules in, and breaks when that changes)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for i in imports():
        # A package's __init__ importing its own modules is how packages are
        # made; a module importing its package is what forms cycles.
        if (
            not i.deferred
            and MODULES[i.source].name != "__init__.py"
            and not i.source.startswith(i.target + ".")
        ):
            graph[i.source].add(i.target)
    cycles = _cycles(graph)
    assert not cycles, "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ..backends import Backend\n", ["toolbus.backends"]),
        ("def f():\n    from ..backends import x\n", ["toolbus.backends"]),
        (
            "import importlib\ndef f():\n    importlib.import_module('toolbus.mcp')\n",
            ["toolbus.mcp"],
        ),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..mcp import x\n", []),
    ],
)
def test_the_checker_sees_deferred_and_dynamic_imports(source: str, expected: list[str]) -> None:
    visitor = _Imports("toolbus.tools._x", is_package=False)
    visitor.visit(ast.parse(source))
    found = sorted({_existing(t) for t, _, _ in visitor.found if t.startswith("toolbus")} - {None})
    assert found == expected
