"""`anarchon schedules add|update|rm|get|ls URL ...`: the stored schedules from the command line.

    anarchon schedules add sqlite:///jobs.db cust-42 --task send-report --cron "0 9 * * *" \\
        --timezone Europe/Athens --args '{"customer": 42}' --namespace myapp
    anarchon schedules update sqlite:///jobs.db cust-42 --version 1 --cron "0 10 * * *"
    anarchon schedules get sqlite:///jobs.db cust-42 --json
    anarchon schedules ls sqlite:///jobs.db --task send-report --prefix cust- --limit 50
    anarchon schedules rm sqlite:///jobs.db cust-42
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar, cast

from ._errors import ScheduleError
from ._stored import SchedulePage, Schedules, StoredSchedule
from .backends import ScheduleBackend

__all__ = ["add_parser", "format_schedules"]

T = TypeVar("T")

_OPTIONS = ("timeout", "jitter", "overlap", "max_attempts", "catch_up", "lease", "heartbeat", "retry")


def add_parser(sub: Any, existing_store: Callable[[argparse.Namespace], Any]) -> None:
    """Add `anarchon schedules ...` to the subcommands `sub` (`existing_store` opens a URL's store)."""
    schedules = sub.add_parser("schedules", help="add, change, remove and list schedules kept in the store")
    verbs = schedules.add_subparsers(dest="verb", required=True, metavar="VERB")

    def common(p: argparse.ArgumentParser, *, with_id: bool = True) -> None:
        p.add_argument("url", help="the store's URL, e.g. postgresql://user@host/db")
        if with_id:
            p.add_argument("id", help="the schedule's id (its job name)")
        p.add_argument("--namespace", default="anarchon", help="default: anarchon")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")

    def fields(p: argparse.ArgumentParser) -> None:
        p.add_argument("--task", help="the task (registered in code with @scheduler.task) that runs it")
        when = p.add_mutually_exclusive_group()
        when.add_argument("--every", help="an interval, e.g. 10s, 1h30m")
        when.add_argument("--cron", help='five fields, or six with seconds last, e.g. "0 9 * * 1-5"')
        when.add_argument("--at", help="one moment, ISO 8601 with its offset, e.g. 2027-01-01T09:00:00+02:00")
        p.add_argument("--offset", help="with --every: shift the grid, e.g. 15m")
        p.add_argument("--timezone", "--tz", help="with --cron: an IANA name (default UTC)")
        p.add_argument("--dst-gap", choices=["next", "skip"])
        p.add_argument("--dst-fold", choices=["first", "both"])
        p.add_argument("--args", help="the task's keyword arguments, a JSON object")
        p.add_argument("--paused", action=argparse.BooleanOptionalAction, default=None,
                       help="kept paused (no slot is claimed until it is resumed)")
        for option in _OPTIONS:
            p.add_argument(f"--{option.replace('_', '-')}", dest=option,
                           help=f"the job option {option}, as for a code job")
        p.add_argument("--strict", action="store_true",
                       help="refuse a task that no live replica has registered (default: a warning)")

    add = verbs.add_parser("add", help="keep a new schedule (refused if the id exists, unless --replace)")
    common(add)
    fields(add)
    add.add_argument("--replace", action="store_true", help="overwrite a schedule with this id (upsert)")
    add.set_defaults(func=lambda a: _run(a, existing_store, _add))

    update = verbs.add_parser("update", help="change a schedule if it still has --version")
    common(update)
    fields(update)
    update.add_argument("--version", type=int, required=True, help="the version it must still have")
    update.set_defaults(func=lambda a: _run(a, existing_store, _update))

    rm = verbs.add_parser("rm", help="remove a schedule (its history stays until anarchon forget)")
    common(rm)
    rm.add_argument("--version", type=int, help="remove it only if it still has this version")
    rm.set_defaults(func=lambda a: _run(a, existing_store, _remove))

    get = verbs.add_parser("get", help="print one schedule")
    common(get)
    get.set_defaults(func=lambda a: _run(a, existing_store, _get))

    ls = verbs.add_parser("ls", help="list schedules by id, a page at a time")
    common(ls, with_id=False)
    ls.add_argument("--task", help="only those that run this task")
    ls.add_argument("--prefix", default="", help="only ids that start with this")
    ls.add_argument("--after", default="", help="the cursor a previous page printed")
    ls.add_argument("--limit", type=int, default=100, help="how many at most (default 100)")
    ls.set_defaults(func=lambda a: _run(a, existing_store, _list))


def _run(args: argparse.Namespace, existing_store: Callable[[argparse.Namespace], Any],
         step: Callable[[Schedules, argparse.Namespace], Awaitable[str]]) -> int:
    schedules = Schedules(cast(ScheduleBackend, existing_store(args)), namespace=args.namespace)

    async def go() -> str:
        async with schedules:
            return await step(schedules, args)

    print(asyncio.run(go()))
    return 0


def _when(args: argparse.Namespace) -> dict[str, Any]:
    given: dict[str, Any] = {}
    if args.every is not None:
        given["every"] = args.every
    if args.cron is not None:
        given["cron"] = args.cron
    if args.at is not None:
        try:
            moment = datetime.fromisoformat(args.at.replace("Z", "+00:00"))
        except ValueError:
            raise ScheduleError(f"invalid --at {args.at!r}: use ISO 8601 with an offset, e.g. "
                                "2027-01-01T09:00:00+02:00") from None
        if moment.tzinfo is None:
            raise ScheduleError(f"invalid --at {args.at!r}: give its offset (e.g. +02:00 or Z), so every "
                                "replica reads the same moment")
        given["at"] = moment
    for name in ("offset", "timezone", "dst_gap", "dst_fold"):
        value = getattr(args, name)
        if value is not None:
            given[name] = value
    return given


def _arguments(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.args is None:
        return None
    try:
        parsed = json.loads(args.args)
    except ValueError as exc:
        raise ScheduleError(f"invalid --args {args.args!r}: not JSON ({exc}); pass an object, e.g. "
                            "'{\"customer\": 42}'") from None
    if not isinstance(parsed, dict):
        raise ScheduleError(f"invalid --args {args.args!r}: pass a JSON object, e.g. '{{\"customer\": 42}}'")
    return parsed


def _options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name in _OPTIONS:
        value = getattr(args, name)
        if value is None:
            continue
        if name == "max_attempts":
            try:
                options[name] = int(value)
            except ValueError:
                raise ScheduleError(f"invalid --max-attempts {value!r}: use a whole number") from None
        elif name == "retry" and value.lower() in ("true", "false", "yes", "no", "on", "off"):
            options[name] = value.lower() in ("true", "yes", "on")
        else:
            options[name] = value
    return options


async def _add(s: Schedules, args: argparse.Namespace) -> str:
    if args.task is None:
        raise ScheduleError("schedules add needs --task: the task (registered in code) that runs it")
    added = await s.add(args.id, args.task, **_when(args), args=_arguments(args), paused=bool(args.paused),
                        replace=args.replace, strict=args.strict, **_options(args))
    return _one(added, args.json, "added")


async def _update(s: Schedules, args: argparse.Namespace) -> str:
    updated = await s.update(args.id, version=args.version, task=args.task, **_when(args),
                             args=_arguments(args), paused=args.paused, strict=args.strict, **_options(args))
    return _one(updated, args.json, "updated")


async def _remove(s: Schedules, args: argparse.Namespace) -> str:
    removed = await s.remove(args.id, version=args.version)
    return _one(removed, args.json, "removed")


async def _get(s: Schedules, args: argparse.Namespace) -> str:
    got = await s.get(args.id)
    if got is None:
        from ._errors import ScheduleNotFound

        raise ScheduleNotFound(f"no schedule {args.id!r} in namespace {args.namespace!r} (anarchon schedules "
                               "ls lists them)")
    return _one(got, args.json, "")


async def _list(s: Schedules, args: argparse.Namespace) -> str:
    page = await s.list(task=args.task, prefix=args.prefix, after=args.after, limit=args.limit)
    return format_schedules(page, as_json=args.json)


def _one(schedule: StoredSchedule, as_json: bool, verb: str) -> str:
    if as_json:
        return json.dumps(schedule.to_json(), indent=2)
    head = f"{schedule.id}: {verb} (version {schedule.version})" if verb else f"{schedule.id} (version " \
        f"{schedule.version})"
    lines = [head, f"  task      {schedule.task}", f"  schedule  {schedule.description}",
             f"  args      {json.dumps(schedule.args)}",
             f"  next due  {_iso(schedule.next_due)}"]
    if schedule.options:
        lines.append(f"  options   {', '.join(f'{k}={v}' for k, v in sorted(schedule.options.items()))}")
    if schedule.paused:
        lines.append("  paused")
    return "\n".join(lines)


def _iso(moment: datetime | None) -> str:
    return "-" if moment is None else moment.isoformat().replace("+00:00", "Z")


def format_schedules(page: SchedulePage, *, as_json: bool = False) -> str:
    """A page of schedules as a table (or JSON), with the cursor of the next page."""
    if as_json:
        return json.dumps({"items": [s.to_json() for s in page.items], "cursor": page.cursor}, indent=2)
    if not page.items:
        return "no schedules match"
    rows = [["ID", "TASK", "SCHEDULE", "NEXT DUE (UTC)", "VERSION", "PAUSED"]] + [
        [s.id, s.task, s.description, _iso(s.next_due), str(s.version), "yes" if s.paused else "-"]
        for s in page.items]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
    if page.cursor is not None:
        text += f"\nmore: --after {shlex.quote(page.cursor)}"
    return text
