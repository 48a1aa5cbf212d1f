"""assign(): first plans (round robin, or largest-first by weight) and sticky re-plans."""

from __future__ import annotations

import random

import pytest

from airflow_copycat.connect.assignment import assign, canonical


def _t(name):
    return {"protocol": "1", "table": name}


def _where(groups):
    """canonical partition -> task index."""
    return {canonical(p): i for i, g in enumerate(groups) for p in g}


def test_unweighted_first_plan_is_round_robin_as_before():
    ps = [_t(x) for x in "abcde"]
    assert assign(ps, 2) == [[ps[0], ps[2], ps[4]], [ps[1], ps[3]]]
    assert assign(ps, 9) == [[p] for p in ps]
    assert assign([], 3) == []


def test_weighted_first_plan_puts_the_largest_first_on_the_least_loaded_task():
    big, small = _t("big"), [_t(f"s{i}") for i in range(4)]
    groups = assign(small[:2] + [big] + small[2:], 2, weights=[10, 10, 1000, 10, 10])
    assert groups == [[big], small]
    # two halves of a split table and small tables over 3 tasks: each half alone, the small ones together
    h1, h2 = _t("big#1"), _t("big#2")
    groups = assign([h1, h2] + small, 3, weights=[500, 500, 10, 10, 10, 10])
    assert sorted(groups, key=len) == [[h1], [h2], small]


def test_zero_weights_still_spread_over_tasks():
    ps = [_t(x) for x in "abcd"]
    groups = assign(ps, 4, weights=[0, 0, 0, 0])
    assert sorted(len(g) for g in groups) == [1, 1, 1, 1]


def test_adding_a_partition_moves_nothing_else_and_goes_to_the_least_loaded_task():
    a, b, c, d, new = (_t(x) for x in "abcdn")
    previous = [[a, b], [c], [d]]
    groups = assign([a, b, c, d, new], 3, previous, weights=[1, 1, 50, 1, 5])
    assert groups[0] == [a, b] and groups[1] == [c] and groups[2] == [d, new]  # task 2 had the least weight
    # without weights: the task with the fewest partitions
    assert assign([a, b, c, d, new], 3, previous) == [[a, b], [c, new], [d]]


def test_dropping_a_partition_releases_it_and_keeps_every_other_with_its_task_mates():
    a, b, c, d = (_t(x) for x in "abcd")
    assert assign([a, c, d], 3, [[a, b], [c], [d]]) == [[a], [c], [d]]
    # a task left empty is not returned: no empty task config; the others keep their groups
    assert assign([a, b, d], 3, [[a, b], [c], [d]]) == [[a, b], [d]]
    # and a new partition fills the emptied task first
    e = _t("e")
    assert assign([a, b, d, e], 3, [[a, b], [c], [d]]) == [[a, b], [e], [d]]


def test_lowering_tasks_max_moves_only_the_partitions_of_removed_tasks():
    ps = [_t(f"p{i}") for i in range(8)]
    weights = [8, 1, 7, 2, 6, 3, 5, 4]
    previous = assign(ps, 4, weights=weights)
    groups = assign(ps, 2, previous, weights=weights)
    assert len(groups) == 2
    for i in range(2):
        assert groups[i][:len(previous[i])] == previous[i]  # kept, in place
    moved = {canonical(p) for g in previous[2:] for p in g}
    assert {canonical(p) for g in groups for p in g[len(previous[groups.index(g)]):]} == moved


def test_raising_tasks_max_gives_new_partitions_to_the_new_empty_tasks():
    a, b, c, d = (_t(x) for x in "abcd")
    assert assign([a, b, c, d], 4, [[a, b, c]]) == [[a, b, c], [d]]


@pytest.mark.parametrize("seed", range(25))
def test_properties_hold_for_random_plans_and_re_plans(seed):
    rnd = random.Random(seed)
    universe = [_t(f"t{i}") for i in range(30)]
    first = rnd.sample(universe, rnd.randint(0, 30))
    previous = assign(first, rnd.randint(1, 8), weights=[rnd.randint(0, 100) for _ in first])
    now = rnd.sample(universe, rnd.randint(0, 30))
    max_tasks = rnd.randint(1, 8)
    groups = assign(now, max_tasks, previous, weights=[rnd.randint(0, 100) for _ in now])
    placed = [canonical(p) for g in groups for p in g]
    assert sorted(placed) == sorted(canonical(p) for p in now)  # each partition exactly once
    assert len(groups) <= max_tasks and all(groups)  # never more tasks than allowed, none empty
    before, after = _where(previous), _where(groups)
    for key, i in before.items():  # a kept partition on a kept task stays with all its kept task-mates
        if key in after and i < max_tasks:
            mates = {k for k, j in before.items() if j == i and k in after}
            assert {k for k, j in after.items() if j == after[key]} >= mates


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="max_tasks"):
        assign([_t("a")], 0)
    with pytest.raises(ValueError, match="weights"):
        assign([_t("a"), _t("b")], 2, weights=[1])
