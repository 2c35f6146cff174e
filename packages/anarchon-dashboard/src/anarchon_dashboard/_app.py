"""The dashboard as a plain ASGI app: one page, its script and style, a JSON state, three controls and
the stored schedules.

    GET  /              the page (a shell: the script fills it from /api/state, as text only)
    GET  /app.js        the script; /app.css the style; /icon.svg the icon
    GET  /api/state     everything the list shows, as JSON
    GET  /api/job/NAME  everything a job's own page shows (NAME percent-encoded), as JSON; 404 if unknown
    POST /api/pause     {"job": NAME}; likewise /api/resume and /api/trigger (403 when read-only)
    GET  /api/schedules?task=T&prefix=P&after=CURSOR&limit=N   a page of stored schedules, by id
    GET  /api/schedule/ID                  one stored schedule (ID percent-encoded); 404 if none
    POST /api/schedules/add|update|remove|pause|resume   a JSON body (`_schedules` has the fields);
                                           403 when read-only, 409 with the current schedule on a
                                           stale version
    GET  /login         with `token=`: the login form; POST /login checks the token and sets a cookie

Paths are relative to where the app is mounted (the ASGI `root_path`). No framework: Starlette, FastAPI
and Django mount it as they mount any ASGI app, and `respond` serves it from a framework's own view.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, cast

from anarchon import (
    AnarchonError,
    ScheduleConflict,
    ScheduleNotFound,
    Schedules,
    StoredSchedule,
    UnknownJob,
    backend_for_url,
    parse_duration,
)
from anarchon.backends import ScheduleBackend, redact_url
from anarchon.inspect import Inspector

from ._data import capabilities, job_state, schedule_row, snapshot
from ._schedules import WRITES, arguments

__all__ = ["Dashboard", "Reply", "app"]

log = logging.getLogger("anarchon.dashboard")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

VERBS = ("pause", "resume", "trigger")
"""The controls the page's buttons post to `api/<verb>`."""
MAX_BODY = 16_384
"""The largest control request accepted, in bytes (a job name is at most a few hundred)."""
MAX_SCHEDULE_BODY = 262_144
"""The largest schedule write accepted, in bytes (its arguments are at most 64 KiB of JSON, which the
page sends as a JSON string: escaped, up to twice that)."""
SCHEDULES_PAGE = 50
"""How many stored schedules a page of `api/schedules` holds unless `limit` says otherwise."""
COOKIE = "anarchon_dashboard"
"""The session cookie that a login with the token sets (a keyed hash of the token, never the token)."""
# Scripts and styles from this app only, and no inline script: store text that slipped into markup
# could still not run. The page talks to its own origin only and cannot be framed; its one form is
# the login's, posted to itself.
_SECURITY = [
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; "
     b"connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


@dataclass(frozen=True, slots=True)
class Reply:
    """One response of the dashboard, for a framework view to send as its own."""

    status: int
    body: bytes
    content_type: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    """Headers besides the content type (security headers, a redirect's location)."""


def _static(name: str) -> bytes:
    return resources.files("anarchon_dashboard").joinpath("static", name).read_bytes()


def _json(status: int, data: object) -> Reply:
    return Reply(status, json.dumps(data, separators=(",", ":")).encode(), "application/json")


def _error(status: int, message: str) -> Reply:
    return _json(status, {"error": message})


class Dashboard:
    """The dashboard of one namespace of one store: an ASGI app (`await dashboard(scope, receive, send)`).

    Build it with `anarchon_dashboard.app(...)`. The store is opened on the first request (or at ASGI
    lifespan startup when the dashboard is the server's app) and closed by `aclose()` or lifespan shutdown
    when the dashboard opened it from a URL.
    """

    def __init__(self, store: str | Any, *, namespace: str = "anarchon", read_only: bool = False,
                 refresh: float | str = 2.0, title: str | None = None, token: str | None = None,
                 basic: str | None = None) -> None:
        if not isinstance(namespace, str) or not namespace.strip():
            raise AnarchonError(f"invalid namespace {namespace!r}: give the scheduler's namespace "
                                "(its namespace= option; 'anarchon' unless set)")
        if token is not None and basic is not None:
            raise AnarchonError("give the dashboard a token or a basic login, not both")
        if token is not None and (not isinstance(token, str) or len(token) < 8):
            raise AnarchonError("invalid token: use a secret of at least 8 characters, e.g. from "
                                "`python -c 'import secrets; print(secrets.token_urlsafe())'`")
        if basic is not None and (not isinstance(basic, str) or ":" not in basic or basic.startswith(":")
                                  or basic.endswith(":")):
            raise AnarchonError("invalid basic login: use USER:PASSWORD, both parts non-empty")
        self.login = "token" if token is not None else "basic" if basic is not None else None
        """How the dashboard asks who is there: "token", "basic", or None (the host's own auth)."""
        self._token = token
        self._session = (hmac.new(token.encode(), b"anarchon-dashboard-session", hashlib.sha256).hexdigest()
                         if token is not None else None)
        self._basic = base64.b64encode(basic.encode()).decode() if basic is not None else None
        self.backend: Any = backend_for_url(store) if isinstance(store, str) else store
        self.namespace = namespace
        self.read_only = read_only
        self.refresh_ms = parse_duration(refresh, name="refresh")
        self.title = title or f"anarchon · {namespace}"
        self._owned = isinstance(store, str)
        self.store = Inspector(self.backend, namespace=namespace, close=False)
        """The read and control API the page goes through (the dashboard opens and closes the store)."""
        self.schedules = (Schedules(cast(ScheduleBackend, self.backend), namespace=namespace,
                                    opened=lambda: self._opened)
                          if capabilities(self.backend)["schedules"] else None)
        """The stored schedules' API the page goes through; None when the store keeps none."""
        self._opened = False
        self._lock = asyncio.Lock()
        self._cache: tuple[float, dict[str, Any]] | None = None
        """(monotonic time of the read, what was read)."""

    def __repr__(self) -> str:
        return f"Dashboard({self.url!r}, namespace={self.namespace!r}, read_only={self.read_only})"

    @property
    def url(self) -> str:
        """The store's URL, password redacted."""
        return redact_url(str(getattr(self.backend, "url", type(self.backend).__name__)))

    async def open(self) -> None:
        """Open the store (idempotent; the first request does it when nothing else did)."""
        async with self._lock:
            if not self._opened:
                await self.backend.open()
                self._opened = True

    async def aclose(self) -> None:
        """Close the store if this dashboard opened it from a URL; a backend passed in is left open."""
        async with self._lock:
            if self._opened and self._owned:
                await self.backend.close()
            self._opened = False

    # -- requests ---------------------------------------------------------------------------------

    async def respond(self, method: str, path: str, body: bytes = b"",
                      headers: Mapping[str, str] | Iterable[tuple[str, str]] = (), query: str = "") -> Reply:
        """Answer one request: `path` relative to where the dashboard is mounted ('/' is the page),
        `query` its query string (the schedules list reads its filters and cursor from it)."""
        items = headers.items() if isinstance(headers, Mapping) else headers
        lowered = {k.lower(): v for k, v in items}
        method = method.upper()
        path = "/" + path.lstrip("/")
        reply = (self._denied(method, path, body, lowered)
                 or await self._route(method, path, body, lowered, query.lstrip("?")))
        return Reply(reply.status, reply.body, reply.content_type,
                     [*reply.headers, *((k.decode(), v.decode()) for k, v in _SECURITY)])

    # -- login ------------------------------------------------------------------------------------

    def _denied(self, method: str, path: str, body: bytes, headers: Mapping[str, str]) -> Reply | None:
        """The reply to a request that has not logged in, or None to serve it."""
        if self.login is None:
            return None
        given = headers.get("authorization", "")
        if self._basic is not None:
            scheme, _, value = given.partition(" ")
            if scheme.lower() == "basic" and hmac.compare_digest(value.strip(), self._basic):
                return None
            return Reply(401, b"log in to see the anarchon dashboard", "text/plain; charset=utf-8",
                         [("www-authenticate", 'Basic realm="anarchon dashboard", charset="UTF-8"')])
        assert self._token is not None and self._session is not None
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip(), self._token):
            return None
        cookies = dict(part.strip().partition("=")[::2] for part in headers.get("cookie", "").split(";"))
        if hmac.compare_digest(cookies.get(COOKIE, ""), self._session):
            return None
        if path in ("/app.css", "/icon.svg"):
            return None
        if path == "/login" and method == "POST":
            return self._log_in(body, headers)
        if path in ("/", "/login") and method in ("GET", "HEAD"):
            return self._login_page(401, "")
        return _error(401, "log in first: send Authorization: Bearer TOKEN, or log in on the page")

    def _login_page(self, status: int, message: str) -> Reply:
        page = _static("login.html").decode().replace("{{title}}", html.escape(self.title))
        alert = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
        return Reply(status, page.replace("{{message}}", alert).encode(), "text/html; charset=utf-8")

    def _log_in(self, body: bytes, headers: Mapping[str, str]) -> Reply:
        assert self._token is not None and self._session is not None
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return _error(415, "log in with the page's form")
        token = urllib.parse.parse_qs(body[:MAX_BODY].decode("utf-8", "replace")).get("token", [""])[0]
        if not hmac.compare_digest(token, self._token):
            log.warning("dashboard: a login with a wrong token was refused")
            return self._login_page(401, "That token is not the dashboard's.")
        cookie = f"{COOKIE}={self._session}; HttpOnly; SameSite=Strict"
        return Reply(303, b"", "text/plain", [("location", "./"), ("set-cookie", cookie)])

    async def _route(self, method: str, path: str, body: bytes, headers: Mapping[str, str],
                     query: str = "") -> Reply:
        reads = {"/": self._page, "/app.js": self._script, "/app.css": self._style, "/icon.svg": self._icon,
                 "/api/state": self._state}
        if path in reads:
            if method not in ("GET", "HEAD"):
                return _error(405, f"{method} {path}: use GET")
            return await reads[path]()
        if path.startswith("/api/job/"):
            if method not in ("GET", "HEAD"):
                return _error(405, f"{method} {path}: use GET")
            return await self._job(path.removeprefix("/api/job/"))
        if path == "/api/schedules":
            if method not in ("GET", "HEAD"):
                return _error(405, f"{method} {path}: use GET (POST to /api/schedules/add to add one)")
            return await self._schedule_list(query)
        if path.startswith("/api/schedule/"):
            if method not in ("GET", "HEAD"):
                return _error(405, f"{method} {path}: use GET")
            return await self._schedule_get(path.removeprefix("/api/schedule/"))
        write = path.removeprefix("/api/schedules/")
        if write in WRITES:
            if method != "POST":
                return _error(405, f"{method} {path}: use POST with a JSON body {{\"id\": ID, ...}}")
            return await self._schedule_write(write, body, headers)
        verb = path.removeprefix("/api/")
        if verb in VERBS:
            if method != "POST":
                return _error(405, f"{method} {path}: use POST with a JSON body {{\"job\": NAME}}")
            return await self._control(verb, body, headers)
        return _error(404, f"no such page {path!r}: the dashboard serves '/', '/api/state', '/api/job/NAME', "
                      "'/api/schedules', '/api/schedule/ID', POST '/api/pause', '/api/resume', "
                      "'/api/trigger' and POST '/api/schedules/' add, update, remove, pause or resume")

    async def _page(self) -> Reply:
        page = _static("index.html").decode()
        page = page.replace("{{title}}", html.escape(self.title)).replace(
            "{{config}}", html.escape(json.dumps({
                "namespace": self.namespace, "store": self.url, "read_only": self.read_only,
                "refresh_ms": self.refresh_ms,
            }), quote=True))
        # A read-only page gets no schedule form at all, not one that is merely hidden.
        form = "" if self.read_only else _static("schedule-form.html").decode()
        page = page.replace("{{schedule_form}}", form)
        return Reply(200, page.encode(), "text/html; charset=utf-8")

    async def _script(self) -> Reply:
        return Reply(200, _static("app.js"), "text/javascript; charset=utf-8")

    async def _style(self) -> Reply:
        return Reply(200, _static("app.css"), "text/css; charset=utf-8")

    async def _icon(self) -> Reply:
        return Reply(200, _static("icon.svg"), "image/svg+xml")

    async def _read(self) -> tuple[dict[str, Any], int] | Reply:
        """The namespace's state and its age in ms, or the reply that says why it cannot be read."""
        # Several open pages share one read per half refresh: the store's load does not grow with them.
        now = time.monotonic()
        if self._cache is None or (now - self._cache[0]) * 1000 >= self.refresh_ms / 2:
            try:
                await self.open()
                self._cache = (time.monotonic(), await snapshot(self.backend, self.namespace))
            except Exception as exc:
                return self._unreadable(exc)
        read_at, state = self._cache
        return state, max(0, round((time.monotonic() - read_at) * 1000))

    def _unreadable(self, exc: Exception) -> Reply:
        message = " ".join(str(exc).split()) or type(exc).__name__
        log.warning("dashboard: reading namespace %r from %s failed: %s", self.namespace, self.url, message)
        return _error(503, f"cannot read {self.url}: {message}")

    async def _state(self) -> Reply:
        read = await self._read()
        if isinstance(read, Reply):
            return read
        # `age_ms` tells the page how old the read is, so its countdowns start from the right time.
        state, age = read
        return _json(200, {**state, "store": self.url, "read_only": self.read_only, "age_ms": age})

    async def _job(self, name: str) -> Reply:
        try:
            await self.open()
            found = await job_state(self.store, name)
        except AnarchonError as exc:
            return _error(400, str(exc))
        except Exception as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("dashboard: reading job %r of namespace %r failed: %s", name, self.namespace, message)
            return _error(503, f"cannot read {self.url}: {message}")
        if found is None:
            return _error(404, f"no job {name!r} in namespace {self.namespace!r}")
        return _json(200, {**found, "store": self.url, "read_only": self.read_only})

    @staticmethod
    def _body(what: str, body: bytes, headers: Mapping[str, str], shape: str, limit: int = MAX_BODY) -> Any:
        """The JSON of a write's body, or the `Reply` that refuses it."""
        # A cross-site form can post text/plain or a form, never application/json without a CORS
        # preflight (which this app does not answer): requiring JSON is the CSRF guard.
        if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _error(415, f"cannot {what}: send a JSON body {shape} with Content-Type: application/json")
        if len(body) > limit:
            return _error(413, f"cannot {what}: the request is {len(body)} bytes; at most {limit}")
        try:
            return json.loads(body)
        except ValueError:
            return _error(400, f"cannot {what}: send a JSON body {shape}, not {body[:200]!r}")

    async def _control(self, verb: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        if self.read_only:
            return _error(403, f"cannot {verb}: this dashboard is read-only")
        data = self._body(verb, body, headers, '{"job": NAME}')
        if isinstance(data, Reply):
            return data
        try:
            job = data["job"]
        except (KeyError, TypeError):
            return _error(400, f"cannot {verb}: send a JSON body {{\"job\": NAME}}, not {body[:200]!r}")
        if not isinstance(job, str):
            return _error(400, f"cannot {verb}: the job must be a string, not {job!r}")
        if not capabilities(self.backend)["control"]:
            return _error(409, f"cannot {verb} {job!r}: {type(self.backend).__name__} stores no controls "
                          "(it lacks the 'control' capability); use SQLite, PostgreSQL or Redis")
        try:
            await self.open()
            control = await getattr(self.store, verb)(job)
        except UnknownJob as exc:
            return _error(404, str(exc))
        except AnarchonError as exc:
            return _error(400, str(exc))
        except Exception as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("dashboard: %s %r in namespace %r failed: %s", verb, job, self.namespace, message)
            return _error(503, f"cannot {verb} {job!r}: {message}")
        self._cache = None  # the page reads its change back at once
        log.info("dashboard: %s %r in namespace %r", verb, job, self.namespace)
        return _json(200, {"job": job, "paused": control.paused, "trigger": control.trigger})

    # -- stored schedules -------------------------------------------------------------------------

    def _no_schedules(self, what: str) -> Reply:
        return _error(409, f"cannot {what}: {type(self.backend).__name__} does not keep schedules (it lacks "
                      "the 'schedules' capability); use SQLite, PostgreSQL or Redis")

    @staticmethod
    def _live_tasks(state: Mapping[str, Any]) -> dict[str, list[str]] | None:
        """Each task a live replica has, with those replicas; None when the store cannot tell."""
        return dict(state["tasks"]) if state["capabilities"]["history"] else None

    def _row(self, schedule: StoredSchedule, read: tuple[dict[str, Any], int]) -> dict[str, Any]:
        state, age = read
        return schedule_row(schedule, state["now"] + age, self._live_tasks(state))

    async def _schedule_list(self, query: str) -> Reply:
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        unknown = sorted(set(params) - {"task", "prefix", "after", "limit"})
        if unknown:
            return _error(400, f"cannot list schedules by {unknown[0]!r}: filter by task, prefix, after "
                          "(a page's cursor) and limit")
        task = params.get("task", [""])[-1] or None
        limit_text = params.get("limit", [str(SCHEDULES_PAGE)])[-1]
        try:
            limit = int(limit_text)
        except ValueError:
            limit = 0
        if not 1 <= limit <= 1000:
            return _error(400, f"invalid limit {limit_text!r}: use a whole number from 1 to 1000")
        head = {"namespace": self.namespace, "store": self.url, "read_only": self.read_only,
                "capabilities": capabilities(self.backend)}
        if self.schedules is None:
            return _json(200, {**head, "items": [], "cursor": None, "tasks": [],
                               "note": f"{type(self.backend).__name__} does not keep schedules (it lacks the "
                                       "'schedules' capability): use SQLite, PostgreSQL or Redis to keep "
                                       "them in the store"})
        read = await self._read()
        if isinstance(read, Reply):
            return read
        try:
            page = await self.schedules.list(task=task, prefix=params.get("prefix", [""])[-1],
                                             after=params.get("after", [""])[-1], limit=limit)
        except AnarchonError as exc:
            return _error(400, str(exc))
        except Exception as exc:
            return self._unreadable(exc)
        return _json(200, {**head, "items": [self._row(s, read) for s in page.items], "cursor": page.cursor,
                           "tasks": sorted(read[0]["tasks"])})

    async def _schedule_get(self, schedule_id: str) -> Reply:
        if self.schedules is None:
            return self._no_schedules(f"read schedule {schedule_id!r}")
        read = await self._read()
        if isinstance(read, Reply):
            return read
        try:
            found = await self.schedules.get(schedule_id)
        except AnarchonError as exc:
            return _error(400, str(exc))
        except Exception as exc:
            return self._unreadable(exc)
        if found is None:
            return _error(404, f"no schedule {schedule_id!r} in namespace {self.namespace!r}")
        return _json(200, {"schedule": self._row(found, read), "read_only": self.read_only})

    async def _schedule_write(self, verb: str, body: bytes, headers: Mapping[str, str]) -> Reply:
        if self.read_only:
            return _error(403, f"cannot {verb} a schedule: this dashboard is read-only")
        data = self._body(f"{verb} a schedule", body, headers, '{"id": ID, ...}', MAX_SCHEDULE_BODY)
        if isinstance(data, Reply):
            return data
        if self.schedules is None:
            return self._no_schedules(f"{verb} a schedule")
        try:
            given = arguments(verb, data)
        except AnarchonError as exc:
            return _error(400, str(exc))
        schedule_id: str = given.pop("id")
        options: dict[str, Any] = given.pop("options")
        read = await self._read()  # (the live tasks: a schedule whose task no replica has gets a warning)
        if isinstance(read, Reply):
            return read
        try:
            if verb == "add":
                done = await self.schedules.add(schedule_id, given.pop("task"), **given, **options)
            elif verb == "update":
                done = await self.schedules.update(schedule_id, **given, **options)
            elif verb == "remove":
                done = await self.schedules.remove(schedule_id, version=given.get("version"))
            else:
                done = await (self.schedules.pause if verb == "pause" else self.schedules.resume)(schedule_id)
        except ScheduleConflict as exc:
            current = exc.current if isinstance(exc.current, StoredSchedule) else None
            message = str(exc)
            if verb == "add" and current is not None:
                message = (f"schedule {schedule_id!r} exists already (version {current.version}, task "
                           f"{current.task!r}): tick 'replace' (\"replace\": true) to overwrite it, or "
                           "edit it")
            self._cache = None
            return _json(409, {"error": message,
                               "current": None if current is None else self._row(current, read)})
        except ScheduleNotFound as exc:
            return _error(404, str(exc))
        except (AnarchonError, TypeError, ValueError) as exc:
            return _error(400, " ".join(str(exc).split()) or type(exc).__name__)
        except Exception as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("dashboard: %s schedule %r in namespace %r failed: %s", verb, schedule_id,
                        self.namespace, message)
            return _error(503, f"cannot {verb} schedule {schedule_id!r}: {message}")
        self._cache = None  # the page reads its change back at once
        log.info("dashboard: %s schedule %r (version %d) in namespace %r", verb, done.id, done.version,
                 self.namespace)
        row = self._row(done, read)
        if verb == "remove":
            return _json(200, {"removed": row})
        warning = None
        if row["task_live"] is False and verb in ("add", "update"):
            warning = (f"no live replica has task {done.task!r} yet: the schedule is kept, and runs once a "
                       "replica with the task is up")
        return _json(200, {"schedule": row, "warning": warning})

    # -- ASGI -------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point: HTTP requests, and lifespan when the dashboard is the server's app."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            raise RuntimeError(f"the anarchon dashboard serves HTTP, not {scope['type']!r}")
        root = str(scope.get("root_path", ""))
        path = str(scope["path"])
        # Starlette and Django keep the full path and add the mount point to root_path; older servers
        # strip it. Either way, what is left is the dashboard's own path.
        if root and path.startswith(root):
            path = path[len(root):]
        if path == "":  # mounted at /ops/jobs, opened as /ops/jobs: the page's links need the slash
            await self._send(send, Reply(308, b"", "text/plain", [("location", root + "/")]))
            return
        body = b""
        if scope["method"] == "POST":
            while True:
                message = await receive()
                body += message.get("body", b"")
                if len(body) > MAX_SCHEDULE_BODY or not message.get("more_body"):
                    break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        query = bytes(scope.get("query_string", b"")).decode("latin-1")
        reply = await self.respond(scope["method"], path, body, headers, query)
        if scope["method"] == "HEAD":
            reply = Reply(reply.status, b"", reply.content_type, reply.headers)
        await self._send(send, reply)

    @staticmethod
    async def _send(send: Send, reply: Reply) -> None:
        headers = [(b"content-type", reply.content_type.encode()),
                   (b"content-length", str(len(reply.body)).encode()),
                   *((k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers)]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.open()
                except Exception as exc:  # the page shows the error and polls until the store is back
                    log.warning("dashboard: cannot open %s yet: %s", self.url, " ".join(str(exc).split()))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def app(store: str | Any, *, namespace: str = "anarchon", read_only: bool = False,
        refresh: float | str = 2.0, title: str | None = None, token: str | None = None,
        basic: str | None = None) -> Dashboard:
    """The dashboard of `namespace` in `store` (a URL such as "redis://localhost:6379/0", or a backend).

    `read_only=True` leaves out the pause, resume and trigger buttons and the schedule form, and answers
    their requests 403 (the stored schedules are still listed).
    `refresh` is how often the page polls the store (a duration: 2.0, "2s", "500ms").
    A login of its own, for a dashboard served alone: `token` (a secret the page's login form asks for,
    then kept in a cookie; API clients send `Authorization: Bearer TOKEN`) or `basic` ("USER:PASSWORD",
    HTTP basic authentication). Mounted in an app, leave both out and put it behind the app's own auth.
    """
    return Dashboard(store, namespace=namespace, read_only=read_only, refresh=refresh, title=title,
                     token=token, basic=basic)
