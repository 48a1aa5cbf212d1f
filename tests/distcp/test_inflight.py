"""Several units in flight (:mod:`airflow_copycat.distcp.inflight`): the large units in threads, the
small ones in the calling thread meanwhile, or every unit in the calling thread -- each way stages
what one unit at a time does, yields the results in the order of the units, reports progress that
only grows, and raises a bug after the results of the units before it."""

from __future__ import annotations

import random
import threading
import time

import pytest

from airflow_copycat.distcp import inflight
from airflow_copycat.distcp.inflight import copy_units
from airflow_copycat.distcp.model import Staging
from airflow_copycat.distcp.workunits import work_units
from tests.distcp.test_fast_copy import B, LOCAL, data_of, make_file, small_blocks, tree  # noqa: F401 -- a fixture

WAYS = {"one at a time": {"threads": 1}, "all in threads": {"threads": 4, "small": 0},
        "large in threads, small here": {"threads": 4, "small": 2 * B}, "small ones only": {"threads": 4}}


def _files(tmp_path):
    sizes = [0, 1, B - 1, B, B + 1] + [random.Random(i).randint(0, 3 * B) for i in range(30)]
    files = [make_file(tmp_path, data_of(s, i), name=f"d{i % 3}/f{i:03d}.bin") for i, s in enumerate(sizes)]
    files.append(make_file(tmp_path, data_of(7 * B + 1), name="big.bin"))
    return files


def test_every_way_stages_what_one_at_a_time_does(tmp_path, small_blocks):  # noqa: F811 -- the fixture imported above
    """Many small files and a split one: results in order, the same staged trees (every file staged
    once, in the same layout), and progress that only grows to the task's bytes."""
    config = {"checksum": "md5", "block.split.size": 2 * B}
    units = work_units(_files(tmp_path), 2 * B)
    staged, threads_seen = {}, {}
    real = inflight.copy_unit

    def copy_unit(*args, **kwargs):
        threads_seen.setdefault(way, set()).add(threading.current_thread() is threading.main_thread())
        return real(*args, **kwargs)

    for way, kwargs in WAYS.items():
        inflight.copy_unit = copy_unit
        try:
            target = tmp_path / f"t{len(staged)}"
            seen = []
            out = list(copy_units(units, LOCAL, LOCAL, Staging(str(target)), config, progress=seen.append,
                                  **kwargs))
        finally:
            inflight.copy_unit = real
        assert [u for u, _ in out] == units
        assert all(r["status"] == "ok" for _, r in out), out
        assert [r["file"] for _, r in out] == [u.file.id for u in units]
        assert seen == sorted(seen) and seen[-1] == sum(u.bytes for u in units)
        staged[way] = tree(target)
    first = staged.pop("one at a time")
    assert all(t == first for t in staged.values())
    # {True}: the calling thread only; {False}: the pool only; both: the mixed way
    assert threads_seen == {"one at a time": {True}, "all in threads": {False},
                            "large in threads, small here": {True, False}, "small ones only": {True}}


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("which", ["first", "small after a large", "last"])
def test_a_bug_is_raised_after_the_results_before_it(tmp_path, small_blocks, monkeypatch, way, which):  # noqa: F811 -- the fixture imported above
    """A unit whose copy raises a bug (here a TypeError): every unit before it is yielded, in order,
    then the bug is raised -- also when the bug is in the calling thread while a large unit before
    it still runs in a thread (they are slowed down here); copied one at a time, no unit after it
    is copied."""
    units = work_units(_files(tmp_path), 2 * B)
    large = [i for i, u in enumerate(units) if u.bytes >= 2 * B]
    bad = {"first": 0, "small after a large": next(i for i in range(large[0], len(units)) if i not in large),
           "last": len(units) - 1}[which]
    real = inflight.copy_unit
    called = []

    def copy_unit(unit, *args, **kwargs):
        called.append(units.index(unit))
        if unit is units[bad]:
            raise TypeError("a bug")
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)
        return real(unit, *args, **kwargs)

    monkeypatch.setattr(inflight, "copy_unit", copy_unit)
    out = []
    with pytest.raises(TypeError, match="a bug"):
        for unit, result in copy_units(units, LOCAL, LOCAL, Staging(str(tmp_path / "t")), {}, **WAYS[way]):
            out.append(unit)
            assert result["status"] == "ok"
    assert out == units[:bad]
    if way == "one at a time":
        assert called == list(range(bad + 1))
