"""The `anarchon` command: run a scheduler, read the store, list drivers, preview cron fire times.

    anarchon run myapp.jobs:scheduler            # until SIGINT/SIGTERM, then a graceful stop
    anarchon status redis://localhost:6379/0 --namespace myapp [--json]
    anarchon history redis://localhost:6379/0 JOB --namespace myapp [--limit 20] [--json]
    anarchon pause|resume|trigger sqlite:///jobs.db JOB --namespace myapp [--force]
    anarchon forget sqlite:///jobs.db JOB --namespace myapp [--force]
    anarchon namespaces redis://localhost:6379/0 [--json]
    anarchon schedules add|update|rm|get|ls sqlite:///jobs.db ... --namespace myapp [--json]
    anarchon dashboard sqlite:///jobs.db --namespace myapp [--port 8321] [--read-only] [--token T]
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
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, cast
from zoneinfo import ZoneInfo

from . import _cli_schedules
from ._duration import parse_duration
from ._entrypoints import entry_points
from ._errors import AnarchonError
from ._logs import app_logging
from ._plugins import backend_classes, backend_for_url, plugin_errors
from ._scheduler import Scheduler
from ._schedules import Cron, from_ms, to_ms
from .backends import Capability, JobControl, JobState, JobStatus, RunRecord, redact_url
from .inspect import MISSED_WINDOW_MS, TRIGGER_SUFFIX, Inspector, JobView, Overview

__all__ = ["PAGE_GROUP", "Overview", "format_history", "format_overview", "format_status", "main",
           "read_history", "read_overview", "read_status"]


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
    async with Inspector(backend, namespace=namespace, close=True) as store:
        return await store.records()


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


async def read_overview(backend: Any, namespace: str, *,
                        missed_window_ms: int = MISSED_WINDOW_MS) -> Overview:
    """Open `backend`, read every job of `namespace` (records, controls, registrations, newest runs),
    close it."""
    store = Inspector(backend, namespace=namespace, close=True)
    store.require(Capability.INSPECT, "cannot be inspected",
                  "claim-only stores keep no per-job record to show")
    async with store:
        return await store.overview(missed_window_ms=missed_window_ms)


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return from_ms(ms).isoformat(timespec="milliseconds" if ms % 1000 else "seconds").replace("+00:00", "Z")


def _job_row(job: JobView) -> dict[str, Any]:
    record = job.record
    row: dict[str, Any] = {
        "job": job.name, "last_slot": None, "slot_ms": None, "attempt": None, "status": job.status,
        "holder": None, "lease_expires_in_s": None, "token": None,
    }
    if record is not None:
        row.update(_row(record))
    nxt = job.next_slot
    last, success = job.last_run, job.last_success_at
    row.update(
        next_run=_iso(nxt), next_run_ms=nxt, schedule=job.schedule, instances=job.instances,
        last_outcome=None if last is None else last.outcome,
        last_error=None if last is None else last.error or None,
        last_instance=None if last is None else last.instance,
        last_duration_ms=None if last is None else last.duration_ms,
        paused=job.paused, pending_trigger=job.pending_trigger, trigger_id=job.control.trigger or None,
        last_success=_iso(success), last_success_ms=success,
        missed=job.missed, missed_window_s=job.missed_window_ms // 1000,
        origin=job.origin, task=None if job.stored is None else job.stored.task, task_live=job.task_live,
    )
    return row


def _overview_rows(o: Overview) -> list[dict[str, Any]]:
    return [_job_row(job) for job in o.jobs]


def _state_cell(row: dict[str, Any]) -> str:
    marks = [m for m, on in (("paused", row["paused"]), ("trigger pending", row["pending_trigger"]),
                             (f"no live replica has task {row['task']}", not row["task_live"])) if on]
    status: str = row["status"]
    return status + (f" ({', '.join(marks)})" if marks else "")


def format_overview(o: Overview, *, as_json: bool = False, namespace: str | None = None) -> str:
    """A table (or JSON) of each job: next run, last slot, attempt, status (paused, trigger pending),
    holder, lease left, last success, slots missed in the window, and the last run's outcome and error.
    Jobs published by a scheduler that never ran are listed too."""
    rows = _overview_rows(o)
    if as_json:
        return json.dumps(rows, indent=2)
    if not rows:
        return _no_jobs(namespace)
    window = _window_text(rows[0]["missed_window_s"])
    header = ["JOB", "NEXT RUN (UTC)", "LAST SLOT (UTC)", "ATTEMPT", "STATUS", "HOLDER", "LEASE LEFT",
              "LAST SUCCESS (UTC)", f"MISSED ({window})", "LAST OUTCOME", "ERROR"]

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    table = [header] + [
        [r["job"], cell(r["next_run"]), cell(r["last_slot"]), cell(r["attempt"]), _state_cell(r),
         cell(r["holder"]), "-" if r["lease_expires_in_s"] is None else f"{r['lease_expires_in_s']:.1f}s",
         cell(r["last_success"]), str(r["missed"]), cell(r["last_outcome"]), _cut(r["last_error"] or "-", 60)]
        for r in rows
    ]
    if Capability.HISTORY not in o.capabilities:
        table = [line[:1] + line[2:7] for line in table]
    return _columns(table)


def _window_text(seconds: int) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


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


async def read_history(backend: Any, namespace: str, job: str, limit: int) -> list[RunRecord]:
    """Open `backend`, read `job`'s newest `limit` runs in `namespace` (newest first), close it."""
    async with Inspector(backend, namespace=namespace, close=True) as store:
        return await store.history(job, limit)


def format_history(runs: Sequence[RunRecord], *, as_json: bool = False, job: str = "") -> str:
    """A table (or JSON) of runs: slot, attempt, outcome, instance, start, duration and error."""
    if as_json:
        return json.dumps([{"job": r.job.removesuffix(TRIGGER_SUFFIX),
                            "trigger": r.job.endswith(TRIGGER_SUFFIX), "slot": _iso(r.slot),
                            "slot_ms": r.slot, "attempt": r.attempt,
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
    window = parse_duration(args.missed_window, name="--missed-window")
    overview = asyncio.run(read_overview(backend, args.namespace, missed_window_ms=window))
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

async def _set_control(backend: Any, namespace: str, job: str, verb: str, force: bool) -> JobControl:
    async with Inspector(backend, namespace=namespace, close=True) as store:
        if verb == "trigger":
            return await store.trigger(job, force=force)
        return await (store.pause(job, force=force) if verb == "pause" else store.resume(job, force=force))


def _control(args: argparse.Namespace) -> int:
    backend = _existing_store(args)
    verb = args.command
    control = asyncio.run(_set_control(backend, args.namespace, args.job, verb, args.force))
    if verb == "trigger":
        print(f"{args.job}: triggered (trigger {control.trigger}); one replica runs it within a heartbeat")
    else:
        print(f"{args.job}: {verb}d on every replica within a heartbeat")
    return 0


# -- forget, namespaces ---------------------------------------------------------------------------

async def _forget_job(backend: Any, namespace: str, job: str, force: bool) -> tuple[bool, list[str]]:
    async with Inspector(backend, namespace=namespace, close=True) as store:
        if await store.forget(job, force=force):
            return True, []
        return False, await store.stored()


def _forget(args: argparse.Namespace) -> int:
    backend = _existing_store(args)
    gone, stored = asyncio.run(_forget_job(backend, args.namespace, args.job, args.force))
    if not gone:
        shown = ", ".join(stored[:10]) + (f", … and {len(stored) - 10} more" if len(stored) > 10 else "")
        raise CliError(f"nothing stored of {args.job!r} in namespace {args.namespace!r} (jobs stored: "
                       f"{shown or 'none'}); check the name and --namespace")
    print(f"{args.job}: forgotten in namespace {args.namespace!r} (its records, controls, history and "
          "registrations are deleted)")
    return 0


async def _read_namespaces(backend: Any) -> dict[str, int]:
    async with Inspector(backend, close=True) as store:
        return await store.namespaces()


def _namespaces(args: argparse.Namespace) -> int:
    args.namespace = "anarchon"  # (the store is the same whatever the namespace)
    counts = asyncio.run(_read_namespaces(_existing_store(args)))
    if args.json:
        print(json.dumps([{"namespace": ns, "jobs": n} for ns, n in counts.items()], indent=2))
    elif not counts:
        print("no namespaces in this store yet (nothing was claimed, controlled or published)")
    else:
        print(_columns([["NAMESPACE", "JOBS"], *([ns, str(n)] for ns, n in counts.items())]))
    return 0


# -- dashboard ------------------------------------------------------------------------------------

PAGE_GROUP = "anarchon.page"
"""The entry-point group where a status page declares its `serve` function (anarchon-dashboard does):
the core names no page distribution, so neither imports the other's modules at import time."""

_PAGE_MISSING = "the dashboard is a distribution of its own: pip install anarchon-dashboard"


def _page_server() -> Callable[..., None]:
    """The installed status page's `serve` function, found through `PAGE_GROUP`."""
    found = entry_points(PAGE_GROUP)
    if not found:
        raise CliError(_PAGE_MISSING)
    point = found[0]
    try:
        serve = point.load()
    except ImportError as exc:
        if exc.name is None or not point.value.startswith(exc.name):
            raise  # installed, but one of its own dependencies is missing: say which
        raise CliError(_PAGE_MISSING) from None
    return cast(Callable[..., None], serve)


def _dashboard(args: argparse.Namespace) -> int:
    serve = _page_server()
    if not 1 <= args.port <= 65535:
        raise CliError(f"invalid --port {args.port!r}: use 1-65535")
    token = args.token if args.token is not None else os.environ.get("ANARCHON_DASHBOARD_TOKEN")
    basic = args.basic if args.basic is not None else os.environ.get("ANARCHON_DASHBOARD_BASIC")
    if token and basic:
        raise CliError("give --token or --basic (or their environment variables), not both")
    backend = _existing_store(args)
    serve(backend, namespace=args.namespace, host=args.host, port=args.port, read_only=args.read_only,
          refresh=args.refresh, **({"token": token} if token else {}), **({"basic": basic} if basic else {}))
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
    status.add_argument("--missed-window", default="1d",
                        help="count the slots missed within this long before now (default 1d)")
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
        control.add_argument("--force", action="store_true",
                             help="accept a job the store does not know yet (not deployed yet)")
        control.set_defaults(func=_control)

    forget = sub.add_parser("forget", help="delete a job's records, controls, history and registrations")
    forget.add_argument("url", help="the store's URL, e.g. postgresql://user@host/db")
    forget.add_argument("job", help="the job's name")
    forget.add_argument("--namespace", default="anarchon", help="default: anarchon")
    forget.add_argument("--force", action="store_true",
                        help="forget it even while a live replica still registers it")
    forget.set_defaults(func=_forget)

    namespaces = sub.add_parser("namespaces", help="list the namespaces a store holds, with job counts")
    namespaces.add_argument("url", help="the store's URL, e.g. redis://localhost:6379/0")
    namespaces.add_argument("--json", action="store_true", help="print JSON instead of a table")
    namespaces.set_defaults(func=_namespaces)

    dash = sub.add_parser("dashboard", help="serve a status page with pause, resume and trigger buttons "
                          "(needs pip install anarchon-dashboard)")
    dash.add_argument("url", help="the store's URL, e.g. postgresql://db/app")
    dash.add_argument("--namespace", default="anarchon", help="default: anarchon")
    dash.add_argument("--host", default="127.0.0.1",
                      help="the address to listen on (default 127.0.0.1; without --token or --basic the page "
                           "has no login)")
    dash.add_argument("--token", help="ask for this token on a login page (API clients send "
                      "'Authorization: Bearer TOKEN'); default: $ANARCHON_DASHBOARD_TOKEN")
    dash.add_argument("--basic", metavar="USER:PASSWORD",
                      help="HTTP basic login instead; default: $ANARCHON_DASHBOARD_BASIC")
    dash.add_argument("--port", type=int, default=8321, help="default: 8321")
    dash.add_argument("--read-only", action="store_true",
                      help="no pause, resume or trigger: the buttons are left out and their requests refused")
    dash.add_argument("--refresh", default="2s", help="how often the page polls the store (default 2s)")
    dash.set_defaults(func=_dashboard)

    _cli_schedules.add_parser(sub, _existing_store)

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
