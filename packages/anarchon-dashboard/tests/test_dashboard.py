"""The dashboard's requests, on the in-process MemoryBackend with a manual clock, and mounted in real
FastAPI, Starlette and Django apps."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

import anarchon
import anarchon_dashboard
from anarchon import Every, MemoryBackend, MemoryClaimBackend
from anarchon.backends import CatalogueEntry, ClaimRequest, MemoryStore, ReleaseOutcome, RunRecord
from anarchon.testing import ManualClock
from anarchon_dashboard import Dashboard

NS = "dash"
HOSTILE = '<img src=x onerror="alert(1)">&amp;'
JSON = {"content-type": "application/json"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def backend(clock: ManualClock) -> MemoryBackend:
    return MemoryBackend(MemoryStore(clock))


async def seed(backend: MemoryBackend, clock: ManualClock) -> None:
    """A running job held by `host-a`, a finished one with a failure, a paused one that never ran, and
    a catalogue entry for each."""
    now = clock.now
    await backend.claim(ClaimRequest(NS, "report", now - 500, "host-a", lease_ms=5000))
    done = await backend.claim(ClaimRequest(NS, HOSTILE, now - 2000, "host-b", lease_ms=5000))
    assert done.lease is not None
    await backend.release(done.lease, ReleaseOutcome.FAILED)
    await backend.set_control(NS, "nightly", paused=True)
    entries = [
        CatalogueEntry("report", "host-a", "every 10s", "every", "UTC", {"lease": "5s"}, now + 9500),
        CatalogueEntry("report", "host-b", "every 10s", "every", "UTC", {"lease": "5s"}, now + 9500),
        CatalogueEntry("nightly", "host-a", "cron '0 3 * * *' (Europe/Athens)", "cron", "Europe/Athens", {},
                       now + 3_600_000),
        CatalogueEntry(HOSTILE, "host-b", "every 1m", "every", "UTC", {}, now + 58_000),
    ]
    await backend.publish_catalogue(NS, entries, ttl_ms=60_000)
    await backend.record_runs(NS, [
        RunRecord(HOSTILE, now - 2000, 1, 2, "host-b", "failed", now - 1990, 12, f"RuntimeError: {HOSTILE}"),
        RunRecord("report", now - 10_500, 1, 1, "host-b", "done", now - 10_490, 40),
    ], keep=100)


def deployed(backend: Any, *jobs: str) -> None:
    """Publish `jobs` as a replica does, so that the controls know them."""

    async def publish() -> None:
        await backend.open()
        try:
            entries = [CatalogueEntry(job, "host-a", "every 10s", "every", "UTC", {}, None) for job in jobs]
            await backend.publish_catalogue(NS, entries, ttl_ms=600_000)
        finally:
            await backend.close()

    asyncio.run(publish())


async def state(dashboard: Dashboard) -> dict[str, Any]:
    reply = await dashboard.respond("GET", "/api/state")
    assert reply.status == 200, reply.body
    assert reply.content_type == "application/json"
    data: dict[str, Any] = json.loads(reply.body)
    return data


async def test_the_state_has_holders_leases_schedules_next_and_recent_runs(
        backend: MemoryBackend, clock: ManualClock) -> None:
    await seed(backend, clock)
    data = await state(anarchon_dashboard.app(backend, namespace=NS))
    assert data["namespace"] == NS and data["now"] == clock.now and data["notes"] == []
    assert data["capabilities"] == {"inspect": True, "control": True, "history": True, "schedules": True}
    jobs = {j["job"]: j for j in data["jobs"]}
    assert list(jobs) == sorted([HOSTILE, "nightly", "report"])

    report = jobs["report"]
    assert report["record"]["holder"] == "host-a" and report["record"]["live"]
    assert report["record"]["expires_in_ms"] == 5000
    assert report["instances"] == ["host-a", "host-b"] and report["schedule"] == "every 10s"
    assert (report["next_slot"], report["next_in_ms"], report["paused"]) == (clock.now + 9500, 9500, False)

    nightly = jobs["nightly"]  # paused and never run: known from the controls and the catalogue only
    assert nightly["paused"] and nightly["record"] is None and nightly["timezone"] == "Europe/Athens"

    failed = jobs[HOSTILE]
    assert failed["record"]["status"] == "failed" and failed["record"]["holder"] == ""
    assert failed["runs"][0]["error"] == f"RuntimeError: {HOSTILE}"
    assert [(r["job"], r["outcome"]) for r in data["recent"]] == [(HOSTILE, "failed"), ("report", "done")]

    clock.advance(6000)  # the lease ran out: nobody holds it any more
    report = next(j for j in (await state(anarchon_dashboard.app(backend, namespace=NS)))["jobs"]
                  if j["job"] == "report")
    assert report["record"]["holder"] == "" and report["record"]["expires_in_ms"] is None


async def test_a_next_run_published_in_the_past_is_computed_from_the_schedule(
        backend: MemoryBackend, clock: ManualClock) -> None:
    """Replicas publish their jobs once a minute: by the time the page reads an entry, the slot it
    published may be past, and the next one follows from the schedule's fingerprint."""
    start = clock.now - clock.now % 10_000
    entry = CatalogueEntry("sync", "host-a", "every 10s", "every", "UTC", {}, start + 10_000,
                           fingerprint=Every(10_000).fingerprint)
    await backend.publish_catalogue(NS, [entry], ttl_ms=180_000)
    clock.advance(35_000)
    await backend.claim(ClaimRequest(NS, "sync", start + 30_000, "host-a"))  # the page reads store time
    sync = (await state(anarchon_dashboard.app(backend, namespace=NS)))["jobs"][0]
    assert (sync["next_slot"], sync["next_in_ms"]) == (start + 40_000, start + 40_000 - clock.now)
    assert sync["every_ms"] == 10_000  # the page moves an interval job's next run on between polls


async def test_open_pages_share_one_read_per_half_refresh_and_a_control_reads_again(
        backend: MemoryBackend, clock: ManualClock) -> None:
    await seed(backend, clock)
    dashboard = anarchon_dashboard.app(backend, namespace=NS, refresh="1h")
    first = await state(dashboard)
    calls = backend.store.calls
    second = await state(dashboard)
    assert backend.store.calls == calls and second["jobs"] == first["jobs"]
    assert 0 <= second["age_ms"] < 60_000
    await dashboard.respond("POST", "/api/pause", b'{"job": "report"}', JSON)
    calls = backend.store.calls
    report = next(j for j in (await state(dashboard))["jobs"] if j["job"] == "report")
    assert backend.store.calls > calls and report["paused"] and report["record"]["holder"] == "host-a"


async def test_a_store_without_history_or_controls_is_shown_with_a_note_saying_why() -> None:
    data = await state(anarchon_dashboard.app(MemoryClaimBackend(), namespace=NS))
    assert data["jobs"] == [] and data["recent"] == []
    assert data["capabilities"] == {"inspect": False, "control": False, "history": False, "schedules": False}
    notes = " ".join(data["notes"])
    for capability in ("'inspect'", "'control'", "'history'"):
        assert capability in notes, notes
    reply = await anarchon_dashboard.app(MemoryClaimBackend(), namespace=NS).respond(
        "POST", "/api/pause", b'{"job": "report"}', JSON)
    assert reply.status == 409 and b"'control' capability" in reply.body


async def test_the_page_carries_no_store_text_and_forbids_inline_script(
        backend: MemoryBackend, clock: ManualClock) -> None:
    await seed(backend, clock)
    dashboard = anarchon_dashboard.app(backend, namespace=NS, title=HOSTILE)
    reply = await dashboard.respond("GET", "/")
    page = reply.body.decode()
    assert reply.status == 200 and reply.content_type.startswith("text/html")
    assert "<img" not in page and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;amp;" in page
    headers = dict(reply.headers)
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]
    script = (await dashboard.respond("GET", "/app.js")).body.decode()
    assert not re.search(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write", script)
    assert "textContent" in script


async def test_the_buttons_pause_resume_and_trigger_through_the_store(backend: MemoryBackend,
                                                                     clock: ManualClock) -> None:
    await seed(backend, clock)
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    reply = await dashboard.respond("POST", "/api/pause", b'{"job": "report"}', JSON)
    assert (reply.status, json.loads(reply.body)) == (200, {"job": "report", "paused": True, "trigger": 0})
    assert (await backend.controls(NS))["report"].paused
    assert (await dashboard.respond("POST", "api/resume", b'{"job": "report"}', JSON)).status == 200
    reply = await dashboard.respond("POST", "/api/trigger", b'{"job": "report"}', JSON)
    control = (await backend.controls(NS))["report"]
    assert not control.paused and control.trigger > 0
    assert json.loads(reply.body)["trigger"] == control.trigger
    reply = await dashboard.respond("POST", "/api/pause", b'{"job": "reprot"}', JSON)
    assert reply.status == 404 and "no job 'reprot' in namespace 'dash'" in json.loads(reply.body)["error"]
    assert "reprot" not in await backend.controls(NS)


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "says"), [
    ("POST", "/api/pause", b'{"job": "report"}', {"content-type": "text/plain"}, 415, "application/json"),
    ("POST", "/api/pause", b"job=report", {"content-type": "application/x-www-form-urlencoded"}, 415,
     "application/json"),
    ("POST", "/api/pause", b'{"name": "report"}', JSON, 400, '{"job": NAME}'),
    ("POST", "/api/pause", b'{"job": 7}', JSON, 400, "must be a string, not 7"),
    ("POST", "/api/pause", b'{"job": " "}', JSON, 400, "invalid job name"),
    ("POST", "/api/pause", b'{"job": "' + b"x" * 20_000 + b'"}', JSON, 413, "at most 16384"),
    ("GET", "/api/pause", b"", {}, 405, "use POST"),
    ("POST", "/api/state", b"", JSON, 405, "use GET"),
    ("GET", "/api/delete", b"", {}, 404, "no such page '/api/delete'"),
])
async def test_bad_requests_are_refused_saying_what_to_send(
        backend: MemoryBackend, method: str, path: str, body: bytes, headers: dict[str, str], status: int,
        says: str) -> None:
    reply = await anarchon_dashboard.app(backend, namespace=NS).respond(method, path, body, headers)
    assert reply.status == status and says in json.loads(reply.body)["error"], reply
    assert await backend.controls(NS) == {}


async def test_read_only_refuses_every_control_with_403(backend: MemoryBackend) -> None:
    dashboard = anarchon_dashboard.app(backend, namespace=NS, read_only=True)
    for verb in ("pause", "resume", "trigger"):
        reply = await dashboard.respond("POST", f"/api/{verb}", b'{"job": "report"}', JSON)
        assert reply.status == 403 and "read-only" in json.loads(reply.body)["error"]
    assert await backend.controls(NS) == {}
    assert (await state(dashboard))["read_only"] is True
    page = (await dashboard.respond("GET", "/")).body.decode()
    assert "&quot;read_only&quot;: true" in page


async def test_an_unreachable_store_answers_503_with_the_redacted_url() -> None:
    from anarchon import backend_for_url

    pytest.importorskip("anarchon_redis")
    backend = backend_for_url("redis://:s3cret@127.0.0.1:1/0")
    reply = await anarchon_dashboard.app(backend, namespace=NS).respond("GET", "/api/state")
    error = json.loads(reply.body)["error"]
    assert reply.status == 503 and "s3cret" not in error and "127.0.0.1:1" in error, error


def test_mounted_in_fastapi_behind_a_dependency(backend: MemoryBackend) -> None:
    """The documented FastAPI recipe: a route that hands the request to `respond`, guarded by a
    dependency."""
    deployed(backend, "report")
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    api = FastAPI()

    def require_admin(request: Request) -> None:
        if request.headers.get("authorization") != "Bearer admin":
            raise HTTPException(status_code=401)

    @api.api_route("/ops/jobs/{path:path}", methods=["GET", "POST"], dependencies=[Depends(require_admin)])
    async def jobs_dashboard(request: Request, path: str) -> Response:
        reply = await dashboard.respond(request.method, path, await request.body(), request.headers,
                                        query=request.url.query)
        return Response(reply.body, reply.status, dict(reply.headers), media_type=reply.content_type)

    with TestClient(api) as client:
        assert client.get("/ops/jobs/").status_code == 401
        assert client.post("/ops/jobs/api/pause", json={"job": "report"}).status_code == 401
        auth = {"authorization": "Bearer admin"}
        page = client.get("/ops/jobs/", headers=auth)
        assert page.status_code == 200 and "app.js" in page.text
        assert client.post("/ops/jobs/api/pause", json={"job": "report"}, headers=auth).status_code == 200
        assert client.get("/ops/jobs/api/state", headers=auth).json()["jobs"][0]["paused"] is True
        for schedule_id in ("a-1", "b-1"):
            added = client.post("/ops/jobs/api/schedules/add", headers=auth,
                                json={"id": schedule_id, "task": "t", "every": "1m"})
            assert added.status_code == 200, added.text
        listed = client.get("/ops/jobs/api/schedules?prefix=b-", headers=auth).json()
        assert [s["id"] for s in listed["items"]] == ["b-1"]


class RequireToken:
    """The documented Starlette recipe: ASGI middleware in front of the mounted dashboard."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        if scope["type"] == "http" and headers.get(b"authorization") != b"Bearer admin":
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


def test_mounted_in_starlette_behind_middleware(backend: MemoryBackend) -> None:
    deployed(backend, "report")
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    app = Starlette(routes=[Mount("/ops/jobs", app=dashboard, middleware=[Middleware(RequireToken)])])
    auth = {"authorization": "Bearer admin"}
    with TestClient(app) as client:
        assert client.get("/ops/jobs/").status_code == 401
        moved = client.get("/ops/jobs", headers=auth, follow_redirects=False)
        assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/ops/jobs/")
        assert "app.js" in client.get("/ops/jobs/", headers=auth).text
        assert client.get("/ops/jobs/app.css", headers=auth).headers["content-type"].startswith("text/css")
        reply = client.post("/ops/jobs/api/trigger", json={"job": "report"}, headers=auth)
        assert reply.status_code == 200 and reply.json()["trigger"] > 0


def test_mounted_in_fastapi_as_an_asgi_app(backend: MemoryBackend) -> None:
    api = FastAPI()
    api.mount("/ops/jobs", anarchon_dashboard.app(backend, namespace=NS, read_only=True))
    with TestClient(api) as client:
        assert client.get("/ops/jobs/api/state").json()["namespace"] == NS
        assert client.post("/ops/jobs/api/pause", json={"job": "report"}).status_code == 403


def test_served_alone_it_opens_the_store_at_startup_and_closes_it_at_shutdown(tmp_path: Path) -> None:
    pytest.importorskip("anarchon_sqlite")
    deployed(anarchon.backend_for_url(f"sqlite:///{tmp_path}/jobs.db"), "report")
    dashboard = anarchon_dashboard.app(f"sqlite:///{tmp_path}/jobs.db", namespace=NS)
    with TestClient(dashboard) as client:
        assert dashboard._opened
        assert client.post("/api/pause", json={"job": "report"}).json()["paused"] is True
        assert client.get("/api/state").json()["jobs"][0]["job"] == "report"
    assert not dashboard._opened


DJANGO = '''
import asyncio, json
import django
from django.conf import settings

settings.configure(ROOT_URLCONF=__name__, ALLOWED_HOSTS=["testserver"], SECRET_KEY="x",
                   MIDDLEWARE=["django.middleware.csrf.CsrfViewMiddleware"])
django.setup()

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.test import AsyncClient
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

import anarchon_dashboard
from anarchon import CatalogueEntry, MemoryBackend

backend = MemoryBackend()
asyncio.run(backend.publish_catalogue("dash", [CatalogueEntry("report", "host-a", "every 10s", "every", "UTC",
                                                              {}, None)], 600_000))
dashboard = anarchon_dashboard.app(backend, namespace="dash")


def staff_only(view):  # stands in for django.contrib.admin's staff_member_required
    async def guarded(request, *args, **kwargs):
        if request.headers.get("authorization") != "Bearer admin":
            return HttpResponseForbidden()
        return await view(request, *args, **kwargs)
    return guarded


@csrf_exempt  # the dashboard's controls accept JSON only, which a cross-site form cannot send
@staff_only
async def jobs_dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
    reply = await dashboard.respond(request.method, path, request.body, request.headers,
                                    query=request.META.get("QUERY_STRING", ""))
    return HttpResponse(reply.body, status=reply.status, content_type=reply.content_type,
                        headers=dict(reply.headers))


urlpatterns = [path("ops/jobs/", jobs_dashboard), path("ops/jobs/<path:path>", jobs_dashboard)]


async def main():
    client = AsyncClient()
    auth = {"authorization": "Bearer admin"}
    assert (await client.get("/ops/jobs/")).status_code == 403
    page = await client.get("/ops/jobs/", headers=auth)
    assert page.status_code == 200 and b"app.js" in page.content, page
    paused = await client.post("/ops/jobs/api/pause", data=json.dumps({"job": "report"}),
                               content_type="application/json", headers=auth)
    assert paused.status_code == 200, paused.content
    for schedule_id in ("a-1", "b-1"):
        added = await client.post("/ops/jobs/api/schedules/add", data=json.dumps(
            {"id": schedule_id, "task": "t", "every": "1m"}), content_type="application/json", headers=auth)
        assert added.status_code == 200, added.content
    listed = json.loads((await client.get("/ops/jobs/api/schedules?prefix=b-", headers=auth)).content)
    assert [s["id"] for s in listed["items"]] == ["b-1"], listed
    state = json.loads((await client.get("/ops/jobs/api/state", headers=auth)).content)
    print(json.dumps([(j["job"], j["paused"]) for j in state["jobs"] if j["origin"] == "code"]))

asyncio.run(main())
'''


def test_served_from_a_django_view(tmp_path: Path) -> None:
    """The documented Django recipe, in a process of its own (Django's settings are per process)."""
    script = tmp_path / "django_dashboard.py"
    script.write_text(textwrap.dedent(DJANGO))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["report", True]]



def test_the_command_never_creates_a_store_and_checks_its_port(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from anarchon.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["dashboard", "sqlite:///nonexistent.db", "--namespace", "myapp"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'nonexistent.db' does not exist (nothing was created)" in err
    assert list(tmp_path.iterdir()) == []
    assert main(["dashboard", "memory://", "--port", "70000"]) == 1
    assert "invalid --port 70000: use 1-65535" in capsys.readouterr().err
    assert main(["dashboard", "memory://", "--namespace", " "]) == 1
    assert "invalid --namespace ' '" in capsys.readouterr().err


def test_all_is_honest_and_public_names_have_docstrings() -> None:
    exported = anarchon_dashboard.__all__
    assert len(set(exported)) == len(exported) and all(hasattr(anarchon_dashboard, n) for n in exported)
    public = {n for n, v in vars(anarchon_dashboard).items()
              if not n.startswith("_") and getattr(v, "__module__", "").startswith("anarchon_dashboard")}
    assert public <= set(exported), sorted(public - set(exported))
    for name in exported:
        value = getattr(anarchon_dashboard, name)
        if callable(value):
            assert value.__doc__, f"anarchon_dashboard.{name} has no docstring"



async def test_a_jobs_own_state_has_its_history_next_slots_and_full_errors(
        backend: MemoryBackend, clock: ManualClock) -> None:
    await seed(backend, clock)
    long_error = ("Traceback (most recent call last):\n" + "  File \"x.py\", line 1\n" * 40
                  + "ValueError: boom")
    await backend.record_runs(NS, [RunRecord("report", clock.now - 20_500, 1, 1, "host-b", "failed",
                                             clock.now - 20_490, 7, long_error)], keep=100)
    entry = CatalogueEntry("report", "host-a", "every 10s", "every", "UTC", {}, clock.now + 9500,
                           fingerprint=Every(10_000).fingerprint)
    await backend.publish_catalogue(NS, [entry], ttl_ms=60_000)
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    reply = await dashboard.respond("GET", "/api/job/report")
    assert reply.status == 200, reply.body
    job = json.loads(reply.body)["job"]
    assert [r["outcome"] for r in job["runs"]] == ["done", "failed"] and job["runs"][1]["error"] == long_error
    assert len(job["next_slots"]) == 5 and job["next_slots"][1] - job["next_slots"][0] == 10_000
    hostile = await dashboard.respond("GET", "/api/job/" + HOSTILE)
    assert json.loads(hostile.body)["job"]["job"] == HOSTILE
    missing = await dashboard.respond("GET", "/api/job/nosuch")
    assert missing.status == 404
    assert "no job 'nosuch' in namespace 'dash'" in json.loads(missing.body)["error"]


def test_a_token_login_guards_every_page_but_the_style(backend: MemoryBackend) -> None:
    deployed(backend, "report")
    dashboard = anarchon_dashboard.app(backend, namespace=NS, token="s3cret-token")
    with TestClient(dashboard) as client:
        page = client.get("/")
        assert page.status_code == 401 and 'name="token"' in page.text and "s3cret" not in page.text
        assert client.get("/api/state").status_code == 401
        assert client.post("/api/pause", json={"job": "report"}).status_code == 401
        assert client.get("/app.css").status_code == 200
        wrong = client.post("/login", data={"token": "guess-guess"}, follow_redirects=False)
        assert wrong.status_code == 401 and "not the dashboard" in wrong.text
        assert client.get("/api/state").status_code == 401
        done = client.post("/login", data={"token": "s3cret-token"}, follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"] == "./"
        cookie = done.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "s3cret-token" not in cookie
        assert client.get("/api/state").status_code == 200
        assert client.post("/api/pause", json={"job": "report"}).status_code == 200
    bearer = {"authorization": "Bearer s3cret-token"}
    with TestClient(dashboard) as client:
        assert client.get("/api/state", headers=bearer).status_code == 200


def test_a_basic_login_asks_the_browser(backend: MemoryBackend) -> None:
    dashboard = anarchon_dashboard.app(backend, namespace=NS, basic="ops:hunter22")
    with TestClient(dashboard) as client:
        refused = client.get("/")
        assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic ")
        assert client.get("/", auth=("ops", "wrong")).status_code == 401
        assert client.get("/api/state", auth=("ops", "hunter22")).status_code == 200


@pytest.mark.parametrize(("options", "says"), [
    ({"token": "short"}, "at least 8 characters"),
    ({"basic": "nocolon"}, "USER:PASSWORD"),
    ({"token": "long-enough", "basic": "a:b"}, "not both"),
])
def test_a_bad_login_option_is_refused(options: dict[str, str], says: str) -> None:
    with pytest.raises(anarchon.AnarchonError, match=says):
        anarchon_dashboard.app(MemoryBackend(), token=options.get("token"), basic=options.get("basic"))
