"""Kill runs: a durable agent turn in a Restate service, the service killed
with SIGKILL at a random moment, Restate retrying the invocation against the
service started again (10 runs, against the real Restate server).

Each run starts `tests/integrations/restate_turn.py` (three turns of a
scripted model, read-only, idempotent and mutating tools, then two lone
calls), sends it the turn, kills it at a moment drawn from the run's seed
(printed: `TOOLBUS_KILL_SEED=<seed>` replays one), starts it again on the
same port and waits for the invocation's answer. Then it checks, from the
tools' own record of what they did (a file outside the engine) and the
invocation's journal:

- every call whose result was journaled before the kill ran exactly once;
- every call ran under its own key (the invocation id and its position),
  the same before and after the crash;
- no charge (the mutating tool) ran twice: one in doubt was either found
  done by the handler, or run again because it had not happened;
- the final conversation equals that of a run never interrupted.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("restate", reason="the restate extra is not installed")

from tests.conftest import wait_until
from tests.integrations.restate_support import Server, free_port, server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
RUNS = 10


class Service:
    """restate_turn.py, serving on `port` until killed."""

    def __init__(self, port: int, effects: Path) -> None:
        self.port = port
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integrations.restate_turn", str(port), str(effects)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

        def serving() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the service exited: {self.proc.communicate()[1][-3000:]}")
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(serving, 60, "the Restate service serving", every=0.01)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.communicate(timeout=60)


@pytest.fixture(scope="module")
def restate_server() -> Iterator[Server]:
    with server() as running:
        yield running


def effects_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def results_journaled(srv: Server, invocation: str) -> list[tuple[int, float]]:
    """Each toolbus result of the invocation's journal, in order: the call's
    position and when the server stored its result (ms since the epoch)."""
    journal = srv.journal(invocation)
    position: dict[int, int] = {}  # completion id: the call's position
    n = 0
    for entry in journal:
        if entry["entry_type"] == "Command: Run" and entry["name"].startswith("toolbus:"):
            n += 1
            command = json.loads(entry["entry_json"])["Command"]["Run"]
            position[command["completion_id"]] = n
    stored: list[tuple[int, float]] = []
    for entry in journal:
        if entry["entry_type"] == "Notification: Run":
            run = json.loads(entry["entry_json"])["Notification"]["Completion"]["Run"]
            if run["completion_id"] in position:
                stored.append((position[run["completion_id"]], _ms(entry["appended_at"])))
    return stored


def _ms(stamp: Any) -> float:
    if isinstance(stamp, int | float):
        return float(stamp)
    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp() * 1000


_baseline: dict[str, Any] = {}


def baseline(srv: Server, tmp: Path) -> dict[str, Any]:
    """An uninterrupted run's conversation, and how long the run took."""
    if not _baseline:
        port = free_port()
        service = Service(port, tmp / "baseline-effects")
        try:
            srv.register(f"http://127.0.0.1:{port}")
            began = time.monotonic()
            answer = srv.call("KillRuns/turn", "Plan the evening")
            _baseline["seconds"] = time.monotonic() - began
        finally:
            service.stop()
        assert answer.status_code == 200, answer.text
        _baseline["transcript"] = answer.json()
    return _baseline


@pytest.mark.parametrize("run", range(RUNS))
def test_kill_runs(restate_server: Server, tmp_path: Path, run: int) -> None:
    srv = restate_server
    seed = int(os.environ.get("TOOLBUS_KILL_SEED", "0")) or random.SystemRandom().randrange(
        1, 2**31
    )
    print(f"restate kill run #{run}: TOOLBUS_KILL_SEED={seed}")
    rng = random.Random(seed)
    base = baseline(srv, tmp_path)
    port = free_port()
    effects = tmp_path / "effects"
    service = Service(port, effects)
    srv.register(f"http://127.0.0.1:{port}")
    invocation = srv.send("KillRuns/turn", "Plan the evening", key=f"kill-{run}-{seed}")
    # The moment it dies, drawn from the seed (not a wait for anything):
    # anywhere in a run as long as the uninterrupted one.
    time.sleep(rng.uniform(0.0, 1.0) * base["seconds"])
    service.kill()
    killed_ms = time.time() * 1000
    service = Service(port, effects)  # (Restate retries the invocation against it)
    try:
        answer = srv.attach(invocation)
    finally:
        service.stop()
    assert answer.status_code == 200, answer.text
    assert answer.json() == base["transcript"]

    done = effects_of(effects)
    ran = [e for e in done if "tool" in e]
    runs_per_key = Counter(e["key"] for e in ran)
    # Every call ran under the key of its position in this invocation.
    for key in runs_per_key:
        prefix, inv, _ = key.rsplit(":", 2)
        assert (prefix, inv) == ("restate", invocation), key
    # A call whose result was journaled before the kill never ran again.
    stored = results_journaled(srv, invocation)
    assert len(stored) == 10  # the script's eight calls, the receipt's two
    for position, at in stored:
        if at < killed_ms - 1:
            key = f"restate:{invocation}:{position}"
            assert runs_per_key[key] == 1, (key, done)
    # No charge ran twice; every one of the run's charges happened.
    charges = Counter(e["key"] for e in ran if e["tool"] == "charge")
    assert set(charges.values()) == {1}, charges
    assert len(charges) == 4  # the script's three, the receipt's one
    # A call run again ran in the restarted service, under the same key.
    for key, n in runs_per_key.items():
        if n > 1:
            assert len({e["pid"] for e in ran if e["key"] == key}) == n
    before = sum(1 for _, at in stored if at < killed_ms - 1)
    print(
        f"  {before} of 10 results journaled before the kill; "
        f"{sum(n - 1 for n in runs_per_key.values())} call(s) ran again, "
        f"{sum(1 for e in done if 'in_doubt' in e)} in doubt"
    )
