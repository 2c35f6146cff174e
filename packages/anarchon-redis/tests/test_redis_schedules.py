"""Stored schedules on Redis and Valkey: the keys of a namespace's schedules, the due index's keys
compared as numbers, and a due index of the previous release (unpartitioned) moved at the first read.
(Every rule of the protocol: the conformance kit's tier, on a Cluster too.)"""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio
from redis.crc import key_slot

from anarchon.backends import ScheduleWrite, schedule_partition
from anarchon_redis import RedisBackend, _lease
from anarchon_redis._keys import Keys
from anarchon_redis._lease import due_key


def _write(schedule_id: str, next_due: int | None) -> ScheduleWrite:
    return ScheduleWrite(schedule_id, "report", '{"every": 60000, "offset": 0}', "{}", "{}", False, next_due)


async def test_a_namespaces_schedules_share_one_hash_slot_apart_from_every_job_key(
        redis_url: str, prefix: str, raw: redis.asyncio.Redis) -> None:
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        for schedule_id in ("sched", "x}:others", "reports:daily"):
            assert (await backend.put_schedule("ns:x", _write(schedule_id, 1_000), expect="absent")).written
        found: list[bytes | str] = await raw.keys(f"*{prefix}*")  # pyright: ignore[reportUnknownMemberType]
        keys = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
        tag = f"{{{prefix}:ns%3Ax}}"
        assert keys == [f"{tag}:sched:{part}" for part in ("body", "ids", "meta", "pdue", "ptaskdue", "tasks",
                                                           "version")]
        assert len({key_slot(k.encode()) for k in keys}) == 1, "one script reads and writes them all"
        # A job's keys begin with the tag's text and a ':' where these have the tag's '}'.
        assert not any(k.startswith(f"{{{prefix}:ns%3Ax:") for k in keys)
    finally:
        await backend.close()


async def test_the_due_index_orders_and_advances_next_due_as_numbers(redis_url: str, prefix: str) -> None:
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        # Values on either side of 2**32 (the script compares a key as two 8-digit halves) and below 0.
        dues = {"a": 2**32 - 1, "b": 2**32, "c": -5, "d": -1, "e": 0, "f": 2**40 + 7, "g": -(2**40)}
        v: dict[str, int] = {}
        for schedule_id, due in dues.items():
            record = (await backend.put_schedule("ns", _write(schedule_id, due), expect="absent")).record
            assert record is not None
            v[schedule_id] = record.version
        page = await backend.due_schedules("ns", until=2**41, limit=100)
        assert [r.id for r in page] == sorted(dues, key=dues.__getitem__)
        assert [r.next_due for r in page] == sorted(dues.values())
        assert [r.id for r in await backend.due_schedules("ns", until=-1, limit=100)] == ["g", "c", "d"]
        await backend.advance_schedules("ns", [("a", v["a"], 2**32), ("b", v["b"], 2**32 - 1),
                                               ("c", v["c"], -1), ("d", v["d"], -5), ("e", v["e"], 2**32 + 1),
                                               ("f", v["f"], 2**40 + 6)])
        got = {r.id: r.next_due for r in await backend.get_schedules("ns", list(dues)) if r is not None}
        assert got == {"a": 2**32, "b": 2**32, "c": -1, "d": -1, "e": 2**32 + 1, "f": 2**40 + 7,
                       "g": -(2**40)}
        assert due_key(-(2**63)) == "0" * 16 and due_key(2**63 - 1) == "f" * 16
    finally:
        await backend.close()


async def test_an_expect_that_is_no_version_is_refused_before_the_store(redis_url: str, prefix: str) -> None:
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        for bad in ("abesnt", True, 1.0, None):
            with pytest.raises(TypeError, match=f"expect must be 'absent', 'any' or a version .*{bad!r}"):
                await backend.put_schedule("ns", _write("a", 1), expect=bad)  # type: ignore[arg-type]
        assert await backend.schedules_version("ns") == 0
    finally:
        await backend.close()


def _old_layout(keys: list[str], rows: dict[str, tuple[str, int | None]]) -> list[tuple[str, dict[Any, Any]]]:
    """What the previous release wrote for these schedules (id -> (task, next_due)): its meta, body, lists
    and its unpartitioned due index, `due` (due_key + id) and `taskdue` (task + NUL + due_key + id)."""
    meta, body, due, ids, tasks, version, taskdue = keys[:7]
    out: list[tuple[str, dict[Any, Any]]] = [(version, {"": len(rows)})]
    for n, (schedule_id, (task, next_due)) in enumerate(rows.items(), 1):
        key = due_key(next_due)
        out += [(meta, {schedule_id: f"{n} 1000 1000 {key} {task}"}),
                (body, {schedule_id: '[{"every": 60000, "offset": 0},{},{},0]'}),
                (ids, {schedule_id: 0}), (tasks, {f"{task}\0{schedule_id}": 0})]
        if next_due is not None:
            out += [(due, {key + schedule_id: 0}), (taskdue, {f"{task}\0{key}{schedule_id}": 0})]
    return out


async def _write_by_hand(raw: redis.asyncio.Redis, writes: list[tuple[str, dict[Any, Any]]]) -> None:
    for key, fields in writes:
        if key.endswith(":version"):
            await raw.set(key, fields[""])
        elif key.endswith((":meta", ":body")):
            await raw.hset(key, mapping=fields)  # pyright: ignore[reportUnknownMemberType]
        else:
            await raw.zadd(key, fields)


async def test_a_due_index_of_the_previous_release_is_moved_at_the_first_read(
        redis_url: str, prefix: str, raw: redis.asyncio.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lease, "_MOVE_CHUNK", 7)  # moved in many chunks
    keys = Keys(prefix).schedules("ns")
    rows: dict[str, tuple[str, int | None]] = {
        f"s{i}": (("t1", "t2")[i % 2], None if i % 7 == 0 else 1_000 + (i % 4) * 10) for i in range(300)}
    rows["é-id"] = ("t1", 1_000)
    await _write_by_hand(raw, _old_layout(keys, rows))
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        def expected(tasks: set[str] | None, parts: set[int]) -> list[tuple[int, str]]:
            return sorted((due, i) for i, (task, due) in rows.items() if due is not None and due <= 1_020
                          and (tasks is None or task in tasks) and schedule_partition(i) in parts)

        asked = {schedule_partition(i) for i in list(rows)[::5]}
        page = await backend.due_schedules("ns", until=1_020, partitions=sorted(asked), limit=1000)
        assert [(r.next_due, r.id) for r in page] == expected(None, asked)
        assert await raw.exists(keys[2], keys[6]) == 0, "the previous index is gone once moved"
        page = await backend.due_schedules("ns", until=1_020, tasks=["t2"], limit=1000)
        assert [(r.next_due, r.id) for r in page] == expected({"t2"}, set(range(64)))
        # Written by this release, a moved schedule leaves the index it had.
        first = page[0]
        await backend.advance_schedules("ns", [(first.id, first.version, 5_000)])
        removed = await backend.remove_schedule("ns", page[1].id)
        assert removed.written
        got = await backend.due_schedules("ns", until=1_020, tasks=["t2"], limit=1000)
        assert [r.id for r in got] == [r.id for r in page[2:]]
        got = await backend.due_schedules("ns", until=10_000, after=(1_030, "\U0010ffff"), limit=1000)
        assert [r.id for r in got] == [first.id]
        assert await raw.zcard(keys[7]) == sum(due is not None for _, due in rows.values()) - 1
    finally:
        await backend.close()


async def test_an_entry_a_writer_of_the_previous_release_left_behind_is_never_read(
        redis_url: str, prefix: str, raw: redis.asyncio.Redis) -> None:
    keys = Keys(prefix).schedules("ns")
    backend = RedisBackend(redis_url, prefix=prefix)
    await backend.open()
    try:
        for i in range(5):
            assert (await backend.put_schedule("ns", _write(f"s{i}", 1_000 + i), expect="absent")).written
        # A replica of the previous release moves s1 on (its meta and its own index, never `pdue`) and
        # removes s2 (its meta and lists only).
        found = await raw.hget(keys[0], "s1")  # pyright: ignore[reportUnknownMemberType]
        assert isinstance(found, bytes)
        meta = found.decode()
        old = due_key(1_001)
        await raw.hset(keys[0], "s1", meta.replace(old, due_key(9_000)))  # pyright: ignore[reportUnknownMemberType]
        await raw.zadd(keys[2], {due_key(9_000) + "s1": 0})
        await raw.zadd(keys[6], {f"report\0{due_key(9_000)}s1": 0})
        await raw.hdel(keys[0], "s2")  # pyright: ignore[reportUnknownMemberType]
        for tasks in (None, ["report"]):
            page = await backend.due_schedules("ns", until=10_000, tasks=tasks, limit=2)
            assert [(r.id, r.next_due) for r in page] == [("s0", 1_000), ("s3", 1_003)]
            page = await backend.due_schedules("ns", until=10_000, tasks=tasks, after=(1_003, "s3"), limit=2)
            assert [(r.id, r.next_due) for r in page] == [("s4", 1_004), ("s1", 9_000)]
        assert await raw.zcard(keys[7]) == 4, "the entries the meta contradicts are dropped"
    finally:
        await backend.close()
