"""Work units (whole files, byte ranges of split files) and their packing into tasks by bytes."""

from __future__ import annotations

import random

import pytest

from airflow_copycat.distcp.model import CopyableFile, WorkUnit
from airflow_copycat.distcp.workunits import pack, task_bytes, work_units


def f(name: str, size: int, converters=()) -> CopyableFile:
    return CopyableFile(origin=f"/src/{name}", relative=name, destination=name, size=size, mtime=1.0, dataset="d",
                        file_set="d", converters=tuple(converters))


def test_whole_files_when_not_splitting():
    units = work_units([f("a", 10), f("b", 0)], 0)
    assert [(u.file.relative, u.part, u.parts, u.offset, u.length, u.bytes) for u in units] == [
        ("a", 0, 1, 0, -1, 10), ("b", 0, 1, 0, -1, 0)]


def test_large_files_split_into_byte_ranges():
    units = work_units([f("big", 25), f("exact", 20), f("small", 10)], 10)
    big = [(u.part, u.parts, u.offset, u.length) for u in units if u.file.relative == "big"]
    assert big == [(0, 3, 0, 10), (1, 3, 10, 10), (2, 3, 20, 5)]
    assert [(u.part, u.parts, u.offset, u.length) for u in units if u.file.relative == "exact"] == [
        (0, 2, 0, 10), (1, 2, 10, 10)]
    assert [(u.parts, u.length) for u in units if u.file.relative == "small"] == [(1, -1)]  # not larger: whole
    assert sum(u.bytes for u in units) == 55


def test_converted_files_are_never_split():
    assert [u.parts for u in work_units([f("a.gz", 100, ["gunzip"])], 10)] == [1]


def test_work_units_round_trip_through_plan_json():
    units = work_units([f("big", 25)], 10)
    assert [WorkUnit.from_dict(u.to_dict()) for u in units] == units


def _random_units(n: int, seed: int = 7) -> list[WorkUnit]:
    rng = random.Random(seed)
    return work_units([f(f"f{i:05d}", int(rng.paretovariate(1.2) * 1000)) for i in range(n)], 0)


def test_pack_balances_bytes_largest_first():
    # Given 2,000 files with heavy-tailed sizes, capped so that no file dominates
    units = [u for u in _random_units(2000) if u.bytes < 2_000_000]
    total = sum(u.bytes for u in units)
    # When packed into 8 tasks
    tasks = pack(units, 8)
    loads = [task_bytes(t) for t in tasks]
    # Then every unit is in exactly one task, and the tasks are balanced:
    assert len(tasks) == 8 and sorted(id(u) for t in tasks for u in t) == sorted(id(u) for u in units)
    assert sum(loads) == total
    assert max(loads) - min(loads) <= max(u.bytes for u in units)  # LPT: at most the largest unit apart
    assert max(loads) / min(loads) < 1.05
    for t in tasks:  # largest first within a task
        assert [u.bytes for u in t] == sorted((u.bytes for u in t), reverse=True)


def test_pack_spreads_the_parts_of_a_split_file():
    units = work_units([f("huge", 100 * 64), f("tiny", 10)], 64)
    tasks = pack(units, 4)
    assert all(len({u.part for u in t if u.file.relative == "huge"}) == 25 for t in tasks)
    loads = sorted(task_bytes(t) for t in tasks)
    assert loads[-1] - loads[0] <= 64 and sum(loads) == 100 * 64 + 10


def test_pack_is_deterministic_whatever_the_input_order():
    units = _random_units(500)
    shuffled = list(units)
    random.Random(1).shuffle(shuffled)
    as_ids = lambda tasks: [[(u.file.id, u.part) for u in t] for t in tasks]  # noqa: E731
    assert as_ids(pack(units, 6)) == as_ids(pack(shuffled, 6)) == as_ids(pack(list(reversed(units)), 6))


def test_pack_never_makes_empty_tasks():
    assert pack([], 4) == []
    two = pack(work_units([f("a", 5), f("b", 1)], 0), 8)
    assert [[u.file.relative for u in t] for t in two] == [["a"], ["b"]]
    empties = pack(work_units([f(f"e{i}", 0) for i in range(10)], 0), 3)  # empty files spread by count
    assert sorted(len(t) for t in empties) == [3, 3, 4]
    with pytest.raises(ValueError, match="max_tasks"):
        pack(two[0], 0)

