"""`Settings`: a scheduler's settings, checked in one place and kept whole."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing

import pytest

from anarchon import (
    ConfigError,
    MemoryBackend,
    MemoryClaimBackend,
    OptionError,
    ScheduleError,
    Scheduler,
    Settings,
)
from anarchon._settings import LEASE_SETTINGS, SETTING_NAMES
from anarchon.testing import probe


def test_the_settings_are_the_keywords_of_every_scheduler_signature() -> None:
    overloads = typing.get_overloads(Scheduler.__init__)
    assert len(overloads) == 2
    for overload in overloads:
        keywords = {name for name, p in inspect.signature(overload).parameters.items()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY}
        assert keywords == SETTING_NAMES, overload
    assert set(LEASE_SETTINGS) <= SETTING_NAMES


def test_defaults_are_filled_in_and_durations_are_milliseconds() -> None:
    s = Settings.parse(MemoryBackend(), {"lease": "6s", "heartbeat": "1s", "jitter": 0})
    assert (s.lease_ms, s.heartbeat_ms, s.jitter_ms) == (6000, 1000, 0)
    assert (s.namespace, s.stop_timeout_ms, s.max_skew_ms) == ("anarchon", 10_000, 2000)
    assert s.block_limit_ms == 60_000
    assert s.leases and s.history > 0 and s.instance_id


def test_settings_are_frozen_and_the_scheduler_hands_them_on_whole() -> None:
    scheduler = Scheduler(MemoryBackend(), lease="6s", heartbeat="1s", instance_id="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        scheduler.settings.lease_ms = 1  # type: ignore[misc]
    assert (scheduler.lease_ms, scheduler.heartbeat_ms, scheduler.instance_id) == (6000, 1000, "a")

    async def main() -> None:
        async with scheduler:
            assert probe(scheduler).settings is scheduler.settings
            with pytest.raises(RuntimeError, match="instance id cannot change"):
                scheduler.instance_id = "b"

    asyncio.run(main())
    scheduler.instance_id = "b"
    assert scheduler.settings.instance_id == "b"


@pytest.mark.parametrize(("given", "error", "text"), [
    ({"leese": "6s"}, ConfigError, "unknown option 'leese' for Scheduler(): valid options are"),
    ({"namespace": ""}, OptionError, "invalid namespace ''"),
    ({"namespace": 3}, ConfigError, "invalid namespace 3"),
    ({"lease": "10 parsecs"}, ScheduleError, "invalid lease '10 parsecs': use e.g."),
    ({"lease": "2s", "heartbeat": "1s"}, OptionError, "less than half the lease"),
    ({"history": -1}, OptionError, "invalid history -1"),
])
def test_bad_settings_name_the_value_and_the_fix(given: dict[str, object], error: type[Exception],
                                                 text: str) -> None:
    with pytest.raises(error) as info:
        Settings.parse(MemoryBackend(), given)
    assert text in str(info.value)


def test_lease_settings_are_refused_on_a_claim_only_backend() -> None:
    for key in LEASE_SETTINGS:
        with pytest.raises(ConfigError, match=f"option '{key}' needs a lease backend"):
            Settings.parse(MemoryClaimBackend(), {key: "10s"})
    assert not Settings.parse(MemoryClaimBackend(), {}).leases
