"""The `anarchon` command: run a scheduler, read the store, list drivers, preview cron fire times.

    anarchon run myapp.jobs:scheduler            # until SIGINT/SIGTERM, then a graceful stop
    anarchon status redis://localhost:6379/0 --namespace myapp [--json]
    anarchon history redis://localhost:6379/0 JOB --namespace myapp [--limit 20] [--json]
    anarchon pause|resume|trigger sqlite:///jobs.db JOB --namespace myapp
    anarchon dashboard sqlite:///jobs.db --namespace myapp [--port 8321] [--read-only]
    anarchon backends
    anarchon next "0 8 * * 1-5" --timezone Europe/Athens -n 5
    anarchon --version

Errors are one line on stderr, and the exit code is 1 (2 for a usage error).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, cast
from zoneinfo import ZoneInfo

from ._controls import TRIGGER_SUFFIX, set_control
from ._errors import AnarchonError, ConfigError
from ._history import next_slot_of
from ._logs import app_logging
from ._plugins import backend_classes, backend_for_url, plugin_errors
from ._scheduler import Scheduler
from ._schedules import Cron, from_ms, to_ms
from .backends import (
    Capability,
    CatalogueEntry,
    HistoryBackend,
    InspectBackend,
    JobState,
    JobStatus,
    RunRecord,
    redact_url,
)

__all__ = ["Overview", "format_history", "format_overview", "format_status", "main", "read_history",
           "read_overview", "read_status"]


class CliError(Exception):
    """An error the CLI reports as one line."""


# -- run ------------------------------------------------------------------------------------------

def load_scheduler(target: str) -> Scheduler[Any]:
    """Import `module:attribute` (attribute defaults to `scheduler`) from the working directory."""
    module_name, _, attr = target.partition(":")
    attr = attr or "scheduler"
    if not module_name:
        raise CliError(f"invalid target {target!r}: use module:attribute, e.g. myapp.jobs:scheduler")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise CliError(
                f"cannot import {module_name!r}: no such module (run from the directory that contains "
                "it, or install it)"
            ) from exc
        raise
    obj = getattr(module, attr, None)
    if callable(obj) and not isinstance(obj, Scheduler):
        obj = obj()  # a factory: `myapp.jobs:make_scheduler`
    if not isinstance(obj, Scheduler):
        raise CliError(f"{module_name}:{attr} is {obj!r}, not an anarchon.Scheduler")
    return obj


def _run(args: argparse.Namespace) -> int:
    scheduler = load_scheduler(args.target)
    if not scheduler.jobs:
        raise CliError(f"{args.target} has no jobs: register some before running it")
    # After the import: logging your module set up is used as it is; else one console handler for
    # every logger. Either way `log=True`'s handler then stays quiet, so each event is one line.
    if not app_logging(scheduler.log):
        logging.basicConfig(level=args.log_level or "INFO", format="%(name)s: %(message)s")
    if args.log_level:
        for log in {logging.getLogger("anarchon"), scheduler.log}:
            log.setLevel(args.log_level)
    scheduler.run()
    return 0


# -- status ---------------------------------------------------------------------------------------

async def read_status(backend: Any, namespace: str) -> list[JobState]:
    """Open `backend`, read every job record in `namespace`, close it."""
    _check_inspect(backend)
    await backend.open()
    try:
        return await cast(InspectBackend, backend).jobs(namespace)
    finally:
        await backend.close()


def _row(state: JobState) -> dict[str, Any]:
    live = state.status is JobStatus.RUNNING
    job = state.job
    if job.endswith(TRIGGER_SUFFIX):  # the record of a job's triggers: its slot is the trigger's id
        job = job.removesuffix(TRIGGER_SUFFIX) + " (trigger)"
    return {
        "job": job,
        "last_slot": from_ms(state.slot).isoformat().replace("+00:00", "Z"),
        "slot_ms": state.slot,
        "attempt": state.attempt,
        "status": str(state.status),
        "holder": state.owner,
        "lease_expires_in_s": round((state.expires_at - state.now) / 1000, 1) if live else None,
        "token": state.token,
    }


def format_status(states: Sequence[JobState], *, as_json: bool = False, namespace: str | None = None) -> str:
    """A table (or JSON) of job, last slot, attempt, status, holder and lease expiry in seconds."""
    rows = [_row(s) for s in states]
    if as_json:
        return json.dumps(rows, indent=2)
    if not rows:
        return _no_jobs(namespace)
    header = ["JOB", "LAST SLOT (UTC)", "ATTEMPT", "STATUS", "HOLDER", "LEASE EXPIRES IN"]
    table = [header] + [
        [r["job"], r["last_slot"], str(r["attempt"]), r["status"], r["holder"],
         "-" if r["lease_expires_in_s"] is None else f"{r['lease_expires_in_s']:.1f}s"]
        for r in rows
    ]
    return _columns(table)


class Overview:
    """What `anarchon status` shows: the stored records, the job catalogue and each job's last run."""

    def __init__(self, states: list[JobState], catalogue: list[CatalogueEntry],
                 last: dict[str, RunRecord], now_ms: int, history: bool) -> None:
        self.states = states
        self.catalogue = catalogue
        self.last = last
        """Each job's newest ended run, where the store keeps a history."""
        self.now_ms = now_ms
        self.history = history
        """True when the store keeps a history and a catalogue (capability `history`)."""


def _require(backend: Any, capability: Capability, what: str, fix: str) -> None:
    """Raise `ConfigError` saying `backend.url` `what` unless `backend` declares `capability`."""
    caps: frozenset[Capability] = getattr(backend, "capabilities", frozenset())
    if capability not in caps:
        names = ", ".join(sorted(str(c) for c in caps))
        raise ConfigError(
            f"{backend.url} {what}: {type(backend).__name__} does not declare the '{capability}' "
            f"capability (it has: {names}); {fix}"
        )


def _check_inspect(backend: Any) -> None:
    _require(backend, Capability.INSPECT, "cannot be inspected",
             "claim-only stores keep no per-job record to show")


async def read_overview(backend: Any, namespace: str) -> Overview:
    """Open `backend`, read the records, the catalogue and each job's last run in `namespace`, close it."""
    _check_inspect(backend)
    keeps = Capability.HISTORY in backend.capabilities
    await backend.open()
    try:
        states = await cast(InspectBackend, backend).jobs(namespace)
        catalogue: list[CatalogueEntry] = []
        last: dict[str, RunRecord] = {}
        if keeps:
            store = cast(HistoryBackend, backend)
            catalogue = await store.catalogue(namespace)
            names = sorted({s.job for s in states if not s.job.endswith(TRIGGER_SUFFIX)}
                           | {e.job for e in catalogue})
            runs = await asyncio.gather(*(store.history(namespace, name, 1) for name in names))
            last = {name: found[0] for name, found in zip(names, runs, strict=True) if found}
        return Overview(states, catalogue, last, to_ms(datetime.now(UTC)), keeps)
    finally:
        await backend.close()


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return from_ms(ms).isoformat(timespec="milliseconds" if ms % 1000 else "seconds").replace("+00:00", "Z")


def _overview_rows(o: Overview) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for state in o.states:
        row = _row(state)
        row.update(next_run=None, next_run_ms=None, schedule=None, instances=[], last_outcome=None,
                   last_error=None, last_instance=None, last_duration_ms=None)
        rows[row["job"]] = row
    for entry in o.catalogue:
        if entry.job not in rows:
            rows[entry.job] = {
                "job": entry.job, "last_slot": None, "slot_ms": None, "attempt": None, "status": "never run",
                "holder": None, "lease_expires_in_s": None, "token": None, "next_run": None,
                "next_run_ms": None, "schedule": None, "instances": [], "last_outcome": None,
                "last_error": None, "last_instance": None, "last_duration_ms": None,
            }
        row = rows[entry.job]
        row["schedule"] = row["schedule"] or entry.schedule
        row["instances"].append(entry.instance)
        nxt = next_slot_of(entry, o.now_ms)
        if nxt is not None and (row["next_run_ms"] is None or nxt < row["next_run_ms"]):
            row["next_run_ms"], row["next_run"] = nxt, _iso(nxt)
    for name, run in o.last.items():
        if name in rows:
            rows[name].update(last_outcome=run.outcome, last_error=run.error or None,
                              last_instance=run.instance, last_duration_ms=run.duration_ms)
    return [rows[name] for name in sorted(rows)]


def format_overview(o: Overview, *, as_json: bool = False, namespace: str | None = None) -> str:
    """A table (or JSON) of each job: next run, last slot, attempt, status, holder, lease left, and the
    last run's outcome and error. Jobs published by a scheduler that never ran are listed too."""
    rows = _overview_rows(o)
    if as_json:
        return json.dumps(rows, indent=2)
    if not rows:
        return _no_jobs(namespace)
    header = ["JOB", "NEXT RUN (UTC)", "LAST SLOT (UTC)", "ATTEMPT", "STATUS", "HOLDER", "LEASE LEFT",
              "LAST OUTCOME", "ERROR"]

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    table = [header] + [
        [r["job"], cell(r["next_run"]), cell(r["last_slot"]), cell(r["attempt"]), r["status"],
         cell(r["holder"]), "-" if r["lease_expires_in_s"] is None else f"{r['lease_expires_in_s']:.1f}s",
         cell(r["last_outcome"]), _cut(r["last_error"] or "-", 60)]
        for r in rows
    ]
    if not o.history:
        table = [line[:1] + line[2:7] for line in table]
    return _columns(table)


def _no_jobs(namespace: str | None) -> str:
    where = "this namespace" if namespace is None else f"namespace {namespace!r}"
    return (f"no jobs recorded in {where} yet (a scheduler's namespace is its namespace= option, "
            "'anarchon' unless set)")


def _columns(table: list[list[str]]) -> str:
    """`table` (a header row first) as left-aligned columns two spaces apart."""
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in table)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_history(backend: Any) -> None:
    _require(backend, Capability.HISTORY, "keeps no run history",
             "use SQLite, PostgreSQL or Redis for a history")


async def read_history(backend: Any, namespace: str, job: str, limit: int) -> list[RunRecord]:
    """Open `backend`, read `job`'s newest `limit` runs in `namespace` (newest first), close it."""
    _check_history(backend)
    await backend.open()
    try:
        return await cast(HistoryBackend, backend).history(namespace, job, limit)
    finally:
        await backend.close()


def format_history(runs: Sequence[RunRecord], *, as_json: bool = False, job: str = "") -> str:
    """A table (or JSON) of runs: slot, attempt, outcome, instance, start, duration and error."""
    if as_json:
        return json.dumps([{"job": r.job, "slot": _iso(r.slot), "slot_ms": r.slot, "attempt": r.attempt,
                            "token": r.token, "instance": r.instance, "outcome": r.outcome,
                            "started_at": _iso(r.started_at), "started_at_ms": r.started_at,
                            "duration_ms": r.duration_ms, "error": r.error} for r in runs], indent=2)
    if not runs:
        return (f"no runs of {job!r} recorded (check the job name and --namespace; schedulers with "
                "history=0 record none)")
    header = ["SLOT (UTC)", "ATTEMPT", "OUTCOME", "INSTANCE", "STARTED (UTC)", "DURATION", "ERROR"]
    table = [header] + [
        [str(_iso(r.slot)), str(r.attempt), r.outcome, r.instance, str(_iso(r.started_at)),
         f"{r.duration_ms} ms", _cut(r.error or "-", 80)]
        for r in runs
    ]
    return _columns(table)


def _existing_store(args: argparse.Namespace) -> Any:
    """The backend of `args.url` for `args.namespace`; a store in a local file must exist already."""
    if not args.namespace.strip():
        raise CliError(
            f"invalid --namespace {args.namespace!r}: give the scheduler's namespace (default anarchon)"
        )
    backend = backend_for_url(args.url)
    path = getattr(backend, "path", None)  # a store in a local file (SQLite): the CLI must not create it
    if isinstance(path, str) and not os.path.exists(path):
        raise CliError(
            f"no store at {args.url}: the file {path!r} does not exist (nothing was created); check the "
            "path, relative to the working directory"
        )
    return backend


def _status(args: argparse.Namespace) -> int:
    backend = _existing_store(args)
    overview = asyncio.run(read_overview(backend, args.namespace))
    print(format_overview(overview, as_json=args.json, namespace=args.namespace))
    return 0


def _history(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise CliError(f"invalid --limit {args.limit!r}: use 1 or more")
    backend = _existing_store(args)
    runs = asyncio.run(read_history(backend, args.namespace, args.job, args.limit))
    print(format_history(runs, as_json=args.json, job=args.job))
    return 0


# -- pause, resume, trigger -------------------------------------------------------------------------

def _control(args: argparse.Namespace) -> int:
    backend = _existing_store(args)
    verb = args.command
    change: dict[str, Any] = {"trigger": True} if verb == "trigger" else {"paused": verb == "pause"}
    control = asyncio.run(set_control(backend, args.namespace, args.job, verb, opened=False, **change))
    if verb == "trigger":
        print(f"{args.job}: triggered (trigger {control.trigger}); one replica runs it within a heartbeat")
    else:
        print(f"{args.job}: {verb}d on every replica within a heartbeat")
    return 0


# -- dashboard ------------------------------------------------------------------------------------

def _dashboard(args: argparse.Namespace) -> int:
    try:
        import anarchon_dashboard
    except ImportError as exc:
        if exc.name != "anarchon_dashboard":
            raise  # installed, but one of its own dependencies is missing: say which
        raise CliError(
            "the dashboard is a distribution of its own: pip install anarchon-dashboard"
        ) from None
    if not 1 <= args.port <= 65535:
        raise CliError(f"invalid --port {args.port!r}: use 1-65535")
    backend = _existing_store(args)
    anarchon_dashboard.serve(backend, namespace=args.namespace, host=args.host, port=args.port,
                             read_only=args.read_only, refresh=args.refresh)
    return 0


# -- backends -------------------------------------------------------------------------------------

def _backends(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for cls in backend_classes():
        caps: frozenset[Capability] = getattr(cls, "capabilities", frozenset())
        rows.append({
            "schemes": [f"{s}://" for s in cls.url_schemes],
            "class": f"{cls.__module__.split('.')[0]}.{cls.__qualname__}",
            "capabilities": sorted(str(c) for c in caps),
        })
    # A plugin that failed is listed with the others, saying why, rather than stopping the listing.
    for error in plugin_errors():
        rows.append({
            "schemes": [], "class": f"{error.plugin} (plugin failed)", "capabilities": [],
            "distribution": error.distribution, "error": str(error),
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [["SCHEMES", "BACKEND", "CAPABILITIES"]] + [
        [" ".join(r["schemes"]) or "-", r["class"], r.get("error") or ", ".join(r["capabilities"])]
        for r in rows
    ]
    print(_columns(table))
    return 0


# -- next -----------------------------------------------------------------------------------------

def _parse_after(text: str | None, zone: ZoneInfo) -> int:
    if text is None:
        return to_ms(datetime.now(UTC))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"invalid --after {text!r}: use ISO 8601, e.g. 2026-10-24T00:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return to_ms(when)


def _next(args: argparse.Namespace) -> int:
    cron = Cron(args.expression, args.timezone, args.dst_gap, args.dst_fold)
    if args.n < 1:
        raise CliError(f"invalid -n {args.n!r}: use 1 or more")
    zone = ZoneInfo(args.timezone)
    after = _parse_after(args.after, zone)
    for _ in range(args.n):
        slot = cron.next_slot(after)
        if slot is None:
            break
        local = from_ms(slot).astimezone(zone)
        utc = from_ms(slot).strftime("%Y-%m-%dT%H:%M:%SZ")
        print(f"{local.isoformat()}  {local.tzname():<6}  {utc}")
        after = slot
    return 0


# -- main -----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for docs and tests)."""
    parser = argparse.ArgumentParser(
        prog="anarchon", description="Leaderless distributed scheduling: run, inspect, preview.",
    )
    parser.add_argument("--version", action="version", version=f"anarchon {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run a scheduler defined in your module until SIGINT/SIGTERM")
    run.add_argument("target", help="module:attribute of a Scheduler (or of a function returning one)")
    run.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                     help="the scheduler's log level (default: INFO, or what your module set)")
    run.set_defaults(func=_run)

    status = sub.add_parser("status", help="print the stored state of every job in a namespace")
    status.add_argument("url", help="the store's URL, e.g. redis://localhost:6379/0")
    status.add_argument("--namespace", default="anarchon", help="default: anarchon")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(func=_status)

    history = sub.add_parser("history", help="print a job's newest ended runs, newest first")
    history.add_argument("url", help="the store's URL, e.g. postgresql://user@host/db")
    history.add_argument("job", help="the job's name")
    history.add_argument("--namespace", default="anarchon", help="default: anarchon")
    history.add_argument("--limit", type=int, default=20, help="how many runs at most (default 20)")
    history.add_argument("--json", action="store_true", help="print JSON instead of a table")
    history.set_defaults(func=_history)

    for verb, text in (("pause", "pause a job on every replica: its slots are skipped until resumed"),
                       ("resume", "resume a paused job on every replica"),
                       ("trigger", "run a job once now, on exactly one replica")):
        control = sub.add_parser(verb, help=text)
        control.add_argument("url", help="the store's URL, e.g. sqlite:///jobs.db")
        control.add_argument("job", help="the job's name")
        control.add_argument("--namespace", default="anarchon", help="default: anarchon")
        control.set_defaults(func=_control)

    dash = sub.add_parser("dashboard", help="serve a status page with pause, resume and trigger buttons "
                          "(needs pip install anarchon-dashboard)")
    dash.add_argument("url", help="the store's URL, e.g. postgresql://db/app")
    dash.add_argument("--namespace", default="anarchon", help="default: anarchon")
    dash.add_argument("--host", default="127.0.0.1",
                      help="the address to listen on (default 127.0.0.1; the page has no login)")
    dash.add_argument("--port", type=int, default=8321, help="default: 8321")
    dash.add_argument("--read-only", action="store_true",
                      help="no pause, resume or trigger: the buttons are left out and their requests refused")
    dash.add_argument("--refresh", default="2s", help="how often the page polls the store (default 2s)")
    dash.set_defaults(func=_dashboard)

    backends = sub.add_parser("backends", help="list installed drivers and their URL schemes")
    backends.add_argument("--json", action="store_true", help="print JSON instead of a table")
    backends.set_defaults(func=_backends)

    nxt = sub.add_parser("next", help="preview a cron expression's next fire times, DST included")
    nxt.add_argument("expression", help='five fields, or six with seconds last, e.g. "0 8 * * 1-5"')
    nxt.add_argument("--timezone", "--tz", default="UTC", help="an IANA name (default UTC)")
    nxt.add_argument("-n", type=int, default=5, help="how many fire times (default 5)")
    nxt.add_argument("--after", help="start from this ISO time (default now; naive means --timezone)")
    nxt.add_argument("--dst-gap", choices=["next", "skip"], default="next")
    nxt.add_argument("--dst-fold", choices=["first", "both"], default="first")
    nxt.set_defaults(func=_next)
    return parser


def _version() -> str:
    try:
        return metadata.version("anarchon-core")
    except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `anarchon` console script."""
    args = build_parser().parse_args(argv)
    try:
        return cast(int, args.func(args))
    except KeyboardInterrupt:
        return 130
    except (CliError, AnarchonError) as exc:
        message = str(exc)
    except Exception as exc:  # e.g. the user's module failed to import: still one line
        message = f"{type(exc).__name__}: {exc}"
    url = getattr(args, "url", None)
    if url:  # drivers redact already; this also covers a message that quotes the URL as given
        message = message.replace(url, redact_url(url))
    print(f"anarchon {args.command}: error: {' '.join(message.split())}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
