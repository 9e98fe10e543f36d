"""The Ray backend when toolbus starts Ray itself: in a subprocess, since the
other Ray tests (test_ray.py) share one session this process started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# The slow tier (tests/README.md): a local Ray cluster started and stopped.
pytestmark = pytest.mark.slow

pytest.importorskip("ray", reason="needs Ray: pip install 'toolbus[ray]'")

_BAD_ADDRESS = r"""
import json, sys, time
from toolbus import Executor, ToolCall, ToolRegistry
from toolbus.backends import RayBackend, _ray_calls

# The bound on connecting (20 s by default) made shorter (the test's
# CONNECT_TIMEOUT): nobody ever answers at the address, so the first call's
# wait ends at the bound whatever it is, and a hang would still be one.
_ray_calls.CONNECT_TIMEOUT = float(sys.argv[2])

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


# Above the bound of the second call's refusal (10 s, below): a second wait
# for Ray would still be seen.
CONNECT_TIMEOUT = 12.0


@pytest.mark.timeout(200)
def test_a_bad_address_is_a_clear_error_not_a_hang() -> None:
    """A Ray address nobody answers at hung the call instead of a clear error (review 11)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(Path(__file__).parents[2])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c", _BAD_ADDRESS, "127.0.0.1:1", str(CONNECT_TIMEOUT)],
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
    # Rejected at once, not after another connection attempt (CONNECT_TIMEOUT,
    # as the first call shows): bounded loosely, as a loaded machine is slow.
    assert "127.0.0.1:1" in error and seconds < 10, out
    assert out["close_s"] < 20, out
