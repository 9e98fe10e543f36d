"""The real Restate server, and Restate services served by toolbus, for the tests.

`server()` starts `restate-server` from `.cache/npm` (the test command
installs it: scripts/npm_peers.py) on loopback ports with a throwaway data
directory, yields a `Server` (ingress, admin API, SQL over the journal) and
stops it. Without the package it skips, and says why. `Served` serves
services in a thread of the test process (`toolbus.integrations.restate.serve`),
so a test can stop it mid-attempt and serve again, as a crash and a restart
would, and read what happened in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_until

__all__ = ["BINARY", "Served", "Server", "free_port", "server"]

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / ".cache/npm/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """One single-node restate-server on loopback ports."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.ingress = self.admin = ""
        self.http = httpx.Client(timeout=60)

    def start(self) -> None:
        ingress, admin, fabric = free_port(), free_port(), free_port()
        self.ingress = f"http://127.0.0.1:{ingress}"
        self.admin = f"http://127.0.0.1:{admin}"
        env = {
            **os.environ,
            "RESTATE_NODE_NAME": "toolbus-tests",
            "RESTATE_CLUSTER_NAME": "toolbus-tests",
            "RESTATE_AUTO_PROVISION": "true",
            "RESTATE_LISTEN_MODE": "tcp",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{fabric}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{fabric}/",
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_ADMIN__DISABLE_WEB_UI": "true",
            "RESTATE_DEFAULT_NUM_PARTITIONS": "2",
            "RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE": "256MiB",
            # A service that is back is retried soon (the default waits up to a minute).
            "RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL": "50ms",
            "RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL": "500ms",
            "RESTATE_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS": "1000",
            "RESTATE_LOG_FILTER": "warn",
            "RESTATE_LOG_DISABLE_ANSI_CODES": "true",
        }
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 (the process's)
        self.proc = subprocess.Popen(
            [str(BINARY), "--base-dir", str(self.data_dir), "--no-logo"],
            env=env,
            cwd=self.data_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

        def healthy() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"restate-server exited {self.proc.returncode}: {self.log()}")
            try:
                return (
                    self.http.get(f"{self.admin}/health").status_code == 200
                    and self.http.get(f"{self.ingress}/restate/health").status_code == 200
                )
            except httpx.TransportError:
                return False

        wait_until(healthy, 60, "restate-server healthy", every=0.02)

    def log(self) -> str:
        try:
            return (self.data_dir / "server.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.http.close()

    # -- its APIs --------------------------------------------------------------

    def register(self, uri: str) -> None:
        """Register (again) the deployment at `uri`, and wait until it is callable."""
        answer = self.http.post(f"{self.admin}/deployments", json={"uri": uri, "force": True})
        assert answer.status_code in (200, 201), answer.text

    def call(self, path: str, body: Any = None, *, key: str | None = None) -> httpx.Response:
        """Invoke `path` (`Service/handler`) over the ingress and wait for its answer."""
        return self.http.post(f"{self.ingress}/{path}", **_request(body, key))

    def send(self, path: str, body: Any = None, *, key: str | None = None) -> str:
        """Invoke `path` without waiting; its invocation id."""
        answer = self.http.post(f"{self.ingress}/{path}/send", **_request(body, key))
        assert answer.status_code in (200, 202), answer.text
        invocation: str = answer.json()["invocationId"]
        return invocation

    def attach(self, invocation: str) -> httpx.Response:
        """Wait for `invocation`'s answer."""
        return self.http.get(f"{self.ingress}/restate/invocation/{invocation}/attach")

    def cancel(self, invocation: str) -> None:
        answer = self.http.patch(f"{self.admin}/invocations/{invocation}/cancel")
        assert answer.status_code in (200, 202), answer.text

    def query(self, sql: str) -> list[dict[str, Any]]:
        answer = self.http.post(
            f"{self.admin}/query", json={"query": sql}, headers={"accept": "application/json"}
        )
        assert answer.status_code == 200, answer.text
        rows: list[dict[str, Any]] = answer.json()["rows"]
        return rows

    def journal(self, invocation: str) -> list[dict[str, Any]]:
        """`invocation`'s journal: each entry's type, name and value as JSON text."""
        return self.query(
            "SELECT index, entry_type, name, entry_json, appended_at FROM sys_journal "
            f"WHERE id = '{invocation}' ORDER BY index"
        )

    def status(self, invocation: str) -> dict[str, Any]:
        rows = self.query(f"SELECT * FROM sys_invocation WHERE id = '{invocation}'")
        return rows[0] if rows else {}


def _request(body: Any, key: str | None) -> dict[str, Any]:
    made: dict[str, Any] = {"headers": {"idempotency-key": key} if key else {}}
    if body is not None:
        made["json"] = body
    return made


@contextlib.contextmanager
def server() -> Iterator[Server]:
    if not BINARY.exists():
        pytest.skip(
            "the Restate server is not installed in .cache/npm "
            "(`python3 scripts/run.py test` installs it when npm is there)"
        )
    data = Path(tempfile.mkdtemp(prefix="toolbus-restate-"))
    running = Server(data)
    try:
        for tries in range(3):  # (a port taken meanwhile: again, on others)
            try:
                running.start()
                break
            except RuntimeError:
                if tries == 2:
                    raise
                running.stop()
                running = Server(data)
        yield running
    finally:
        running.stop()
        shutil.rmtree(data, ignore_errors=True)


class Served:
    """Restate services served in a thread of this process, on one port,
    stopped and served again at will (the server's retries find them back)."""

    def __init__(self, *services: Any, grace: float = 0.05) -> None:
        self.services = services
        self.grace = grace
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.error: BaseException | None = None

    def start(self) -> Served:
        from toolbus.integrations.restate import serve

        started = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            started.set()
            await serve(*self.services, port=self.port, stop=self._stop, grace=self.grace)

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as e:  # shown by the test that waits for health
                self.error = e

        self._thread = threading.Thread(target=run, name="restate-service", daemon=True)
        self._thread.start()
        started.wait(30)

        def healthy() -> bool:
            if self.error is not None:
                raise AssertionError(f"the service stopped: {self.error!r}")
            try:
                return httpx.get(f"{self.uri}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, 30, "the Restate service serving", every=0.01)
        return self

    def stop(self) -> None:
        """Stop serving: attempts still running are cancelled after `grace`."""
        if self._thread is None:
            return
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert not self._thread.is_alive(), "the Restate service did not stop"
        self._thread = None

    def __enter__(self) -> Served:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def settled(server: Server, invocation: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until `invocation` has ended; its status row."""
    found: dict[str, Any] = {}

    def ended() -> bool:
        nonlocal found
        found = server.status(invocation)
        return found.get("status") == "completed"

    wait_until(ended, timeout, f"invocation {invocation} completed", every=0.02)
    return found
