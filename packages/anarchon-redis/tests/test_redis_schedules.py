"""Stored schedules on Redis and Valkey: the keys of a namespace's schedules, and the due index's keys
compared as numbers. (Every rule of the protocol: the conformance kit's tier, on a Cluster too.)"""

from __future__ import annotations

import pytest
import redis.asyncio
from redis.crc import key_slot

from anarchon.backends import ScheduleWrite
from anarchon_redis import RedisBackend
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
        assert keys == [f"{tag}:sched:{part}" for part in ("body", "due", "ids", "meta", "taskdue", "tasks",
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
