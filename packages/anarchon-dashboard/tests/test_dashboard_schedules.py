"""The dashboard's stored-schedule requests (list, get, add, update, remove, pause, resume), on the
in-process MemoryBackend, which keeps schedules as the drivers do: every write goes through the public
`anarchon.Schedules` API and is read back from the store here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from starlette.testclient import TestClient

import anarchon_dashboard
from anarchon import MemoryBackend, MemoryClaimBackend, Schedules
from anarchon.backends import CatalogueEntry
from anarchon_dashboard import Dashboard

NS = "dash"
JSON = {"content-type": "application/json"}
HOSTILE = '<img src=x onerror="alert(1)">&amp;'


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


async def live_task(backend: MemoryBackend, task: str, instance: str = "host-a") -> None:
    """Publish `task` as a replica that registers it does."""
    entry = CatalogueEntry(task, instance, "task", "task", "", {}, None)
    await backend.publish_catalogue(NS, [entry], ttl_ms=600_000)


async def post(dashboard: Dashboard, verb: str, body: object) -> tuple[int, dict[str, Any]]:
    reply = await dashboard.respond("POST", f"/api/schedules/{verb}", json.dumps(body).encode(), JSON)
    assert reply.content_type == "application/json"
    data: dict[str, Any] = json.loads(reply.body)
    return reply.status, data


async def get(dashboard: Dashboard, path: str, query: str = "") -> tuple[int, dict[str, Any]]:
    reply = await dashboard.respond("GET", path, query=query)
    data: dict[str, Any] = json.loads(reply.body)
    return reply.status, data


def admin(backend: MemoryBackend) -> Schedules:
    """The store's schedules, read and written beside the dashboard."""
    return Schedules(backend, namespace=NS)


async def test_create_edit_pause_resume_and_delete_a_schedule(backend: MemoryBackend) -> None:
    await live_task(backend, "send-report")
    dashboard = anarchon_dashboard.app(backend, namespace=NS)

    status, data = await post(dashboard, "add", {
        "id": "report-42", "task": "send-report", "cron": "0 9 * * 1-5", "timezone": "Europe/Athens",
        "args": '{"customer": 42}', "options": {"timeout": "10m", "overlap": "skip", "retry": "on"}})
    assert status == 200, data
    added = data["schedule"]
    assert (added["id"], added["version"], added["task_live"], added["replicas"]) == ("report-42", 1, True,
                                                                                      ["host-a"])
    assert data["warning"] is None
    stored = await admin(backend).get("report-42")
    assert stored is not None and stored.task == "send-report" and stored.args == {"customer": 42}
    assert stored.description == "cron '0 9 * * 1-5' (Europe/Athens)"
    assert stored.options == {"timeout": "600000ms", "overlap": "skip", "retry": True}

    status, data = await get(dashboard, "/api/schedule/report-42")
    assert status == 200 and data["schedule"]["timezone"] == "Europe/Athens"
    assert data["schedule"]["next_slot"] == stored.schedule.next_slot(data["schedule"]["next_slot"] - 1)

    # Edit: what the form sends, the version it was read at included; an emptied option is removed.
    status, data = await post(dashboard, "update", {
        "id": "report-42", "version": 1, "task": "send-report", "every": "1h", "offset": "15m",
        "args": {"customer": 42, "fmt": "csv"}, "options": {"timeout": None, "overlap": "buffer_one",
                                                           "retry": "30s"}, "paused": False})
    assert status == 200, data
    assert (data["schedule"]["version"], data["schedule"]["schedule"]) == (2, "every 1h offset 15m")
    stored = await admin(backend).get("report-42")
    assert stored is not None and stored.version == 2 and stored.args == {"customer": 42, "fmt": "csv"}
    assert stored.options == {"overlap": "buffer_one", "retry": "30000ms"}

    status, data = await post(dashboard, "pause", {"id": "report-42"})
    assert status == 200 and data["schedule"]["paused"] and data["schedule"]["next_slot"] is None
    stored = await admin(backend).get("report-42")
    assert stored is not None and stored.paused and stored.version == 3
    status, data = await post(dashboard, "resume", {"id": "report-42"})
    assert status == 200 and not data["schedule"]["paused"] and data["schedule"]["version"] == 4

    status, data = await post(dashboard, "remove", {"id": "report-42", "version": 4})
    assert status == 200 and data["removed"]["id"] == "report-42"
    assert await admin(backend).get("report-42") is None
    status, data = await get(dashboard, "/api/schedule/report-42")
    assert status == 404 and data["error"] == "no schedule 'report-42' in namespace 'dash'"


async def test_a_stale_version_is_refused_with_409_and_the_current_schedule(backend: MemoryBackend) -> None:
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    await admin(backend).add("sync", "sync-task", every="10s")
    await admin(backend).update("sync", version=1, every="20s")  # someone else's edit

    status, data = await post(dashboard, "update", {"id": "sync", "version": 1, "every": "30s"})
    assert status == 409
    assert "is at version 2, not 1: it changed meanwhile" in data["error"]
    assert (data["current"]["version"], data["current"]["schedule"]) == (2, "every 20s")
    status, data = await post(dashboard, "remove", {"id": "sync", "version": 1})
    assert status == 409 and data["current"]["version"] == 2
    stored = await admin(backend).get("sync")
    assert stored is not None and (stored.version, stored.description) == (2, "every 20s")

    # An add of a taken id: refused unless it replaces, saying how.
    status, data = await post(dashboard, "add", {"id": "sync", "task": "sync-task", "every": "1m"})
    assert status == 409 and data["current"]["version"] == 2
    assert data["error"].startswith("schedule 'sync' exists already (version 2, task 'sync-task'): tick "
                                    "'replace'")
    status, data = await post(dashboard, "add", {"id": "sync", "task": "sync-task", "every": "1m",
                                                 "replace": True})
    assert status == 200 and data["schedule"]["schedule"] == "every 1m"

    status, data = await post(dashboard, "update", {"id": "nosuch", "version": 1, "every": "1m"})
    assert status == 404 and "no schedule 'nosuch'" in data["error"]
    status, data = await post(dashboard, "pause", {"id": "nosuch"})
    assert status == 404 and "no schedule 'nosuch'" in data["error"]


async def test_the_list_pages_by_cursor_and_filters_by_task_and_id_prefix(backend: MemoryBackend) -> None:
    schedules = admin(backend)
    for customer in range(5):
        await schedules.add(f"report-{customer}", "send-report", every="1h", args={"customer": customer})
    await schedules.add("sync-a", "sync", every="10s")
    dashboard = anarchon_dashboard.app(backend, namespace=NS)

    seen: list[str] = []
    after = ""
    pages = 0
    while True:
        status, data = await get(dashboard, "/api/schedules", f"limit=4&after={after}")
        assert status == 200, data
        seen += [s["id"] for s in data["items"]]
        pages += 1
        if data["cursor"] is None:
            break
        after = data["cursor"]
    assert seen == [*(f"report-{n}" for n in range(5)), "sync-a"] and pages == 2

    status, data = await get(dashboard, "/api/schedules", "task=sync")
    assert [s["id"] for s in data["items"]] == ["sync-a"] and data["cursor"] is None
    status, data = await get(dashboard, "/api/schedules", "prefix=report-&limit=2")
    assert [s["id"] for s in data["items"]] == ["report-0", "report-1"] and data["cursor"] == "report-1"
    status, data = await get(dashboard, "/api/schedules", "prefix=report-&task=sync")
    assert data["items"] == []

    status, data = await get(dashboard, "/api/schedules", "limit=0")
    assert status == 400 and data["error"] == "invalid limit '0': use a whole number from 1 to 1000"
    status, data = await get(dashboard, "/api/schedules", "owner=me")
    assert status == 400 and "cannot list schedules by 'owner'" in data["error"]


def test_served_over_asgi_the_query_string_reaches_the_list(backend: MemoryBackend) -> None:
    import asyncio

    async def seed() -> None:
        await admin(backend).add("a-1", "alpha", every="1m")
        await admin(backend).add("b-1", "beta", every="1m")

    asyncio.run(seed())
    with TestClient(anarchon_dashboard.app(backend, namespace=NS)) as client:
        assert [s["id"] for s in client.get("/api/schedules?task=beta").json()["items"]] == ["b-1"]
        listed = client.get("/api/schedules", params={"prefix": "a-"}).json()
        assert [s["id"] for s in listed["items"]] == ["a-1"]
        assert client.get("/api/schedule/b-1").json()["schedule"]["task"] == "beta"


@pytest.mark.parametrize(("verb", "body", "status", "says"), [
    ("add", {"id": "x", "task": "t", "cron": "61 * * * *"}, 400,
     "invalid cron expression '61 * * * *': minute '61' is out of range"),
    ("add", {"id": "x", "task": "t", "cron": "0 9 * * *", "timezone": "Mars/Olympus"}, 400,
     "unknown timezone 'Mars/Olympus': use an IANA name"),
    ("add", {"id": "x", "task": "t", "every": "soon"}, 400, "invalid interval 'soon': use e.g. '30s'"),
    ("add", {"id": "x", "task": "t", "every": "10s", "args": "{customer: 1}"}, 400,
     "invalid args '{customer: 1}': not JSON"),
    ("add", {"id": "x", "task": "t", "every": "10s", "args": "[1, 2]"}, 400,
     "args must be a JSON object of the task's keyword arguments"),
    ("add", {"id": "x", "task": "t", "every": "10s", "options": {"tmeout": "1s"}}, 400,
     "unknown option 'tmeout'"),
    ("add", {"id": "x", "task": "t", "every": "10s", "options": {"overlap": "sometimes"}}, 400,
     "invalid overlap 'sometimes'"),
    ("add", {"id": "x", "task": "t", "every": "10s", "options": {"every": "1s"}}, 400,
     "'every' is not a job option"),
    ("add", {"id": "x", "task": "t", "every": "10s", "options": {"timeout": ["1s"]}}, 400,
     "invalid option timeout ['1s']: give a string, a number or true/false"),
    ("add", {"id": "x", "task": "t", "every": "10s", "options": {"max_attempts": "three"}}, 400,
     "invalid max_attempts 'three': use a whole number"),
    ("add", {"id": "x", "task": "t", "every": "10s", "colour": "red"}, 400, "unknown field 'colour'"),
    ("add", {"id": "x", "every": "10s"}, 400, "cannot add schedule 'x' without a task"),
    ("add", {"task": "t", "every": "10s"}, 400, "cannot add a schedule without its id"),
    ("add", {"id": "x", "task": "t"}, 400, "a schedule needs exactly one of every, cron or at, not none"),
    ("add", {"id": "x", "task": "t", "every": "1m", "cron": "* * * * *"}, 400,
     "exactly one of every, cron or at, not every and cron"),
    ("add", {"id": "x", "task": "t", "at": "2001-01-01T00:00:00Z"}, 400,
     "is in the past: it would never run"),
    ("add", {"id": "x", "task": "t", "at": "2099-01-01T09:00"}, 400,
     "invalid at '2099-01-01T09:00': give its offset"),
    ("add", {"id": "x", "task": "t", "every": True}, 400, "every must be a duration"),
    ("add", {"id": "x" * 201, "task": "t", "every": "1m"}, 400, "schedule id"),
    ("add", {"id": "a\nb", "task": "t", "every": "1m"}, 400, "schedule id"),
    ("add", ["x"], 400, "send a JSON object"),
    ("update", {"id": "x", "every": "1m"}, 400, "cannot update schedule 'x' without the version"),
    ("update", {"id": "x", "version": "1", "every": "1m"}, 400, "version must be a whole number, not '1'"),
    ("remove", {"id": "x", "version": 1.5}, 400, "version must be a whole number, not 1.5"),
    ("pause", {"id": 7}, 400, "id must be a string, not 7"),
    ("resume", {"id": "x", "version": 1}, 400, "unknown field 'version'; it takes id"),
])
async def test_bad_input_is_one_message_and_writes_nothing(backend: MemoryBackend, verb: str, body: object,
                                                           status: int, says: str) -> None:
    got, data = await post(anarchon_dashboard.app(backend, namespace=NS), verb, body)
    assert (got, says in data["error"]) == (status, True), data
    assert (await admin(backend).list()).items == []


@pytest.mark.parametrize(("body", "headers", "status", "says"), [
    (b'{"id": "x"}', {"content-type": "text/plain"}, 415, "Content-Type: application/json"),
    (b"id=x", {"content-type": "application/x-www-form-urlencoded"}, 415, "application/json"),
    (b"{not json", JSON, 400, "send a JSON body"),
    (b'{"id": "' + b"x" * 300_000 + b'"}', JSON, 413, "at most 262144"),
])
async def test_a_write_takes_json_only(backend: MemoryBackend, body: bytes, headers: dict[str, str],
                                       status: int, says: str) -> None:
    reply = await anarchon_dashboard.app(backend, namespace=NS).respond("POST", "/api/schedules/pause", body,
                                                                        headers)
    assert reply.status == status and says in json.loads(reply.body)["error"], reply


async def test_large_arguments_fit_up_to_the_cores_limit(backend: MemoryBackend) -> None:
    """Arguments of 60 KB, sent by the page as the text of its form (escaped once more in JSON), fit;
    more than the core's 64 KiB are refused with its message."""
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    big = json.dumps({"ids": ['"' * 10] * 2500})  # every quote escaped twice over in the request
    assert 16_384 * 6 < len(json.dumps({"args": big})) < 262_144
    status, data = await post(dashboard, "add", {"id": "big", "task": "t", "every": "1h", "args": big})
    assert status == 200, data
    stored = await admin(backend).get("big")
    assert stored is not None and stored.args == json.loads(big)
    status, data = await post(dashboard, "add", {"id": "bigger", "task": "t", "every": "1h",
                                                 "args": {"blob": "x" * 70_000}})
    assert status == 400 and "more than 65536: keep large data elsewhere" in data["error"]


async def test_read_only_lists_and_reads_but_refuses_every_write_with_403(backend: MemoryBackend) -> None:
    await admin(backend).add("sync", "sync-task", every="10s")
    dashboard = anarchon_dashboard.app(backend, namespace=NS, read_only=True)
    for verb, body in [("add", {"id": "new", "task": "t", "every": "1m"}),
                       ("update", {"id": "sync", "version": 1, "every": "1m"}),
                       ("remove", {"id": "sync"}), ("pause", {"id": "sync"}), ("resume", {"id": "sync"})]:
        status, data = await post(dashboard, verb, body)
        assert status == 403 and data["error"] == f"cannot {verb} a schedule: this dashboard is read-only"
    stored = await admin(backend).get("sync")
    assert stored is not None and (stored.version, stored.paused) == (1, False)
    assert [s.id for s in (await admin(backend).list()).items] == ["sync"]
    status, data = await get(dashboard, "/api/schedules")
    assert status == 200 and [s["id"] for s in data["items"]] == ["sync"] and data["read_only"] is True
    assert (await get(dashboard, "/api/schedule/sync"))[0] == 200

    # The page itself: no form at all when read-only, one otherwise.
    page = (await dashboard.respond("GET", "/")).body.decode()
    assert 'id="schedule-form"' not in page and "<button" not in page and "{{" not in page
    writable = (await anarchon_dashboard.app(backend, namespace=NS).respond("GET", "/")).body.decode()
    assert 'id="schedule-form"' in writable and 'id="schedule-new"' in writable and "{{" not in writable


async def test_a_store_that_keeps_no_schedules_says_so() -> None:
    dashboard = anarchon_dashboard.app(MemoryClaimBackend(), namespace=NS)
    assert dashboard.schedules is None
    status, data = await get(dashboard, "/api/schedules")
    assert status == 200 and data["items"] == [] and "lacks the 'schedules' capability" in data["note"]
    assert data["capabilities"]["schedules"] is False
    status, data = await post(dashboard, "add", {"id": "x", "task": "t", "every": "1m"})
    assert status == 409 and "MemoryClaimBackend does not keep schedules" in data["error"]
    status, data = await get(dashboard, "/api/schedule/x")
    assert status == 409 and "'schedules' capability" in data["error"]


async def test_a_schedule_whose_task_no_live_replica_has_is_marked(backend: MemoryBackend) -> None:
    await live_task(backend, "send-report", "host-b")
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    status, data = await post(dashboard, "add", {"id": "orphan", "task": "not-deployed", "every": "1m"})
    assert status == 200 and data["schedule"]["task_live"] is False
    assert data["warning"] == ("no live replica has task 'not-deployed' yet: the schedule is kept, and runs "
                               "once a replica with the task is up")
    status, data = await post(dashboard, "add", {"id": "fine", "task": "send-report", "every": "1m"})
    assert data["schedule"]["task_live"] is True and data["warning"] is None

    _, listed = await get(dashboard, "/api/schedules")
    marks = {s["id"]: (s["task_live"], s["replicas"]) for s in listed["items"]}
    assert marks == {"fine": (True, ["host-b"]), "orphan": (False, [])}
    assert listed["tasks"] == ["send-report"]
    _, state = await get(dashboard, "/api/state")
    assert state["orphans"] == ["orphan"] and state["tasks"] == {"send-report": ["host-b"]}

    await live_task(backend, "not-deployed", "host-c")  # the replicas with the task are deployed
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    _, state = await get(dashboard, "/api/state")
    assert state["orphans"] == []


async def test_a_stored_schedules_rows_and_own_page_show_its_task_args_and_version(
        backend: MemoryBackend) -> None:
    await live_task(backend, "send-report")
    await admin(backend).add(HOSTILE, "send-report", cron="0 9 * * *", timezone="Europe/Athens",
                             args={"customer": HOSTILE}, timeout="10m")
    await admin(backend).update(HOSTILE, version=1, args={"customer": 7})
    dashboard = anarchon_dashboard.app(backend, namespace=NS)

    _, state = await get(dashboard, "/api/state")
    [row] = state["jobs"]
    assert (row["job"], row["origin"], row["schedule"], row["kind"], row["timezone"]) == (
        HOSTILE, "schedule", "cron '0 9 * * *' (Europe/Athens)", "cron", "Europe/Athens")
    assert row["options"] == {"timeout": "600000ms"} and row["instances"] == ["host-a"]
    assert row["stored"]["version"] == 2 and row["task_live"] is True and row["next_slot"] is not None

    status, data = await get(dashboard, "/api/job/" + HOSTILE)
    assert status == 200, data
    job = data["job"]
    assert job["stored"]["task"] == "send-report" and job["stored"]["args"] == {"customer": 7}
    assert job["stored"]["version"] == 2 and len(job["next_slots"]) == 5
    first = datetime.fromtimestamp(job["next_slots"][0] / 1000, UTC)
    assert first.astimezone(ZoneInfo("Europe/Athens")).hour == 9
    assert job["next_slots"][1] - job["next_slots"][0] in (
        int(timedelta(hours=h).total_seconds() * 1000) for h in (23, 24, 25))


async def test_a_paused_stored_schedule_is_paused_in_the_job_list(backend: MemoryBackend) -> None:
    """Its flag, as the Schedules view's and the job list's buttons set it, is what the list shows; a
    control set by `anarchon pause` is told apart, so that the page lifts the one that is set."""
    await admin(backend).add("sync", "sync-task", every="10s")
    dashboard = anarchon_dashboard.app(backend, namespace=NS, refresh="1h")
    assert (await post(dashboard, "pause", {"id": "sync"}))[0] == 200
    _, state = await get(dashboard, "/api/state")  # (a write reads the state again at once)
    [row] = state["jobs"]
    assert row["paused"] and row["stored"]["paused"] and not row["control_paused"]
    await backend.set_control(NS, "sync", paused=True)
    assert (await post(dashboard, "resume", {"id": "sync"}))[0] == 200
    _, state = await get(dashboard, "/api/state")
    [row] = state["jobs"]
    assert row["paused"] and not row["stored"]["paused"] and row["control_paused"]


async def test_a_one_off_moment_is_read_with_its_offset(backend: MemoryBackend) -> None:
    dashboard = anarchon_dashboard.app(backend, namespace=NS)
    status, data = await post(dashboard, "add", {"id": "once", "task": "t",
                                                 "at": "2099-01-01T09:00:00+02:00"})
    assert status == 200, data
    moment = datetime(2099, 1, 1, 7, tzinfo=UTC)
    assert data["schedule"]["next_slot"] == int(moment.timestamp() * 1000)
    stored = await admin(backend).get("once")
    assert stored is not None and stored.description == "at 2099-01-01T07:00:00Z"
    status, data = await post(dashboard, "add", {"id": "epoch", "task": "t", "at": moment.timestamp()})
    assert status == 200 and data["schedule"]["next_slot"] == int(moment.timestamp() * 1000)


async def test_a_schedule_id_that_cannot_be_one_is_refused_on_read(backend: MemoryBackend) -> None:
    status, data = await get(anarchon_dashboard.app(backend, namespace=NS), "/api/schedule/a\x01b")
    assert status == 400 and "schedule id" in data["error"]
