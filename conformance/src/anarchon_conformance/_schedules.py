"""The `schedules` tier: schedules kept in the store as data (`anarchon.backends.ScheduleBackend`).

One test per rule of the protocol's docstrings, each failure naming the rule; races of writes against
writes and against reads of the due index; and a comparison with the reference model, `MemoryBackend`,
over steps that hypothesis chooses.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anarchon.backends import (
    SCHEDULE_PARTITIONS,
    SCHEDULES_CHANGED,
    Capability,
    MemoryBackend,
    MemoryStore,
    ScheduleRecord,
    ScheduleWrite,
    ScheduleWriteResult,
    schedule_partition,
)

from ._contract import ODD_NAMES, tier
from ._kit import Kit
from ._support import BackendPool, StoreClock

__all__ = ["TestScheduleContract", "TestScheduleModel", "TestScheduleRaces"]

DUE = 1_900_000_000_000
"""A next due slot (epoch ms, in 2030): the store keeps it as given and never compares it with its clock."""
SPEC = '{"every": 60000, "offset": 0}'

COLLATION_IDS = [
    "B", "a", "b", "Z", "é", "e", "f", "ß", "a b", "a-b", "a_b", "a%b", "ab", "aB", "Ab",
    "\uffef", "😀", "\uff5a", "ジョブ", "z", "~", "a\u0301",
]
"""Ids whose code point order differs from a case-insensitive, locale-aware or UTF-16 order: 'B' < 'a',
'Z' < 'a', 'z' < 'é', '\\uffef' < '😀' (UTF-16 puts the surrogate pair first), 'a%b' < 'a-b' < 'a_b'."""

Expect = int | Literal["absent", "any"]


def sw(schedule_id: str, task: str = "task", *, next_due: int | None = DUE, spec: str = SPEC,
       args: str = "{}", options: str = "{}", paused: bool = False) -> ScheduleWrite:
    """A schedule as a client writes it, with plausible defaults."""
    return ScheduleWrite(schedule_id, task, spec, args, options, paused, next_due)


def fields(record: ScheduleRecord | None) -> tuple[Any, ...] | None:
    """What a client wrote of a record (the store's version and times aside)."""
    if record is None:
        return None
    return (record.id, record.task, record.spec, record.args, record.options, record.paused, record.next_due)


def written(write: ScheduleWrite) -> tuple[Any, ...]:
    """`fields` of the record `write` writes."""
    return (write.id, write.task, write.spec, write.args, write.options, write.paused, write.next_due)


def check_record(record: Any, what: str) -> ScheduleRecord:
    """A ScheduleRecord of the declared types, or a failure that names `what` returned it."""
    assert isinstance(record, ScheduleRecord), f"{what} returned {record!r}, not a ScheduleRecord"
    for name in ("id", "task", "spec", "args", "options"):
        value = getattr(record, name)
        assert isinstance(value, str), f"{what}: {name} {value!r} is not a str"
    assert isinstance(record.paused, bool), f"{what}: paused {record.paused!r} is not a bool"
    for name in ("version", "created_at", "updated_at"):
        value = getattr(record, name)
        assert _is_int(value), f"{what}: {name} {value!r} is not an int"
    assert record.next_due is None or _is_int(record.next_due), (
        f"{what}: next_due {record.next_due!r} is not an int or None")
    return record


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_result(result: Any, what: str) -> ScheduleWriteResult:
    """A ScheduleWriteResult whose record (when there is one) is a ScheduleRecord."""
    assert isinstance(result, ScheduleWriteResult), f"{what} returned {result!r}, not a ScheduleWriteResult"
    assert isinstance(result.written, bool), f"{what}: written {result.written!r} is not a bool"
    if result.written:
        assert result.record is not None, f"{what} wrote, so it must return the record written: {result!r}"
    if result.record is not None:
        check_record(result.record, what)
    return result


class Schedules:
    """One test's schedules on one client of the backend under test, every answer's shape checked."""

    def __init__(self, backend: Any, namespace: str) -> None:
        self.backend = backend
        self.namespace = namespace

    def on(self, backend: Any, namespace: str | None = None) -> Schedules:
        """The same calls through another client (or in another namespace)."""
        return Schedules(backend, self.namespace if namespace is None else namespace)

    async def put(self, write: ScheduleWrite, expect: Expect) -> ScheduleWriteResult:
        """`put_schedule`, checked."""
        result = await self.backend.put_schedule(self.namespace, write, expect=expect)
        return check_result(result, f"put_schedule({write.id!r}, expect={expect!r})")

    async def put_many(self, writes: Sequence[ScheduleWrite], expect: Literal["absent", "any"]
                       ) -> list[ScheduleWriteResult]:
        """`put_schedules`, checked: one answer per write."""
        raw: object = await self.backend.put_schedules(self.namespace, list(writes), expect=expect)
        what = f"put_schedules(<{len(writes)} writes>, expect={expect!r})"
        assert isinstance(raw, list) and len(cast(list[object], raw)) == len(writes), (
            f"{what} must answer a list of one result per write, {len(writes)}: got {raw!r:.300}")
        return [check_result(r, what) for r in cast(list[object], raw)]

    async def add(self, write: ScheduleWrite) -> ScheduleRecord:
        """Add a schedule that must be new; its record."""
        result = await self.put(write, "absent")
        assert result.written and result.record is not None, (
            f"put_schedule(expect='absent') of the new id {write.id!r} must write it: {result!r}")
        return result.record

    async def remove(self, schedule_id: str, expect: int | None = None) -> ScheduleWriteResult:
        """`remove_schedule`, checked."""
        result = await self.backend.remove_schedule(self.namespace, schedule_id, expect=expect)
        return check_result(result, f"remove_schedule({schedule_id!r}, expect={expect!r})")

    async def get(self, *ids: str) -> list[ScheduleRecord | None]:
        """`get_schedules`, checked."""
        raw: object = await self.backend.get_schedules(self.namespace, list(ids))
        assert isinstance(raw, list) and len(cast(list[object], raw)) == len(ids), (
            f"get_schedules of {len(ids)} ids must answer a list of {len(ids)}: {raw!r}")
        got = cast(list[ScheduleRecord | None], raw)
        for schedule_id, record in zip(ids, got, strict=True):
            if record is not None:
                check_record(record, "get_schedules")
                assert record.id == schedule_id, (
                    f"get_schedules answers in the order asked: asked {list(ids)!r}, got "
                    f"{[fields(r) for r in got]}")
        return got

    async def one(self, schedule_id: str) -> ScheduleRecord | None:
        """One schedule by id."""
        [record] = await self.get(schedule_id)
        return record

    async def page(self, *, after: str = "", limit: int = 1000, task: str | None = None,
                   prefix: str = "") -> list[ScheduleRecord]:
        """`list_schedules`, checked."""
        page: object = await self.backend.list_schedules(self.namespace, after=after, limit=limit, task=task,
                                                         prefix=prefix)
        assert isinstance(page, list), f"list_schedules returned {page!r}, not a list"
        return [check_record(r, "list_schedules") for r in cast(list[object], page)]

    async def ids(self, *, limit: int = 1000, **kw: Any) -> list[str]:
        """Every id `list_schedules` pages through, `limit` at a time."""
        out: list[str] = []
        after = kw.pop("after", "")
        while True:
            page = await self.page(after=after, limit=limit, **kw)
            out += [r.id for r in page]
            if len(page) < limit:
                return out
            after = page[-1].id

    async def due(self, until: int, after: tuple[int, str] | None = None, limit: int = 1000, *,
                  tasks: Sequence[str] | None = None, partitions: Sequence[int] | None = None
                  ) -> list[ScheduleRecord]:
        """`due_schedules`, checked (`tasks` and `partitions` passed only when given)."""
        more: dict[str, list[Any]] = {} if tasks is None else {"tasks": list(tasks)}
        if partitions is not None:
            more["partitions"] = list(partitions)
        page: object = await self.backend.due_schedules(self.namespace, until=until, after=after, limit=limit,
                                                        **more)
        assert isinstance(page, list), f"due_schedules returned {page!r}, not a list"
        return [check_record(r, "due_schedules") for r in cast(list[object], page)]

    async def all_due(self, until: int, limit: int = 1000) -> list[tuple[int, str]]:
        """Every (next_due, id) `due_schedules` pages through, `limit` at a time."""
        out: list[tuple[int, str]] = []
        after: tuple[int, str] | None = None
        while True:
            page = await self.due(until, after, limit)
            keys = [(r.next_due, r.id) for r in page]
            assert all(due is not None for due, _ in keys), f"due_schedules returned a NULL next_due: {keys}"
            out += [(due or 0, i) for due, i in keys]
            if len(page) < limit:
                return out
            after = out[-1]

    async def advance(self, moves: Sequence[tuple[str, int, int | None]]) -> None:
        """`advance_schedules`."""
        await self.backend.advance_schedules(self.namespace, list(moves))

    async def version(self) -> int:
        """`schedules_version`, checked."""
        counter = await self.backend.schedules_version(self.namespace)
        assert isinstance(counter, int) and not isinstance(counter, bool), (
            f"schedules_version returned {counter!r}, not an int")
        return counter


def on(kit: Kit, backend: Any = None, namespace: str | None = None) -> Schedules:
    """The schedule calls of a test, through `backend` (default: the kit's first client)."""
    return Schedules(backend or kit.backend, namespace or kit.namespace)


def real_now_ms() -> int:
    return time.time_ns() // 1_000_000


class TestScheduleContract:
    """`schedules`: add, upsert, compare-and-set, remove, get, list by id, the due index, advance and the
    change counter, as `ScheduleBackend`'s docstrings say."""

    pytestmark = tier("schedules")

    # -- put_schedule ---------------------------------------------------------------------------

    async def test_an_add_creates_the_record_at_the_counters_new_value(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        write = sw(ODD_NAMES[0], "report", args='{"customer": 7}', options='{"lease":"6000ms"}')
        before = real_now_ms()
        counter = await s.version()
        record = await s.add(write)
        assert fields(record) == written(write), (
            f"a created record holds every field of the write: wrote {write!r}, got {record!r}")
        assert record.version > counter and record.version == await s.version(), (
            f"the record's version is the namespace's change counter after the write that made it: "
            f"{record.version}, the counter {counter} before and {await s.version()} after")
        assert record.created_at == record.updated_at, (
            f"created: created_at = updated_at = the store's now; got {record.created_at} and "
            f"{record.updated_at}")
        assert abs(record.created_at - before) < 600_000, (
            f"created_at {record.created_at} is not the store's now in epoch ms (about {before})")
        other = on(anarchon_kit, await anarchon_kit.client())
        assert await other.one(write.id) == record, "another client reads back the record the add returned"

    async def test_an_add_of_a_taken_id_is_refused_with_the_current_record(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        first = await s.add(sw("job", "one"))
        again = await s.on(await anarchon_kit.client()).put(sw("job", "two", next_due=DUE + 1), "absent")
        assert not again.written, f"put_schedule(expect='absent') must refuse an id that is taken: {again!r}"
        assert again.record == first, (
            f"a refused add answers the current record: expected {first!r}, got {again.record!r}")
        assert await s.one("job") == first, "a refused add changes nothing"

    async def test_an_upsert_creates_or_replaces_whatever_the_version(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        created = await s.put(sw("job", "one"), "any")
        assert created.written and created.record is not None, (
            f"put_schedule(expect='any') of a new id creates it: {created!r}")
        last = created.record
        await s.add(sw("other"))  # (another schedule's write moves the counter too)
        for n in (2, 3):
            write = sw("job", f"task-{n}", next_due=None if n == 3 else DUE + n, spec='{"at": 1}',
                       args=f'{{"n": {n}}}', options='{"overlap":"allow"}', paused=n == 2)
            result = await s.put(write, "any")
            assert result.written and result.record is not None, f"an upsert always writes: {result!r}"
            assert result.record.version > last.version and result.record.version == await s.version(), (
                f"a replaced schedule's version is the change counter after the write, so it grows: "
                f"{last.version} became {result.record.version}, the counter is {await s.version()}")
            assert fields(result.record) == written(write), (
                f"every field of the write replaces the old one: wrote {write!r}, got {result.record!r}")
            assert result.record.created_at == created.record.created_at, (
                f"a replacement keeps created_at: {created.record.created_at} became "
                f"{result.record.created_at}")
            assert result.record.updated_at >= created.record.created_at, (
                f"updated_at is the store's now of the replacement: {result.record!r}")
            assert await s.one("job") == result.record
            last = result.record

    async def test_compare_and_set_writes_only_the_expected_version(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        v1 = await s.add(sw("job", "one"))
        await asyncio.sleep(0.01)  # (a store time that moves: updated_at may then differ from created_at)
        v2 = await s.put(sw("job", "two", next_due=DUE + 5), v1.version)
        assert v2.written and v2.record is not None, (
            f"put_schedule(expect={v1.version}) of version {v1.version} must write: {v2!r}")
        assert (v2.record.task, v2.record.next_due) == ("two", DUE + 5), v2
        assert v2.record.version > v1.version and v2.record.version == await s.version(), (
            f"a compare-and-set writes the counter's new value as the version: {v2.record!r}")
        assert v2.record.created_at == v1.created_at, "a compare-and-set keeps created_at"
        assert v2.record.updated_at >= v1.updated_at, "updated_at is the store's now of the write"
        for stale in (v1.version, v2.record.version + 1, 0):
            refused = await s.put(sw("job", "three"), stale)
            assert not refused.written, (
                f"put_schedule(expect={stale}) of version {v2.record.version} must be refused "
                f"(compare-and-set): {refused!r}")
            assert refused.record == v2.record, (
                f"a refused compare-and-set answers the current record: {refused.record!r}, not "
                f"{v2.record!r}")
        missing = await s.put(sw("nothing-here"), v2.record.version)
        assert not missing.written and missing.record is None, (
            f"a compare-and-set of an id that does not exist is refused with None: {missing!r}")
        assert await s.one("nothing-here") is None, "a refused compare-and-set must not create the schedule"
        assert await s.one("job") == v2.record

    async def test_a_schedule_added_again_never_has_a_version_it_had(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        old = await s.add(sw("job", next_due=DUE))
        await s.remove("job")
        new = await s.add(sw("job", "again", next_due=DUE))
        assert new.version > old.version, (
            f"a schedule removed and added again never has a version it had before: {old.version} then "
            f"{new.version}")
        refused = await s.put(sw("job", "meant for the old one"), old.version)
        assert not refused.written and refused.record == new, (
            f"a compare-and-set meant for the removed schedule must not touch the new one: {refused!r}")
        await s.advance([("job", old.version, DUE + 60_000)])
        assert await s.one("job") == new, "a move of the due index meant for the removed schedule is ignored"
        gone = await s.remove("job", expect=old.version)
        assert not gone.written and gone.record == new, (
            f"a removal meant for the removed schedule must not remove the new one: {gone!r}")

    async def test_every_field_round_trips_exactly(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        big = '{"blob": "' + "x" * 65_000 + '"}'
        writes = [
            sw(name, task=name, spec='{"cron": "0 9 * * 1-5", "timezone": "Europe/Athens", '
               '"dst_gap": "next", "dst_fold": "first"}',
               args='{"k": "ジョブ \\"q\\" \\\\ 😀", "n": [1, 2.5, null, true]}',
               options='{ "overlap" : "skip" ,"timeout":"1000ms"}', paused=i % 2 == 0,
               next_due=(None, 0, 1, DUE, 253_402_300_799_999)[i])
            for i, name in enumerate(ODD_NAMES)
        ]
        writes.append(sw("big-args", args=big))
        for write in writes:
            await s.add(write)
        got = await s.on(await anarchon_kit.client()).get(*[w.id for w in writes])
        for write, record in zip(writes, got, strict=True):
            assert fields(record) == written(write), (
                f"the store keeps every field as written (text byte for byte, JSON not reformatted): wrote "
                f"{written(write)!r:.300}, read {fields(record)!r:.300}")

    async def test_created_and_updated_at_are_store_time(
            self, anarchon_kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
        """Move this process's wall clock by an hour: the times still come from the store."""
        s = on(anarchon_kit)
        real_time, real_time_ns = time.time, time.time_ns
        real = real_now_ms()
        for offset_s in (3600, -3600):
            monkeypatch.setattr(time, "time", lambda o=offset_s: real_time() + o)
            monkeypatch.setattr(time, "time_ns", lambda o=offset_s: real_time_ns() + o * 1_000_000_000)
            created = await s.add(sw(f"job{offset_s}"))
            updated = await s.put(sw(f"job{offset_s}", "two"), created.version)
            assert updated.record is not None
            times = (("created_at", created.created_at), ("updated_at", updated.record.updated_at))
            for name, value in times:
                assert abs(value - real) < 600_000, (
                    f"{name} must be the store's clock, not the client's: the client's clock ran "
                    f"{offset_s:+} s off and {name} is {value}, the store's now about {real}")

    # -- remove_schedule ------------------------------------------------------------------------

    async def test_a_removal_answers_the_removed_record(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        record = await s.add(sw("job"))
        gone = await s.remove("job")
        assert gone.written and gone.record == record, (
            f"remove_schedule answers the removed record: expected {record!r}, got {gone!r}")
        assert await s.one("job") is None, "a removed schedule is gone"
        assert await s.all_due(DUE) == [], "a removed schedule leaves the due index"
        again = await s.remove("job")
        assert not again.written and again.record is None, (
            f"a removal of an id that does not exist is refused with None: {again!r}")
        assert (await s.add(sw("job", "new"))).task == "new", "an id removed can be added again"

    async def test_a_removal_with_expect_compares_the_version(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        v1 = await s.add(sw("job"))
        v2 = await s.put(sw("job", "two"), v1.version)
        assert v2.record is not None
        refused = await s.remove("job", expect=v1.version)
        assert not refused.written and refused.record == v2.record, (
            f"remove_schedule(expect={v1.version}) of version {v2.record.version} is refused with the "
            f"current record: {refused!r}")
        assert await s.one("job") == v2.record, "a refused removal changes nothing"
        gone = await s.remove("job", expect=v2.record.version)
        assert gone.written and gone.record == v2.record, (
            f"remove_schedule(expect={v2.record.version}) of that version removes: {gone!r}")
        missing = await s.remove("job", expect=v2.record.version)
        assert not missing.written and missing.record is None, (
            f"a removal with expect of an id that does not exist is refused with None: {missing!r}")

    async def test_a_removal_leaves_the_jobs_records_alone(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        s = on(kit)
        await s.add(sw("job"))
        lease = await kit.won("job", "a")
        if Capability.CONTROL in kit.capabilities:
            await kit.backend.set_control(kit.namespace, "job", paused=True)
        await s.remove("job")
        if Capability.INSPECT in kit.capabilities:
            state = await kit.backend.inspect(kit.namespace, "job")
            assert state is not None and state.token == lease.token, (
                "removing a schedule leaves its job's lease records alone (ForgetBackend.forget deletes "
                "them)")
        if Capability.CONTROL in kit.capabilities:
            assert "job" in await kit.backend.controls(kit.namespace), (
                "removing a schedule leaves its job's controls alone (ForgetBackend.forget deletes them)")
        assert await kit.renew(lease) is not None, "removing a schedule leaves its running lease alone"

    # -- get_schedules --------------------------------------------------------------------------

    async def test_get_answers_in_the_order_asked_with_none_for_missing(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        a, b = await s.add(sw("a")), await s.add(sw("b", "other"))
        got = await s.get("b", "missing", "a", "b", "A")
        assert got == [b, None, a, b, None], (
            f"get_schedules answers in the order asked, None where there is none: {[fields(r) for r in got]}")
        assert await s.get() == [], "get_schedules of no ids answers []"
        many = [f"id-{i:04d}" for i in range(300)]
        for schedule_id in many[::50]:
            await s.add(sw(schedule_id))
        got = await s.get(*many)
        assert [r is not None for r in got] == [i % 50 == 0 for i in range(300)], "300 ids in one call"

    async def test_schedules_are_namespaced(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        s = on(kit)
        others = [on(kit, namespace=kit.namespace + sep + "x") for sep in (":", "-", "}", " ")]
        for other in others:
            await other.add(sw("job", "elsewhere", next_due=DUE - 1))
            await other.add(sw("x:job", "elsewhere", next_due=DUE - 1))
        assert await s.version() == 0, "schedules_version is 0 before any write in a namespace"
        await s.add(sw("job"))
        assert await s.ids() == ["job"], "list_schedules reads only its namespace"
        assert [r.task for r in await s.due(DUE)] == ["task"], "due_schedules reads only its namespace"
        assert (await s.one("job") or sw("?")).task == "task", "get_schedules reads only its namespace"
        joined = on(kit, namespace=kit.namespace + ":x")
        assert (await joined.one("job") or sw("?")).task == "elsewhere", (
            "namespace 'ns:x' with id 'job' and namespace 'ns' with id 'x:job' must not collide")

    # -- list_schedules -------------------------------------------------------------------------

    async def test_a_list_pages_by_id_in_code_point_order(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        for i, schedule_id in enumerate(COLLATION_IDS):
            await s.add(sw(schedule_id, next_due=DUE + i))
        expected = sorted(set(COLLATION_IDS))
        for limit in (1, 3, 1000):
            got = await s.ids(limit=limit)
            assert got == expected, (
                f"list_schedules pages by id in code point order (limit {limit}): expected {expected}, "
                f"got {got}")
        page = await s.page(limit=4)
        assert [r.id for r in page] == expected[:4], "a page holds at most `limit` schedules, the first ones"
        assert await s.page(limit=0) == [], "a limit of 0 answers no schedule"

    async def test_a_list_starts_after_the_cursor(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        for schedule_id in COLLATION_IDS:
            await s.add(sw(schedule_id))
        expected = sorted(set(COLLATION_IDS))
        for after in ("a", "a b", "aa", "é", "😀", "\U0010ffff", "A"):
            got = [r.id for r in await s.page(after=after)]
            assert got == [i for i in expected if i > after], (
                f"list_schedules(after={after!r}) answers only ids greater than it (exclusive, code point "
                f"order; the cursor need not exist): got {got}")

    async def test_a_list_filters_by_prefix_and_task(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        ids = ["a", "a_b", "a%b", "ab", "a\\b", "a_", "a'b", "A_b", "b_a", "a_bc", "a_b😀", "ä_b", "a",
               "a*b", "a[b]", "t_1", "t_2"]
        tasks = {schedule_id: ("odd" if i % 2 else "even") for i, schedule_id in enumerate(ids)}
        for schedule_id in dict.fromkeys(ids):
            await s.add(sw(schedule_id, tasks[schedule_id]))
        unique = sorted(set(ids))
        for prefix in ("", "a", "a_", "a%", "a\\", "a'", "a*", "a[", "a_b", "ä", "z", "A_b"):
            for task in (None, "odd", "even", "none"):
                expected = [i for i in unique if i.startswith(prefix) and task in (None, tasks[i])]
                for limit in (2, 1000):
                    got = await s.ids(limit=limit, prefix=prefix, task=task)
                    assert got == expected, (
                        f"list_schedules(prefix={prefix!r}, task={task!r}) answers the ids that start "
                        f"with the prefix (compared exactly: no LIKE wildcards, no case folding) and run "
                        f"that task: "
                        f"expected {expected}, got {got}")
        got = await s.ids(prefix="a_", task="even", after="a_")
        assert got == [i for i in unique if i.startswith("a_") and i > "a_" and tasks[i] == "even"], (
            f"list_schedules with after, prefix and task together: {got}")

    async def test_paging_is_stable_while_schedules_change(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        writer = s.on(await anarchon_kit.client())
        ids = [f"s{i:03d}" for i in range(0, 60, 2)]
        for schedule_id in ids:
            await s.add(sw(schedule_id))
        seen: list[str] = []
        removed: set[str] = set()
        after, step = "", 0
        while True:
            page = await s.page(after=after, limit=4)
            seen += [r.id for r in page]
            if len(page) < 4:
                break
            after = page[-1].id
            step += 1
            # Between pages: adds before and after the cursor, removals of seen and unseen ids, updates.
            for schedule_id in (f"s{step * 7 % 60:03d}x", f"r{step:03d}", f"t{step:03d}"):
                await writer.put(sw(schedule_id), "any")
            for schedule_id in (ids[(step * 5) % len(ids)], ids[-step]):
                if schedule_id not in removed:
                    await writer.remove(schedule_id)
                    removed.add(schedule_id)
            await writer.put(sw(ids[step % len(ids)], "changed"), "any")
        assert seen == sorted(seen) and len(seen) == len(set(seen)), (
            f"paging from the last id of each page never returns a schedule twice: {seen}")
        missing = [i for i in ids if i not in removed and i not in seen]
        assert not missing, (
            f"paging from the last id of each page never skips a schedule that exists from the first page to "
            f"the last, while others are written meanwhile: missed {missing}")

    # -- due_schedules --------------------------------------------------------------------------

    async def test_the_due_index_is_ordered_by_next_due_then_id(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        expected: list[tuple[int, str]] = []
        for i, schedule_id in enumerate(COLLATION_IDS):
            if schedule_id in {k for _, k in expected}:
                continue
            due = DUE + (i % 3) * 1000
            await s.add(sw(schedule_id, next_due=due))
            expected.append((due, schedule_id))
        expected.sort()
        for limit in (1, 4, 1000):
            got = await s.all_due(DUE + 10_000, limit=limit)
            assert got == expected, (
                f"due_schedules is ordered by (next_due, id), ids in code point order (limit {limit}): "
                f"expected {expected}, got {got}")

    async def test_the_due_index_reads_up_to_until_inclusive(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        for schedule_id, due in (("early", DUE - 60_000), ("at", DUE), ("late", DUE + 1), ("never", None),
                                 ("zero", 0)):
            await s.add(sw(schedule_id, next_due=due))
        got = [(r.next_due, r.id) for r in await s.due(DUE)]
        assert got == [(0, "zero"), (DUE - 60_000, "early"), (DUE, "at")], (
            f"due_schedules(until={DUE}) answers the schedules whose next_due is set and at most until "
            f"(inclusive), never one without a next_due: got {got}")
        assert [r.id for r in await s.due(DUE - 1)] == ["zero", "early"], "next_due > until is not due"
        assert await s.due(-1) == [], "nothing is due before every next_due"
        page = await s.due(DUE, limit=2)
        assert [r.id for r in page] == ["zero", "early"], "a page of the due index holds at most `limit`"
        record = page[0]
        assert record == await s.one("zero"), "the due index answers whole records, as get_schedules does"

    async def test_the_due_index_starts_after_the_cursor(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        keys = [(DUE, "b"), (DUE, "c"), (DUE, "bb"), (DUE + 1, "a"), (DUE + 1, "d"), (DUE + 2, "a0")]
        for due, schedule_id in keys:
            await s.add(sw(schedule_id, next_due=due))
        keys.sort()
        for after in [(DUE, "b"), (DUE, "ba"), (DUE, ""), (DUE, "z"), (DUE + 1, "a"), (DUE - 5, "zz"),
                      (DUE + 2, "a0")]:
            got = [(r.next_due, r.id) for r in await s.due(DUE + 10, after=after)]
            assert got == [k for k in keys if k > after], (
                f"due_schedules(after={after}) answers only (next_due, id) greater than after "
                f"(exclusive; the cursor need not exist): got {got}")

    async def test_the_due_index_follows_every_write(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        a = await s.add(sw("a", next_due=DUE))
        await s.add(sw("b", next_due=DUE + 5))
        await s.put(sw("a", next_due=DUE + 10), a.version)
        assert await s.all_due(DUE + 100) == [(DUE + 5, "b"), (DUE + 10, "a")], "an update moves the index"
        await s.put(sw("b", next_due=None), "any")
        assert await s.all_due(DUE + 100) == [(DUE + 10, "a")], "a write of next_due None leaves the index"
        b = await s.put(sw("b", next_due=DUE - 1), "any")
        assert await s.all_due(DUE + 100) == [(DUE - 1, "b"), (DUE + 10, "a")], "a write may move it back"
        await s.remove("a")
        assert await s.all_due(DUE + 100) == [(DUE - 1, "b")], "a removal leaves the index"
        assert b.record is not None
        refused = await s.put(sw("b", next_due=DUE - 100), b.record.version + 1)
        assert not refused.written
        assert await s.all_due(DUE + 100) == [(DUE - 1, "b")], "a refused write leaves the index alone"

    async def test_the_due_index_reads_only_the_tasks_asked(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        keys: dict[str, list[tuple[int, str]]] = {"t1": [], "t2": [], "t3": []}
        for i, schedule_id in enumerate(COLLATION_IDS):
            task, due = ("t1", "t2", "t3")[i % 3], DUE + (i % 4) * 1000
            await s.add(sw(schedule_id, task, next_due=None if i % 7 == 6 else due))
            if i % 7 != 6:
                keys[task].append((due, schedule_id))
        await s.add(sw("late", "t1", next_due=DUE + 10_000))
        for tasks in (["t1"], ["t1", "t3"], ["t3", "t2", "t1"], ["t2", "t2"], ["none"], []):
            expected = sorted(k for t in set(tasks) for k in keys.get(t, []))
            for limit in (1, 3, 1000):
                got: list[tuple[int, str]] = []
                after: tuple[int, str] | None = None
                while True:
                    page = await s.due(DUE + 5_000, after, limit, tasks=tasks)
                    assert all(r.task in tasks for r in page), (
                        f"due_schedules(tasks={tasks}) reads the due schedules of those tasks only: "
                        f"{[(r.id, r.task) for r in page]}")
                    got += [(r.next_due or 0, r.id) for r in page]
                    if len(page) < limit:
                        break
                    after = got[-1]
                assert got == expected, (
                    f"due_schedules(tasks={tasks}) is the due index of those tasks, ordered by (next_due, "
                    f"id) across them, at most until, paged from any cursor (limit {limit}): expected "
                    f"{expected}, got {got}")

    async def test_the_due_index_reads_only_the_partitions_asked(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        ids = [f"p{i}" for i in range(160)] + COLLATION_IDS
        keys: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for i, schedule_id in enumerate(ids):
            task, due = ("t1", "t2")[i % 2], DUE + (i % 5) * 1000
            await s.add(sw(schedule_id, task, next_due=due))
            keys.setdefault((task, schedule_partition(schedule_id)), []).append((due, schedule_id))
        present = sorted({part for _, part in keys})
        assert len(present) > SCHEDULE_PARTITIONS // 2, "the ids spread over the partitions"
        cases: list[tuple[list[str] | None, list[int]]] = [
            (None, present[:1]), (None, present[::3]), (["t1"], present[1::2]), (["t2", "t1"], present[:5]),
            (None, list(range(SCHEDULE_PARTITIONS))), (["t1"], []), (None, [SCHEDULE_PARTITIONS, -1]),
        ]
        for tasks, parts in cases:
            expected = sorted(k for (t, part), ks in keys.items() for k in ks
                              if part in parts and (tasks is None or t in tasks) and k[0] <= DUE + 3_000)
            for limit in (1, 7, 1000):
                got: list[tuple[int, str]] = []
                after: tuple[int, str] | None = None
                while True:
                    page = await s.due(DUE + 3_000, after, limit, tasks=tasks, partitions=parts)
                    wrong = [(r.id, schedule_partition(r.id)) for r in page
                             if schedule_partition(r.id) not in parts]
                    assert not wrong, (
                        f"due_schedules(partitions={parts}) reads the schedules of those partitions only "
                        f"(schedule_partition of each id): {wrong}")
                    got += [(r.next_due or 0, r.id) for r in page]
                    if len(page) < limit:
                        break
                    after = got[-1]
                assert got == expected, (
                    f"due_schedules(tasks={tasks}, partitions={parts}) is the due index of those partitions, "
                    f"ordered by (next_due, id) across them, at most until, paged from any cursor "
                    f"(limit {limit}): expected {expected}, got {got}")

    # -- advance_schedules ----------------------------------------------------------------------

    async def test_advance_moves_only_forward(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        before = await s.add(sw("job", next_due=DUE))
        v = before.version
        await s.advance([("job", v, DUE - 1)])
        assert (await s.one("job") or before).next_due == DUE, (
            "advance_schedules moves only forward: a smaller next_due must not replace a larger one")
        await s.advance([("job", v, DUE + 60_000)])
        after = await s.one("job")
        assert after is not None and after.next_due == DUE + 60_000, (
            f"advance_schedules moves a schedule forward in the due index: {after!r}")
        assert replace(after, next_due=DUE) == before, (
            f"an advance changes nothing but next_due (no version, no updated_at): {before!r} became "
            f"{after!r}")
        assert await s.all_due(DUE + 60_000) == [(DUE + 60_000, "job")], "the due index moves with it"
        await s.advance([("job", v, DUE + 120_000), ("job", v, DUE + 90_000)])
        assert (await s.one("job") or before).next_due == DUE + 120_000, (
            "each move of one call is judged alone, only forward: the larger of two moves stays")
        await s.advance([])

    async def test_advance_needs_the_version_it_read(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        v1 = await s.add(sw("job", next_due=DUE))
        v2 = await s.put(sw("job", next_due=DUE + 5), v1.version)
        assert v2.record is not None
        await s.advance([("job", v1.version, DUE + 60_000)])
        assert (await s.one("job") or sw("?")).next_due == DUE + 5, (
            "advance_schedules moves a schedule only while it still has the version given: a write since "
            "then set its own next due")
        await s.advance([("job", v2.record.version, DUE + 60_000), ("missing", v2.record.version, DUE)])
        assert (await s.one("job") or sw("?")).next_due == DUE + 60_000
        assert await s.one("missing") is None, "an advance of an id that does not exist creates nothing"

    async def test_advance_to_none_ends_the_schedules_place_in_the_index(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        job = await s.add(sw("job", next_due=DUE))
        other = await s.add(sw("other", next_due=DUE))
        await s.advance([("job", job.version, None), ("other", other.version, DUE + 1)])
        assert (await s.one("job") or sw("?", next_due=0)).next_due is None, (
            "advance_schedules with next_due None (no slot left) replaces any next_due")
        assert await s.all_due(DUE + 100) == [(DUE + 1, "other")], "a schedule without next_due is never due"
        await s.advance([("job", job.version, DUE + 50)])
        assert (await s.one("job") or sw("?", next_due=0)).next_due is None, (
            "advance_schedules moves only forward, and None is the end: a set next_due must not replace it")
        await s.put(sw("job", next_due=DUE + 7), job.version)
        assert await s.all_due(DUE + 100) == [(DUE + 1, "other"), (DUE + 7, "job")], "a write sets it again"

    # -- the change counter ---------------------------------------------------------------------

    async def test_the_change_counter_grows_with_every_write_and_removal_only(
            self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        reader = s.on(await anarchon_kit.client())
        assert await reader.version() == 0, "schedules_version is 0 before any write"
        seen = [0]

        async def grew(what: str) -> int:
            counter = await reader.version()
            assert counter > seen[-1], (
                f"schedules_version must be larger after each write or removal: {seen[-1]} before {what}, "
                f"{counter} after")
            seen.append(counter)
            return counter

        a = await s.add(sw("a"))
        assert a.version == await grew("an add")
        a = (await s.put(sw("a", "x"), "any")).record or a
        assert a.version == await grew("an upsert")
        a = (await s.put(sw("a", "y"), a.version)).record or a
        assert a.version == await grew("a compare-and-set")
        b = (await s.put(sw("b"), "any")).record
        assert b is not None and b.version == await grew("an upsert that creates")
        await s.advance([("a", a.version, DUE + 1), ("b", b.version, None)])
        assert await reader.version() == seen[-1], "advance_schedules must not bump the change counter"
        await s.remove("b")
        await grew("a removal")
        await s.remove("a", expect=a.version)
        await grew("a removal with expect")

    async def test_a_write_is_pushed_where_the_backend_notifies(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        if Capability.NOTIFY not in kit.capabilities:
            pytest.skip(f"{type(kit.backend).__name__} lacks 'notify': replicas poll the change counter")
        listener = await kit.client()
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

        def heard(job: str, slot: int) -> None:
            got.put_nowait((job, slot))

        await listener.subscribe(kit.namespace, heard)
        await asyncio.sleep(0.1)  # let a subscription settle on stores that confirm it asynchronously
        s = on(kit)
        await on(kit, namespace=kit.namespace + "-x").add(sw("elsewhere"))
        steps: list[tuple[str, Any]] = [
            ("an add", lambda: s.add(sw(ODD_NAMES[0]))),
            ("an upsert", lambda: s.put(sw(ODD_NAMES[0], "two"), "any")),
            ("a compare-and-set", lambda: s.put(sw(ODD_NAMES[0], "three"), 2)),
            ("a removal", lambda: s.remove(ODD_NAMES[0])),
        ]
        for what, step in steps:
            await step()
            try:
                pushed = await asyncio.wait_for(got.get(), timeout=5)
            except TimeoutError:
                pytest.fail(f"a backend with 'notify' must push (id, SCHEDULES_CHANGED) to the namespace's "
                            f"subscribers after {what}: nothing came within 5 s")
            assert pushed != ("elsewhere", SCHEDULES_CHANGED), "a write in another namespace was pushed"
            assert pushed == (ODD_NAMES[0], SCHEDULES_CHANGED), (
                f"a write is pushed as (id, SCHEDULES_CHANGED={SCHEDULES_CHANGED}): got {pushed!r} "
                f"after {what}")

    # -- put_schedules ---------------------------------------------------------------------------

    async def test_a_batch_judges_each_write_alone_and_answers_in_order(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        # More writes than a chunk of any driver here, ids out of order, every seventh already taken.
        count = 2_500
        ids = [f"b-{(i * 7919) % count:05d}" for i in range(count)]
        taken = {schedule_id: await s.add(sw(schedule_id, "old")) for schedule_id in ids[::7]}
        writes = [sw(schedule_id, f"task-{i}", next_due=DUE + i, args=f'{{"i": {i}}}', paused=i % 3 == 0)
                  for i, schedule_id in enumerate(ids)]
        counter = await s.version()
        results = await s.put_many(writes, "absent")
        last = counter
        for i, (write, result) in enumerate(zip(writes, results, strict=True)):
            if write.id in taken:
                assert not result.written and result.record == taken[write.id], (
                    f"a batch's add of a taken id is refused with the current record, as put_schedule's: "
                    f"answer {i} ({write.id!r}) is {result!r}")
                continue
            assert result.written and result.record is not None, (
                f"a batch judges each write alone, so one refusal stops nothing: answer {i} ({write.id!r}) "
                f"is {result!r}")
            assert fields(result.record) == written(write), (
                f"put_schedules answers in the order of the writes: answer {i} should hold "
                f"{written(write)!r}, not {fields(result.record)!r}")
            assert result.record.version > last, (
                f"each write of a batch is a write: versions grow in the order of the writes, above the "
                f"counter before the batch ({counter}): answer {i} has {result.record.version} after {last}")
            assert result.record.created_at == result.record.updated_at, (
                f"a created record: created_at = updated_at, as put_schedule's: {result.record!r}")
            last = result.record.version
        assert await s.version() == last, (
            f"the counter after a batch is the last written record's version, {last}: it is "
            f"{await s.version()}")
        got = await s.on(await anarchon_kit.client()).get(*ids)
        for write, result, record in zip(writes, results, got, strict=True):
            assert record == result.record, (
                f"another client reads what the batch answered for {write.id!r}: {record!r}, not "
                f"{result.record!r}")
        assert len(await s.all_due(DUE + count)) == count, "every schedule of the batch is in the due index"

    async def test_a_batch_upsert_creates_or_replaces_each(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        old = await s.add(sw("m", "old", next_due=DUE))
        writes = [sw("z", "new"), sw("m", "new", next_due=None, options='{"overlap":"allow"}'),
                  sw("a", "new")]
        counter = await s.version()
        results = await s.put_many(writes, "any")
        assert all(r.written and r.record is not None for r in results), (
            f"a batch upsert writes every schedule: {results!r}")
        records = [r.record for r in results if r.record is not None]
        assert [fields(r) for r in records] == [written(w) for w in writes], (
            f"put_schedules(expect='any') answers in the order of the writes, each as written: "
            f"{[fields(r) for r in records]!r}")
        versions = [r.version for r in records]
        assert versions == sorted(versions) and len(set(versions)) == 3 and versions[0] > counter, (
            f"each write of a batch bumps the counter: versions grow in order above {counter}: {versions}")
        assert await s.version() == versions[-1], "the counter after a batch is its last version"
        assert records[1].created_at == old.created_at and records[1].version > old.version, (
            f"a replaced schedule keeps created_at and gets a larger version, as put_schedule's: "
            f"{old!r} became {records[1]!r}")
        assert await s.all_due(DUE) == [(DUE, "a"), (DUE, "z")], (
            "a replacement takes the old next due out of the due index")

    async def test_a_batch_with_a_repeated_id_writes_nothing(self, anarchon_kit: Kit) -> None:
        s = on(anarchon_kit)
        await s.add(sw("first"))
        counter = await s.version()
        try:
            await s.backend.put_schedules(s.namespace, [sw("a"), sw("b"), sw("a", "again")], expect="any")
        except ValueError:
            pass
        else:
            pytest.fail("a batch that repeats an id is a ValueError, before anything is written: "
                        "put_schedules accepted [a, b, a]")
        with pytest.raises(TypeError, match="expect"):
            await s.backend.put_schedules(s.namespace, [sw("a")], expect=counter)
        assert await s.put_many([], "absent") == [], "an empty batch answers []"
        assert await s.get("a", "b") == [None, None], (
            "a batch that repeats an id (or has an expect that is no 'absent' or 'any') writes nothing")
        assert await s.version() == counter, "a batch refused whole, or empty, bumps nothing"

    async def test_a_batch_is_pushed_where_the_backend_notifies(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        if Capability.NOTIFY not in kit.capabilities:
            pytest.skip(f"{type(kit.backend).__name__} lacks 'notify': replicas poll the change counter")
        listener = await kit.client()
        got: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
        await listener.subscribe(kit.namespace, lambda job, slot: got.put_nowait((job, slot)))
        await asyncio.sleep(0.1)  # let a subscription settle on stores that confirm it asynchronously
        s = on(kit)
        await s.add(sw("taken"))
        await asyncio.wait_for(got.get(), timeout=5)
        ids = ["taken", ODD_NAMES[0], ODD_NAMES[1]]
        await s.put_many([sw(i) for i in ids], "absent")
        try:
            pushed = await asyncio.wait_for(got.get(), timeout=5)
        except TimeoutError:
            pytest.fail("a backend with 'notify' must push (id, SCHEDULES_CHANGED) at least once after a "
                        "batch that wrote: nothing came within 5 s")
        assert pushed in [(ODD_NAMES[0], SCHEDULES_CHANGED), (ODD_NAMES[1], SCHEDULES_CHANGED)], (
            f"a batch's push names one of the ids it wrote: got {pushed!r}")

    async def test_namespaces_lists_a_namespace_that_holds_schedules(self, anarchon_kit: Kit) -> None:
        kit = anarchon_kit
        if Capability.FORGET not in kit.capabilities:
            pytest.skip(f"{type(kit.backend).__name__} lacks 'forget': it lists no namespaces")
        s = on(kit, namespace=kit.namespace + "-only-schedules")
        await s.add(sw("job"))
        assert s.namespace in await kit.backend.namespaces(), (
            "namespaces() lists every namespace in which the store keeps anything: a stored schedule too")
        await s.remove("job")
        assert s.namespace not in await kit.backend.namespaces(), (
            "a namespace whose last schedule was removed, and that holds nothing else, is not listed")


# -- races ------------------------------------------------------------------------------------------


class TestScheduleRaces:
    """Writes that race, each on its own connection: compare-and-set and add-if-absent have one winner,
    upserts lose no write, and a read of the due index never sees half a write."""

    pytestmark = tier("schedules")

    CLIENTS = 8

    async def _clients(self, kit: Kit) -> list[Schedules]:
        return [on(kit, kit.backend if i == 0 else await kit.client()) for i in range(self.CLIENTS)]

    async def test_race_concurrent_adds_of_one_id_have_one_winner(self, anarchon_kit: Kit) -> None:
        clients = await self._clients(anarchon_kit)
        for round_ in range(10):
            schedule_id = f"job-{round_}"
            results = await asyncio.gather(*(
                c.put(sw(schedule_id, f"task-{i}", next_due=DUE + i), "absent")
                for i, c in enumerate(clients)))
            winners = [r.record for r in results if r.written]
            assert len(winners) == 1, (
                f"concurrent put_schedule(expect='absent') of one id: exactly one must win, "
                f"{len(winners)} did: {[fields(w) for w in winners]}")
            winner = winners[0]
            for r in results:
                if not r.written:
                    assert r.record == winner, (
                        f"a refused add answers the current record, the winner's: {r.record!r}, not "
                        f"{winner!r}")
            assert await clients[0].one(schedule_id) == winner, "the store keeps the winner's write"

    async def test_race_concurrent_updates_of_one_version_have_one_winner(self, anarchon_kit: Kit) -> None:
        clients = await self._clients(anarchon_kit)
        current = await clients[0].add(sw("job"))
        for round_ in range(10):
            version = current.version
            results = await asyncio.gather(*(
                c.put(sw("job", f"task-{round_}-{i}", next_due=DUE + i), version)
                for i, c in enumerate(clients)))
            winners = [r.record for r in results if r.written]
            assert len(winners) == 1, (
                f"concurrent put_schedule(expect={version}): a compare-and-set has exactly one winner, "
                f"{len(winners)} won: {[fields(w) for w in winners]}")
            winner = winners[0]
            assert winner is not None and winner.version > version
            assert all(r.record == winner for r in results if not r.written), (
                "a refused compare-and-set answers the current record, the winner's")
            current = winner

    async def test_race_concurrent_upserts_lose_no_write(self, anarchon_kit: Kit) -> None:
        clients = await self._clients(anarchon_kit)
        counter = await clients[0].version()
        results = await asyncio.gather(*(
            c.put(sw("job", f"task-{i}-{k}"), "any") for k in range(3) for i, c in enumerate(clients)))
        assert all(r.written for r in results), "an upsert always writes"
        versions = sorted(r.record.version for r in results if r.record is not None)
        assert len(set(versions)) == len(versions) and versions[0] > counter, (
            f"concurrent upserts: each write's version is the counter's new value, bumped atomically (a "
            f"lost update shows as a version given twice): {versions}")
        last = max((r.record for r in results if r.record is not None), key=lambda r: r.version)
        assert await clients[0].one("job") == last, "the store keeps the last write, the newest version"
        assert await clients[0].version() >= counter + len(results), (
            f"schedules_version must be larger after each of {len(results)} upserts: {counter} became "
            f"{await clients[0].version()}")

    async def test_race_concurrent_batches_of_adds_have_one_winner_per_id(self, anarchon_kit: Kit) -> None:
        clients = await self._clients(anarchon_kit)
        ids = [f"job-{n:03d}" for n in range(60)]
        counter = await clients[0].version()
        # Each client adds an overlapping window of the ids, in its own order.
        windows = [ids[i * 6:i * 6 + 24] for i in range(len(clients))]
        batches = [[sw(j, f"task-{i}") for j in (w[::-1] if i % 2 else w)] for i, w in enumerate(windows)]
        answers = await asyncio.gather(*(c.put_many(b, "absent")
                                         for c, b in zip(clients, batches, strict=True)))
        stored = dict(zip(ids, await clients[0].get(*ids), strict=True))
        wins: dict[str, int] = {}
        for batch, results in zip(batches, answers, strict=True):
            for write, result in zip(batch, results, strict=True):
                if result.written:
                    wins[write.id] = wins.get(write.id, 0) + 1
                assert result.record is not None and result.record == stored[write.id], (
                    f"concurrent batches of adds: every answer is the record the store keeps, the one "
                    f"winner's (a refusal too): {write.id!r} answered {result!r}, stored "
                    f"{stored[write.id]!r}")
        asked = {w.id for b in batches for w in b}
        assert all(wins.get(i) == 1 for i in asked), (
            f"concurrent batches of adds: exactly one must win each id: "
            f"{ {i: wins.get(i, 0) for i in sorted(asked) if wins.get(i) != 1} }")
        versions = sorted(r.version for r in stored.values() if r is not None)
        assert len(set(versions)) == len(versions) and versions[0] > counter, (
            f"every written record has a version of its own, above the counter before: {versions}")

    async def test_race_writes_on_one_client_are_each_judged_alone(self, anarchon_kit: Kit) -> None:
        """Many writes of every kind at once on one client (which may send them together): each is
        answered as it would be alone, and two of one id as if one came after the other."""
        s = on(anarchon_kit)
        old = {f"old-{n:02d}": (await s.add(sw(f"old-{n:02d}"))).version for n in range(44)}
        counter = await s.version()
        calls: list[tuple[str, str, Any]] = []  # (kind, id, call)
        for n, (schedule_id, v) in enumerate(old.items()):
            kind = ("update", "stale update", "remove", "stale remove", "add", "upsert")[n // 8]
            if kind == "upsert":
                calls.append((kind, schedule_id, s.put(sw(schedule_id, "upserted"), "any")))
            elif kind == "update":
                calls.append((kind, schedule_id, s.put(sw(schedule_id, "updated", next_due=DUE + n), v)))
            elif kind == "stale update":
                calls.append((kind, schedule_id, s.put(sw(schedule_id, "updated"), v + 1_000_000)))
            elif kind == "remove":
                calls.append((kind, schedule_id, s.remove(schedule_id, expect=v if n % 2 else None)))
            elif kind == "stale remove":
                calls.append((kind, schedule_id, s.remove(schedule_id, expect=v + 1_000_000)))
            else:
                calls.append((kind, schedule_id, s.put(sw(schedule_id, "added again"), "absent")))
        for n in range(8):
            new = sw(f"new-{n}", "new", next_due=None if n % 2 else DUE)
            calls.append(("new", new.id, s.put(new, "absent")))
            calls.append(("upsert", f"up-{n}", s.put(sw(f"up-{n}", "upserted"), "any")))
            calls.append(("twice", "twice", s.put(sw("twice", f"twice-{n}"), "absent")))
        calls.append(("remove absent", "never-added", s.remove("never-added")))
        results = await asyncio.gather(*(call for _, _, call in calls))
        stored = dict(zip(old, await s.get(*old), strict=True))
        by_kind: dict[str, list[tuple[ScheduleWriteResult, str]]] = {}
        for (kind, schedule_id, _), r in zip(calls, results, strict=True):
            by_kind.setdefault(kind, []).append((r, schedule_id))

        def check(kind: str, written: bool, why: str) -> None:
            wrong = [r for r, _ in by_kind[kind] if r.written != written]
            assert not wrong, f"concurrent writes on one client: {why}; {len(wrong)} were not: {wrong[:2]}"

        check("update", True, "a compare-and-set of the current version writes")
        check("stale update", False, "a compare-and-set of another version is refused")
        check("remove", True, "a removal (of the current version, or of any) removes")
        check("stale remove", False, "a removal of another version is refused")
        check("add", False, "an add of a taken id is refused")
        check("new", True, "an add of a free id writes")
        check("upsert", True, "an upsert writes")
        check("remove absent", False, "a removal of an id that is not there is refused")
        for r, schedule_id in by_kind["update"]:
            assert r.record is not None and r.record.task == "updated" and stored[schedule_id] == r.record, (
                f"an update answers the record the store keeps: {r.record!r}, stored {stored[schedule_id]!r}")
        for r, schedule_id in by_kind["remove"]:
            gone = stored[schedule_id] is None
            assert r.record is not None and r.record.version == old[schedule_id] and gone, (
                f"a removal answers the record it removed, and the store no longer has it: {r.record!r}")
        for kind in ("stale update", "stale remove", "add"):
            for r, schedule_id in by_kind[kind]:
                current = r.record is not None and r.record.version == old[schedule_id]
                assert current and r.record == stored[schedule_id], (
                    f"a refused {kind} answers the current record: {r!r}")
        [(absent, _)] = by_kind["remove absent"]
        assert absent.record is None, f"a refused removal of an absent id answers no record: {absent!r}"
        twice = [r for r, _ in by_kind["twice"]]
        winners = [r.record for r in twice if r.written]
        assert len(winners) == 1 and all(r.record == winners[0] for r in twice), (
            f"adds of one id at once on one client: one wins, the others answer its record: {twice}")
        versions = [r.record.version for (kind, _, _), r in zip(calls, results, strict=True)
                    if r.written and r.record is not None and kind != "remove"]
        assert len(set(versions)) == len(versions) and min(versions) > counter, (
            f"each write has a version of its own, above the counter before them: {sorted(versions)}")
        assert await s.version() >= max(versions), (
            f"the counter is at least the largest version written ({max(versions)}): {await s.version()}")

    async def test_race_update_and_removal_of_one_version_have_one_winner(self, anarchon_kit: Kit) -> None:
        clients = await self._clients(anarchon_kit)
        for round_ in range(10):
            schedule_id = f"job-{round_}"
            v = (await clients[0].add(sw(schedule_id))).version
            results = await asyncio.gather(*(
                c.put(sw(schedule_id, "changed"), v) if i % 2 else c.remove(schedule_id, expect=v)
                for i, c in enumerate(clients)))
            assert sum(r.written for r in results) == 1, (
                f"an update and a removal of the same version race: exactly one must win, got "
                f"{[(r.written, fields(r.record)) for r in results]}")

    async def test_race_advance_and_update_leave_the_updates_next_due(self, anarchon_kit: Kit) -> None:
        clients = await self._clients(anarchon_kit)
        ids = [f"job-{i}" for i in range(20)]
        added = {i: (await clients[0].add(sw(i, next_due=DUE))).version for i in ids}
        results = await asyncio.gather(
            *(clients[4 + i % 3].put(sw(schedule_id, next_due=DUE + 5), added[schedule_id])
              for i, schedule_id in enumerate(ids)),
            *(clients[1 + i % 3].advance([(schedule_id, added[schedule_id], DUE + 60_000)])
              for i, schedule_id in enumerate(ids)))
        updated = {r.record.id: r.record.version for r in results[:len(ids)]
                   if isinstance(r, ScheduleWriteResult) and r.record is not None}
        for record in await clients[0].get(*ids):
            assert record is not None and (record.version, record.next_due) == (
                updated[record.id], DUE + 5), (
                f"an advance of the version an update replaces, racing it: the update's next_due must stay "
                f"(an advance moves only the version it read): {record!r}")

    async def test_race_writes_against_due_reads(self, anarchon_kit: Kit) -> None:
        """A writer adds, updates and removes schedules while readers page through the due index: every
        page is in order and within `until`, every record is one whole write, and a schedule nobody
        touches is read exactly once per pass."""
        clients = await self._clients(anarchon_kit)
        steady = [f"steady-{i:02d}" for i in range(12)]
        for i, schedule_id in enumerate(steady):
            await clients[0].add(sw(schedule_id, "steady", next_due=DUE + i * 10, args=f'{{"n": {i}}}'))
        churn = [f"churn-{i:02d}" for i in range(6)]
        stop = asyncio.Event()
        problems: list[str] = []

        async def write(c: Schedules, k: int) -> None:
            n = 0
            while not stop.is_set():
                await asyncio.sleep(0)  # (an in-process store answers without yielding)
                n += 1
                schedule_id = churn[(n + k) % len(churn)]
                # Every field of a write says which write it is: a record mixed from two writes shows.
                write = sw(schedule_id, f"w{k}-{n}", next_due=DUE + (n * 7 + k) % 130,
                           args=f'{{"w": "w{k}-{n}"}}', spec=f'{{"at": {n}}}')
                if n % 5 == 0:
                    await c.remove(schedule_id)
                else:
                    await c.put(write, "any")

        async def read(c: Schedules) -> None:
            while not stop.is_set():
                await asyncio.sleep(0)
                seen: list[tuple[int, str]] = []
                after: tuple[int, str] | None = None
                while True:
                    page = await c.due(DUE + 100, after, 3)
                    for r in page:
                        if r.next_due is None or r.next_due > DUE + 100:
                            problems.append(
                                f"due_schedules(until={DUE + 100}) returned next_due {r.next_due}")
                        if r.id.startswith("churn") and r.args != f'{{"w": "{r.task}"}}':
                            problems.append(f"a record mixed from two writes: {r!r}")
                    keys = [(r.next_due or 0, r.id) for r in page]
                    if keys != sorted(keys) or (after is not None and keys and keys[0] <= after):
                        problems.append(f"a page out of (next_due, id) order after {after}: {keys}")
                    seen += keys
                    if len(page) < 3:
                        break
                    after = keys[-1]
                counts = {schedule_id: sum(1 for _, i in seen if i == schedule_id) for schedule_id in steady}
                wanted = {schedule_id: 1 for i, schedule_id in enumerate(steady) if DUE + i * 10 <= DUE + 100}
                if counts != {**{i: 0 for i in steady}, **wanted}:
                    problems.append(f"a schedule no write touched was read {counts} times in one pass")

        tasks = [asyncio.ensure_future(write(clients[k], k)) for k in range(1, 4)]
        tasks += [asyncio.ensure_future(read(clients[k])) for k in range(4, 8)]
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.gather(*tasks)
        assert not problems, (
            f"writes racing reads of the due index: a read sees each write whole or not at all, in "
            f"order, and never skips nor repeats an untouched schedule; {len(problems)} problems, first: "
            f"{problems[:3]}")


# -- the reference model ----------------------------------------------------------------------------

MODEL_SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.differing_executors],
)

_IDS = ["a", "B", "b_", "😀"]
_DUES = st.one_of(st.none(), st.integers(DUE - 5, DUE + 5))

Version = Literal["current", "previous"]
"""A version as a step names it, for each store to resolve against its own: the id's current version, or
one it had before (versions are the store's counter values, so two stores need not number alike)."""


@dataclass(frozen=True)
class _Step:
    kind: str
    args: tuple[Any, ...]


def _put(schedule_id: str, task: str, due: int | None, expect: Version | Literal["absent", "any"]) -> _Step:
    return _Step("put", (schedule_id, task, due, expect))


def _remove(schedule_id: str, expect: Version | None) -> _Step:
    return _Step("remove", (schedule_id, expect))


def _advance(moves: list[tuple[str, Version, int | None]]) -> _Step:
    return _Step("advance", (moves,))


def _list(after: str, prefix: str, task: str | None, limit: int) -> _Step:
    return _Step("list", (after, prefix, task, limit))


def _due(until: int, tasks: list[str] | None, partitions: list[int] | None, after: tuple[int, str] | None,
         limit: int) -> _Step:
    return _Step("due", (until, tasks, partitions, after, limit))


def _get(ids: list[str]) -> _Step:
    return _Step("get", (ids,))


_PARTITION_SETS = [sorted({schedule_partition(i) for i in _IDS[::2]}), [schedule_partition(_IDS[0])], []]
"""Partitions asked of the due index: those of half the model's ids, one id's, none."""
_VERSIONS = st.sampled_from(cast(list[Version], ["current", "current", "previous"]))
_STEPS = st.one_of(
    st.builds(_put, st.sampled_from(_IDS), st.sampled_from(["t1", "t2"]), _DUES,
              st.one_of(st.sampled_from(cast(list[Literal["absent", "any"]], ["absent", "any"])), _VERSIONS)),
    st.builds(_remove, st.sampled_from(_IDS), st.one_of(st.none(), _VERSIONS)),
    st.builds(_advance, st.lists(st.tuples(st.sampled_from(_IDS), _VERSIONS, _DUES), min_size=1, max_size=3)),
    st.builds(_list, st.sampled_from(["", "a", "b", "ä"]), st.sampled_from(["", "a", "b_", "b"]),
              st.sampled_from([None, "t1"]), st.integers(0, 4)),
    st.builds(_due, st.integers(DUE - 6, DUE + 6),
              st.one_of(st.none(), st.sampled_from([["t1"], ["t2", "t1"]])),
              st.one_of(st.none(), st.sampled_from(_PARTITION_SETS)),
              st.one_of(st.none(), st.tuples(st.integers(DUE - 5, DUE + 5), st.sampled_from(_IDS))),
              st.integers(1, 4)),
    st.builds(_get, st.lists(st.sampled_from(_IDS), max_size=3)),
)


def _plain(answer: Any) -> Any:
    """An answer without the store's times and versions (each store has its own clock and counter)."""
    if isinstance(answer, ScheduleRecord):
        return fields(answer)
    if isinstance(answer, ScheduleWriteResult):
        return answer.written, _plain(answer.record)
    if isinstance(answer, list):
        return [_plain(a) for a in cast(list[object], answer)]
    return answer


class _Side:
    """One store of the comparison, and the versions each id has had in it."""

    def __init__(self, backend: Any, namespace: str) -> None:
        self.backend = backend
        self.namespace = namespace
        self.current: dict[str, int] = {}
        self.before: dict[str, int] = {}
        """Per id, the newest version it had before its current one (or before it was removed)."""

    async def look(self) -> list[ScheduleRecord | None]:
        """Every id's record now; the versions noted."""
        records: list[ScheduleRecord | None] = await self.backend.get_schedules(self.namespace, _IDS)
        for schedule_id, record in zip(_IDS, records, strict=True):
            was = self.current.get(schedule_id)
            now = None if record is None else record.version
            if was is not None and was != now:
                self.before[schedule_id] = was
            if now is None:
                self.current.pop(schedule_id, None)
            else:
                self.current[schedule_id] = now
        return records

    def version(self, schedule_id: str, which: Version) -> int:
        """`which` version of the id in this store: its current one, or one it had before (0: none ever)."""
        if which == "current" and schedule_id in self.current:
            return self.current[schedule_id]
        return self.before.get(schedule_id, 0)

    async def apply(self, step: _Step) -> Any:
        backend, ns = self.backend, self.namespace
        if step.kind == "put":
            schedule_id, task, due, expect = step.args
            if expect not in ("absent", "any"):
                expect = self.version(schedule_id, expect)
            return await backend.put_schedule(ns, sw(schedule_id, task, next_due=due), expect=expect)
        if step.kind == "remove":
            schedule_id, expect = step.args
            version = None if expect is None else self.version(schedule_id, expect)
            return await backend.remove_schedule(ns, schedule_id, expect=version)
        if step.kind == "advance":
            moves = [(i, self.version(i, which), due) for i, which, due in step.args[0]]
            return await backend.advance_schedules(ns, moves)
        if step.kind == "list":
            after, prefix, task, limit = step.args
            return await backend.list_schedules(ns, after=after, limit=limit, task=task, prefix=prefix)
        if step.kind == "due":
            until, tasks, partitions, after, limit = step.args
            more = {} if tasks is None else {"tasks": tasks}
            if partitions is not None:
                more["partitions"] = partitions
            return await backend.due_schedules(ns, until=until, after=after, limit=limit, **more)
        return await backend.get_schedules(ns, step.args[0])


class TestScheduleModel:
    """The backend and `MemoryBackend` receive the same schedule calls and must give the same answers."""

    pytestmark: ClassVar[list[Any]] = [pytest.mark.anarchon_tier("schedules"),
                                       pytest.mark.usefixtures("_anarchon_tier_gate")]

    @MODEL_SETTINGS
    @given(dues=st.lists(_DUES, min_size=len(_IDS), max_size=len(_IDS)),
           steps=st.lists(_STEPS, min_size=5, max_size=30))
    def test_schedules_match_the_reference_model(
        self, anarchon_runner: tuple[asyncio.Runner, BackendPool], dues: list[int | None],
            steps: list[_Step]) -> None:
        runner, pool = anarchon_runner
        namespace = f"model-{uuid.uuid4().hex[:10]}"
        # Every id exists at first, so that most steps meet a schedule.
        steps = [*(_put(schedule_id, "t1", due, "any") for schedule_id, due in zip(_IDS, dues, strict=True)),
                 *steps]

        async def play() -> None:
            real = _Side((await pool.clients(1))[0], namespace)
            model = _Side(MemoryBackend(MemoryStore(StoreClock())), namespace)
            counter = 0
            for n, step in enumerate(steps):
                model_before = await model.backend.schedules_version(namespace)
                expected = await model.apply(step)
                got = await real.apply(step)
                where = f"step {n} {step.kind}{step.args!r} (steps so far: {steps[:n + 1]!r})"
                assert _plain(got) == _plain(expected), (
                    f"{where}: the backend answered {_plain(got)!r}, the reference model (the protocol's "
                    f"rules) {_plain(expected)!r}")
                after = await real.backend.schedules_version(namespace)
                if await model.backend.schedules_version(namespace) > model_before:
                    assert after > counter, (
                        f"{where} wrote, and schedules_version went {counter} -> {after}: it must grow with "
                        "every write and removal")
                if step.kind == "advance":
                    assert after == counter, f"{where}: advance_schedules must not bump the change counter"
                if step.kind == "put" and got.written:
                    assert got.record.version == after, (
                        f"{where}: the record written has version {got.record.version}; it must be the "
                        f"change counter's new value, {after}")
                counter = after
                stored, modelled = _plain(await real.look()), _plain(await model.look())
                assert stored == modelled, (
                    f"after {where} the backend holds {stored!r}, the reference model (the protocol's rules) "
                    f"{modelled!r}")

        runner.run(play())
