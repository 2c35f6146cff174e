"""Deliberately broken schedule stores, each breaking one rule of `ScheduleBackend`: the kit's `schedules`
tier fails every one.

Each is the reference model (`MemoryBackend`) with one rule broken; `BROKEN_SCHEDULES` lists them with
the kit test that must catch each and a phrase its failure must say.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from anarchon import MemoryBackend, MemoryStore
from anarchon.backends import ScheduleRecord, ScheduleWrite, ScheduleWriteResult
from anarchon_conformance import BackendFactory, StoreClock

Expect = int | Literal["absent", "any"]

# -- writes ------------------------------------------------------------------------------------------


class VersionPerScheduleBackend(MemoryBackend):
    """Numbers each schedule's versions 1, 2, 3...: one removed and added again has its old versions."""

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        [before] = await self.get_schedules(namespace, [write.id])
        result = await super().put_schedule(namespace, write, expect=expect)
        if not result.written or result.record is None:
            return result
        with self.store.lock:
            record = replace(result.record, version=1 if before is None else before.version + 1)
            self.store.schedules[namespace][write.id] = record
        return ScheduleWriteResult(True, record)


class UpdateIgnoresVersionBackend(MemoryBackend):
    """A compare-and-set that writes whatever the current version is."""

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        if isinstance(expect, int) and (await self.get_schedules(namespace, [write.id]))[0] is not None:
            expect = "any"
        return await super().put_schedule(namespace, write, expect=expect)


class AddOverwritesBackend(MemoryBackend):
    """An add (expect='absent') that replaces a schedule that exists."""

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        return await super().put_schedule(namespace, write, expect="any" if expect == "absent" else expect)


class ResetsCreatedAtBackend(MemoryBackend):
    """A replacement that sets created_at anew."""

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        [before] = await self.get_schedules(namespace, [write.id])
        result = await super().put_schedule(namespace, write, expect=expect)
        if not result.written or result.record is None or before is None:
            return result
        with self.store.lock:
            record = replace(result.record, created_at=result.record.updated_at + 1)
            self.store.schedules[namespace][write.id] = record
        return ScheduleWriteResult(True, record)


class ClientClockSchedulesBackend(MemoryBackend):
    """Stamps created_at and updated_at with the client's clock (the process's), not the store's."""

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        [before] = await self.get_schedules(namespace, [write.id])
        result = await super().put_schedule(namespace, write, expect=expect)
        if not result.written or result.record is None:
            return result
        now = time.time_ns() // 1_000_000
        with self.store.lock:
            record = replace(
                result.record,
                updated_at=now,
                created_at=now if before is None else result.record.created_at,
            )
            self.store.schedules[namespace][write.id] = record
        return ScheduleWriteResult(True, record)


class RemoveIgnoresExpectBackend(MemoryBackend):
    """A removal that ignores the version it was given."""

    async def remove_schedule(
        self, namespace: str, schedule_id: str, *, expect: int | None = None
    ) -> ScheduleWriteResult:
        return await super().remove_schedule(namespace, schedule_id)


class RemovalNotCountedBackend(MemoryBackend):
    """A removal that leaves the change counter where it was."""

    async def remove_schedule(
        self, namespace: str, schedule_id: str, *, expect: int | None = None
    ) -> ScheduleWriteResult:
        before = self.store.schedule_versions.get(namespace, 0)
        result = await super().remove_schedule(namespace, schedule_id, expect=expect)
        self.store.schedule_versions[namespace] = before
        return result


class SilentSchedulesBackend(MemoryBackend):
    """Declares `notify`, pushes handovers, but not the writes of schedules."""

    def _schedules_changed(self, namespace: str, schedule_id: str) -> int:
        version = self.store.schedule_versions[namespace] = self.store.schedule_versions.get(namespace, 0) + 1
        return version


class FoldedNamespacesBackend(MemoryBackend):
    """Keeps `ns:x` in namespace `ns`: the part of a namespace after a ':' is dropped."""

    @staticmethod
    def _fold(namespace: str) -> str:
        return namespace.split(":")[0]

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        return await super().put_schedule(self._fold(namespace), write, expect=expect)

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        return await super().get_schedules(self._fold(namespace), ids)

    async def schedules_version(self, namespace: str) -> int:
        return await super().schedules_version(self._fold(namespace))


# -- batches -----------------------------------------------------------------------------------------


class BatchSortedBackend(MemoryBackend):
    """Answers a batch of writes sorted by id (as a statement without ORDER BY might), not in its order."""

    async def put_schedules(
        self, namespace: str, writes: Sequence[ScheduleWrite], *, expect: Literal["absent", "any"]
    ) -> list[ScheduleWriteResult]:
        results = await super().put_schedules(namespace, writes, expect=expect)
        return [r for _, r in sorted(zip([w.id for w in writes], results, strict=True), key=lambda p: p[0])]


class BatchStopsAtRefusalBackend(MemoryBackend):
    """Writes a batch up to its first refusal, and refuses the rest without writing them."""

    async def put_schedules(
        self, namespace: str, writes: Sequence[ScheduleWrite], *, expect: Literal["absent", "any"]
    ) -> list[ScheduleWriteResult]:
        out: list[ScheduleWriteResult] = []
        for write in writes:
            if out and not out[-1].written:
                out.append(ScheduleWriteResult(False, None))
            else:
                out.append(await self.put_schedule(namespace, write, expect=expect))
        return out


class BatchOneVersionBackend(MemoryBackend):
    """Bumps the change counter once per batch: every schedule of a batch gets the same version."""

    async def put_schedules(
        self, namespace: str, writes: Sequence[ScheduleWrite], *, expect: Literal["absent", "any"]
    ) -> list[ScheduleWriteResult]:
        results = await super().put_schedules(namespace, writes, expect=expect)
        with self.store.lock:
            kept = self.store.schedules.get(namespace, {})
            version = self.store.schedule_versions.get(namespace, 0)
            out: list[ScheduleWriteResult] = []
            for result in results:
                if result.written and result.record is not None:
                    record = replace(result.record, version=version)
                    kept[record.id] = record
                    result = ScheduleWriteResult(True, record)
                out.append(result)
        return out


class BatchRepeatsBackend(MemoryBackend):
    """Writes a batch that repeats an id, the last write of it winning, instead of refusing it whole."""

    async def put_schedules(
        self, namespace: str, writes: Sequence[ScheduleWrite], *, expect: Literal["absent", "any"]
    ) -> list[ScheduleWriteResult]:
        return [await self.put_schedule(namespace, write, expect=expect) for write in writes]


# -- reads -------------------------------------------------------------------------------------------


class GetSortedBackend(MemoryBackend):
    """Answers get_schedules sorted by id, not in the order asked."""

    async def get_schedules(self, namespace: str, ids: Sequence[str]) -> list[ScheduleRecord | None]:
        return await super().get_schedules(namespace, sorted(ids))


class CaseFoldedListBackend(MemoryBackend):
    """Lists by a case-insensitive collation: 'a' < 'B'."""

    async def list_schedules(
        self, namespace: str, *, after: str = "", limit: int, task: str | None = None, prefix: str = ""
    ) -> list[ScheduleRecord]:
        everything = await super().list_schedules(namespace, limit=1_000_000, task=task, prefix=prefix)
        ordered = sorted(everything, key=lambda r: (r.id.casefold(), r.id))
        return [r for r in ordered if (r.id.casefold(), r.id) > (after.casefold(), after)][:limit]


class Utf16OrderBackend(MemoryBackend):
    """Orders ids by UTF-16 code units (a JavaScript or SQL Server store): '😀' < '\\uffef'."""

    @staticmethod
    def _key(text: str) -> bytes:
        return text.encode("utf-16-be")

    async def list_schedules(
        self, namespace: str, *, after: str = "", limit: int, task: str | None = None, prefix: str = ""
    ) -> list[ScheduleRecord]:
        everything = await super().list_schedules(namespace, limit=1_000_000, task=task, prefix=prefix)
        ordered = sorted(everything, key=lambda r: self._key(r.id))
        return [r for r in ordered if self._key(r.id) > self._key(after)][:limit]


class SkipsOnPagingBackend(MemoryBackend):
    """A page after a cursor skips its first schedule."""

    async def list_schedules(
        self, namespace: str, *, after: str = "", limit: int, task: str | None = None, prefix: str = ""
    ) -> list[ScheduleRecord]:
        page = await super().list_schedules(namespace, after=after, limit=limit + 1, task=task, prefix=prefix)
        return page[1:] if after else page[:limit]


class LikePrefixBackend(MemoryBackend):
    """Matches a prefix as SQL LIKE would without escaping it: '_' is any one character, '%' any text."""

    async def list_schedules(
        self, namespace: str, *, after: str = "", limit: int, task: str | None = None, prefix: str = ""
    ) -> list[ScheduleRecord]:
        import re

        pattern = re.compile(
            "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in prefix), re.DOTALL
        )
        everything = await super().list_schedules(namespace, after=after, limit=1_000_000, task=task)
        return [r for r in everything if pattern.match(r.id)][:limit]


class DueBeyondUntilBackend(MemoryBackend):
    """Reads the due index a millisecond past `until`."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        return await super().due_schedules(
            namespace, partitions=partitions, until=until + 1, tasks=tasks, after=after, limit=limit
        )


class DueUntilExclusiveBackend(MemoryBackend):
    """Reads the due index up to `until`, exclusive."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        return await super().due_schedules(
            namespace, partitions=partitions, until=until - 1, tasks=tasks, after=after, limit=limit
        )


class DueAfterInclusiveBackend(MemoryBackend):
    """Reads the due index from its cursor inclusive: the last of a page comes again."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        if after is not None:
            after = (after[0], after[1][:-1]) if after[1] else (after[0] - 1, "\U0010ffff")
        return await super().due_schedules(
            namespace, partitions=partitions, until=until, tasks=tasks, after=after, limit=limit
        )


class DueByIdBackend(MemoryBackend):
    """Orders the due index by id alone."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        everything = await super().due_schedules(
            namespace, partitions=partitions, until=until, tasks=tasks, limit=1_000_000
        )
        ordered = sorted(everything, key=lambda r: r.id)
        return [r for r in ordered if after is None or r.id > after[1]][:limit]


class TornDueReadBackend(MemoryBackend):
    """Reads the due index's keys, lets other calls run, then reads the schedules: a read not atomic."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        page = await super().due_schedules(
            namespace, partitions=partitions, until=until, tasks=tasks, after=after, limit=limit
        )
        await asyncio.sleep(0)  # a write runs here
        now = await self.get_schedules(namespace, [r.id for r in page])
        return [r for r in now if r is not None]


class DueIgnoresTasksBackend(MemoryBackend):
    """Reads the due schedules of every task, whatever `tasks` asks for."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        return await super().due_schedules(
            namespace, partitions=partitions, until=until, after=after, limit=limit
        )


class DueTaskByTaskBackend(MemoryBackend):
    """Reads the tasks asked one after another, each in (next_due, id) order, not merged."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        if tasks is None:
            return await super().due_schedules(
                namespace, partitions=partitions, until=until, after=after, limit=limit
            )
        out: list[ScheduleRecord] = []
        for task in dict.fromkeys(tasks):
            out += await super().due_schedules(
                namespace, partitions=partitions, until=until, tasks=[task], after=after, limit=limit
            )
        return out[:limit]


class DueIgnoresPartitionsBackend(MemoryBackend):
    """Reads the due schedules of every partition, whatever `partitions` asks for."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        return await super().due_schedules(namespace, until=until, tasks=tasks, after=after, limit=limit)


class DuePartitionByPartitionBackend(MemoryBackend):
    """Reads the partitions asked one after another, each in (next_due, id) order, not merged."""

    async def due_schedules(
        self,
        namespace: str,
        *,
        until: int,
        tasks: Sequence[str] | None = None,
        partitions: Sequence[int] | None = None,
        after: tuple[int, str] | None = None,
        limit: int,
    ) -> list[ScheduleRecord]:
        if partitions is None:
            return await super().due_schedules(namespace, until=until, tasks=tasks, after=after, limit=limit)
        out: list[ScheduleRecord] = []
        for part in dict.fromkeys(partitions):
            out += await super().due_schedules(
                namespace, until=until, tasks=tasks, partitions=[part], after=after, limit=limit
            )
        return out[:limit]


# -- the due index moved on --------------------------------------------------------------------------


class AdvanceBackwardsBackend(MemoryBackend):
    """Moves a schedule's next due wherever it is told, backwards too."""

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        with self.store.lock:
            kept = self.store.schedules.get(namespace, {})
            for schedule_id, version, next_due in moves:
                current = kept.get(schedule_id)
                if current is not None and current.version == version:
                    kept[schedule_id] = replace(current, next_due=next_due)


class AdvanceIgnoresVersionBackend(MemoryBackend):
    """Moves a schedule forward whatever its version: over a newer write's next due."""

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        current = await self.get_schedules(namespace, [m[0] for m in moves])
        await super().advance_schedules(
            namespace,
            [
                (i, now.version if now is not None else v, d)
                for (i, v, d), now in zip(moves, current, strict=True)
            ],
        )


class AdvanceRevivesBackend(MemoryBackend):
    """Lets a set next due replace None (a schedule with no slot left comes back)."""

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        with self.store.lock:
            kept = self.store.schedules.get(namespace, {})
            for schedule_id, version, next_due in moves:
                current = kept.get(schedule_id)
                if current is not None and current.version == version and current.next_due is None:
                    kept[schedule_id] = replace(current, next_due=next_due)
        await super().advance_schedules(namespace, moves)


class AdvanceCountsBackend(MemoryBackend):
    """Bumps the change counter on every advance."""

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        await super().advance_schedules(namespace, moves)
        with self.store.lock:
            self.store.schedule_versions[namespace] = self.store.schedule_versions.get(namespace, 0) + 1


class AdvanceTouchesBackend(MemoryBackend):
    """An advance that also bumps the version (as if it were a write)."""

    async def advance_schedules(self, namespace: str, moves: Sequence[tuple[str, int, int | None]]) -> None:
        before = {
            i: r
            for i, r in zip(
                [m[0] for m in moves], await self.get_schedules(namespace, [m[0] for m in moves]), strict=True
            )
        }
        await super().advance_schedules(namespace, moves)
        with self.store.lock:
            kept = self.store.schedules.get(namespace, {})
            for schedule_id, old in before.items():
                now = kept.get(schedule_id)
                if old is not None and now is not None and now.next_due != old.next_due:
                    kept[schedule_id] = replace(now, version=now.version + 1)


# -- races -------------------------------------------------------------------------------------------


class CheckThenWriteBackend(MemoryBackend):
    """Checks `expect` and reads the counter, lets other calls run, then writes without checking again."""

    async def put_schedule(
        self, namespace: str, write: ScheduleWrite, *, expect: Expect
    ) -> ScheduleWriteResult:
        [current] = await self.get_schedules(namespace, [write.id])
        if (expect == "absent" and current is not None) or (
            isinstance(expect, int) and (current is None or current.version != expect)
        ):
            return ScheduleWriteResult(False, current)
        version = await self.schedules_version(namespace) + 1
        await asyncio.sleep(0)  # another client's write runs here
        with self.store.lock:
            now = self._now()
            self.store.schedule_versions[namespace] = version - 1
            record = ScheduleRecord(
                write.id,
                write.task,
                write.spec,
                write.args,
                write.options,
                write.paused,
                write.next_due,
                version,
                now if current is None else current.created_at,
                now,
            )
            self.store.schedules.setdefault(namespace, {})[write.id] = record
            self._schedules_changed(namespace, write.id)
        return ScheduleWriteResult(True, record)


# -- the list the self-test runs ---------------------------------------------------------------------


@dataclass(frozen=True)
class BrokenSchedules:
    """One rule of `ScheduleBackend`, a store that breaks it alone, and how the kit fails it."""

    name: str
    cls: type[Any]
    test: str
    """The kit test that must fail (a `-k` expression that selects it)."""
    says: str
    """A phrase the failure must contain: the rule, not only its symptom."""


BROKEN_SCHEDULES = [
    BrokenSchedules(
        "batch_sorted",
        BatchSortedBackend,
        "test_a_batch_judges_each_write_alone_and_answers_in_order",
        "answers in the order of the writes",
    ),
    BrokenSchedules(
        "batch_stops_at_refusal",
        BatchStopsAtRefusalBackend,
        "test_a_batch_judges_each_write_alone_and_answers_in_order",
        "one refusal stops nothing",
    ),
    BrokenSchedules(
        "batch_one_version",
        BatchOneVersionBackend,
        "test_a_batch_upsert_creates_or_replaces_each",
        "each write of a batch bumps the counter",
    ),
    BrokenSchedules(
        "batch_repeats",
        BatchRepeatsBackend,
        "test_a_batch_with_a_repeated_id_writes_nothing",
        "repeats an id is a ValueError",
    ),
    BrokenSchedules(
        "version_per_schedule",
        VersionPerScheduleBackend,
        "test_a_schedule_added_again_never_has_a_version_it_had",
        "never has a version it had before",
    ),
    BrokenSchedules(
        "version_per_schedule_counter",
        VersionPerScheduleBackend,
        "test_an_upsert_creates_or_replaces_whatever_the_version",
        "the change counter after the write",
    ),
    BrokenSchedules(
        "due_ignores_tasks",
        DueIgnoresTasksBackend,
        "test_the_due_index_reads_only_the_tasks_asked",
        "of those tasks only",
    ),
    BrokenSchedules(
        "due_task_by_task",
        DueTaskByTaskBackend,
        "test_the_due_index_reads_only_the_tasks_asked",
        "ordered by (next_due, id) across them",
    ),
    BrokenSchedules(
        "due_ignores_partitions",
        DueIgnoresPartitionsBackend,
        "test_the_due_index_reads_only_the_partitions_asked",
        "of those partitions only",
    ),
    BrokenSchedules(
        "due_partition_by_partition",
        DuePartitionByPartitionBackend,
        "test_the_due_index_reads_only_the_partitions_asked",
        "ordered by (next_due, id) across them",
    ),
    BrokenSchedules(
        "update_ignores_version",
        UpdateIgnoresVersionBackend,
        "test_compare_and_set_writes_only_the_expected_version",
        "(compare-and-set)",
    ),
    BrokenSchedules(
        "add_overwrites",
        AddOverwritesBackend,
        "test_an_add_of_a_taken_id_is_refused_with_the_current_record",
        "must refuse an id that is taken",
    ),
    BrokenSchedules(
        "resets_created_at",
        ResetsCreatedAtBackend,
        "test_an_upsert_creates_or_replaces_whatever_the_version",
        "keeps created_at",
    ),
    BrokenSchedules(
        "client_clock",
        ClientClockSchedulesBackend,
        "test_created_and_updated_at_are_store_time",
        "must be the store's clock",
    ),
    BrokenSchedules(
        "remove_ignores_expect",
        RemoveIgnoresExpectBackend,
        "test_a_removal_with_expect_compares_the_version",
        "of version 2 is refused",
    ),
    BrokenSchedules(
        "removal_not_counted",
        RemovalNotCountedBackend,
        "test_the_change_counter_grows_with_every_write_and_removal_only",
        "larger after each write or removal",
    ),
    BrokenSchedules(
        "silent_schedules",
        SilentSchedulesBackend,
        "test_a_write_is_pushed_where_the_backend_notifies",
        "must push (id, SCHEDULES_CHANGED)",
    ),
    BrokenSchedules(
        "folded_namespaces", FoldedNamespacesBackend, "test_schedules_are_namespaced", "in a namespace"
    ),
    BrokenSchedules(
        "get_sorted",
        GetSortedBackend,
        "test_get_answers_in_the_order_asked_with_none_for_missing",
        "in the order asked",
    ),
    BrokenSchedules(
        "case_folded_list",
        CaseFoldedListBackend,
        "test_a_list_pages_by_id_in_code_point_order",
        "code point order",
    ),
    BrokenSchedules(
        "utf16_order", Utf16OrderBackend, "test_a_list_pages_by_id_in_code_point_order", "code point order"
    ),
    BrokenSchedules(
        "skips_on_paging",
        SkipsOnPagingBackend,
        "test_paging_is_stable_while_schedules_change",
        "never skips a schedule",
    ),
    BrokenSchedules(
        "like_prefix", LikePrefixBackend, "test_a_list_filters_by_prefix_and_task", "no LIKE wildcards"
    ),
    BrokenSchedules(
        "due_beyond_until",
        DueBeyondUntilBackend,
        "test_the_due_index_reads_up_to_until_inclusive",
        "at most until",
    ),
    BrokenSchedules(
        "due_until_exclusive",
        DueUntilExclusiveBackend,
        "test_the_due_index_reads_up_to_until_inclusive",
        "(inclusive)",
    ),
    BrokenSchedules(
        "due_after_inclusive",
        DueAfterInclusiveBackend,
        "test_the_due_index_starts_after_the_cursor",
        "greater than after",
    ),
    BrokenSchedules(
        "due_by_id",
        DueByIdBackend,
        "test_the_due_index_is_ordered_by_next_due_then_id",
        "ordered by (next_due, id)",
    ),
    BrokenSchedules(
        "torn_due_read",
        TornDueReadBackend,
        "test_race_writes_against_due_reads",
        "a read sees each write whole",
    ),
    BrokenSchedules(
        "advance_backwards", AdvanceBackwardsBackend, "test_advance_moves_only_forward", "moves only forward"
    ),
    BrokenSchedules(
        "advance_backwards_model",
        AdvanceBackwardsBackend,
        "test_schedules_match_the_reference_model",
        "the reference model",
    ),
    BrokenSchedules(
        "advance_ignores_version",
        AdvanceIgnoresVersionBackend,
        "test_advance_needs_the_version_it_read",
        "still has the version given",
    ),
    BrokenSchedules(
        "advance_revives",
        AdvanceRevivesBackend,
        "test_advance_to_none_ends_the_schedules_place_in_the_index",
        "None is the end",
    ),
    BrokenSchedules(
        "advance_counts",
        AdvanceCountsBackend,
        "test_the_change_counter_grows_with_every_write_and_removal_only",
        "must not bump",
    ),
    BrokenSchedules(
        "advance_touches",
        AdvanceTouchesBackend,
        "test_advance_moves_only_forward",
        "changes nothing but next_due",
    ),
    BrokenSchedules(
        "check_then_add",
        CheckThenWriteBackend,
        "test_race_concurrent_adds_of_one_id_have_one_winner",
        "exactly one must win",
    ),
    BrokenSchedules(
        "check_then_update",
        CheckThenWriteBackend,
        "test_race_concurrent_updates_of_one_version_have_one_winner",
        "exactly one winner",
    ),
    BrokenSchedules(
        "check_then_upsert",
        CheckThenWriteBackend,
        "test_race_concurrent_upserts_lose_no_write",
        "a lost update",
    ),
]


def broken(name: str) -> BackendFactory:
    """The factory of the broken schedule store `name` (see `BROKEN_SCHEDULES`)."""
    [entry] = [b for b in BROKEN_SCHEDULES if b.name == name]
    store = MemoryStore(StoreClock())

    async def make() -> Any:
        backend = entry.cls(store)
        await backend.open()
        return backend

    return make


__all__ = ["BROKEN_SCHEDULES", "BrokenSchedules", "broken"]
