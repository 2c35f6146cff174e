"""The spread bench's count of a killed replica's orphans (M2 with `--kill-at`), on starts made up here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stored_spread import orphans

from anarchon.backends import schedule_partition


def test_the_orphans_are_the_killed_replicas_partitions_slots_due_after_the_kill(tmp_path: Path) -> None:
    names = [f"s-{i:07d}" for i in range(200)]
    killed = names[:20]  # started by replica 0 before the kill, at 10 s
    mine = {schedule_partition(n) for n in killed}
    (tmp_path / "starts-0.txt").write_text("".join(f"{n} 5000 1 5.1\n" for n in killed)
                                           + f"{names[20]} 11000 1 11.0\n"  # after the kill: not counted
                                           + f"{names[21]} -9000 1 -0.5\n")  # 10 s before it: neither
    # The other replica started other partitions' slots, and one of replica 0's (a backup, say).
    others = [n for n in names if schedule_partition(n) not in mine]
    (tmp_path / "starts-1.txt").write_text("".join(f"{n} 5000 1 5.2\n" for n in [*others, killed[0]]))
    due = {(n, slot) for n in names for slot in (5000, 15000)}
    orphaned = sorted((n, s) for n, s in due if s == 15000 and schedule_partition(n) in mine)
    assert len(orphaned) >= 20
    late = {key: 15.0 + 0.1 * k for k, key in enumerate(orphaned[:-1])}  # the last one never starts
    starts = [(n, s, 1, t) for (n, s), t in late.items()]
    starts += [(n, s, 2, t + 30) for (n, s), t in late.items()]  # a later attempt is not the start
    starts += [(n, 15000, 1, 15.0) for n in names if schedule_partition(n) not in mine]
    v = orphans(tmp_path, due, starts, 10.0)
    assert v["killed_partitions"] == len(mine)
    assert (v["orphans"], v["orphans_missed"]) == (len(orphaned), 1)
    assert v["orphans_max_ms"] == max(late.values()) * 1000 - 15000
    assert v["orphans_late_1s"] == sum(1 for t in late.values() if t * 1000 - 15000 > 1000) > 0
    assert v["orphans_late_until_s"] == 5.0
