"""The one-line description of a task group that a mapped run task shows in the Airflow UI."""

from airflow_copycat.runtime.result import describe_group


def test_tables_files_and_kafka_partitions_are_named():
    tables = {"group": 0, "kind": "source", "tasks": [
        {"partitions": [{"protocol": "1", "table": "shop.public.orders"}]},
        {"partitions": [{"protocol": "1", "table": "shop.public.customers", "split": "2/4", "column": "id"}]}]}
    assert describe_group(tables) == "group 0: orders, customers 2/4"
    files = {"group": 3, "kind": "source", "tasks": [{"partitions": [{"filename": "/var/log/app/app.log"}]}]}
    assert describe_group(files) == "group 3: app.log"


def test_a_long_list_is_cut_saying_how_many_more():
    sink = {"group": 1, "kind": "sink", "tasks": [{"partitions": [["orders", p] for p in range(40)]}]}
    label = describe_group(sink)
    assert len(label) <= 120 and label.startswith("group 1: orders[0], orders[1], ")
    shown = label.split(": ", 1)[1].split(" (+")[0].split(", ")
    assert label.endswith(f" (+{40 - len(shown)} more)")


def test_a_copy_group_says_its_units_and_bytes():
    copy = {"group": 2, "kind": "copy", "tasks": [{"task": 0, "units": 3, "bytes": 1_500_000_000},
                                                 {"task": 1, "units": 2, "bytes": 20_000}]}
    assert describe_group(copy) == "group 2: 2 task(s), 5 work unit(s), 1.5 GB"
