"""The collector setting a task runs in (runtime/collector.py): set while any task runs, then restored."""

from __future__ import annotations

import gc
import threading

import pytest

from airflow_copycat.runtime.collector import YOUNG_THRESHOLD, task_collection


def test_a_task_runs_with_fewer_collections_and_the_process_gets_its_setting_back():
    before = gc.get_threshold()
    garbage = [[] for _ in range(10)]  # alive when the task starts: frozen, never walked by its collections
    with task_collection():
        assert gc.get_threshold()[0] == max(YOUNG_THRESHOLD, before[0])
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() >= len(garbage)
        cycle = []
        cycle.append(cycle)  # cyclic garbage is still collected
        del cycle
        assert gc.collect() >= 1
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_nested_and_failing_runs_restore_once_when_the_last_one_ends():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with task_collection():
            with task_collection():
                pass
            assert gc.get_threshold()[0] == max(YOUNG_THRESHOLD, before[0]), "an inner run's end keeps the setting"
            raise RuntimeError("the task failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_runs_in_two_threads_share_the_setting():
    before = gc.get_threshold()
    inside, release = threading.Event(), threading.Event()

    def other():
        with task_collection():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    with task_collection():
        pass
    assert gc.get_threshold()[0] == max(YOUNG_THRESHOLD, before[0]), "the other thread's task still runs"
    release.set()
    t.join(10)
    assert gc.get_threshold() == before


def test_objects_frozen_before_the_first_task_stay_frozen_after_it():
    """A process forked from one that froze its objects (Airflow's LocalExecutor does) keeps them frozen: the
    task's end does not unfreeze them (their memory pages stay shared with the parent)."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with task_collection():
            pass
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


def test_a_process_that_turned_collection_off_keeps_it_off():
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with task_collection():
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
