"""`toolbus._process_group`: a kill reaches every process of a session, whatever
group it moved to, found in /proc however its command name reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import wait_until
from toolbus import _process_group as pg

# The slow tier (tests/README.md): real processes started and killed.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc"),
]

PY = sys.executable
# A session leader (a shell) starts: coreutils `timeout` (which moves itself
# and its `sleep` to a group of their own), and a Python child that does the
# same with setpgid(0, 0) and then names itself like the start of a stat line
# ("x) Z 1 1 1 1": a parser that splits at the first ")" reads a zombie).
SESSION = (
    'timeout 1000 sh -c \'echo $$ > "$1.sleep"; exec sleep 1000\' sh "$1" & '
    'echo $! > "$1.timeout"; "$2" -I -S -c "$3" "$1.child" & wait'
)
CHILD = (
    "import os, sys, time; os.setpgid(0, 0); "
    "open('/proc/self/comm', 'w').write('x) Z 1 1 1 1'); "
    "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(1000)"
)
# A session leader whose child, in a group of its own, forks without pause
# (each grandchild in a group of its own too) until it is killed, or 300 of them.
FORKER = """
import os, sys, time
if os.fork() == 0:
    os.setpgid(0, 0)
    for n in range(300):
        if os.fork() == 0:
            os.setpgid(0, 0)
            time.sleep(1000)
        if n == 20:
            open(sys.argv[1], "w").write("forking")
    time.sleep(1000)
time.sleep(1000)
"""


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[0].decode()


def _dead(pid: int) -> bool:
    """Gone, or a zombie (an orphan is init's to reap, and this machine's may not)."""
    return _state(pid) in (None, "Z")


def _pid(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip().isdigit(), 60, f"{path}")
    return int(path.read_text())


def test_a_session_is_killed_whatever_group_its_processes_moved_to(tmp_path: Path) -> None:
    base = tmp_path / "run"
    leader = subprocess.Popen(
        ["sh", "-c", SESSION, "sh", str(base), PY, CHILD], start_new_session=True
    )
    try:
        pids = [_pid(Path(f"{base}.{what}")) for what in ("timeout", "sleep", "child")]
        wait_until(
            lambda: Path(f"/proc/{pids[2]}/comm").read_text().startswith("x)"), 60, "renamed"
        )
        groups = {Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[2] for p in pids}
        assert str(leader.pid) not in groups  # each out of the leader's group
        assert pg.kill_group(leader.pid)
        assert pg.kill_session(leader.pid) >= 3  # and the leader, if it was not dead yet
        wait_until(lambda: all(_dead(p) for p in [leader.pid, *pids]), 60, "the session dead")
        # Zombies only (the leader's, unreaped, holds the id): nothing to signal.
        assert pg.kill_session(leader.pid) == 0
    finally:
        pg.kill_group(leader.pid)
        leader.wait()


def test_processes_forked_while_the_session_is_killed_are_killed_too(tmp_path: Path) -> None:
    flag = tmp_path / "forking"
    leader = subprocess.Popen([PY, "-I", "-S", "-c", FORKER, str(flag)], start_new_session=True)
    try:
        wait_until(flag.exists, 60, "the child forking")
        pg.kill_session(leader.pid)
        leader.wait(60)
        # Nothing of the session is left alive (forked before a kill landed or not).
        wait_until(lambda: not pg._members(frozenset({leader.pid})), 60, "the session dead")
    finally:
        pg.kill_session(leader.pid)
        pg.kill_group(leader.pid)
        leader.wait()


def test_this_process_is_never_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg, "_members", lambda sids: [(os.getpid(), 0)])
    assert pg.kill_sessions({12345}) == 0
    assert pg.kill_sessions(()) == 0


def test_without_proc_it_does_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pg, "_PROC", str(tmp_path / "absent"))
    assert pg.kill_session(2**22 + 1) == 0  # above any pid_max: no such session anyway
