"""The Ray backend when toolbus starts Ray itself (review 11): in a subprocess,
since the other Ray tests share one session this process started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="needs Ray: pip install 'toolbus[ray]'")

_BAD_ADDRESS = r"""
import json, sys, time
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.backends import RayBackend

reg = ToolRegistry()

@reg.tool(backend=RayBackend(sys.argv[1]), read_only=True)
def where() -> int:
    return 1

ex = Executor(reg, timeout=10)
out = {}
for name in ("first", "again"):
    t = time.monotonic()
    r = ex.execute(ToolCall(name="where", arguments={}))
    out[name] = [r.status, r.error_code, r.error, time.monotonic() - t]
t = time.monotonic()
ex.close()
out["close_s"] = time.monotonic() - t
print("RESULT " + json.dumps(out, default=str), flush=True)
"""


@pytest.mark.timeout(200)
def test_a_bad_address_is_a_clear_error_not_a_hang() -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c", _BAD_ADDRESS, "127.0.0.1:1"],
        capture_output=True, text=True, timeout=190, env=env, cwd="/tmp",
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    out = json.loads(lines[-1][7:])
    status, code, error, seconds = out["first"]
    assert (status, code) == ("error", "TOOL_CRASHED")
    assert "127.0.0.1:1" in error and seconds < 30, out
    status, code, error, seconds = out["again"]
    assert (status, code) == ("rejected", "TOOL_UNAVAILABLE"), out
    assert "127.0.0.1:1" in error and seconds < 2, out
    assert out["close_s"] < 5, out


def test_user_code_under_the_base_prefix_is_still_shipped_by_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A system Python has sys.base_prefix == "/usr": an app in /usr/src/app (or
    /opt/python-apps beside a prefix /opt/python) is not the standard library,
    so it travels by value to nodes that lack it."""
    import importlib

    from toolbus.backends import _ray_shipping

    pkg = tmp_path / "python-apps" / "myagent"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "python-apps"))
    module = importlib.import_module("myagent")
    try:
        monkeypatch.setattr(sys, "base_prefix", str(tmp_path / "python"))
        monkeypatch.setattr(sys, "prefix", str(tmp_path / "python"))
        assert _ray_shipping._by_value("myagent.tools") is module
        assert _ray_shipping._by_value("json.decoder") is None  # the stdlib: by reference
    finally:
        sys.modules.pop("myagent", None)


@pytest.mark.parametrize(
    "options",
    [
        {"num_cpus": float("inf")},
        {"num_gpus": float("nan")},
        {"resources": {"accelerator": float("inf")}},
        {"resources": {"CPU": 1}},
        {"resources": {"GPU": 1}},
    ],
    ids=["num_cpus-inf", "num_gpus-nan", "resource-inf", "resources-CPU", "resources-GPU"],
)
def test_placement_options_ray_refuses_are_refused_at_construction(
    options: dict[str, object],
) -> None:
    # Accepted, each call would fail (retryably) when Ray refuses to start an actor.
    from toolbus.backends import RayBackend

    with pytest.raises(ValueError, match="RayBackend: "):
        RayBackend(**options)  # type: ignore[arg-type]
    RayBackend(num_cpus=0.5, resources={"accelerator": 1})  # what Ray accepts stays accepted
