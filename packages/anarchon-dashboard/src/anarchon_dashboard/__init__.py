"""anarchon-dashboard: a status page for the jobs of one namespace, as an ASGI app.

One page shows every job of the namespace, with filters: its schedule and next run, whether it is
paused or has a trigger pending, its last slot and last success, slots missed, who holds its lease and
a countdown to the lease's expiry, the replicas that registered it, and the newest runs of all jobs
with their errors. Each job has a page of its own (`#job=NAME`): its next slots and its history with
full errors. Buttons pause, resume and trigger a job on every replica (the same controls as
`anarchon pause|resume|trigger`). A Schedules view (`#schedules`) lists the schedules kept in the store
and creates, edits (with the version it read), pauses, resumes and deletes them. The page polls a JSON
endpoint (`api/state`, `api/job/NAME`, `api/schedules`) every two seconds; countdowns run in the
browser between polls. Everything goes through the core's public `anarchon.inspect` and
`anarchon.Schedules` APIs.

Serve it on its own:

    pip install anarchon-dashboard
    anarchon dashboard postgresql://db/app --namespace myapp --port 8321 [--read-only]

or mount it in your app. It is a plain ASGI app with no framework dependency:

    import anarchon_dashboard
    from fastapi import FastAPI

    dashboard = anarchon_dashboard.app("postgresql://db/app", namespace="myapp", read_only=False)
    api = FastAPI()
    api.mount("/ops/jobs", dashboard)     # Starlette: Mount("/ops/jobs", app=dashboard)

Served alone, `token=` (a login page, then a cookie) or `basic="USER:PASSWORD"` (HTTP basic) gives it a
login of its own (`anarchon dashboard --token`/`--basic`). Mounted, leave both out and put it behind
your app's authentication (docs/operations.md shows a FastAPI dependency, Starlette middleware and a
Django view). `read_only=True` leaves the buttons and the schedule form out and answers the control and
schedule-writing endpoints 403. Store text (job names, holders, errors, arguments) only ever reaches the
page as text, never as markup, and the control and schedule-writing endpoints take JSON only, which a
cross-site form cannot send.

What the page can show depends on the store's capabilities: job records need `inspect`, buttons need
`control`, schedules, next runs, never-run jobs and recent runs need `history`, and stored schedules
need `schedules`. A missing capability
leaves that part out, with a note on the page saying why.

In a framework view (Django, or anything not ASGI-mounted), `await dashboard.respond(method, path,
body, headers, query=QUERY_STRING)` returns a `Reply` (status, body, content type, headers) to send as
your own response.
"""

from ._app import Dashboard, Reply, app
from ._data import RECENT_RUNS, RUNS_PER_JOB, snapshot
from ._serve import serve

__all__ = ["Dashboard", "RECENT_RUNS", "RUNS_PER_JOB", "Reply", "app", "serve", "snapshot"]
