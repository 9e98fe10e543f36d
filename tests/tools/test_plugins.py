"""Plugins: tools installed packages publish under the entry-point group `toolbus.tools`.

The example plugin (tests/plugins/toolbus_example_plugin) is installed in the
test environment by `python3 scripts/run.py test`; its entry points are real
ones, a broken import, a bad value, a failing factory and a name collision
among them. Finer cases use made-up entry points (`plugin_values`).
"""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.tools import PluginError, PluginWarning

ROOT = Path(__file__).resolve().parents[2]
GROUP = "toolbus.tools"
EXAMPLE_TOOLS = ["echo", "example_reverse", "example_upper", "example_lower"]
EXAMPLE_BROKEN = {
    "example_broken_import": "cannot be loaded: ModuleNotFoundError: No module named "
    "'toolbus_example_plugin_missing_dependency'",
    "example_not_a_tool": "dict is not a Tool, a ToolRegistry, or a callable",
    "example_raises": "calling it raised RuntimeError: the example factory failed on purpose",
    "example_echo_again": "its tool 'echo' collides with the tool registered by entry point "
    "'example_echo'",
}


@pytest.fixture
def example_installed() -> None:
    """The example plugin must be installed: a test environment without it is
    not the one scripts/run.py makes, and these tests must not pass vacuously."""
    found = [
        ep
        for ep in importlib.metadata.entry_points(group=GROUP)
        if ep.value.startswith("toolbus_example_plugin")
    ]
    assert found, (
        "the example plugin is not installed in this environment: python3 scripts/run.py test "
        "installs it (or: pip install -e tests/plugins/toolbus_example_plugin)"
    )


needs_example = pytest.mark.usefixtures("example_installed")


@needs_example
def test_a_plugin_package_installed_in_the_test_venv_is_found() -> None:
    with pytest.warns(PluginWarning) as warned:
        registry = ToolRegistry.from_entry_points()
    example = [n for n in registry.names() if n in EXAMPLE_TOOLS]
    # In the entry points' order (by name): echo, factory, registry.
    assert example == EXAMPLE_TOOLS
    errors = {e.entry_point: e for e in registry.plugin_errors}
    for name, reason in EXAMPLE_BROKEN.items():
        assert name in errors, name
        assert reason in str(errors[name]), str(errors[name])
        assert errors[name].distribution == "toolbus-example-plugin"
        assert str(errors[name]).endswith("; skipped")
    assert errors["example_echo_again"].tool == "echo"
    assert isinstance(errors["example_broken_import"].__cause__, ImportError)
    assert isinstance(errors["example_raises"].__cause__, RuntimeError)
    # Each skipped plugin is a warning too, pointing at the caller's line.
    # (Only the plugins' own: the block also records any other warning the
    # process raises meanwhile, such as a garbage collection's ResourceWarning
    # for an event loop another test left unclosed, from asyncio's file.)
    plugin_warnings = [w for w in warned if issubclass(w.category, PluginWarning)]
    messages = [str(w.message) for w in plugin_warnings]
    assert all(any(e.entry_point in m for m in messages) for e in registry.plugin_errors)
    assert {Path(w.filename).name for w in plugin_warnings} == {Path(__file__).name}
    # The first to bring "echo" keeps it, and its tools run.
    with Executor(registry) as ex:
        assert ex.execute(ToolCall(name="echo", arguments={"text": "hi"})).output == "hi"
        assert ex.execute(ToolCall(name="example_upper", arguments={"text": "hi"})).output == "HI"


@needs_example
def test_plugin_modules_are_imported_only_when_asked() -> None:
    script = textwrap.dedent(
        """
        import sys, warnings
        import toolbus
        assert "toolbus_example_plugin" not in sys.modules, "imported by import toolbus"
        warnings.simplefilter("ignore")
        registry = toolbus.ToolRegistry.from_entry_points()
        assert "toolbus_example_plugin" in sys.modules
        print(",".join(registry.names()))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "echo" in proc.stdout.split(",")


@needs_example
def test_load_entry_points_keeps_the_registrys_own_tools() -> None:
    registry = ToolRegistry()

    @registry.tool
    def echo(text: str) -> str:
        """Mine."""
        return "mine"

    with pytest.warns(PluginWarning):
        problems = registry.load_entry_points()
    assert registry.get("echo") is echo
    clash = [p for p in problems if p.tool == "echo"]
    assert [p.entry_point for p in clash] == ["example_echo", "example_echo_again"]
    assert "collides with the tool already registered" in str(clash[0])
    assert registry.plugin_errors == problems


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Entry points of the group `test.plugins`: name -> `module:attribute`."""
    points = [EntryPoint(name, value, "test.plugins") for name, value in values.items()]

    def entry_points(*, group: str) -> list[EntryPoint]:
        return [p for p in points if p.group == group]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_every_kind_of_entry_point_value(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(
        monkeypatch,
        a_tool="tests.plugin_values:ping",
        b_class="tests.plugin_values:Hello",
        c_generator="tests.plugin_values:generated",
        d_registry_factory="tests.plugin_values:registry_factory",
    )
    registry = ToolRegistry.from_entry_points("test.plugins")
    assert registry.plugin_errors == []
    assert registry.names() == ["ping", "hello", "gen_one", "gen_two", "from_factory_registry"]
    assert ToolRegistry.from_entry_points("no.such.group").names() == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("tests.plugin_values:mixed", "it gave str is not a Tool"),
        ("tests.plugin_values:needs_arguments", "must take no arguments"),
        ("tests.plugin_values:names", "it gave str is not a Tool"),
        ("tests.plugin_values:nothing_here", "cannot be loaded: AttributeError"),
        ("tests.no_such_module:x", "cannot be loaded: ModuleNotFoundError"),
        # Review 9: the plugin's own code raising anywhere, even SystemExit, skips it.
        ("tests.plugin_values:fails_half_way", "iterating over its tools raised RuntimeError"),
        ("tests.plugin_values:iter_raises", "iterating over its tools raised RuntimeError"),
        ("tests.plugin_values:exits", "calling it raised SystemExit: a plugin that exits"),
        ("tests.plugin_exit_on_import:x", "cannot be loaded: SystemExit: this plugin refuses"),
    ],
)
def test_a_broken_entry_point_is_skipped(
    monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    fake_entry_points(monkeypatch, broken=value, good="tests.plugin_values:ping")
    with pytest.warns(PluginWarning, match="entry point 'broken'"):
        registry = ToolRegistry.from_entry_points("test.plugins")
    assert registry.names() == ["ping"]
    (error,) = registry.plugin_errors
    assert (error.entry_point, error.value, error.tool) == ("broken", value, None)
    assert reason in str(error)


def test_a_keyboard_interrupt_in_a_plugin_is_the_users(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C while a plugin loads is not the plugin's failure: it stops the caller.
    fake_entry_points(monkeypatch, broken="tests.plugin_values:interrupted")
    with pytest.raises(KeyboardInterrupt):
        ToolRegistry.from_entry_points("test.plugins")


def test_plugin_error_pickles() -> None:
    error = PluginError("text", entry_point="ep", value="m:a", distribution="d", tool="t")
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.entry_point, copy.value, copy.distribution, copy.tool) == (
        "text",
        "ep",
        "m:a",
        "d",
        "t",
    )


def test_a_plugins_tool_is_the_same_object(monkeypatch: pytest.MonkeyPatch) -> None:
    # A function tool is callable, yet a tool: registered as it is, never
    # called as a factory.
    from tests import plugin_values

    fake_entry_points(monkeypatch, ping="tests.plugin_values:ping")
    registry = ToolRegistry.from_entry_points("test.plugins")
    assert registry.get("ping") is plugin_values.ping


@pytest.mark.parametrize("entry", ["gen_raises", "sys_exit"])
def test_a_broken_plugin_is_skipped(tmp_path: Path, entry: str, monkeypatch: Any) -> None:
    """A plugin whose generator raised or that called sys.exit was fatal to from_entry_points
    (review 9)."""
    pkg = tmp_path / "brokenplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            from toolbus import tool

            @tool
            def good() -> str:
                return "good"

            def gen_raises():
                yield good
                raise RuntimeError("half way")

            def sys_exit():
                raise SystemExit("a plugin that exits")
            """
        )
    )
    info = tmp_path / "brokenplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[brokenplug.tools]\nx = brokenplug:{entry}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match="brokenplug"):
        reg = ToolRegistry.from_entry_points(group="brokenplug.tools")
    assert len(reg.plugin_errors) == 1
