"""The page in headless Chromium (Debian's, driven by Playwright), served by `anarchon dashboard`, over
real replica processes on one SQLite file: the buttons pause and resume a job on every replica.

Chromium is /usr/bin/chromium (`apt-get install chromium`; .ci/run installs it), never a browser that
Playwright downloads. Without it the tests skip, saying so; ANARCHON_REQUIRE_SERVICES=1 makes that a
failure. `ANARCHON_DASHBOARD_SCREENSHOT=docs/img/dashboard.png` saves the page as the docs show it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from anarchon import backend_for_url
from anarchon.backends import ControlBackend, JobControl
from anarchon.testing import unused_port
from anarchon_testkit.cluster import Cluster

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("ANARCHON_CHROMIUM", "/usr/bin/chromium")
HEARTBEAT_S = 1.0
SLACK_S = 0.5
"""Beyond a heartbeat, before a pause must show: the claim jitter, a poll's and a claim's round trips."""


def _unavailable(reason: str) -> None:
    if os.environ.get("ANARCHON_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; ANARCHON_REQUIRE_SERVICES=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium, launched once for the module."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set ANARCHON_CHROMIUM)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright for Python is not installed: pip install 'anarchon-dashboard[test]'")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two replicas: `tick` every second; `long` every 6 s, running 5 s of it (a lease to watch)."""
    workdir = tmp_path_factory.mktemp("dashboard-cluster")
    with Cluster(f"sqlite:///{workdir}/jobs.db", workdir / "replicas", replicas=2, lease="3s",
                 heartbeat=f"{HEARTBEAT_S}s", tick_every="1s", long_every="6s", long_run="5s") as c:
        c.wait_for(lambda e: e.event == "start" and e.job == "tick" and e.slot > c.ready_ms, timeout=10)
        yield c


@contextmanager
def served(url: str, namespace: str, *flags: str) -> Iterator[str]:
    """`anarchon dashboard URL` in a process of its own; yields the page's address once it answers."""
    port = unused_port()
    proc = subprocess.Popen([sys.executable, "-m", "anarchon.cli", "dashboard", url, "--namespace", namespace,
                             "--port", str(port), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(base + "api/state", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"anarchon dashboard did not answer at {base}: {proc.communicate()[0]}")
            time.sleep(0.1)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def controls(url: str, namespace: str) -> dict[str, JobControl]:
    """The namespace's controls, read from the store directly (in a thread: Playwright's sync API runs
    an event loop of its own in this one)."""

    async def read() -> dict[str, JobControl]:
        store = cast(ControlBackend, backend_for_url(url))
        await store.open()
        try:
            return await store.controls(namespace)
        finally:
            await store.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, read()).result(30)


def utc(text: str, plus_ms: int) -> str:
    """A time as the page writes it ("2026-12-01 22:06:31Z"), `plus_ms` later."""
    when = datetime.strptime(text, "%Y-%m-%d %H:%M:%SZ").replace(tzinfo=UTC) + timedelta(milliseconds=plus_ms)
    return when.strftime("%Y-%m-%d %H:%M:%SZ")


def seconds(text: str) -> float:
    found = re.fullmatch(r"(\d+\.\d) s", text.strip())
    assert found, f"not a countdown: {text!r}"
    return float(found.group(1))


def test_pause_and_resume_from_the_page_reach_every_replica(browser: Any, cluster: Cluster,
                                                            tmp_path: Path) -> None:
    from playwright.sync_api import expect

    instances = {e.pid: e.instance for e in cluster.events() if e.event == "ready"}
    with served(cluster.url, cluster.namespace) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # Fake timers: the countdowns and the polls move only when the test says. Requests are real.
        page.clock.install()
        page.goto(base)
        tick = page.locator('tr[data-job="tick"]')
        expect(tick).to_be_visible()
        long = page.locator('tr[data-job="long"]')

        # Who holds `long`, and its lease counting down in the browser: reload until a run is live.
        for _ in range(20):
            holder = long.locator("td").nth(4).inner_text().strip()
            if holder in instances.values():
                break
            time.sleep(0.5)
            page.reload()
        else:
            raise AssertionError(f"the page never showed a holder of 'long': {long.inner_text()}")
        # The page's clock stops, so only run_for moves it (pause_at takes Unix time in seconds, ahead of
        # the page's own). A poll that lands in between redraws the row from the store's real time, so
        # the countdown is marked and read in one call, and the check retried if the mark is gone.
        page.clock.pause_at(page.evaluate("Date.now()") / 1000 + 0.3)
        cell = long.locator("td").nth(5)
        countdown = "const c = n.querySelector('.countdown');"
        mark = f"n => {{ {countdown} c.dataset.probe = 'kept'; return c.textContent; }}"
        read = f"n => {{ {countdown} return [c.dataset.probe || '', c.textContent]; }}"
        for _ in range(5):
            before = seconds(cell.evaluate(mark))
            assert 0 < before <= 3.0, before
            page.clock.run_for(500)
            probe, after = cell.evaluate(read)
            if probe == "kept":
                assert abs(before - seconds(after) - 0.5) < 0.11, (before, after)
                break
        else:
            raise AssertionError("the row was redrawn during every 500 ms of the page's clock")
        page.clock.resume()

        tick.locator('button[data-verb="pause"]').click()
        expect(page.locator("#message")).to_have_text(re.compile(r"^tick: paused"))
        paused_ms = time.time() * 1000
        assert controls(cluster.url, cluster.namespace)["tick"].paused
        expect(tick.locator(".badge", has_text="paused")).to_be_visible()
        time.sleep(2 * HEARTBEAT_S + 1)
        bound = paused_ms + (HEARTBEAT_S + SLACK_S) * 1000
        late = [e.slot for e in cluster.starts("tick") if e.slot > bound]
        assert not late, f"slots run after the pause plus a heartbeat: {late}\n{cluster.output()}"

        tick.locator('button[data-verb="resume"]').click()
        expect(page.locator("#message")).to_have_text(re.compile(r"^tick: resumed"))
        resumed_ms = time.time() * 1000
        back = cluster.wait_for(lambda e: e.event == "start" and e.job == "tick" and e.slot > resumed_ms,
                                timeout=5)
        assert back.slot - resumed_ms <= 1000 + (HEARTBEAT_S + SLACK_S) * 1000, (back, resumed_ms)
        expect(tick.locator('button[data-verb="pause"]')).to_be_visible()
        cluster.assert_one_winner()

        assert errors == [], errors

        # On real time now: each replica's registration, and the runs the replicas wrote to the history.
        view = browser.new_page(viewport={"width": 1280, "height": 720})
        view.on("pageerror", lambda exc: errors.append(str(exc)))
        view.goto(base)
        row = view.locator('tr[data-job="tick"]')
        expect(row.locator("td").nth(1)).to_contain_text("every 1s")
        for instance in instances.values():
            expect(row.locator("td").nth(7)).to_contain_text(instance)
        next_run = row.locator("td").nth(2).locator(".countdown")
        expect(next_run).to_have_text(re.compile(r"^in \d\.\d s$"))
        runs = view.locator("#runs tbody tr").filter(has_text="tick")
        expect(runs.first).to_be_visible()
        assert runs.first.locator("td").nth(4).inner_text() in instances.values()
        expect(runs.first.locator("td").nth(5)).to_have_text("done")

        # The job's own page: its schedule, its next slots and its history, from the replicas' runs.
        row.locator("a.job-link").click()
        expect(view.locator("#job-view")).to_be_visible()
        expect(view.locator("#list-view")).to_be_hidden()
        expect(view.locator("#job-name")).to_have_text("tick")
        expect(view.locator("#job-facts")).to_contain_text("every 1s")
        expect(view.locator("#job-next li")).to_have_count(5)
        history = view.locator("#job-runs tbody tr")
        expect(history.first.locator("td").nth(4)).to_have_text("done")
        assert history.first.locator("td").nth(3).inner_text() in instances.values()
        view.go_back()
        expect(view.locator('tr[data-job="tick"]')).to_be_visible()
        time.sleep(1)
        shot = Path(os.environ.get("ANARCHON_DASHBOARD_SCREENSHOT") or tmp_path / "dashboard.png")
        view.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        assert errors == [], errors


def test_read_only_shows_no_buttons_and_refuses_controls(browser: Any, cluster: Cluster) -> None:
    from playwright.sync_api import expect

    with served(cluster.url, cluster.namespace, "--read-only") as base:
        page = browser.new_page()
        page.goto(base)
        expect(page.locator('tr[data-job="tick"]')).to_be_visible()
        expect(page.locator("#mode")).to_have_text("read-only")
        assert page.locator("button").count() == 0
        expect(page.locator("#jobs th.actions")).to_be_hidden()
        status = page.evaluate("""async () => (await fetch("api/pause", {method: "POST",
            headers: {"content-type": "application/json"}, body: JSON.stringify({job: "tick"})})).status""")
        assert status == 403
        request = urllib.request.Request(base + "api/trigger", json.dumps({"job": "tick"}).encode(),
                                         {"content-type": "application/json"}, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 403
    tick = controls(cluster.url, cluster.namespace).get("tick", JobControl())
    assert not tick.paused and tick.trigger == 0


HOSTILE = '<img src=x onerror="document.title=`pwned`">'


def in_thread(step: Any) -> Any:
    """Run a coroutine to its end in a thread of its own (this one runs Playwright's event loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, step).result(30)


@contextmanager
def served_in_process(dashboard: Any) -> Iterator[str]:
    """`dashboard` served by uvicorn on a thread of this process."""
    import threading

    import uvicorn

    port = unused_port()
    server = uvicorn.Server(uvicorn.Config(dashboard, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(10)


def test_store_text_is_shown_as_text_with_schedules_next_and_recent_runs(browser: Any) -> None:
    """A job named like markup and an error made of markup, on a store with a catalogue and a history:
    the page shows them literally, with the schedule, the next run counting down and the runs."""
    from playwright.sync_api import expect

    from anarchon import Every, MemoryBackend
    from anarchon.backends import CatalogueEntry, ClaimRequest, ReleaseOutcome, RunRecord
    from anarchon_dashboard import app

    backend = MemoryBackend()

    async def seed() -> None:
        now = int(time.time() * 1000)
        won = await backend.claim(ClaimRequest("web", HOSTILE, now - 1000, "web-1", lease_ms=30_000))
        assert won.lease is not None
        await backend.release(won.lease, ReleaseOutcome.FAILED)
        await backend.publish_catalogue("web", [
            CatalogueEntry(HOSTILE, "web-1", "every 1h", "every", "UTC", {}, now + 3_600_000),
            CatalogueEntry("digest", "web-2", "cron '0 8 * * 1-5' (Europe/Athens)", "cron", "Europe/Athens",
                           {}, now + 90_000),
            CatalogueEntry("sync", "web-2", "every 1m", "every", "UTC", {}, now - now % 60_000 + 60_000,
                           fingerprint=Every(60_000).fingerprint),
        ], ttl_ms=60_000)
        await backend.record_runs("web", [RunRecord(HOSTILE, now - 1000, 1, 1, "web-1", "failed", now - 990,
                                                    1500, f"ValueError: {HOSTILE}")], keep=10)

    in_thread(seed())
    # No poll within the test's fake time: a poll would set the countdowns from the store's time again.
    with served_in_process(app(backend, namespace="web", refresh="1h")) as base:
        page = browser.new_page()
        page.clock.install()
        page.goto(base)
        hostile = page.locator("#jobs tbody tr").filter(has_text="<img")
        expect(hostile).to_have_count(1)
        assert hostile.locator("td").first.inner_text() == HOSTILE
        assert page.locator("img").count() == 0 and page.title() != "pwned"
        error = page.locator("#runs pre.err")
        expect(error).to_have_text(f"ValueError: {HOSTILE}")
        assert page.locator("#runs tbody tr").first.locator("td").nth(5).inner_text() == "failed"

        # The filters: by name, and by state.
        page.fill("#filter", "SYN")
        expect(page.locator("#jobs tbody tr")).to_have_count(1)
        expect(page.locator('tr[data-job="sync"]')).to_be_visible()
        page.fill("#filter", "")
        page.select_option("#show", "never")
        expect(page.locator("#jobs tbody tr")).to_have_count(2)  # digest and sync
        page.select_option("#show", "failed")
        expect(page.locator("#jobs tbody tr")).to_have_count(1)
        page.select_option("#show", "")
        expect(page.locator("#jobs tbody tr")).to_have_count(3)

        # Into the failed job's own page: its history with the whole error, still as text.
        hostile.locator("a.job-link").click()
        expect(page.locator("#job-view")).to_be_visible()
        expect(page.locator("#job-name")).to_have_text(HOSTILE)
        expect(page.locator("#job-facts")).to_contain_text("every 1h")
        failed = page.locator("#job-runs tbody tr").first
        expect(failed.locator("td").nth(4)).to_have_text("failed")
        expect(failed.locator("pre.err")).to_have_text(f"ValueError: {HOSTILE}")
        assert page.locator("img").count() == 0 and page.title() != "pwned"
        page.locator("#back").click()
        expect(page.locator("#list-view")).to_be_visible()

        digest = page.locator('tr[data-job="digest"]')
        expect(digest.locator("td").nth(1)).to_contain_text("cron '0 8 * * 1-5' (Europe/Athens)")
        expect(digest.locator("td").nth(3)).to_have_text("never run")
        assert digest.locator("td").nth(7).inner_text() == "web-2"
        due = digest.locator("td").nth(2).locator(".countdown")
        # Due 90 s after the seed by the store's clock, which runs on in real time while the page loads
        # (seconds on a loaded machine): over a minute away, by the store's clock.
        expect(due).to_have_text(re.compile(r"^in 1 m [0-5]\d s$"))
        sync = page.locator('tr[data-job="sync"]').locator("td").nth(2)
        expect(sync.locator(".countdown")).to_have_text(re.compile(r"^in (\d+\.\d s|1 m 00 s)$"))
        first = sync.locator(".sub").inner_text()
        page.clock.run_for(61_000)  # the interval job's next run moves on by itself, one period
        expect(sync.locator(".countdown")).to_have_text(re.compile(r"^in (\d+\.\d s|1 m 00 s)$"))
        assert sync.locator(".sub").inner_text() == utc(first, 60_000), first
        expect(due).to_have_text(re.compile(r"^in [1-5]?\d\.\d s$"))  # the page's fake minute counted
        # The cron job's slot comes due: the page reads again at once, not at its next poll (an hour).
        with page.expect_request("**/api/state"):
            page.clock.run_for(35_000)
        expect(due).to_have_text(re.compile(r"^in 1 m [0-5]\d s$"))  # fake time moved on, the store's did not


def test_a_token_login_on_the_page(browser: Any) -> None:
    """Served alone with a token: the page asks for it, refuses a wrong one, and opens with the right one."""
    from playwright.sync_api import expect

    from anarchon import MemoryBackend
    from anarchon.backends import CatalogueEntry
    from anarchon_dashboard import app

    backend = MemoryBackend()
    entry = CatalogueEntry("sync", "web-1", "every 1m", "every", "UTC", {}, None)
    in_thread(backend.publish_catalogue("web", [entry], 60_000))
    with served_in_process(app(backend, namespace="web", token="let-me-in-please")) as base:
        page = browser.new_page()
        page.goto(base)
        expect(page.locator('input[name="token"]')).to_be_visible()
        assert page.locator("#jobs").count() == 0
        page.fill('input[name="token"]', "a-wrong-token")
        page.click('button[type="submit"]')
        expect(page.locator(".error")).to_contain_text("not the dashboard's")
        page.fill('input[name="token"]', "let-me-in-please")
        page.click('button[type="submit"]')
        expect(page.locator('tr[data-job="sync"]')).to_be_visible()
        page.reload()  # the session is a cookie
        expect(page.locator('tr[data-job="sync"]')).to_be_visible()


def stored(backend: Any, schedule_id: str) -> Any:
    """The stored schedule `schedule_id` as the store holds it (None when gone), read beside the page."""
    from anarchon import Schedules

    return in_thread(Schedules(backend, namespace="web").get(schedule_id))


def test_schedules_are_created_edited_paused_and_deleted_from_the_page(browser: Any) -> None:
    """The Schedules view over a store that keeps schedules (MemoryBackend, served in this process: the
    SQLite driver's schedules are not on this branch yet): a bad cron is refused next to the form, then a
    schedule is created, listed, edited (and a stale edit refused), paused, resumed and deleted; each step
    is read back from the store."""
    from playwright.sync_api import expect

    from anarchon import MemoryBackend, Schedules
    from anarchon.backends import CatalogueEntry
    from anarchon_dashboard import app

    backend = MemoryBackend()
    in_thread(backend.publish_catalogue("web", [CatalogueEntry("send-report", "web-1", "task", "task", "", {},
                                                               None)], 600_000))
    with served_in_process(app(backend, namespace="web")) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base)
        page.locator("#tab-schedules").click()
        expect(page.locator("#schedules-view")).to_be_visible()
        expect(page.locator("#schedules tbody")).to_contain_text("no schedules in this namespace yet")
        form = page.locator("#schedule-form")
        expect(form).to_be_hidden()

        # Create: first with a cron that cannot be read, whose error shows beside the form.
        page.locator("#schedule-new").click()
        expect(form).to_be_visible()
        form.locator('[name="id"]').fill("report-42")
        form.locator('[name="task"]').fill("send-report")
        form.locator('[name="kind"]').select_option("cron")
        expect(form.locator('[name="every"]')).to_be_hidden()
        form.locator('[name="cron"]').fill("61 9 * * 1-5")
        form.locator('[name="timezone"]').fill("Europe/Athens")
        form.locator('[name="args"]').fill('{"customer": 42, "fmt": "pdf"}')
        form.locator('[name="timeout"]').fill("10m")
        form.locator('[name="overlap"]').select_option("buffer_one")
        page.locator("#schedule-save").click()
        expect(page.locator("#schedule-error")).to_contain_text("invalid cron expression '61 9 * * 1-5'")
        expect(form).to_be_visible()
        assert stored(backend, "report-42") is None
        form.locator('[name="cron"]').fill("0 9 * * 1-5")
        page.locator("#schedule-save").click()
        expect(form).to_be_hidden()
        expect(page.locator("#message")).to_contain_text("report-42: created, version 1")
        row = page.locator('tr[data-schedule="report-42"]')
        expect(row).to_be_visible()
        expect(row.locator("td").nth(1)).to_contain_text("send-report")
        expect(row.locator("td").nth(2)).to_contain_text("cron '0 9 * * 1-5' (Europe/Athens)")
        expect(row.locator("td").nth(2)).to_contain_text("overlap buffer_one · timeout 10m")
        expect(row.locator("td").nth(3)).to_have_text('{"customer":42,"fmt":"pdf"}')
        expect(row.locator("td").nth(4).locator(".countdown")).to_have_text(re.compile(r"^in \d"))
        expect(row.locator("td").nth(6)).to_contain_text("1")
        created = stored(backend, "report-42")
        assert created.version == 1 and created.args == {"customer": 42, "fmt": "pdf"}
        assert created.options == {"timeout": "600000ms", "overlap": "buffer_one"}
        assert created.description == "cron '0 9 * * 1-5' (Europe/Athens)"

        # Edit: the form comes prefilled; an every schedule replaces the cron, and the emptied timeout goes.
        row.locator('button[data-schedule-verb="edit"]').click()
        expect(page.locator("#schedule-form-title")).to_have_text("Edit report-42 (version 1)")
        expect(form.locator('[name="id"]')).to_have_value("report-42")
        assert form.locator('[name="id"]').evaluate("n => n.readOnly")
        expect(form.locator('[name="cron"]')).to_have_value("0 9 * * 1-5")
        expect(form.locator('[name="timezone"]')).to_have_value("Europe/Athens")
        expect(form.locator('[name="timeout"]')).to_have_value("10m")
        expect(form.locator('[name="overlap"]')).to_have_value("buffer_one")
        assert json.loads(form.locator('[name="args"]').input_value()) == {"customer": 42, "fmt": "pdf"}
        form.locator('[name="kind"]').select_option("every")
        form.locator('[name="every"]').fill("30m")
        form.locator('[name="timeout"]').fill("")
        form.locator('[name="args"]').fill('{"customer": 42}')
        page.locator("#schedule-save").click()
        expect(form).to_be_hidden()
        expect(row.locator("td").nth(2)).to_contain_text("every 30m")
        expect(row.locator("td").nth(6)).to_contain_text("2")
        edited = stored(backend, "report-42")
        assert (edited.version, edited.description, edited.args) == (2, "every 30m", {"customer": 42})
        assert edited.options == {"overlap": "buffer_one"}

        # A stale edit: someone else saves in between; the page says so and keeps what was typed.
        row.locator('button[data-schedule-verb="edit"]').click()
        expect(page.locator("#schedule-form-title")).to_have_text("Edit report-42 (version 2)")
        expect(form.locator('[name="every"]')).to_have_value("30m")
        in_thread(Schedules(backend, namespace="web").update("report-42", version=2, every="1h"))
        form.locator('[name="every"]').fill("15m")
        page.locator("#schedule-save").click()
        refused = page.locator("#schedule-error")
        expect(refused).to_contain_text("is at version 3, not 2: it changed meanwhile")
        expect(refused).to_contain_text("It is now: every 1h")
        assert stored(backend, "report-42").description == "every 1h"
        page.locator("#schedule-save").click()  # again, deliberately: over version 3
        expect(form).to_be_hidden()
        expect(row.locator("td").nth(2)).to_contain_text("every 15m")
        overwritten = stored(backend, "report-42")
        assert (overwritten.version, overwritten.description) == (4, "every 15m")

        # Pause and resume: the schedule's own flag.
        row.locator('button[data-schedule-verb="pause"]').click()
        expect(row.locator("td").nth(5)).to_have_text("paused")
        expect(row.locator("td").nth(4)).to_have_text("paused")
        assert stored(backend, "report-42").paused
        expect(row.locator('button[data-schedule-verb="resume"]')).to_be_visible()

        # Its job page: task, arguments and version beside the schedule.
        row.locator("a.job-link").click()
        expect(page.locator("#job-name")).to_have_text("report-42")
        facts = page.locator("#job-facts")
        expect(facts).to_contain_text("every 15m")
        expect(facts).to_contain_text("send-report")
        expect(facts).to_contain_text('{"customer":42}')
        expect(facts).to_contain_text("5 · stored schedule")
        expect(page.locator("#job-next li")).to_have_text(["paused"])
        page.locator('#job-actions button[data-schedule-verb="resume"]').click()
        expect(page.locator("#job-next li")).to_have_count(5)
        assert not stored(backend, "report-42").paused
        page.locator("#tab-schedules").click()

        # Delete, after a confirm that is first declined.
        page.once("dialog", lambda dialog: dialog.dismiss())
        row.locator('button[data-schedule-verb="remove"]').click()
        expect(row).to_be_visible()
        assert stored(backend, "report-42") is not None
        page.once("dialog", lambda dialog: dialog.accept())
        row.locator('button[data-schedule-verb="remove"]').click()
        expect(row).to_have_count(0)
        expect(page.locator("#message")).to_contain_text("report-42: deleted")
        assert stored(backend, "report-42") is None

        # Once, at a moment given in the browser's own time zone.
        page.locator("#schedule-new").click()
        form.locator('[name="id"]').fill("once")
        form.locator('[name="task"]').fill("send-report")
        form.locator('[name="kind"]').select_option("at")
        form.locator('[name="at"]').fill("2099-01-01T09:00:00")
        page.locator("#schedule-save").click()
        expect(page.locator('tr[data-schedule="once"]')).to_be_visible()
        local_ms = page.evaluate("new Date('2099-01-01T09:00:00').getTime()")
        assert stored(backend, "once").schedule.when_ms == local_ms
        page.locator('tr[data-schedule="once"] button[data-schedule-verb="edit"]').click()
        expect(form.locator('[name="at"]')).to_have_value(re.compile(r"^2099-01-01T09:00(:00)?$"))
        page.locator("#schedule-cancel").click()
        expect(form).to_be_hidden()
        assert errors == [], errors


def test_read_only_lists_schedules_with_no_form_or_buttons(browser: Any) -> None:
    from playwright.sync_api import expect

    from anarchon import MemoryBackend, Schedules
    from anarchon_dashboard import app

    backend = MemoryBackend()
    schedules = Schedules(backend, namespace="web")
    in_thread(schedules.add("nightly", "not-deployed", cron="0 3 * * *", args={"shard": HOSTILE}))
    with served_in_process(app(backend, namespace="web", read_only=True)) as base:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(base + "#schedules")
        row = page.locator('tr[data-schedule="nightly"]')
        expect(row).to_be_visible()
        expect(row.locator("td").nth(1)).to_contain_text("no live replica")  # nobody has its task
        expect(row.locator("td").nth(3)).to_have_text(json.dumps({"shard": HOSTILE}, separators=(",", ":")))
        assert page.locator("img").count() == 0
        assert page.locator("#schedule-form").count() == 0 and page.locator("#schedule-new").count() == 0
        assert page.locator("button").count() == 0
        expect(page.locator("#schedules th.actions")).to_be_hidden()
        row.locator("a.job-link").click()
        expect(page.locator("#job-facts")).to_contain_text("not-deployed")
        assert page.locator("button").count() == 0
        status = page.evaluate("""async () => (await fetch("api/schedules/pause", {method: "POST",
            headers: {"content-type": "application/json"}, body: JSON.stringify({id: "nightly"})})).status""")
        assert status == 403
        assert errors == [], errors
    assert not in_thread(schedules.get("nightly")).paused
