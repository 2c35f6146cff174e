"""Schedules: the UTC grid, cron with DST policies across real transitions, one-offs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from anarchon import At, Cron, Every, ScheduleError, from_ms, parse_duration, to_ms


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return to_ms(datetime(year, month, day, hour, minute, second, tzinfo=UTC))


def fires(schedule: Cron, start: int, n: int) -> list[datetime]:
    out, t = [], start
    for _ in range(n):
        nxt = schedule.next_slot(t)
        assert nxt is not None
        out.append(from_ms(nxt))
        t = nxt
    return out


@pytest.mark.parametrize(
    ("text", "ms"),
    [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("1h30m", 5_400_000), ("2d", 172_800_000),
     (1.5, 1500), (10, 10_000), (timedelta(minutes=2), 120_000), ("0.5s", 500), ("45", 45_000),
     ("1h 30m", 5_400_000), ("10 s", 10_000)],
)
def test_durations(text: object, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["10 parsecs", 0, -5, "", "5 m s", "1h-3m", True, None, "ms", float("nan"),
                                 "inf", "nan", "1e400", "9" * 400 + "s"])
def test_bad_durations_quote_the_input(bad: object) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_duration(bad, name="lease")
    assert repr(bad) in str(info.value)
    assert "30s" in str(info.value)  # says how to fix it


def test_every_sits_on_the_utc_grid_whenever_started() -> None:
    every = Every.parse("10s")
    assert every.next_slot(utc(2026, 1, 1, 0, 0, 3)) == utc(2026, 1, 1, 0, 0, 10)
    assert every.next_slot(utc(2026, 1, 1, 0, 0, 10)) == utc(2026, 1, 1, 0, 0, 20)  # strictly after
    assert every.prev_slot(utc(2026, 1, 1, 0, 0, 10)) == utc(2026, 1, 1, 0, 0, 10)


def test_every_offset_shifts_the_grid() -> None:
    hourly = Every.parse("1h", offset="15m")
    assert from_ms(hourly.next_slot(utc(2026, 1, 1, 10, 20))) == datetime(2026, 1, 1, 11, 15, tzinfo=UTC)
    with pytest.raises(ScheduleError, match="shorter than the interval"):
        Every.parse("1h", offset="1h")


def test_cron_weekdays_in_athens() -> None:
    cron = Cron("0 8 * * 1-5", "Europe/Athens")
    got = fires(cron, utc(2026, 1, 2, 12), 3)  # Friday noon UTC
    # 08:00 EET = 06:00 UTC; the weekend is skipped.
    assert got == [datetime(2026, 1, 5, 6, tzinfo=UTC), datetime(2026, 1, 6, 6, tzinfo=UTC),
                   datetime(2026, 1, 7, 6, tzinfo=UTC)]


def test_cron_with_seconds_field() -> None:
    cron = Cron("* * * * * 30")
    assert cron.next_slot(utc(2026, 1, 1, 0, 0, 0)) == utc(2026, 1, 1, 0, 0, 30)


# Europe/Athens 2026: spring forward 29 March 03:00 -> 04:00 (01:00 UTC);
# fall back 25 October 04:00 -> 03:00 (01:00 UTC).
def test_athens_gap_fires_at_first_valid_instant() -> None:
    cron = Cron("30 3 * * *", "Europe/Athens")
    got = fires(cron, utc(2026, 3, 28, 12), 2)
    assert got == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:30 does not exist: 04:00 EEST
                   datetime(2026, 3, 30, 0, 30, tzinfo=UTC)]


def test_athens_gap_skip_policy() -> None:
    cron = Cron("30 3 * * *", "Europe/Athens", dst_gap="skip")
    assert fires(cron, utc(2026, 3, 28, 12), 1) == [datetime(2026, 3, 30, 0, 30, tzinfo=UTC)]


def test_athens_gap_several_missing_wall_times_fire_once() -> None:
    cron = Cron("*/20 3 * * *", "Europe/Athens")  # 03:00, 03:20, 03:40 all fall in the gap
    got = fires(cron, utc(2026, 3, 28, 12), 2)
    assert got == [datetime(2026, 3, 29, 1, 0, tzinfo=UTC), datetime(2026, 3, 30, 0, 0, tzinfo=UTC)]


def test_athens_fold_fires_first_occurrence_once() -> None:
    cron = Cron("30 3 * * *", "Europe/Athens")
    got = fires(cron, utc(2026, 10, 24, 12), 2)
    assert got == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC),  # 03:30 EEST, not 03:30 EET again
                   datetime(2026, 10, 26, 1, 30, tzinfo=UTC)]


def test_athens_fold_both_policy() -> None:
    cron = Cron("30 3 * * *", "Europe/Athens", dst_fold="both")
    got = fires(cron, utc(2026, 10, 24, 12), 3)
    assert got == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 25, 1, 30, tzinfo=UTC),
                   datetime(2026, 10, 26, 1, 30, tzinfo=UTC)]


# America/New_York 2026: spring forward 8 March 02:00 -> 03:00 (07:00 UTC);
# fall back 1 November 02:00 -> 01:00 (06:00 UTC).
def test_new_york_gap_and_fold() -> None:
    gap = Cron("30 2 * * *", "America/New_York")
    assert fires(gap, utc(2026, 3, 7, 12), 2) == [
        datetime(2026, 3, 8, 7, 0, tzinfo=UTC), datetime(2026, 3, 9, 6, 30, tzinfo=UTC)]
    fold = Cron("30 1 * * *", "America/New_York")
    assert fires(fold, utc(2026, 10, 31, 12), 2) == [
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 2, 6, 30, tzinfo=UTC)]
    both = Cron("30 1 * * *", "America/New_York", dst_fold="both")
    assert fires(both, utc(2026, 10, 31, 12), 2) == [
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 1, 6, 30, tzinfo=UTC)]


def test_hourly_cron_across_fold_starting_inside_it() -> None:
    # Starting between the two 03:xx hours in Athens must find the second 03:00 only with "both".
    start = utc(2026, 10, 25, 0, 45)
    assert from_ms(Cron("0 * * * *", "Europe/Athens").next_slot(start) or 0) == datetime(
        2026, 10, 25, 2, 0, tzinfo=UTC)
    assert from_ms(Cron("0 * * * *", "Europe/Athens", dst_fold="both").next_slot(start) or 0) == datetime(
        2026, 10, 25, 1, 0, tzinfo=UTC)


def test_prev_slot_for_catch_up() -> None:
    cron = Cron("0 8 * * *", "Europe/Athens")
    assert cron.prev_slot(utc(2026, 1, 5, 6, 3)) == utc(2026, 1, 5, 6)
    assert cron.prev_slot(utc(2026, 1, 5, 5, 59)) == utc(2026, 1, 4, 6)


def test_cron_that_never_fires() -> None:
    assert Cron("0 0 30 2 *").next_slot(utc(2026, 1, 1)) is None


@pytest.mark.parametrize("bad", ["every tuesday", "* * * *", "* * * * * * * *", "", "0 8 * * 5L"])
def test_invalid_cron_quotes_the_expression(bad: str) -> None:
    with pytest.raises(ScheduleError) as info:
        Cron(bad)
    assert repr(bad) in str(info.value) and "0 8 * * 1-5" in str(info.value)


@pytest.mark.parametrize(("bad", "message"), [
    ("*/61 * * * *", "minute step '61' in '*/61' is out of range: use a step of 1-59"),
    ("5-50/70 * * * *", "minute step '70' in '5-50/70' is out of range: use a step of 1-59"),
    ("61 * * * *", "minute '61' is out of range: use 0-59"),
    ("0 25 * * *", "hour '25' is out of range: use 0-23"),
    ("0 0 0 * *", "day of month '0' is out of range: use 1-31"),
    ("0 0 1,32 * *", "day of month '32' is out of range: use 1-31"),
    ("0 0 * 13 *", "month '13' is out of range: use 1-12 or jan, feb, mar"),
    ("0 0 * jan-dek *", "month 'dek' in 'jan-dek' is not valid: use 1-12 or jan, feb"),
    ("0 8 * * mon-fry", "weekday 'fry' in 'mon-fry' is not valid: use 0-7 or sun, mon, tue, wed, thu, fri"),
    ("0 8 * * 8", "weekday '8' is out of range: use 0-7"),
    ("0 8 * * 1-5/0", "weekday step '0' in '1-5/0' is out of range: use a step of 1-6"),
    ("* * * * * 60", "second '60' is out of range: use 0-59"),
])
def test_invalid_cron_field_names_field_value_and_range(bad: str, message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        Cron(bad)
    assert str(info.value).startswith(f"invalid cron expression {bad!r}: {message}")


@pytest.mark.parametrize("good", [
    "0 8 * * MON-FRI", "0 8 * JAN-mar *", "0 8 * * fri-mon", "0 8 * * 0-7", "0 8 * * 7", "0 8 * * 1#2",
    "0 8 L * *", "0 0 15W * *", "0 8 ? * *", "0 8 1-31/2 * *", "*/59 * * * *", "0 */23 * * *",
])
def test_cron_fields_croniter_accepts_stay_accepted(good: str) -> None:
    assert Cron(good).expression == good


def test_unknown_timezone() -> None:
    with pytest.raises(ScheduleError, match="'Mars/Olympus'"):
        Cron("0 8 * * *", "Mars/Olympus")


def test_at_one_moment() -> None:
    at = At.parse(datetime(2027, 1, 1, tzinfo=UTC))
    assert at.next_slot(utc(2026, 12, 31)) == utc(2027, 1, 1)
    assert at.next_slot(utc(2027, 1, 1)) is None
    with pytest.raises(ScheduleError, match="naive datetime"):
        At.parse(datetime(2027, 1, 1))


def test_fingerprints_identify_kind_expression_timezone_offset() -> None:
    prints = {
        Every.parse("10s").fingerprint, Every.parse("10s", "1s").fingerprint, Every.parse("20s").fingerprint,
        Cron("0 8 * * *").fingerprint, Cron("0 8 * * *", "Europe/Athens").fingerprint,
        Cron("0 8 * * *", "Europe/Athens", dst_fold="both").fingerprint,
        At.parse(1_800_000_000).fingerprint,
    }
    assert len(prints) == 7
    assert Cron("0  8 * * *").fingerprint == Cron("0 8 * * *").fingerprint  # whitespace does not matter
