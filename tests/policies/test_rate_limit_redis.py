"""rate_limit over Redis: two processes share one limit.

Runs where a `redis-server` binary is installed (.ci/run installs one): a
server is started on a Unix socket for the test and stopped after it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import MakeExecutor, wait_until
from tests.policies.test_rate_limit import most_in_a_window
from toolbus import ToolCall, ToolRegistry
from toolbus.policies import rate_limit

redis = pytest.importorskip("redis", reason="the redis client is not installed (toolbus[redis])")
# The slow tier (tests/README.md): a Redis server started.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("redis-server") is None, reason="no redis-server binary on this machine"
    ),
]

ROOT = Path(__file__).resolve().parents[2]

# One side of the shared limit: waits for "go" on stdin, runs its calls, and
# prints its statuses and the limiter's admission times.
CHILD = textwrap.dedent(
    """
    import json, math, sys
    from toolbus import Executor, ToolCall, ToolRegistry
    from toolbus.policies import rate_limit

    url, count = sys.argv[1], int(sys.argv[2])
    times = []
    limit = rate_limit("10/second", storage=url, max_wait=math.inf,
                       on_admit=lambda key, at: times.append(at))
    reg = ToolRegistry()

    @reg.tool(read_only=True)
    def ping(n: int) -> int:
        return n

    with Executor(reg, policies=[limit]) as ex:
        print("ready", flush=True)
        sys.stdin.readline()
        batch = ex.execute_batch([ToolCall(name="ping", arguments={"n": n}) for n in range(count)])
        print(json.dumps({"statuses": [r.status for r in batch.results], "times": times}))
    """
)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    sock = tmp_path / "redis.sock"
    # No TCP port (nothing to collide with), no persistence.
    command = ["redis-server", "--port", "0", "--unixsocket", str(sock), "--save", ""]
    server = subprocess.Popen(
        [*command, "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(unix_socket_path=str(sock))

        def up() -> bool:
            assert server.poll() is None, f"redis-server exited ({server.returncode})"
            try:
                return bool(client.ping())
            except (redis.ConnectionError, FileNotFoundError):
                return False

        wait_until(up, timeout=120, what="redis-server accepting connections")
        client.close()
        yield f"redis+unix://{sock}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_two_processes_share_one_limit(redis_url: str, make_executor: MakeExecutor) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, redis_url, "15"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        times: list[float] = []
        lock = threading.Lock()

        def admitted(key: str, at: float) -> None:
            with lock:
                times.append(at)

        limit = rate_limit("10/second", storage=redis_url, max_wait=math.inf, on_admit=admitted)
        reg = ToolRegistry()

        @reg.tool(read_only=True)
        def ping(n: int) -> int:
            return n

        ex = make_executor(reg, policies=[limit])
        child.stdin.write("go\n")
        child.stdin.flush()
        mine = ex.execute_batch([ToolCall(name="ping", arguments={"n": n}) for n in range(15)])
        theirs = json.loads(child.stdout.readline())
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
    assert [r.status for r in mine.results] == ["ok"] * 15
    assert theirs["statuses"] == ["ok"] * 15
    both = times + theirs["times"]
    assert len(both) == 30
    # Each process stamps its admissions with its own reading of the wall
    # clock just before Redis runs the admission script: two processes' stamps
    # may cross by the microseconds between the two. So: at most 10 in any
    # window of a second less a millisecond (two limits apart would let 20 in).
    assert most_in_a_window(both, 0.999) <= 10
    assert max(both) - min(both) >= 2.0  # 30 calls at 10 a second
