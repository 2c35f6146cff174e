"""Schedules: every instance computes the same slots (integer epoch ms, UTC) for a job.

- `Every`: a UTC grid, `slot = k * interval + offset`, whenever the instance started.
- `Cron`: croniter over zoneinfo wall times, with explicit DST policies:
  a wall time that does not exist (spring forward) fires at the first valid instant after it
  (`dst_gap="next"`) or not at all (`"skip"`); an ambiguous wall time (fall back) fires at its
  first occurrence (`dst_fold="first"`) or at both (`"both"`).
- `At`: one slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ._duration import Duration, parse_duration
from ._errors import ScheduleError

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo


def _croniter() -> Any:
    """The croniter module, imported on first use: a process with interval jobs only never loads it."""
    import croniter

    return croniter

__all__ = [
    "At",
    "Cron",
    "DstFold",
    "DstGap",
    "Every",
    "Schedule",
    "from_ms",
    "to_ms",
]

DstGap = Literal["next", "skip"]
DstFold = Literal["first", "both"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def to_ms(when: datetime) -> int:
    """Return an aware datetime as integer epoch milliseconds; naive datetimes are refused."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ScheduleError(
            f"naive datetime {when!r}: pass an aware one, e.g. datetime(..., tzinfo=timezone.utc)"
        )
    return (when - _EPOCH) // _MS


def from_ms(ms: int) -> datetime:
    """Return epoch milliseconds as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


class Schedule(Protocol):
    """Where a job's slots lie."""

    @property
    def fingerprint(self) -> str:
        """Identifies the schedule (kind, expression, timezone, offset); stored with the job."""
        ...

    @property
    def min_interval_ms(self) -> int | None:
        """The shortest gap between two slots, when known (used for the default jitter)."""
        ...

    def next_slot(self, after_ms: int) -> int | None:
        """Return the first slot strictly after `after_ms`, or None when there is none."""
        ...

    def prev_slot(self, at_ms: int) -> int | None:
        """Return the last slot at or before `at_ms`, or None when there is none."""
        ...


@dataclass(frozen=True, slots=True)
class Every:
    """A fixed interval on the UTC grid, optionally shifted by `offset`."""

    interval_ms: int
    offset_ms: int = 0

    @classmethod
    def parse(cls, interval: Duration, offset: Duration = 0) -> Every:
        """Build from durations, checking them."""
        interval_ms = parse_duration(interval, name="interval")
        offset_ms = parse_duration(offset, name="offset", allow_zero=True)
        if offset_ms >= interval_ms:
            raise ScheduleError(
                f"offset {offset!r} must be shorter than the interval {interval!r}: "
                "e.g. every('hourly', '1h', offset='15m')"
            )
        return cls(interval_ms, offset_ms)

    @property
    def fingerprint(self) -> str:
        """`every:<interval ms>+<offset ms>`."""
        return f"every:{self.interval_ms}+{self.offset_ms}"

    @property
    def min_interval_ms(self) -> int:
        """The interval."""
        return self.interval_ms

    def next_slot(self, after_ms: int) -> int:
        """The next grid point after `after_ms`."""
        k = (after_ms - self.offset_ms) // self.interval_ms + 1
        return k * self.interval_ms + self.offset_ms

    def prev_slot(self, at_ms: int) -> int:
        """The grid point at or before `at_ms`."""
        k = (at_ms - self.offset_ms) // self.interval_ms
        return k * self.interval_ms + self.offset_ms


def _zone(name: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # on first use: interval jobs never load it

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ScheduleError(
            f"unknown timezone {name!r}: use an IANA name such as 'Europe/Athens' or 'UTC'"
        ) from None


class _Field:
    """One cron field's name and range. A plain class: six are made at import by every process,
    and a dataclass costs that import about 1 ms to generate its methods, none of which are used."""

    __slots__ = ("hi", "lo", "name", "names")

    def __init__(self, name: str, lo: int, hi: int, names: tuple[str, ...] = ()) -> None:
        self.name = name
        self.lo = lo
        self.hi = hi
        self.names = names
        """Names for lo, lo + 1, ... (months and weekdays)."""


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS),
    _Field("weekday", 0, 7, _DAYS),  # 0 and 7 are both Sunday
    _Field("second", 0, 59),
)
# croniter's extensions (L last, W nearest weekday, # nth weekday, ? any): croniter checks those items.
_EXTENSIONS = frozenset("lw#?")


def _check_field(field: _Field, text: str) -> str | None:
    """What is wrong with one cron field, naming the field, the value and the valid range; None if nothing."""
    for item in text.split(","):
        base, slash, step = item.partition("/")
        if not base or any(c in _EXTENSIONS for c in base.lower()):
            continue
        if slash:
            span = field.hi - field.lo - (1 if field.names == _DAYS else 0)  # 7 is Sunday again
            if not step.isdigit() or not 1 <= int(step) <= span:
                return f"{field.name} step {step!r} in {item!r} is out of range: use a step of 1-{span}"
        if base == "*":
            continue
        for value in base.split("-", 1):
            if value.isdigit() and field.lo <= int(value) <= field.hi:
                continue
            if value.lower() in field.names:
                continue
            kind = "out of range" if value.isdigit() else "not valid"
            where = "" if value == item else f" in {item!r}"
            names = f" or {', '.join(field.names)}" if field.names else ""
            return f"{field.name} {value!r}{where} is {kind}: use {field.lo}-{field.hi}{names}"
    return None


@dataclass(frozen=True, slots=True)
class Cron:
    """A cron expression (5 fields, or 6 with seconds last) in an IANA timezone."""

    expression: str
    timezone: str = "UTC"
    dst_gap: DstGap = "next"
    dst_fold: DstFold = "first"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        expr = " ".join(self.expression.split()) if isinstance(self.expression, str) else None
        hint = "use five fields (minute hour day month weekday) or six with seconds last, e.g. '0 8 * * 1-5'"
        if not expr or len(expr.split()) not in (5, 6):
            raise ScheduleError(f"invalid cron expression {self.expression!r}: {hint}")
        for spec, text in zip(_FIELDS, expr.split(), strict=False):
            problem = _check_field(spec, text)
            if problem:
                raise ScheduleError(f"invalid cron expression {self.expression!r}: {problem}")
        if not _croniter().croniter.is_valid(expr):
            raise ScheduleError(f"invalid cron expression {self.expression!r}: {hint}")
        if self.dst_gap not in ("next", "skip"):
            raise ScheduleError(f"invalid dst_gap {self.dst_gap!r}: use 'next' or 'skip'")
        if self.dst_fold not in ("first", "both"):
            raise ScheduleError(f"invalid dst_fold {self.dst_fold!r}: use 'first' or 'both'")
        if not isinstance(self.timezone, str):
            raise ScheduleError(f"invalid timezone {self.timezone!r}: use an IANA name such as 'UTC'")
        object.__setattr__(self, "expression", expr)
        object.__setattr__(self, "_zone", _zone(self.timezone))

    @property
    def fingerprint(self) -> str:
        """`cron:<expression>@<timezone>` plus any non-default DST policy."""
        policy = "" if (self.dst_gap, self.dst_fold) == ("next", "first") else (
            f";gap={self.dst_gap};fold={self.dst_fold}"
        )
        return f"cron:{self.expression}@{self.timezone}{policy}"

    @property
    def min_interval_ms(self) -> None:
        """Not computed for cron expressions."""
        return None

    def instants(self, wall: datetime) -> list[int]:
        """Return the slots (epoch ms) that a naive local wall time maps to under the DST policy."""
        zone = self._zone
        first = wall.replace(tzinfo=zone, fold=0)
        second = wall.replace(tzinfo=zone, fold=1)
        u0, u1 = to_ms(first), to_ms(second)
        if u0 == u1:
            return [u0]
        # Two offsets apply to this wall time: either it is ambiguous (both round-trip) or it
        # falls in a gap (neither does).
        if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall:
            return sorted({u0, u1}) if self.dst_fold == "both" else [min(u0, u1)]
        if self.dst_gap == "skip":
            return []
        return [self._transition(min(u0, u1), max(u0, u1))]

    def _transition(self, lo: int, hi: int) -> int:
        """The instant in (lo, hi] where the zone's UTC offset changes: the first valid instant."""
        zone = self._zone
        base = from_ms(lo).astimezone(zone).utcoffset()
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if from_ms(mid).astimezone(zone).utcoffset() == base:
                lo = mid
            else:
                hi = mid
        return hi

    def _offsets(self, at_ms: int) -> tuple[timedelta, timedelta]:
        zone = self._zone
        offsets = [
            from_ms(at_ms + d).astimezone(zone).utcoffset() or timedelta(0)
            for d in (-86_400_000, 0, 86_400_000)
        ]
        return min(offsets), max(offsets)

    def next_slot(self, after_ms: int) -> int | None:
        """The first fire instant strictly after `after_ms`."""
        lo, hi = self._offsets(after_ms)
        after_utc = from_ms(after_ms).replace(tzinfo=None)
        # Wall times w whose instant w - offset can exceed `after` satisfy w > after + min offset.
        start = after_utc + lo - timedelta(seconds=1)
        lib = _croniter()
        it = lib.croniter(self.expression, start)
        best: int | None = None
        try:
            for _ in range(100_000):
                wall: datetime = it.get_next(datetime)
                if best is not None and to_ms((wall - hi).replace(tzinfo=UTC)) > best:
                    break
                for slot in self.instants(wall):
                    if slot > after_ms and (best is None or slot < best):
                        best = slot
        except lib.CroniterBadDateError:
            pass
        return best

    def prev_slot(self, at_ms: int) -> int | None:
        """The last fire instant at or before `at_ms`."""
        lo, hi = self._offsets(at_ms)
        at_utc = from_ms(at_ms).replace(tzinfo=None)
        start = at_utc + hi + timedelta(seconds=1)
        lib = _croniter()
        it = lib.croniter(self.expression, start)
        best: int | None = None
        try:
            for _ in range(100_000):
                wall: datetime = it.get_prev(datetime)
                if best is not None and to_ms((wall - lo).replace(tzinfo=UTC)) < best:
                    break
                for slot in self.instants(wall):
                    if slot <= at_ms and (best is None or slot > best):
                        best = slot
        except lib.CroniterBadDateError:
            pass
        return best


@dataclass(frozen=True, slots=True)
class At:
    """One moment; the job is finished after it."""

    when_ms: int

    @classmethod
    def parse(cls, when: datetime | int | float) -> At:
        """Build from an aware datetime or epoch seconds."""
        if isinstance(when, datetime):
            return cls(to_ms(when))
        if isinstance(when, int | float) and not isinstance(when, bool):
            return cls(round(when * 1000))
        raise ScheduleError(
            f"invalid moment {when!r}: pass an aware datetime, e.g. datetime(2027, 1, 1, tzinfo=timezone.utc)"
        )

    @property
    def fingerprint(self) -> str:
        """`at:<epoch ms>`."""
        return f"at:{self.when_ms}"

    @property
    def min_interval_ms(self) -> None:
        """A single moment has no interval."""
        return None

    def next_slot(self, after_ms: int) -> int | None:
        """The moment, if it is after `after_ms`."""
        return self.when_ms if self.when_ms > after_ms else None

    def prev_slot(self, at_ms: int) -> int | None:
        """The moment, if it is at or before `at_ms`."""
        return self.when_ms if self.when_ms <= at_ms else None
