"""The npm packages the tests drive, pinned: the MCP Inspector's command
line, the reference server `server-everything` and the official conformance
suite (the MCP tests; its next release, installed beside it under the name
`conformance-next`, runs the scenario 0.1.16 gets wrong), and the Restate
server (the Restate integration's tests, example and benchmark). `test`
installs whichever is missing into `.cache/npm` (once: each is kept until
its pin changes) when `npm` is there; without npm, or offline, the tests
that need them skip and say why (tests/mcp_servers/peers.py,
tests/integrations/restate_support.py and the test files find them there).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

# Where each goes under node_modules, and its version (or `npm:<package>@<version>`,
# another package under this name).
PACKAGES = {
    "@modelcontextprotocol/inspector": "1.0.3",
    "@modelcontextprotocol/server-everything": "2026.8.31",
    "@modelcontextprotocol/conformance": "0.1.16",
    "conformance-next": "npm:@modelcontextprotocol/conformance@0.2.0-alpha.12",
    # The Restate server (its Linux binary comes as an optional dependency).
    "@restatedev/restate-server": "1.7.12",
}


def installed_version(prefix: Path, package: str) -> str | None:
    try:
        manifest = json.loads((prefix / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = manifest.get("version") if isinstance(manifest, dict) else None
    return version if isinstance(version, str) else None


def version_of(spec: str) -> str:
    """The version a `PACKAGES` value pins."""
    return spec.rpartition("@")[2] if spec.startswith("npm:") else spec


def ensure_npm_peers(root: Path) -> None:
    """Install the pinned packages that `root/.cache/npm` lacks (or has at another version)."""
    prefix = root / ".cache" / "npm"
    missing = [
        f"{p}@{v}" for p, v in PACKAGES.items() if installed_version(prefix, p) != version_of(v)
    ]
    if not missing:
        return
    npm = shutil.which("npm")
    if npm is None:
        print("+ npm not found: the MCP tests that drive npm's packages will skip", flush=True)
        return
    print(f"+ npm install --prefix .cache/npm {' '.join(missing)}", flush=True)
    options = ["--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error"]
    done = subprocess.run(
        [npm, "install", *options, *missing],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        print(
            f"could not install them (npm exited {done.returncode}): the tests that need them "
            f"will skip\n{done.stderr[-2000:]}",
            flush=True,
        )
