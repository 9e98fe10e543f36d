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
            "toolbus._interrupts",
            "toolbus._text",
            "toolbus._encoded_text",
            "toolbus._tokens",
            "toolbus._version",
            "toolbus._seams",
            "toolbus._asgi",
            "toolbus._process_group",
            "toolbus.approvals",
            "toolbus.agent_runs",
            "toolbus.models",
        ),
    ),
    (
        "pure decisions",
        (
            "toolbus.masking",
            "toolbus._cleaned_result",
            "toolbus.scanning",
            "toolbus.retry",
            "toolbus.formatting",
            "toolbus.calls",
            "toolbus.hooks",
            "toolbus.scheduling",
            "toolbus.in_doubt",
            "toolbus.decisions",
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


# The functions that import a module named by a string, by where they live.
_DYNAMIC = {"importlib": "import_module", "builtins": "__import__", "pkgutil": "resolve_name"}


class _Imports(ast.NodeVisitor):
    """The toolbus imports a module's code can make, each with its line and
    whether it runs later (inside a function) or as the module is imported
    (module level, class bodies, decorators and default values)."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.found: list[tuple[str, int, bool]] = []
        self._depth = 0
        # Local names of the dynamic importers: `import_module`, `load` (from
        # `from importlib import import_module as load`), `importlib.import_module`.
        self._dynamic = {"__import__": "__import__"}
        self._modules = {"importlib": "importlib", "pkgutil": "pkgutil", "builtins": "builtins"}

    @property
    def package(self) -> str:
        return self.module if self.is_package else self.module.rpartition(".")[0]

    def _absolute(self, level: int, name: str | None, package: str | None = None) -> str:
        if level == 0:
            return name or ""
        base = (package if package is not None else self.package).split(".")
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

    def _signature_now(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Decorators and default values run when the function is defined.
        if not isinstance(node, ast.Lambda):
            for decorator in node.decorator_list:
                self.visit(decorator)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._signature_now(node)
        self._depth += 1
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)
            if alias.name in _DYNAMIC:
                self._modules[alias.asname or alias.name] = alias.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node.level, node.module)
        for alias in node.names:
            # `from pkg import name`: a submodule if there is one, else pkg's attribute.
            self._add(f"{base}.{alias.name}", node.lineno)
            if node.level == 0 and _DYNAMIC.get(node.module or "") == alias.name:
                self._dynamic[alias.asname or alias.name] = alias.name

    def _importer(self, func: ast.expr) -> str | None:
        """`import_module`, `__import__` or `resolve_name` if `func` names one."""
        if isinstance(func, ast.Name):
            return self._dynamic.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = self._modules.get(func.value.id)
            if module is not None and _DYNAMIC[module] == func.attr:
                return func.attr
        return None

    def visit_Call(self, node: ast.Call) -> None:
        importer = self._importer(node.func)
        if importer is not None:
            for target in self._targets(importer, node):
                self._add(target, node.lineno)
        self.generic_visit(node)

    def _targets(self, importer: str, node: ast.Call) -> list[str]:
        """What a dynamic import with a fixed name imports (none if the name is not fixed)."""
        keywords = {k.arg: k.value for k in node.keywords if k.arg}

        def argument(index: int, name: str) -> ast.expr | None:
            return node.args[index] if len(node.args) > index else keywords.get(name)

        def text(value: ast.expr | None) -> str | None:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
            return None

        name = text(argument(0, "name"))
        if name is None:
            return []
        if importer == "resolve_name":
            return [name.partition(":")[0]]
        if importer == "import_module":
            level = len(name) - len(name.lstrip("."))
            package = argument(1, "package")
            # `__package__` (or anything not fixed) is this module's own package.
            anchor = text(package) if text(package) is not None else None
            return [self._absolute(level, name.lstrip(".") or None, anchor)]
        level_node = argument(4, "level")
        level = level_node.value if isinstance(level_node, ast.Constant) else 0
        base = self._absolute(int(level or 0), name or None)
        fromlist = argument(3, "fromlist")
        names = [
            text(e) for e in (fromlist.elts if isinstance(fromlist, ast.List | ast.Tuple) else [])
        ]
        return [base, *(f"{base}.{n}" for n in names if n)]


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
        (
            "import importlib\nimportlib.import_module('..executor', __package__)\n",
            ["toolbus.executor"],
        ),
        (
            "import importlib\nimportlib.import_module('.executor', package='toolbus')\n",
            ["toolbus.executor"],
        ),
        (
            "from importlib import import_module as load\nload('toolbus.executor')\n",
            ["toolbus.executor"],
        ),
        ("__import__('mcp', globals(), None, ['x'], 2)\n", ["toolbus.mcp"]),
        ("__import__(name='toolbus.mcp')\n", ["toolbus.mcp"]),
        (
            "import pkgutil\npkgutil.resolve_name('toolbus.executor:Executor')\n",
            ["toolbus.executor"],
        ),
    ],
)
def test_the_checker_sees_deferred_and_dynamic_imports(source: str, expected: list[str]) -> None:
    visitor = _Imports("toolbus.tools._x", is_package=False)
    visitor.visit(ast.parse(source))
    found = sorted({_existing(t) for t, _, _ in visitor.found if t.startswith("toolbus")} - {None})
    assert found == expected


@pytest.mark.parametrize(
    ("source", "deferred"),
    [
        ("from ..mcp import x\n", False),
        ("def f():\n    from ..mcp import x\n", True),
        ("class C:\n    from ..mcp import x\n", False),  # a class body runs at import
        ("@use(__import__('toolbus.mcp'))\ndef f():\n    pass\n", False),  # a decorator too
        ("def f(x=__import__('toolbus.mcp')):\n    pass\n", False),  # and a default value
        ("f = lambda: __import__('toolbus.mcp')\n", True),
    ],
)
def test_the_checker_knows_what_runs_at_import_time(source: str, deferred: bool) -> None:
    visitor = _Imports("toolbus.tools._x", is_package=False)
    visitor.visit(ast.parse(source))
    assert {d for t, _, d in visitor.found if t.startswith("toolbus")} == {deferred}
