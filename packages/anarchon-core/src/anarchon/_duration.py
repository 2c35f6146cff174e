"""Durations: a timedelta, a number of seconds, or a string such as '250ms', '1h30m' or '2d'."""

from __future__ import annotations

import functools
import math
import re
from datetime import timedelta
from typing import TypeAlias

from ._errors import ScheduleError

__all__ = ["Duration", "parse_duration"]

Duration: TypeAlias = timedelta | int | float | str
"""Anything anarchon accepts as a duration."""

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)(?![a-z])")
_HINT = "use e.g. '30s', '5m', '1h30m' or a number of seconds"


def parse_duration(value: object, *, name: str = "duration", allow_zero: bool = False) -> int:
    """Return `value` as whole milliseconds, or raise ScheduleError quoting the bad input."""
    if type(value) is str:  # the usual case, and the same few strings for every job: remembered
        return _parse_text(value, name, allow_zero)
    return _parse(value, name, allow_zero)


@functools.lru_cache(maxsize=256)
def _parse_text(value: str, name: str, allow_zero: bool) -> int:
    return _parse(value, name, allow_zero)


def _parse(value: object, name: str, allow_zero: bool) -> int:
    if isinstance(value, bool):
        raise ScheduleError(f"invalid {name} {value!r}: {_HINT}")
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise ScheduleError(f"invalid {name} {value!r}: {_HINT}")
        ms = value * 1000
    elif isinstance(value, str):
        text = value.strip().lower()
        if not text:
            raise ScheduleError(f"invalid {name} {value!r}: {_HINT}")
        try:
            ms = float(text) * 1000  # a bare number in a string means seconds
        except ValueError:
            pos, total = 0, 0.0
            while (match := _PART.match(text, pos)) is not None:
                total += float(match.group(1)) * _UNITS_MS[match.group(2)]
                pos = match.end()
            if pos != len(text) or pos == 0:
                raise ScheduleError(f"invalid {name} {value!r}: {_HINT}") from None
            ms = total
    else:
        raise ScheduleError(f"invalid {name} {value!r}: {_HINT}")
    if not math.isfinite(ms):  # 'inf', 'nan', '1e400': float() accepts them
        raise ScheduleError(f"invalid {name} {value!r}: {_HINT}")
    result = round(ms)
    if result < 0 or (result == 0 and not allow_zero) or (ms > 0 and result == 0):
        bound = "zero or more" if allow_zero else "more than zero"
        raise ScheduleError(f"invalid {name} {value!r}: it must be {bound}; {_HINT}")
    return result
