"""The status page in a real browser: Debian's headless Chromium driven by Playwright.

The page loads (through the token's cookie exchange), shows a running
workload's counts, in-flight calls and errors, what its policies did (a
circuit breaker opening, and opening again after its trial call failed;
throttled calls, cache hits, a refund awaiting approval), and keeps updating
without a reload. The test saves a screenshot (and refreshes docs/img/status-page.png
when that file is missing or TOOLBUS_UPDATE_DOCS=1).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")
pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

from playwright.sync_api import expect, sync_playwright

from tests.observe_workload import SECRET, make_executor, run_rounds
from toolbus import Executor, RetryPolicy, ToolCall, ToolRegistry
from toolbus.observe import serve_status

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# What this machine's closed network needs (see .ci/run): no sandbox as root,
# no GPU, and none of Chromium's own connections out.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
TOKEN = "page-token-5e6f7a8b"

# The slow tier (tests/README.md): a real browser.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason="no Chromium at /usr/bin/chromium (Debian: apt-get install chromium)",
    ),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def workload() -> Iterator[Any]:
    """An executor running batch after batch on a thread until the test ends."""
    stop = threading.Event()
    with make_executor() as executor:
        worker = threading.Thread(target=run_rounds, args=(executor, stop.is_set), daemon=True)
        worker.start()
        yield executor
        stop.set()
        worker.join(10)


def number(page: Any, selector: str) -> int:
    return int(page.text_content(selector) or "0")


def save_screenshot(page: Any, tmp_path: Path) -> Path:
    shot = tmp_path / "status-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    target = DOCS_IMG / "status-page.png"
    if not target.exists() or os.environ.get("TOOLBUS_UPDATE_DOCS") == "1":
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
    return shot


def test_the_page_shows_a_running_workload_and_updates_without_reload(
    browser: Any, workload: Any, tmp_path: Path
) -> None:
    with serve_status(workload, token=TOKEN) as server:
        context = browser.new_context(viewport={"width": 1440, "height": 1100})
        page = context.new_page()
        console_errors: list[str] = []
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        page.goto(server.url + "?token=" + TOKEN)  # traded for a cookie, then redirected
        assert page.url == server.url
        page.evaluate("() => { window.__sameDocument = 'yes'; }")
        expect(page.locator("#connection")).to_have_text("live", timeout=15_000)
        expect(page.locator("#executor-name")).to_have_text(workload.name)

        # A running workload's counts, calls in flight and failures.
        page.wait_for_function("() => Number(document.getElementById('stat-ok').textContent) > 0")
        expect(page.locator("#tools tr[data-tool='fetch_page']")).to_be_visible()
        page.wait_for_selector("#in-flight tr[data-call]", timeout=15_000)
        page.wait_for_selector("#errors td.err", timeout=15_000)  # a timeout or a refused charge

        # It goes on updating with no reload: counters grow, seq moves on.
        ok, seq = number(page, "#stat-ok"), number(page, "#seq")
        page.wait_for_function(
            f"() => Number(document.getElementById('stat-ok').textContent) >= {ok + 10}",
            timeout=20_000,
        )
        assert number(page, "#seq") > seq

        # The policies: the rates service's breaker opened at its first failure,
        # and opens again when its trial call fails three seconds later.
        breaker = page.locator("#policies tr[data-tool='rates']:not([data-key]) td")
        expect(breaker.nth(2)).to_have_class("breaker open", timeout=15_000)
        expect(page.locator("#pol-open")).to_have_text("1")
        opened = int(breaker.nth(5).text_content() or "0")
        assert opened >= 1
        page.wait_for_function(
            "() => { const cells = document.querySelectorAll("
            "\"#policies tr[data-tool='rates'] td\");"
            f" return cells.length > 5 && Number(cells[5].textContent) > {opened}"
            " && cells[2].classList.contains('open'); }",
            timeout=20_000,
        )
        page.wait_for_function(
            "() => Number(document.getElementById('pol-throttled').textContent) > 0"
            " && Number(document.getElementById('pol-cache_hits').textContent) > 0",
            timeout=20_000,
        )
        page.wait_for_selector("#waiting tr[data-call]", timeout=20_000)  # a refund waits
        expect(page.locator("#waiting tr[data-call] td").nth(2)).to_have_text("refund")
        assert page.evaluate("() => window.__sameDocument") == "yes"
        assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1

        # Masked arguments only: the workload's api_key/token never reach the page.
        assert SECRET not in page.content()
        assert not [e for e in console_errors if "Content Security Policy" in e], console_errors
        page.wait_for_selector("#in-flight tr[data-call]", timeout=15_000)  # a busy moment
        save_screenshot(page, tmp_path)
        context.close()


def test_the_page_reconnects_and_reports_a_server_that_went_away(
    browser: Any, workload: Any
) -> None:
    server = serve_status(workload)
    page = browser.new_page()
    try:
        page.goto(server.url)  # no token: loopback only
        expect(page.locator("#connection")).to_have_text("live", timeout=15_000)
        server.close()
        expect(page.locator("#connection")).not_to_have_text("live", timeout=15_000)
    finally:
        server.close()
        page.close()


def test_the_page_shows_calls_running_at_once_with_the_same_id_as_two_rows(browser: Any) -> None:
    gate = threading.Event()
    registry = ToolRegistry()

    @registry.tool(read_only=True)
    def hold(n: int) -> int:
        """Waits for the test."""
        gate.wait(20)
        return n

    with Executor(registry, max_parallel=4) as executor, serve_status(executor) as server:
        page = browser.new_page()
        workers = [
            threading.Thread(
                target=executor.execute,
                args=(ToolCall(id="call_0", name="hold", arguments={"n": n}),),
            )
            for n in (1, 2)
        ]
        try:
            page.goto(server.url)
            expect(page.locator("#connection")).to_have_text("live", timeout=15_000)
            for w in workers:
                w.start()
            rows = page.locator("#in-flight tr[data-call='call_0']")
            expect(rows).to_have_count(2, timeout=15_000)  # from the events
            page.reload()  # from /status
            expect(page.locator("#connection")).to_have_text("live", timeout=15_000)
            expect(rows).to_have_count(2, timeout=15_000)
            gate.set()
            expect(rows).to_have_count(0, timeout=15_000)
        finally:
            gate.set()
            for w in workers:
                w.join(10)
            page.close()


def test_the_page_shows_what_the_queued_calls_wait_for(browser: Any) -> None:
    gate = threading.Event()
    registry = ToolRegistry()

    @registry.tool(read_only=True, groups=["db"])
    def query(n: int) -> int:
        """Waits for the test."""
        gate.wait(20)
        return n

    with (
        Executor(registry, max_parallel=4, groups={"db": 1}) as executor,
        serve_status(executor) as server,
    ):
        page = browser.new_page()
        try:
            handles = [
                executor.submit(ToolCall(name="query", arguments={"n": n})) for n in range(3)
            ]
            page.goto(server.url)
            expect(page.locator("#connection")).to_have_text("live", timeout=15_000)
            expect(page.locator("#stat-queued")).to_have_text("2", timeout=15_000)
            expect(page.locator("#stat-queues")).to_have_text("db 2")  # beside the count
            gate.set()
            for h in handles:
                assert h.result(10).status == "ok"
        finally:
            gate.set()
            page.close()


def test_a_long_error_shows_three_lines_and_the_rest_on_a_click(browser: Any) -> None:
    """A breaker's refusal made a row of the failures about 10 lines tall (issue 22).
    One long unbroken word (a URL, a base64 blob) made the table about 20 000 px
    wide, every error cut to one line, opened or not; a retrying call's previous
    error in flight was cut with no way to see the rest (review 22)."""
    registry = ToolRegistry()
    words = " ".join(f"word{i}" for i in range(200))
    blob = "https://example.com/" + "A" * 3000  # one word, far wider than the page

    @registry.tool(read_only=True)
    def chatty() -> None:
        """Fails with a long message."""
        raise RuntimeError(words)

    @registry.tool(read_only=True)
    def unbroken() -> None:
        """Fails with one long word."""
        raise RuntimeError(blob)

    # Retried a minute after its first try: `retrying` with its previous error meanwhile.
    @registry.tool(read_only=True, retry=RetryPolicy(max_retries=1, backoff_base=60, jitter=0))
    def flaky() -> None:
        """Fails with a long message."""
        raise ConnectionError(words)

    with Executor(registry) as executor, serve_status(executor) as server:
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        try:
            page.goto(server.url)
            expect(page.locator("#connection")).to_have_text("live", timeout=15_000)
            assert executor.execute(ToolCall(name="chatty")).status == "error"
            cell = page.locator("#errors td.err .clip").first
            expect(cell).to_contain_text("word199", timeout=15_000)  # all of it is there
            # Measured in one go in the page: its tables are drawn anew on every
            # update, and a cell found a moment earlier may be gone.
            measure = (
                "() => { const e = document.querySelector('#errors td.err .clip');"
                " return [e.getBoundingClientRect().height,"
                " parseFloat(getComputedStyle(e).lineHeight)]; }"
            )
            capped, line = page.evaluate(measure)
            assert capped <= 3.5 * line, (capped, line)
            page.evaluate("() => document.querySelector('#errors td.err .clip').click()")
            opened, line = page.evaluate(measure)
            assert opened > 6 * line, (opened, line)
            # It stays open when the table is drawn again: with the second
            # error's row (waited for as such: an update for the call's earlier
            # events may come first, fresh-clone run of stop 44).
            assert executor.execute(ToolCall(name="chatty")).status == "error"
            page.wait_for_function(
                "() => document.querySelectorAll('#errors td.err .clip').length === 2"
            )
            heights = page.evaluate(
                "() => [...document.querySelectorAll('#errors td.err .clip')]"
                ".map((e) => e.getBoundingClientRect().height)"
            )
            assert len(heights) == 2 and heights[0] <= 3.5 * line < 6 * line < heights[1]
            # One long word wraps: the table stays within the page, and the
            # opened cell shows all of it, on many lines.
            assert executor.execute(ToolCall(name="unbroken")).status == "error"
            expect(cell).to_contain_text("AAAA", timeout=15_000)
            widths = page.evaluate(
                "() => [document.querySelector('#errors table').getBoundingClientRect().width,"
                " document.documentElement.scrollWidth, window.innerWidth]"
            )
            assert max(widths[:2]) <= widths[2], widths
            capped, line = page.evaluate(measure)
            assert capped <= 3.5 * line, (capped, line)
            page.evaluate("() => document.querySelector('#errors td.err .clip').click()")
            opened, line = page.evaluate(measure)
            assert opened > 4 * line, (opened, line)  # (even cut to 300 characters)
            # A retrying call's previous error: clipped too, all of it on a click.
            handle = executor.submit(ToolCall(name="flaky"))
            detail = page.locator("#in-flight td.detail .clip").first
            expect(detail).to_contain_text("word0", timeout=15_000)
            shown = page.evaluate(
                "() => { const e = document.querySelector('#in-flight td.detail .clip');"
                " e.click(); return [e.classList.contains('open'), e.scrollHeight - e.clientHeight,"
                " e.textContent]; }"
            )
            assert shown[0] and shown[1] <= 1, shown
            handle.cancel()
            assert handle.result(10).status == "cancelled"
        finally:
            page.close()
