"""The churn bench's judge (M4), on changes and starts made up here, and one tiny run on SQLite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stored_churn import HOUR_MS, Change, judge, read_changes
from stored_spread import _offset_ms

COUNT = 3600  # the N schedules: s-<i> due at i seconds into the hour
HOUR0 = 1_000_000 * HOUR_MS  # an hour's start, in ms
HB = 5000


def slot(i: int) -> int:
    return HOUR0 + _offset_ms(i, COUNT)


def test_untouched_schedules_start_once_each() -> None:
    lo, hi = slot(100), slot(110)
    starts = [(f"s-{i:07d}", slot(i), 1, i, slot(i) / 1000 + 0.02) for i in range(100, 110)]
    v = judge(COUNT, [], starts, lo, hi, HB)
    assert (v["due"], v["starts"], v["duplicates"], v["lost"], v["late_after_change"]) == (10, 10, 0, 0, 0)
    assert round(v["p50_ms"]) == round(v["p99_ms"]) == 20
    v = judge(COUNT, [], [*starts[:4], starts[3], *starts[6:]], lo, hi, HB)
    assert (v["duplicates"], v["lost"]) == (1, 2)
    attempt2 = (starts[0][0], starts[0][1], 2, 100, 0.0)
    assert judge(COUNT, [], [*starts, attempt2], lo, hi, HB)["duplicates"] == 0


def test_a_removed_schedule_may_start_within_a_heartbeat_of_its_removal_and_not_after() -> None:
    lo, hi = slot(0), slot(60)
    removed_at = slot(20)
    gone = Change("s-0000030", None, removed_at - 10, removed_at)
    kept = Change("s-0000022", None, removed_at - 10, removed_at)
    starts = [(f"s-{i:07d}", slot(i), 1, i, slot(i) / 1000) for i in range(60)]
    v = judge(COUNT, [gone, kept], starts, lo, hi, HB)
    # s-22's slot came 2 s after its removal: it may start or not; s-30's came 10 s after: it must not.
    assert (v["due"], v["lost"], v["late_after_change"], v["late_removed_or_moved"]) == (58, 0, 1, 1)
    v = judge(COUNT, [gone, kept], [s for s in starts if s[0] not in ("s-0000022", "s-0000030")], lo, hi, HB)
    assert (v["lost"], v["late_after_change"]) == (0, 0)


def test_a_slot_due_just_before_a_change_may_be_dropped_by_it() -> None:
    lo, hi = slot(0), slot(60)
    changes = [Change("s-0000010", None, slot(10) + 500, slot(10) + 502),  # removed 0.5 s after its slot
               Change("s-0000020", None, slot(20) + 1500, slot(20) + 1502),  # 1.5 s after
               Change("s-0000030", (_offset_ms(50, COUNT), 30), slot(30) + 200, slot(30) + 202)]  # moved
    starts = [(f"s-{i:07d}", slot(i), 1, i, slot(i) / 1000) for i in range(60) if i not in (10, 20, 30)]
    starts.append(("s-0000030", slot(50), 1, 30, 0.0))
    v = judge(COUNT, changes, starts, lo, hi, HB)
    assert (v["lost"], v["raced"], v["late_after_change"]) == (1, 2, 0)
    assert judge(COUNT, changes, starts, lo, hi, HB, grace_ms=2000)["lost"] == 0
    ran = [*starts, ("s-0000010", slot(10), 1, 10, 0.0), ("s-0000030", slot(30), 1, 30, 0.0)]
    v = judge(COUNT, changes, ran, lo, hi, HB)
    assert (v["raced"], v["lost"]) == (0, 1)


def test_an_update_is_honoured_from_a_heartbeat_after_its_answer() -> None:
    lo, hi = slot(0), slot(120)
    t = slot(10)
    moved = Change("s-0000040", (_offset_ms(80, COUNT), 40), t - 30, t)  # its slot from 40 s to 80 s
    args = Change("s-0000050", (_offset_ms(50, COUNT), 7), t - 30, t)  # n from 50 to 7
    late_args = Change("s-0000012", (_offset_ms(12, COUNT), 9), t - 30, t)  # 2 s later: either n
    added = Change("c-0000001", (_offset_ms(90, COUNT), 1), t - 30, t)
    starts = [(f"s-{i:07d}", slot(i), 1, i, slot(i) / 1000) for i in range(120) if i not in (40, 50, 12)]
    starts += [("s-0000040", slot(80), 1, 40, 0.0), ("s-0000050", slot(50), 1, 7, 0.0),
               ("s-0000012", slot(12), 1, 12, 0.0), ("c-0000001", slot(90), 1, 1, 0.0)]
    changes = [moved, args, late_args, added]
    v = judge(COUNT, changes, starts, lo, hi, HB)
    assert (v["due"], v["lost"], v["duplicates"], v["late_after_change"]) == (120, 0, 0, 0)
    # The old time, the old arguments, or the new schedule missing: each is counted.
    stale = [*starts, ("s-0000040", slot(40), 1, 40, 0.0)]
    v = judge(COUNT, changes, stale, lo, hi, HB)
    assert v["late_removed_or_moved"] == 1
    assert [e["late"][:2] for e in v["examples"]] == [["s-0000040", slot(40)]]
    assert v["examples"][0]["changes"] == [{"definition": moved.definition, "sent": t - 30, "done": t}]
    old_args = [s if s[0] != "s-0000050" else ("s-0000050", slot(50), 1, 50, 0.0) for s in starts]
    v = judge(COUNT, changes, old_args, lo, hi, HB)
    assert v["stale_args"] == 1 and v["examples"][0]["allowed"] == [7]
    v = judge(COUNT, changes, [s for s in starts if s[0] != "c-0000001"], lo, hi, HB)
    assert v["lost"] == 1 and [e["lost"] for e in v["examples"]] == [["c-0000001", slot(90)]]


def test_the_writer_log_reads_back_without_the_refused_changes() -> None:
    lines = [json.dumps({"id": "c-1", "kind": "add", "offset": 5, "n": 1, "sent": 1.0, "done": 1.002}),
             json.dumps({"id": "s-2", "kind": "remove", "sent": 2.0, "done": 2.001}),
             json.dumps({"id": "s-3", "kind": "update", "offset": 5, "n": 3, "sent": 3.0,
                         "error": "ScheduleConflict"})]
    assert read_changes(lines) == [Change("c-1", (5, 1), 1000, 1002), Change("s-2", None, 2000, 2001)]


def test_a_tiny_run_on_sqlite_judges_every_change(tmp_path: Path) -> None:
    """The whole bench, small: 3 replicas with a 1 s heartbeat on SQLite, 20 changes a second."""
    script = Path(__file__).resolve().parents[1] / "stored_churn.py"
    done = subprocess.run(
        [sys.executable, str(script), f"sqlite:///{tmp_path}/churn.db", "--count", "3600", "--rate", "20",
         "--seconds", "12", "--warmup", "4", "--heartbeat", "1", "--keep", "--json"],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads(done.stdout)
    assert row["changes"] >= 200 and row["conflicts"] == 0
    # About one slot a second falls in the 7 s judged, less those the writers removed or moved away.
    assert row["due"] >= 3 and row["starts"] >= row["due"]
    assert (row["duplicates"], row["lost"]) == (0, 0)
