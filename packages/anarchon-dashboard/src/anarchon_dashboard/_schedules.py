"""The page's stored schedules: a JSON request checked and turned into the arguments of one call of
`anarchon.Schedules`, so that every mistake comes back as one message that quotes it.

    POST api/schedules/add      {"id", "task", "every" | "cron" (with "timezone") | "at", "args",
                                 "options", "paused", "replace", "strict"}
    POST api/schedules/update   {"id", "version", and what changes; the rest is kept}
    POST api/schedules/remove   {"id", "version" (optional: remove it only if unchanged)}
    POST api/schedules/pause    {"id"}; likewise api/schedules/resume

`every` and `offset` are durations ("10s", "1h30m", or seconds); `at` is ISO 8601 with its offset
("2027-01-01T09:00:00+02:00") or epoch seconds; `args` is a JSON object, or a string holding one (the
page sends the text of its form as it is, and this module says what is wrong with it); `options` holds
the job options a code job takes (timeout, overlap, retry, max_attempts, jitter, catch_up, lease,
heartbeat), and on an update a null option removes it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from anarchon import ScheduleError

__all__ = ["FIELDS", "WRITES", "arguments"]

WRITES = ("add", "update", "remove", "pause", "resume")
"""The writes the page posts to `api/schedules/<verb>`."""

_WHEN = ("every", "cron", "at", "timezone", "offset", "dst_gap", "dst_fold")
FIELDS: dict[str, tuple[str, ...]] = {
    "add": ("id", "task", *_WHEN, "args", "options", "paused", "replace", "strict"),
    "update": ("id", "version", "task", *_WHEN, "args", "options", "paused", "strict"),
    "remove": ("id", "version"),
    "pause": ("id",),
    "resume": ("id",),
}
"""The fields each write takes."""
_CALL = frozenset({"schedule_id", "version", "task", *_WHEN, "args", "paused", "replace", "strict"})
"""The parameters of the `Schedules` calls that are not job options."""

_EXAMPLE = {
    "add": '{"id": "report-42", "task": "send-report", "cron": "0 9 * * *", "timezone": "Europe/Athens", '
           '"args": {"customer": 42}}',
    "update": '{"id": "report-42", "version": 1, "cron": "0 10 * * *"}',
    "remove": '{"id": "report-42", "version": 2}',
    "pause": '{"id": "report-42"}',
    "resume": '{"id": "report-42"}',
}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def _text(verb: str, name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ScheduleError(f"cannot {verb} the schedule: {name} must be a string, not {_short(value)}")
    return value


def _duration(verb: str, name: str, value: object) -> str | int | float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ScheduleError(f"cannot {verb} the schedule: {name} must be a duration such as \"10s\", "
                            f"\"1h30m\" or a number of seconds, not {_short(value)}")
    return value


def _flag(verb: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ScheduleError(f"cannot {verb} the schedule: {name} must be true or false, not {_short(value)}")
    return value


def _moment(verb: str, value: object) -> datetime | int | float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value  # epoch seconds, as `Schedules.add(at=...)` takes them
    text = _text(verb, "at", value)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ScheduleError(f"invalid at {text!r}: use ISO 8601 with an offset, e.g. "
                            "2027-01-01T09:00:00+02:00") from None
    if moment.tzinfo is None:
        raise ScheduleError(f"invalid at {text!r}: give its offset (e.g. +02:00 or Z), so every replica "
                            "reads the same moment")
    return moment


def _object(value: object) -> dict[str, Any] | None:
    """`value` if it is a dict (JSON gives string keys), else None."""
    return cast(dict[str, Any], value) if isinstance(value, dict) else None


def _args(verb: str, value: object) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ScheduleError(f"invalid args {_short(value)}: not JSON ({exc}); write an object, e.g. "
                                '{"customer": 42}') from None
    found = _object(value)
    if found is None:
        raise ScheduleError(f"cannot {verb} the schedule: args must be a JSON object of the task's keyword "
                            f'arguments, e.g. {{"customer": 42}}, not {_short(value)}')
    return found


def _options(verb: str, value: object) -> dict[str, Any]:
    found = _object(value)
    if found is None:
        raise ScheduleError(f"cannot {verb} the schedule: options must be an object, e.g. "
                            f'{{"timeout": "10m", "overlap": "skip"}}, not {_short(value)}')
    options: dict[str, Any] = {}
    for key, given in found.items():
        if key in _CALL:
            raise ScheduleError(f"cannot {verb} the schedule: {key!r} is not a job option; send it as a "
                                "field of its own, beside options")
        option: object = given
        if key == "retry" and isinstance(given, str) and given.strip().lower() in (
                "true", "false", "yes", "no", "on", "off"):
            option = given.strip().lower() in ("true", "yes", "on")
        elif key == "max_attempts" and isinstance(given, str):
            try:
                option = int(given)
            except ValueError:
                raise ScheduleError(f"invalid max_attempts {given!r}: use a whole number") from None
        elif not isinstance(given, str | int | float | bool | None):
            raise ScheduleError(f"invalid option {key} {_short(option)}: give a string, a number or "
                                "true/false")
        options[key] = option
    return options


def arguments(verb: str, body: object) -> dict[str, Any]:
    """What the JSON `body` of write `verb` asks for: the schedule's `id`, its job `options` (a dict),
    and the other keyword arguments of the `Schedules` call; `ScheduleError` saying what to send when
    the body is not valid."""
    request = _object(body)
    if request is None:
        raise ScheduleError(f"cannot {verb} a schedule: send a JSON object, e.g. {_EXAMPLE[verb]}, not "
                            f"{_short(body)}")
    fields = FIELDS[verb]
    unknown = [key for key in request if key not in fields]
    if unknown:
        raise ScheduleError(f"cannot {verb} a schedule: unknown field {unknown[0]!r}; it takes "
                            f"{', '.join(fields)}")
    given = {key: value for key, value in request.items() if value is not None or key == "options"}
    if "id" not in given:
        raise ScheduleError(f"cannot {verb} a schedule without its id: send e.g. {_EXAMPLE[verb]}")
    found: dict[str, Any] = {"id": _text(verb, "id", given.pop("id")), "options": {}}
    if verb == "add" and "task" not in given:
        raise ScheduleError(f"cannot add schedule {found['id']!r} without a task: name the task (registered "
                            "in code with @scheduler.task) that runs it")
    if verb == "update" and "version" not in given:
        raise ScheduleError(f"cannot update schedule {found['id']!r} without the version it was read at: "
                            "send e.g. " + _EXAMPLE["update"])
    for key, value in given.items():
        if key == "version":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ScheduleError(f"cannot {verb} the schedule: version must be a whole number, not "
                                    f"{_short(value)}")
            found[key] = value
        elif key in ("task", "cron", "timezone", "dst_gap", "dst_fold"):
            found[key] = _text(verb, key, value)
        elif key in ("every", "offset"):
            found[key] = _duration(verb, key, value)
        elif key == "at":
            found[key] = _moment(verb, value)
        elif key == "args":
            found[key] = _args(verb, value)
        elif key == "options":
            found["options"] = _options(verb, {} if value is None else value)
        else:  # paused, replace, strict
            found[key] = _flag(verb, key, value)
    return found
