"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`,
pinned in scripts/npm_peers.py) against toolbus, both ways.

Server: `toolbus mcp serve tests.mcp_servers.conformance_tools:registry --http`,
every scenario of the suite (`--suite all`, pending ones included) in one run.
Client: tests/mcp_servers/conformance_client.py (toolbus's `connect_http` and an
`Executor`) against the suite's server of each client scenario, the `auth/*`
ones (an authorization server of the suite's in front) included. One of those
is wrong in 0.1.16 (`STALE`); the suite's next release (`conformance-next`,
0.2.0-alpha.12) runs it, and the authorization scenarios it adds.

A scenario in `OUT_OF_SCOPE` is one toolbus does not offer, and the test says
why; it must fail, so one that starts passing is noticed (the suite calls that
a stale baseline). The test command installs the suite into `.cache/npm`;
`MCP_CONFORMANCE=/path/to/dist/index.js` names another. Without node or the
suite these tests skip and say why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.mcp.test_server_http import start, stop

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(
    os.environ.get("MCP_CONFORMANCE")
    or ROOT / ".cache/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js"
)
NEXT = ROOT / ".cache/npm/node_modules/conformance-next/dist/index.js"
# The suite needs fs.globSync (Node 22); this shim lets it start on Node 20.
NODE20 = ROOT / "tests" / "mcp_servers" / "node20.mjs"

# The slow tier (tests/README.md): node runs the suite.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("node") is None, reason="needs node (the suite runs on it)"),
    pytest.mark.skipif(
        not SUITE.exists(),
        reason=f"needs the MCP conformance suite at {SUITE}: npm install --prefix .cache/npm "
        "@modelcontextprotocol/conformance@0.1.16 (as the test command does), or set MCP_CONFORMANCE",
    ),
]

SERVER_SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "json-schema-2020-12",
    "logging-set-level",
    "tools-call-with-logging",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "server-sse-multiple-streams",
    "server-sse-polling",
    "dns-rebinding-protection",
]
_TOOLS_ONLY = "toolbus serves a registry's tools: no resources, prompts or completions"
OUT_OF_SCOPE = {
    "completion-complete": _TOOLS_ONLY,
    "resources-list": _TOOLS_ONLY,
    "resources-read-text": _TOOLS_ONLY,
    "resources-read-binary": _TOOLS_ONLY,
    "resources-templates-read": _TOOLS_ONLY,
    "resources-subscribe": _TOOLS_ONLY,
    "resources-unsubscribe": _TOOLS_ONLY,
    "prompts-list": _TOOLS_ONLY,
    "prompts-get-simple": _TOOLS_ONLY,
    "prompts-get-with-args": _TOOLS_ONLY,
    "prompts-get-embedded-resource": _TOOLS_ONLY,
    "prompts-get-with-image": _TOOLS_ONLY,
    "tools-call-sampling": "a served tool has no ctx.sample: sampling is deprecated (SEP-2577)",
}
# Against a server that closes each call's stream once primed (`poll_after=0`):
# the scenarios whose calls stream, the client coming back for the rest. 0.1.16's
# `server-sse-polling` sends the 2025-03-26 header, under which no stream is
# primed (nor closed); the next release's sends the version negotiated.
POLLED_SCENARIOS = [
    "tools-call-with-progress",
    "tools-call-with-logging",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
]
CLIENT_SCENARIOS = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"]
AUTH_SCENARIOS = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-jwt",
    "auth/client-credentials-basic",
    "auth/cross-app-access-complete-flow",
]
STALE = {
    "auth/2025-03-26-oauth-metadata-backcompat": "0.1.16's server publishes, at its origin, "
    "authorization server metadata whose issuer is <origin>/oauth; a client must refuse an "
    "issuer other than the one the metadata's URL was built from (RFC 8414 3.3, SEP-2468), as "
    "the SDK's provider does. The suite's next release serves a matching issuer.",
}
# Run with the next release: 0.1.16's stale scenario, and the authorization
# scenarios it adds (the 2026-07-28 ones; its extensions DPoP, workload
# identity and enterprise-managed authorization are not offered).
NEXT_AUTH_SCENARIOS = [
    *STALE,
    "auth/metadata-issuer-mismatch",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
]


def suite(
    *args: str, timeout: float = 300, where: Path = SUITE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", "--import", NODE20.as_uri(), str(where), *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def checks_of(results: Path, prefix: str) -> list[dict[str, Any]]:
    """The checks a scenario's run saved (`<prefix><timestamp>/checks.json`)."""
    folders = [p for p in results.iterdir() if p.name.startswith(prefix)]
    assert len(folders) == 1, f"results for {prefix!r}: {sorted(p.name for p in results.iterdir())}"
    checks: list[dict[str, Any]] = json.loads((folders[0] / "checks.json").read_text())
    return checks


def failures(checks: list[dict[str, Any]]) -> list[str]:
    return [
        f"{c['name']}: {c.get('errorMessage') or c['description']}"
        for c in checks
        if c["status"] == "FAILURE"
    ]


@pytest.fixture(scope="module")
def server_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of every server scenario against a served registry."""
    results = tmp_path_factory.mktemp("conformance-server")
    registry = "tests.mcp_servers.conformance_tools:registry"
    proc, url = start(["-m", "toolbus", "mcp", "serve", registry, "--http", "--port", "0"])
    try:
        run = suite("server", "--suite", "all", "--url", url, "-o", str(results))
    finally:
        assert stop(proc) == 0
    assert any(results.iterdir()), run.stdout + run.stderr
    return results


def _scenario_prefix(scenario: str) -> str:
    # The results folder of `tools-call-error` must not be taken for
    # `tools-call-error-...`: the timestamp after the name starts with a digit.
    return f"server-{scenario}-2"


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_the_server_passes(server_results: Path, scenario: str) -> None:
    checks = checks_of(server_results, _scenario_prefix(scenario))
    assert checks and not failures(checks), failures(checks)


@pytest.mark.parametrize("scenario", sorted(OUT_OF_SCOPE))
def test_what_the_server_does_not_offer_still_fails(server_results: Path, scenario: str) -> None:
    """Each is out of scope for the reason given in OUT_OF_SCOPE; when one
    passes, it belongs in SERVER_SCENARIOS."""
    assert failures(checks_of(server_results, _scenario_prefix(scenario))), OUT_OF_SCOPE[scenario]


@pytest.fixture(scope="module")
def polled() -> Iterator[str]:
    """The suite's tools served in process with `poll_after=0`; the client's
    coming back (`Last-Event-ID`) lets `test_reconnection` end."""
    from tests.mcp_servers import conformance_tools
    from tests.mcp_servers.serving import served_in_thread
    from toolbus import Executor
    from toolbus.mcp._serve_http import http_app

    alone = conformance_tools.ALONE
    conformance_tools.ALONE = 120.0
    conformance_tools.reconnected.clear()
    executor = Executor(conformance_tools.registry, timeout=120)
    inner = http_app(conformance_tools.registry, executor, poll_after=0, reconnect_after=0.1)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and b"last-event-id" in dict(scope["headers"]):
            conformance_tools.reconnected.set()
        await inner(scope, receive, send)

    try:
        with served_in_thread(app) as url:
            yield url
    finally:
        conformance_tools.reconnected.set()
        conformance_tools.ALONE = alone
        executor.close()


@pytest.mark.skipif(not NEXT.exists(), reason=f"needs the suite's next release at {NEXT}")
def test_a_stream_closed_mid_call_is_resumed(polled: str, tmp_path: Path) -> None:
    """SEP-1699 with the next release (which sends the negotiated version):
    a priming event first, a retry field, the stream closed mid-call and the
    result sent when the client comes back with Last-Event-ID."""
    run = suite("server", "--scenario", "server-sse-polling", "--url", polled, "-o",
                str(tmp_path), where=NEXT)  # fmt: skip
    checks = checks_of(tmp_path, _scenario_prefix("server-sse-polling"))
    verdicts = {c["id"]: c["status"] for c in checks if c["status"] != "INFO"}
    assert verdicts == {
        "server-sse-priming-event": "SUCCESS",
        "server-sse-retry-field": "SUCCESS",
        "server-sse-disconnect-resume": "SUCCESS",
    }, run.stdout[-3000:]


@pytest.mark.parametrize("scenario", POLLED_SCENARIOS)
def test_calls_whose_streams_are_closed_still_pass(
    polled: str, tmp_path: Path, scenario: str
) -> None:
    run = suite("server", "--scenario", scenario, "--url", polled, "-o", str(tmp_path))
    checks = checks_of(tmp_path, _scenario_prefix(scenario))
    assert checks and not failures(checks), failures(checks) or run.stdout[-3000:]


# The next release's scenarios of the tasks extension (SEP-2663, 2026-07-28),
# against `conformance_task_tools` served with `task_after=0` (an optional
# tool's call is a task at once).
TASK_SCENARIOS = [
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
]
TASKS_UNLIKE = {
    "tasks-mrtr-composition": "a call of a task tool that asks becomes a task at once, its "
    "question in the task's inputRequests; the scenario (SEP-2322 with SEP-2663 451f5e1, in "
    "the suite's pre-release) wants the question asked by MRTR first, the task made after",
}


@pytest.fixture(scope="module")
def task_server() -> Iterator[str]:
    from tests.mcp_servers.conformance_task_tools import registry
    from tests.mcp_servers.serving import served_in_thread
    from toolbus import Executor
    from toolbus.mcp._serve_http import http_app

    with (
        Executor(registry, timeout=120) as executor,
        served_in_thread(http_app(registry, executor, task_after=0)) as url,
    ):
        yield url


def task_checks(url: str, scenario: str, results: Path) -> list[dict[str, Any]]:
    run = suite("server", "--scenario", scenario, "--url", url, "-o", str(results), where=NEXT)
    checks = checks_of(results, _scenario_prefix(scenario))
    assert checks, run.stdout[-3000:]
    return checks


@pytest.mark.skipif(not NEXT.exists(), reason=f"needs the suite's next release at {NEXT}")
@pytest.mark.parametrize("scenario", TASK_SCENARIOS)
def test_the_server_passes_the_task_scenarios(
    task_server: str, tmp_path: Path, scenario: str
) -> None:
    checks = task_checks(task_server, scenario, tmp_path)
    assert not failures(checks), failures(checks)


@pytest.mark.skipif(not NEXT.exists(), reason=f"needs the suite's next release at {NEXT}")
@pytest.mark.parametrize("scenario", sorted(TASKS_UNLIKE))
def test_a_task_scenario_toolbus_answers_otherwise_still_fails(
    task_server: str, tmp_path: Path, scenario: str
) -> None:
    assert failures(task_checks(task_server, scenario, tmp_path)), TASKS_UNLIKE[scenario]


@pytest.fixture(scope="module")
def listed() -> str:
    """What the suite lists (once for the module: two tests read it)."""
    return suite("list", timeout=60).stdout


def test_every_server_scenario_is_accounted_for(server_results: Path, listed: str) -> None:
    server_part = listed.split("Client scenarios", maxsplit=1)[0]
    names = {line.split()[1] for line in server_part.splitlines() if line.strip().startswith("- ")}
    assert names == set(SERVER_SCENARIOS) | set(OUT_OF_SCOPE)


def run_client(scenario: str, results: Path, where: Path = SUITE) -> list[dict[str, Any]]:
    """Run the client against the suite's server of `scenario`; its checks."""
    command = f"{sys.executable} {ROOT / 'tests' / 'mcp_servers' / 'conformance_client.py'}"
    run = suite("client", "--command", command, "--scenario", scenario, "-o", str(results),
                where=where)  # fmt: skip
    # An auth scenario's results go to a folder of its own (`auth/<name>-<time>`).
    folder = results / "auth" if scenario.startswith("auth/") else results
    checks = checks_of(folder, f"{scenario.removeprefix('auth/')}-2")
    assert checks, run.stdout[-3000:]
    return checks


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS + AUTH_SCENARIOS)
def test_the_client_passes(tmp_path: Path, scenario: str) -> None:
    checks = run_client(scenario, tmp_path)
    assert not failures(checks), failures(checks)


@pytest.mark.skipif(not NEXT.exists(), reason=f"needs the suite's next release at {NEXT}")
@pytest.mark.parametrize("scenario", NEXT_AUTH_SCENARIOS)
def test_the_client_passes_the_next_release(tmp_path: Path, scenario: str) -> None:
    checks = run_client(scenario, tmp_path, NEXT)
    assert not failures(checks), failures(checks)


@pytest.mark.parametrize("scenario", sorted(STALE))
def test_a_stale_scenario_still_fails_for_its_reason(tmp_path: Path, scenario: str) -> None:
    """Each fails on 0.1.16 for the reason given in STALE (the client refused
    the mismatched issuer, so nothing after discovery happened)."""
    failed = failures(run_client(scenario, tmp_path))
    assert failed and all("Expected Check Missing" in f for f in failed), STALE[scenario]


def test_every_client_scenario_is_accounted_for(listed: str) -> None:
    client_part = listed.split("Client scenarios")[1]
    names = {line.split()[1] for line in client_part.splitlines() if line.strip().startswith("- ")}
    assert names == set(CLIENT_SCENARIOS) | set(AUTH_SCENARIOS) | set(STALE)
