"""Running a probe in a fresh process and reading back its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from ._report import ROOT


def probe(*args: str, timeout: float) -> dict[str, Any]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "BENCH_PROBE_DEADLINE": str(timeout)}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks._probe", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout + 30,  # the probe ends itself at `timeout`, with stacks
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"probe {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-20000:]}"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
