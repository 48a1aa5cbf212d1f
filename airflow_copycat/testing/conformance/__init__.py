"""Conformance kit: a standard pytest suite for any connector, from its class and a config.

Like the Singer SDK's ``get_tap_test_class``: a connector author writes a few
lines and gets the checks every connector must pass, with failures phrased in
the connector's own terms::

    from airflow_copycat.testing import source_connector_tests

    def make_source(tmp_path, n):          # set up a source holding n records; return its config
        ...
    TestMySource = source_connector_tests(MySourceConnector, make_source,
                                          invalid_configs=[({"batch.size": 0}, ["batch.size"])])

    TestMySink = sink_connector_tests(MySinkConnector, make_sink=lambda tmp_path: {...},
                                      read_back=lambda config: [...values the destination holds...])

What the generated tests check (see the test names pytest prints):

* config validation names every bad key, all problems at once, both through
  :meth:`Connector.check_config` and the framework's validation
  (bad values derived from the :class:`ConfigDef`, plus the author's
  ``invalid_configs``);
* ``task_configs(max_tasks)`` returns at most ``max_tasks`` flat string configs
  and covers every partition exactly once (sources: the partitions each task
  config declares under ``task.partitions``; sinks: the topic-partitions the
  planner assigns to the task configs), and every task config starts;
* sources: records carry JSON source partitions and offsets, tasks read every
  record once and then report caught up (``poll() -> None``), and a task
  restarted from the last committed offsets emits exactly the rest -- no
  repeat, no gap;
* sinks: a bounded run writes every record once; a batch given again after a
  crash before the commit is not written twice (sinks declaring
  ``exactly_once``) and nothing is lost (every sink); sinks declaring
  ``offsets_in_destination`` rewind to them in ``open()``;
* ``stop()`` is safe before start, after a failed start, after start, after
  work, and when called twice.

Connectors are started and sink partitions assigned by the runtime's own
planner (:func:`airflow_copycat.runtime.plan.start_connector`,
:func:`~airflow_copycat.runtime.plan.assign_sink_tasks`), with the config parsed
as a plan parses it. Tasks are then driven through the calls the runtime's
loops make (``initialize``, ``start``, ``poll`` / ``open``, ``put``,
``pre_commit``, ``close``, ``stop``), against the author's real resource and
without the loops' Kafka side (producing, consuming, the offset topic): no
Kafka is needed. A check that does not
apply says so as a skip (a sink that declares ``exactly_once = False`` is not
asked to write a replayed batch once).

The generated class carries ``connector_class`` and the factories
(``make_source`` and ``records``, or ``make_sink`` and ``read_back``);
subclass it to add a connector's own tests.

The package imports neither airflow nor pyspark (``source`` and ``sink`` hold the two suites,
``common`` what they share); pytest is imported when a
suite is built, and the framework's validation and planner key
(:mod:`airflow_copycat.runtime`) when a check uses them.
"""

from __future__ import annotations

from .sink import sink_connector_tests
from .source import source_connector_tests

__all__ = ["sink_connector_tests", "source_connector_tests"]
