"""The seams through which a lower layer reaches a higher one (toolbus/_seams.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import toolbus
from toolbus import _seams
from toolbus.policies import spill
from toolbus.providers.anthropic import tool_definitions
from toolbus.tools import ToolRegistry


def _all_seams() -> list[_seams.Seam[object]]:  # type: ignore[type-var]
    return [getattr(_seams, n) for n in _seams.__all__ if n != "Seam"]


def test_every_seam_is_filled_once_toolbus_is_imported() -> None:
    assert toolbus.Executor is not None
    empty = [s.name for s in _all_seams() if s._fn is None]
    assert not empty


def test_a_lower_module_imported_first_finds_its_seams_filled() -> None:
    """Python runs `toolbus/__init__.py`, which wires the seams, before any
    submodule: importing a tool module alone is enough."""
    code = (
        "from toolbus.tools import FunctionTool\n"
        "t = FunctionTool(lambda x: x, name='echo', backend='thread')\n"
        "print(t.name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "echo"


def test_an_empty_seam_says_who_fills_it() -> None:
    seam: _seams.Seam[object] = _seams.Seam("example", "toolbus.somewhere.fill_me")  # type: ignore[type-var]
    with pytest.raises(RuntimeError, match=r"'example' is not filled \(toolbus.somewhere.fill_me"):
        seam.call  # noqa: B018


def test_the_registry_reaches_the_providers_and_mcp_through_its_seams() -> None:
    registry = ToolRegistry()

    @registry.tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    assert registry.to_anthropic() == tool_definitions(registry)
    pytest.importorskip("mcp")
    [listed] = registry.to_mcp()
    assert listed["name"] == "add"
    assert listed["inputSchema"]["required"] == ["a", "b"]


def test_a_bad_backend_is_refused_at_registration_through_the_seam() -> None:
    def fetch() -> str:
        return "x"

    registry = ToolRegistry()
    with pytest.raises(ValueError, match="loop"):
        registry.tool(backend="loop")(fetch)


def test_a_spill_policy_brings_its_reader_tool_through_the_seam(tmp_path: object) -> None:
    policy = spill(store=str(tmp_path))
    [reader] = policy.tools()
    assert reader.name == "read_artifact"
    assert reader.read_only
    assert reader is policy.tools()[0]
