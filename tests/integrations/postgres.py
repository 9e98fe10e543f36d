"""A throwaway Postgres cluster from Debian's `postgresql`, for the tests that need one.

`cluster()` starts one on a loopback port (as the `postgres` user when
run as root: Postgres refuses to run as root), yields its URL and stops it.
Without Postgres's binaries it skips, and says why.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["binaries", "cluster"]


def binaries() -> Path | None:
    """Where Debian's Postgres server binaries are (the newest), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("Postgres is not installed (Debian's postgresql; .ci/run installs it)")
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: Postgres refuses to run as root")
    # Its own directory right under /tmp: the `postgres` user must reach it,
    # and pytest's temporary directories are root's alone.
    home = Path(tempfile.mkdtemp(prefix="toolbus-pg-"))
    if as_root:
        shutil.chown(home, "postgres", "postgres")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    data = home / "data"
    port = _free_port()
    subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c fsync=on"
    ctl = [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-t", "60"]
    subprocess.run(
        [*ctl, "-o", options, "-l", str(home / "log"), "start"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*ctl, "-m", "immediate", "stop"], capture_output=True, timeout=120)
        shutil.rmtree(home, ignore_errors=True)
