"""The runtime: runs connectors' tasks. No airflow, no pyspark import, so Spark
executors need neither.

* :mod:`.worker` -- Kafka Connect worker properties (Kafka clients, converters, offset storage).
* :mod:`.connector_config` -- the framework's connector keys, loading and validating configs.
* :mod:`.plan` -- connector config -> task configs -> task groups (the plan format).
* :mod:`.source` / :mod:`.sink` -- the bounded source and sink loops.
* :mod:`.offsets` -- offset stores (compacted Kafka topic, local file).
* :mod:`.result` -- the task and task group result format.
* :mod:`.executor` -- runs a task group in this process.
"""
