"""The chaos run's checker (`anarchon_testkit.chaos.check`) on hand-made event logs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anarchon_testkit.chaos import Action, check, main
from anarchon_testkit.cluster import Event

T0 = 1_800_000_000.0  # wall seconds
S0 = int(T0 * 1000)  # a slot, epoch ms


def tick(slot_s: int, pid: int = 1, attempt: int = 1, late: float = 0.01) -> list[Event]:
    slot = S0 + slot_s * 1000
    t = slot / 1000 + late
    return [Event("start", pid, t, "tick", slot, attempt),
            Event("end", pid, t + 0.001, "tick", slot, attempt)]


def ticks(n: int) -> list[Event]:
    return [e for k in range(n) for e in tick(k, pid=1 + k % 3)]


def judge(events: list[Event], actions: Sequence[Action] = (), *, leases: bool = True,
          ) -> list[str]:
    return check(events, list(actions), leases=leases, since_ms=S0, until_ms=S0 + 9000).violations


def test_a_clean_run_passes() -> None:
    report = check(ticks(10), [], leases=True, since_ms=S0, until_ms=S0 + 9000)
    assert report.violations == [] and report.missed_ticks == 0 and report.starts == 10, report


def test_one_attempt_started_twice_is_a_violation() -> None:
    events = ticks(10) + tick(4, pid=2, late=0.02)
    assert any("started twice" in v for v in judge(events)), judge(events)


def test_a_rerun_needs_a_fault_on_the_first_replica() -> None:
    events = ticks(10) + tick(4, pid=2, attempt=2, late=2.5)  # slot 4's attempt 1 ran on pid 2
    assert any("nothing done to its replica" in v for v in judge(events)), judge(events)
    killed = [Action(S0 / 1000 + 4.02, 2, "kill")]
    assert judge(events, killed) == []
    assert check(events, killed, leases=True, since_ms=S0, until_ms=S0 + 9000).reruns == 1
    # A fault on another replica explains nothing.
    assert judge(events, [Action(S0 / 1000 + 4.02, 3, "kill")]) != []


def test_a_claim_only_backend_never_runs_a_slot_again() -> None:
    events = ticks(10) + tick(4, pid=2, attempt=2, late=2.5)
    killed = [Action(S0 / 1000 + 4.02, 2, "kill")]
    assert any("claim-only" in v for v in judge(events, killed, leases=False))


def long_run(pid: int, attempt: int, start: float, end: float | None) -> list[Event]:
    slot = S0 + 4000
    out = [Event("start", pid, S0 / 1000 + start, "long", slot, attempt)]
    if end is not None:
        out.append(Event("end", pid, S0 / 1000 + end, "long", slot, attempt))
    return out


def test_overlapping_attempts_only_behind_a_frozen_replica() -> None:
    # Attempt 1 runs 4.0 to 9.0 (its replica stopped, ignoring the signal); attempt 2 starts at 6.0.
    events = ticks(10) + long_run(1, 1, 4.0, 9.0) + long_run(2, 2, 6.0, 8.0)
    stopped = [Action(S0 / 1000 + 5.0, 1, "stop")]
    assert any("still ran" in v for v in judge(events, stopped)), judge(events, stopped)
    frozen = [Action(S0 / 1000 + 5.0, 1, "freeze", S0 / 1000 + 8.5)]
    assert judge(events, frozen) == []
    assert check(events, frozen, leases=True, since_ms=S0, until_ms=S0 + 9000).overlaps == 1
    # A killed replica's run ended when it died: no overlap.
    killed_events = ticks(10) + long_run(1, 1, 4.0, None) + long_run(2, 2, 6.5, 8.0)
    assert judge(killed_events, [Action(S0 / 1000 + 5.0, 1, "kill")]) == []


def test_a_long_gap_between_ticks_is_a_violation() -> None:
    events = [e for e in ticks(10) if not (S0 + 2000 <= e.slot <= S0 + 7000)]
    report = check(events, [], leases=True, since_ms=S0, until_ms=S0 + 9000)
    assert report.missed_ticks == 6 and report.longest_tick_gap_ms == 6000, report
    assert any("without a start" in v for v in report.violations), report
    shorter = [e for e in ticks(10) if not (S0 + 2000 <= e.slot <= S0 + 4000)]
    assert judge(shorter) == []  # 3 s: within lease + heartbeat + 2 s


def test_on_sqlite_a_freeze_may_lengthen_a_gap() -> None:
    # A frozen SQLite replica can hold the write lock: every replica waits for it.
    events = [e for e in ticks(10) if not (S0 + 2000 <= e.slot <= S0 + 7000)]
    freeze = [Action(S0 / 1000 + 1.5, 3, "freeze", S0 / 1000 + 6.5)]
    assert judge(events, freeze) != []  # elsewhere a frozen client holds no lock
    assert check(events, freeze, leases=True, since_ms=S0, until_ms=S0 + 9000,
                 freezes_block_store=True).violations == []


def test_the_command_refuses_an_unknown_store_before_starting_anything(capsys: Any) -> None:
    assert main(["bogus://x", "--seconds", "1"]) == 2
    assert "no installed backend handles 'bogus'" in capsys.readouterr().err
