"""`import toolbus` stays light once built-in policies exist: what a rate limit,
a cache or a shared store may use (`limits`, `cachetools`, `redis`) is imported
when such a policy is made, never at `import toolbus`. Every call pays for the
modules a process holds only at start-up, but a tool without policies must cost
what it cost before policies (docs/performance.md, scenario 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import toolbus

HEAVY = ("limits", "cachetools", "redis")
ROOT = Path(toolbus.__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import json, sys

    HEAVY = {heavy!r}
    asked = []

    class Spy:
        # Records every attempt to import one of HEAVY (or a submodule), whether or
        # not it is installed; finds nothing, so the import goes on as usual.
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in HEAVY:
                asked.append(name)
            return None

    sys.meta_path.insert(0, Spy())
    import toolbus
    import toolbus.policies
    from toolbus.policies import *  # noqa: F403
    print(json.dumps({{
        "toolbus": toolbus.__file__,
        "policies": "toolbus.policies" in sys.modules,
        "asked": asked,
        "loaded": sorted(m for m in sys.modules if m.partition(".")[0] in HEAVY),
    }}))
    """
)


def test_import_toolbus_imports_no_heavy_module_a_policy_may_use() -> None:
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(heavy=HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert Path(seen["toolbus"]).resolve() == Path(toolbus.__file__).resolve()
    assert seen["policies"]  # the executor imports the seam: it is what is measured
    assert seen["asked"] == [], seen
    assert seen["loaded"] == [], seen
