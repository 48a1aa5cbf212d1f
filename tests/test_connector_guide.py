"""The "Write your own connector" guide stays true: its code runs, passes the kit, and copies into Kafka.

The ```python blocks of docs/connector-api.md's "## Write your own connector" section are executed in order,
as one module named like the module the guide's ``connector.class`` points at
(``my_connectors.sqlite``), so the guide's own imports work. Every conformance
suite they build is collected here (``TestReadme...``), and
every source connector they define is run through the real source loop against
the real broker.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest

from airflow_copycat.connect import SourceConnector

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "docs" / "connector-api.md"
HEADING = "## Write your own connector"


def _section(text: str) -> str:
    """The guide's section of a markdown text: from the heading to the next heading of the same level."""
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start:] if end < 0 else text[start:end]


def _load(label: str, path: Path, markdown: str) -> types.ModuleType:
    """Run the python blocks of ``markdown`` in order as one module; return it."""
    blocks = re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)
    assert blocks, f"{label}: no ```python block"
    found = re.search(r'"connector\.class": "([\w.]+):\w+"', markdown)
    assert found, f"{label}: no \"connector.class\": \"module:Class\" example naming the connector's module"
    name = found.group(1)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    _register(module)
    for i, code in enumerate(blocks):
        exec(compile(code, f"{label} python block {i + 1}", "exec"), module.__dict__)
    return module


def _register(module: types.ModuleType) -> None:
    """Make ``module`` (and empty parents) importable under its name."""
    parts = module.__name__.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        sys.modules.setdefault(parent, types.ModuleType(parent))
    sys.modules[module.__name__] = module
    if len(parts) > 1:
        setattr(sys.modules[".".join(parts[:-1])], parts[-1], module)


EXAMPLES = {"Readme": _load("docs/connector-api.md", README, _section(README.read_text(encoding="utf-8")))}

SUITES = {}
for _label, _module in EXAMPLES.items():
    for _name, _obj in vars(_module).items():
        if _name.startswith("Test") and isinstance(_obj, type) and hasattr(_obj, "connector_class"):
            SUITES[f"Test{_label}{_name[4:]}"] = (_module, _obj)
            globals()[f"Test{_label}{_name[4:]}"] = _obj  # collected by pytest
SOURCES = {k: v for k, v in SUITES.items()
           if issubclass(v[1].connector_class, SourceConnector) and v[1].connector_class.__module__ == v[0].__name__}


def test_the_guide_builds_a_suite_for_its_own_source_connector():
    assert SOURCES, "docs/connector-api.md's guide builds no source_connector_tests(...) suite for a connector it defines"


@pytest.mark.parametrize("suite", sorted(SOURCES))
def test_guide_source_copies_into_kafka_through_the_real_source_loop(suite, worker_props, kafka_bootstrap, unique,
                                                                      tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    from airflow_copycat.runtime.executor import run_group
    from airflow_copycat.runtime.kafka import read_to_end
    from airflow_copycat.runtime.plan import make_plan
    from airflow_copycat.runtime.worker import WorkerConfig

    module, tests = SOURCES[suite]
    _register(module)  # the README's copy and the page's share a module name: run this one's
    cls = tests.connector_class
    prefix = f"guide-{unique}."

    def run(directory, n):
        config = dict(tests.make_source(directory, n), **{
            "name": f"guide-{unique}", "connector.class": f"{module.__name__}:{cls.__name__}", "tasks.max": 2})
        assert "topic.prefix" in config, "the test writes to fresh topics through the example's topic.prefix"
        config["topic.prefix"] = prefix
        plan = make_plan(config, WorkerConfig(worker_props, env={}))
        results = [run_group(g, worker_props) for g in plan["groups"]]
        failed = [t for g in results for t in g["tasks"] if t["status"] != "ok"]
        assert not failed, failed
        return sum(g["records"] for g in results), {t for g in results for task in g["tasks"] for t in task["topics"]}

    def in_kafka(topics):
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"guide-check-{unique}",
                             "enable.partition.eof": True})
        try:
            return sorted(json.dumps(json.loads(m.value())["payload"], sort_keys=True)
                          for m in read_to_end(consumer, [TopicPartition(t, 0, 0) for t in sorted(topics)]))
        finally:
            consumer.close()

    # Given the guide's source set up with 9 records, when it runs through plan and the real source loop
    first = tmp_path / "first"
    first.mkdir()
    copied, topics = run(first, 9)
    # Then Kafka holds the 9 records the task emits, each once, in the topics it names
    assert copied == 9 and topics and all(t.startswith(prefix) for t in topics)
    assert len(in_kafka(topics)) == 9 and len(set(in_kafka(topics))) == 9
    # When the source holds 3 more records and runs again, only those are copied (the offsets were committed)
    more = tmp_path / "more"
    more.mkdir()
    copied, topics_again = run(more, 12)
    assert copied == 3
    assert len(in_kafka(topics | topics_again)) == 12 and len(set(in_kafka(topics | topics_again))) == 12
