#!/usr/bin/env python3
"""The project's entry points, each setting itself up: `demo`, `test` and `bench`.

    python3 scripts/run.py demo    # the main job: one scripted agent turn, live
    python3 scripts/run.py test    # ruff, mypy --strict, pytest: the fast tier, then the slow one
    python3 scripts/run.py test --quick    # ruff, mypy, the fast tier (~1 min 40 s)
    python3 scripts/run.py test --stress   # the whole suite with the machine oversubscribed
    python3 scripts/run.py bench [--smoke] [--only ...]   # the benchmark suite
    python3 scripts/run.py docs [--serve]   # the documentation site, built strictly into site/

A virtual environment is made in .venv on first use and the project installed
into it, editable, with what the command needs: `demo` the base install only
(quick), `test` the dev set (every extra, pytest, mypy, ruff, and the
example plugin package the tests find by its entry points), `bench` the
`bench` extra (the peers it measures), `docs` the `docs` extra (MkDocs). It
is installed again whenever pyproject.toml (or the plugin's) changes. pip's
output is shown only when it fails. Needs nothing but python3.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".toolbus-install"
LINTED = ("toolbus", "tests", "examples", "scripts", "benchmarks")

# A plugin package the tests load through its entry points (tests/tools/test_plugins.py):
# installed, editable, with the dev set; entry points exist only once installed.
TEST_PLUGIN = ROOT / "tests" / "plugins" / "toolbus_example_plugin"

# The extras each command needs; `dev` includes every other one.
NEEDS: dict[str, frozenset[str]] = {
    "demo": frozenset(),
    "test": frozenset({"dev"}),
    "bench": frozenset({"bench"}),
    "docs": frozenset({"docs"}),
}


def _sh(*args: str | Path) -> None:
    print("+", " ".join(str(a) for a in args), flush=True)
    code = subprocess.call([str(a) for a in args], cwd=ROOT)
    if code:
        sys.exit(code)


def _stamp() -> tuple[str | None, set[str]]:
    """The install's hash (`_install_hash`) and the extras of the last install
    (none: no install)."""
    try:
        text = STAMP.read_text().strip()
    except OSError:
        return None, set()
    try:
        data = json.loads(text)
    except ValueError:
        return text, {"dev"}  # an earlier version of this script: the hash alone, dev installed
    if not isinstance(data, dict):
        return None, set()
    return str(data.get("pyproject")), {str(e) for e in data.get("extras", ())}


def _install_hash() -> str:
    """What an install is made from: pyproject.toml and the test plugin's (its
    entry points are metadata, written only when it is installed)."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update((TEST_PLUGIN / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def _pip_install(extras: set[str]) -> None:
    """`pip install -e .[extras]` (with the dev set, the test plugin too), its
    output shown only if it fails (setuptools' editable-install banner and the
    resolver's chatter are noise on success)."""
    target = f".[{','.join(sorted(extras))}]" if extras else "."
    what = f"toolbus[{','.join(sorted(extras))}]" if extras else "toolbus"
    print(f"installing {what} into {VENV} (editable) ...", flush=True)
    started = time.monotonic()
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    plugin = ["-e", str(TEST_PLUGIN)] if "dev" in extras else []
    proc = subprocess.run(
        [str(PY), "-m", "pip", "install", "--quiet", "-e", target, *plugin],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        sys.exit(f"pip install -e {target} failed (exit {proc.returncode})")
    print(f"installed in {time.monotonic() - started:.0f} s", flush=True)


def ensure_env(command: str) -> None:
    # This script runs on whatever python3 the user has; the project needs 3.11.
    if sys.version_info < (3, 11):  # noqa: UP036
        sys.exit(f"toolbus needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PY.exists():
        print(f"creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    want = _install_hash()
    installed_for, extras = _stamp()
    needs = NEEDS[command]
    if installed_for == want and (needs <= extras or "dev" in extras):
        return
    extras |= needs  # what an earlier command installed stays: a dev environment stays one
    _pip_install(extras)
    STAMP.write_text(json.dumps({"pyproject": want, "extras": sorted(extras)}))


def demo(args: list[str]) -> None:
    _sh(BIN / "toolbus", "demo", *args)


# The test tiers (tests/README.md). The fast tier is the quick mode's, and the
# full command's first; the slow tier (tests marked `slow`: engine kill runs,
# Ray, a browser, a terminal, the examples and the benchmark smoke run) comes
# second, with a longer timeout per test and a time cap of its own for the
# whole tier, so that a hang shows as a failure naming the tier, not as a CI
# run that never ends. The caps are hang guards sized for `--stress` with room
# to spare (on a quiet 2-core machine the fast tier takes under 2 minutes, the
# slow one about 4; under stress-ng plus other work, 12 and 54 were measured
# with one worker each).
SLOW_TIMEOUT = "--timeout=240"
TIERS = {
    "fast": (["-m", "not slow"], 1800),
    "slow": (["-m", "slow", SLOW_TIMEOUT], 4800),
}
REPORTS = ROOT / ".cache" / "test-reports"
SLOWEST = 20


def lint_and_types() -> None:
    _sh(PY, "-m", "ruff", "check", *LINTED)
    _sh(PY, "-m", "ruff", "format", "--check", *LINTED)
    _sh(PY, "-m", "mypy")


def test(args: list[str]) -> None:
    """`test [--quick] [--stress] [pytest arguments]`: ruff, mypy, then the test tiers.

    --quick: the fast tier only: about 1 min 40 s with ruff and
    mypy on a quiet 2-core machine. Both tiers are spread over the cores
    (pytest-xdist, `_spread`).
    --stress: the machine oversubscribed the while (`stress-ng --cpu 6`), to
    show that no test depends on timing. Tests run in a random order, its
    seed printed first (`--randomly-seed N` replays that order, `-p
    no:randomly` keeps the files'). Arguments that name tests (a path, `-k`,
    `-m`) run just those, in one pytest run, as given (with --quick, those of
    the fast tier; without a `--timeout`, the slow tier's).
    """
    # Each pytest process (every xdist worker, every Python subprocess a test
    # starts) would otherwise compile the project and rewrite every test
    # module's asserts anew: 25 s instead of 10 to collect the fast tier, per
    # worker. The bytecode goes where Python puts it, in __pycache__ (ignored).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    quick = "--quick" in args
    stress = "--stress" in args
    extra = [a for a in args if a not in ("--quick", "--stress")]
    given = _Args(extra)
    if not given.seeded:
        # Chosen here and printed, not left to pytest-randomly, whose line `-q`
        # hides: a failure's order can always be replayed.
        seed = random.randrange(2**32)
        print(f"+ random order, seed {seed} (replay it: --randomly-seed {seed})", flush=True)
        extra.append(f"--randomly-seed={seed}")
    with _beside_lint(quick, given.names_tests):
        lint_and_types()
    with _stressed() if stress else contextlib.nullcontext():
        if given.names_tests:
            # As given, in one run: with --quick, the fast tier's tests among
            # them; without a timeout of their own, the slow tier's.
            select = ["-m", "not slow"] if quick else []
            if not given.timeout:
                select.append(SLOW_TIMEOUT)
            _sh(PY, "-m", "pytest", *select, *extra)
            return
        tiers = ["fast"] if quick else ["fast", "slow"]
        failed = [tier for tier in tiers if not _run_tier(tier, [*_spread(tier, extra), *extra])]
    _print_slowest([REPORTS / f"{tier}.xml" for tier in tiers])
    if failed:
        sys.exit(f"tests failed in the {' and '.join(failed)} tier")


@contextlib.contextmanager
def _beside_lint(quick: bool, names_tests: bool) -> Iterator[None]:
    """What runs while ruff and mypy do (mypy keeps one core busy, alone):
    the npm packages the slow tier drives installed where missing (not with
    --quick), and on a fresh clone the bytecode written (`_warm`). Both are
    over before the tests start."""
    npm = None
    failed: list[BaseException] = []  # (a thread's error is otherwise only printed)
    if not quick:  # the slow tier's MCP tests drive them
        peers = _npm_peers()

        def install() -> None:
            try:
                peers.ensure_npm_peers(ROOT)
            except BaseException as e:
                failed.append(e)

        npm = threading.Thread(target=install, name="npm")
        npm.start()
    warm = None if names_tests else _warm()
    linted = False
    try:
        yield
        linted = True
    except BaseException:
        if warm is not None:
            warm.kill()  # (bytecode is written whole or not at all)
        raise
    finally:
        if npm is not None:
            npm.join()  # (an install cut short would look installed)
        if warm is not None:
            warm.wait()
        if failed and not linted:  # (the lint's failure goes on)
            print("installing the npm packages failed too:", repr(failed[0]), file=sys.stderr)
    if failed:
        raise failed[0]  # (as when it ran after the lint: before any test)


def _warm() -> subprocess.Popen[bytes] | None:
    """On a fresh clone (no bytecode yet), the whole suite collected once, in
    the background, for what that writes: the project's bytecode and the
    test modules' (their asserts rewritten). Otherwise every xdist worker of
    the fast tier makes them anew, all at once: 20 s of CPU each instead of
    10 on a 2-core machine, four workers competing for two cores."""
    if (ROOT / "tests" / "__pycache__").is_dir():
        return None
    print("+ collecting the tests in the background (the bytecode a fresh clone lacks)", flush=True)
    return subprocess.Popen(
        [str(PY), "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _npm_peers() -> Any:
    """scripts/npm_peers.py (beside this script, which may be loaded by path)."""
    path = ROOT / "scripts" / "npm_peers.py"
    spec = importlib.util.spec_from_file_location("toolbus_npm_peers", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _spread(tier: str, extra: list[str]) -> list[str]:
    """pytest-xdist's options for a tier: its tests spread over the cores.

    The fast tier hands out single tests to two workers a core (four at
    most: a worker waiting on a timeout or a subprocess leaves its core to
    another). The slow tier keeps a file's tests on one worker, a worker a
    core (two at most): a slow file shares one Ray, one browser or one server
    among its tests, and two of those on one core would only wait on each
    other. None where the arguments say how to run instead (`-n 0`,
    `--dist`, `-p no:xdist`) or ask for what needs one process (`--pdb`,
    `--trace`).
    """
    if _Args(extra).one_process:
        return []
    cores = os.cpu_count() or 1
    if tier == "fast":
        return ["-n", str(min(4, 2 * cores)), "--dist", "load"]
    # (In the order collected, the longest files first: tests/conftest.py's
    # LONGEST. xdist would otherwise hand out the files with most tests first.)
    return ["-n", str(min(2, cores)), "--dist", "loadfile", "--no-loadscope-reorder"]


# pytest options whose value may be the next argument (not a test to run):
# `-p no:randomly` and `--randomly-seed 7` keep the tiers. Every such option
# of the pytest and plugins installed is here: tests/contract/test_run_script.py
# reads `pytest --help` and fails on one that is missing.
_TAKES_VALUE = frozenset(
    {"-p", "-o", "-W", "-r", "-c", "--assert", "--basetemp", "--cache-show", "--capture",
     "--code-highlight", "--color", "--confcutdir", "--config-file", "--debug", "--deselect",
     "--doctest-glob", "--doctest-report", "--durations", "--durations-min", "--ignore",
     "--ignore-glob", "--import-mode", "--junit-prefix", "--junit-xml", "--junitxml",
     "--last-failed-no-failures", "--lfnf", "--log-auto-indent", "--log-cli-date-format",
     "--log-cli-format", "--log-cli-level", "--log-date-format", "--log-disable", "--log-file",
     "--log-file-date-format", "--log-file-format", "--log-file-level", "--log-file-mode",
     "--log-format", "--log-level", "--max-warnings", "--maxfail", "--override-ini",
     "--pastebin", "--pdbcls", "--pythonwarnings", "--report-chars", "--rootdir",
     "--show-capture", "--tb", "--verbosity",
     # plugins': pytest-timeout, -randomly, -asyncio, anyio, hypothesis, -xdist
     "--timeout", "--timeout-method", "--timeout_method", "--session-timeout",
     "--randomly-seed", "--asyncio-mode", "--anyio-mode", "--hypothesis-profile",
     "--hypothesis-seed", "--hypothesis-verbosity", "-n", "--numprocesses", "--dist",
     "--maxprocesses", "--max-worker-restart", "--maxschedchunk", "--tx", "--px",
     "--rsyncdir", "--rsyncignore", "--testrunuid"}
)  # fmt: skip


class _Args:
    """What pytest arguments ask of `test`, read the way pytest reads them.

    `names_tests`: they select tests (a path or node id, `-k`, `-m`, in any
    form: `-m slow`, `-mslow`, `-m=slow`); `one_process`: they say how to
    run instead of the tiers' spreading, or need one process; `timeout`: they
    set the per-test timeout.
    """

    def __init__(self, args: list[str]) -> None:
        self.names_tests = self.one_process = self.timeout = False
        self.seeded = False  # the order is the arguments' (a seed, or -p no:randomly)
        given = iter(args)
        for a in given:
            if not a.startswith("-") or a == "-":
                self.names_tests = True
                continue
            if a.startswith("--"):
                name, attached, value = a.partition("=")
            elif len(a) > 2 and a[:2] in _SELECT | _TAKES_VALUE:
                # A short option with its value attached: `-mslow`, `-n0`, `-pno:xdist`.
                name, attached, value = a[:2], "=", a[2:]
            else:
                name, attached, value = a, "", ""  # a flag, or flags together (`-qx`)
            if not attached and name in _SELECT | _TAKES_VALUE:
                value = next(given, "")
            self._read(name, value)

    def _read(self, name: str, value: str) -> None:
        if name in _SELECT:
            self.names_tests = True
        elif name in ("-n", "--numprocesses", "--dist", "--pdb", "--trace"):
            self.one_process = True
        elif name == "-p" and value in ("no:xdist", "no:randomly"):
            self.one_process = self.one_process or value == "no:xdist"
            self.seeded = self.seeded or value == "no:randomly"
        elif name == "--randomly-seed":
            self.seeded = True
        elif name == "--timeout":
            self.timeout = True


_SELECT = frozenset({"-k", "-m"})


def _names_tests(args: list[str]) -> bool:
    """Whether `args` select tests (a path or node id, `-k`, `-m`): then they
    run as given, in one pytest run, instead of the tiers."""
    return _Args(args).names_tests


def _run_tier(tier: str, extra: list[str]) -> bool:
    """Run one tier within its cap; True if it passed."""
    select, cap = TIERS[tier]
    REPORTS.mkdir(parents=True, exist_ok=True)
    report = REPORTS / f"{tier}.xml"
    report.unlink(missing_ok=True)
    command = [str(PY), "-m", "pytest", *select, f"--junitxml={report}", *extra]
    print(f"+ [{tier} tier, at most {cap} s]", " ".join(command[1:]), flush=True)
    proc = subprocess.Popen(command, cwd=ROOT)
    try:
        code = proc.wait(timeout=cap)
    except subprocess.TimeoutExpired:
        # pytest prints what ran. (A test that hangs is named by pytest-timeout
        # first, its per-test limit being far below the cap: this catches a
        # hang outside any test, which workers report only as interrupted.)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print(f"the {tier} tier passed its time cap of {cap} s", flush=True)
        return False
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return code in (0, 5)  # 5: nothing selected in this tier


def _print_slowest(reports: list[Path]) -> None:
    """The slowest tests of the run (setup, call and teardown together)."""
    times: list[tuple[float, str]] = []
    for report in reports:
        try:
            root = ElementTree.parse(report).getroot()
        except (OSError, ElementTree.ParseError):
            continue
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            times.append((float(case.get("time") or 0.0), name))
    if not times:
        return
    total = sum(t for t, _ in times)
    print(f"\n{SLOWEST} slowest of {len(times)} tests ({total:.0f} s of test time in all):")
    for seconds, name in sorted(times, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.2f} s  {name}")


@contextlib.contextmanager
def _stressed() -> Iterator[None]:
    """`stress-ng --cpu 6` in the background for the duration (installed with
    apt-get when missing and allowed)."""
    exe = shutil.which("stress-ng")
    if exe is None and os.geteuid() == 0 and shutil.which("apt-get"):
        print("+ apt-get install stress-ng", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False, capture_output=True)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "stress-ng"],
            env=env,
            check=False,
            capture_output=True,
        )
        exe = shutil.which("stress-ng")
    if exe is None:
        sys.exit("test --stress needs stress-ng (Debian: apt-get install stress-ng)")
    print("+ stress-ng --cpu 6 (in the background, while the tests run)", flush=True)
    proc = subprocess.Popen([exe, "--cpu", "6", "--quiet"], start_new_session=True)
    try:
        # A stress-ng that cannot run (no permission, a bad option) exits at
        # once: say so, rather than run the tests unstressed.
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = proc.wait(timeout=1.0)
            sys.exit(f"stress-ng exited at once (status {code}): the tests were not run")
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()


def bench(args: list[str]) -> None:
    """`python -m benchmarks` with these arguments (see docs/performance.md)."""
    _sh(PY, "-m", "benchmarks", *args)


def docs(args: list[str]) -> None:
    """`docs`: build the site into site/ (strict: a broken link fails it),
    readable offline from there (open site/index.html); `docs --serve`
    serves it at http://127.0.0.1:8000 while you edit."""
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # (the theme's notice about its future)
    if "--serve" in args:
        _sh(PY, "-m", "mkdocs", "serve")
    else:
        _sh(PY, "-m", "mkdocs", "build", "--strict")
        print(f"the site: {ROOT / 'site' / 'index.html'}")


COMMANDS = {"demo": demo, "test": test, "bench": bench, "docs": docs}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(f"usage: python3 scripts/run.py {{{'|'.join(COMMANDS)}}} [args...]")
    ensure_env(sys.argv[1])
    COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    main()
