"""Kill runs: a durable agent run on DBOS, killed with SIGKILL at a random moment,
then recovered by DBOS, on SQLite (20 runs) and on Postgres (10 runs).

Each run starts `tests/integrations/dbos_turn.py` (three turns of a scripted
model, read-only, idempotent and mutating tools, then two lone calls), kills it at a moment drawn
from the run's seed (printed: `TOOLBUS_KILL_SEED=<seed>` replays one), then
starts it again in recovery mode and checks, from the tools' own record of
what they did (a file outside the engine) and the engine's steps:

- every call whose result was recorded before the kill ran exactly once;
- every call ran under its own key, the same before and after the crash
  (a call run again after it ran under the key it had);
- no charge (the mutating tool) ran twice: one in doubt was either skipped,
  found done by the handler, or run again because it had not happened;
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
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dbos")

from tests.integrations.postgres import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
SQLITE_RUNS = 20
POSTGRES_RUNS = 10


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with cluster() as url:
        yield url


def worker(
    mode: str, url: str, effects: Path, workflow_id: str, use_async: bool
) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        "-m",
        "tests.integrations.dbos_turn",
        mode,
        url,
        str(effects),
        workflow_id,
    ]
    if use_async:
        args.append("async")
    return subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The worker's transcript, steps, and how long its run took (by its own clock)."""
    out, err = proc.communicate(timeout=180)
    if os.environ.get("TOOLBUS_KILL_SHOW"):
        print(err)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{out}\n{err[-4000:]}"
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return {
        "transcript": json.loads(lines["transcript"]),
        "steps": json.loads(lines["steps"]),
        "seconds": float(lines["ran"]),
    }


def effects_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


_baselines: dict[tuple[str, bool], dict[str, Any]] = {}


def baseline(kind: str, url: str, tmp: Path, use_async: bool) -> dict[str, Any]:
    """An uninterrupted run's transcript, and how long the run took: from its
    `ready` (where a kill run's clock starts) to its transcript (the workflow
    done), its worker's start-up and shut-down left out. Timed by the worker
    itself: this process, slow to read a line on a loaded machine, could
    read both at once."""
    if (kind, use_async) not in _baselines:
        effects = tmp / "baseline-effects"
        proc = worker("run", url, effects, f"baseline-{use_async}-{os.getpid()}", use_async)
        _baselines[kind, use_async] = finish(proc)
    return _baselines[kind, use_async]


def kill_run(kind: str, url: str, tmp: Path, run: int) -> None:
    seed = int(os.environ.get("TOOLBUS_KILL_SEED", "0")) or random.SystemRandom().randrange(
        1, 2**31
    )
    print(f"kill run {kind} #{run}: TOOLBUS_KILL_SEED={seed}")
    rng = random.Random(seed)
    use_async = rng.random() < 0.5
    base = baseline(kind, url, tmp, use_async)
    workflow_id = f"kill-{kind}-{run}-{seed}"
    effects = tmp / f"effects-{run}"
    proc = worker("run", url, effects, workflow_id, use_async)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"  # launched: the run begins now
    # The moment it dies, drawn from the seed (not a wait for anything):
    # anywhere in a run as long as the uninterrupted one, its last steps too,
    # so most kills land mid-run.
    time.sleep(rng.uniform(0.0, 1.0) * base["seconds"])
    proc.send_signal(signal.SIGKILL)
    killed_ms = time.time() * 1000
    proc.communicate(timeout=60)
    interrupted = proc.returncode == -signal.SIGKILL
    recovered = finish(worker("recover", url, effects, workflow_id, use_async))

    assert recovered["transcript"] == base["transcript"]
    done = effects_of(effects)
    ran = [e for e in done if "tool" in e]
    runs_per_key = Counter(e["key"] for e in ran)
    # Every call ran under the key of its result step, in this workflow.
    steps = {s["id"]: s for s in recovered["steps"]}
    for key in runs_per_key:
        prefix, wid, position = key.rsplit(":", 2)
        assert (prefix, wid) == ("dbos", workflow_id)
        assert steps[int(position)]["name"].startswith("toolbus:")
    # A call recorded before the kill never ran again.
    for s in recovered["steps"]:
        if s["name"].startswith("toolbus:") and s["completed_ms"] < killed_ms - 1:
            key = f"dbos:{workflow_id}:{s['id']}"
            assert runs_per_key[key] == 1, (key, done)
    # No charge ran twice; every one of the run's charges happened.
    charges = Counter(e["key"] for e in ran if e["tool"] == "charge")
    assert set(charges.values()) == {1}, charges
    assert len(charges) == 4  # the script's three, the receipt's one
    # A call run again ran in the recovering process, under the same key.
    for key, n in runs_per_key.items():
        if n > 1:
            assert len({e["pid"] for e in ran if e["key"] == key}) == n
    print(
        f"  {'interrupted' if interrupted else 'finished before the kill'}; "
        f"{sum(n - 1 for n in runs_per_key.values())} call(s) ran again, "
        f"{sum(1 for e in done if 'in_doubt' in e)} in doubt"
    )


@pytest.mark.parametrize("run", range(SQLITE_RUNS))
def test_kill_runs_on_sqlite(tmp_path_factory: pytest.TempPathFactory, run: int) -> None:
    tmp = tmp_path_factory.mktemp("sqlite")
    kill_run("sqlite", f"sqlite:///{tmp / 'dbos.sqlite'}", tmp, run)


@pytest.mark.parametrize("run", range(POSTGRES_RUNS))
def test_kill_runs_on_postgres(
    postgres: str, tmp_path_factory: pytest.TempPathFactory, run: int
) -> None:
    tmp = tmp_path_factory.mktemp("postgres")
    database = postgres.rsplit("/", 1)[0] + f"/kill_{run}_{os.getpid()}"
    kill_run("postgres", database, tmp, run)
