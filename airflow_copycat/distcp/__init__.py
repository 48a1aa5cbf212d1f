"""Distcp: dataset-aware, exactly-once copy of file trees (Apache Gobblin's Distcp design).

Find what to copy (:mod:`.listing`: datasets and their copyable files), diff it
with the target (:mod:`.diff`), cut it into work units balanced by bytes
(:mod:`.workunits`), copy each unit into staging through converters
(:mod:`.copier`, :mod:`.converters`), and publish each dataset's file set
atomically through a write-ahead log (:mod:`.publish`). :mod:`.model` holds the
data that moves between those steps and the staging layout; :mod:`.config` the
job's keys.

The job around them -- plans, task groups on Spark, results, the publish step --
is :mod:`airflow_copycat.runtime.copy_job`. Nothing here imports Airflow, Spark
or the runtime.
"""
