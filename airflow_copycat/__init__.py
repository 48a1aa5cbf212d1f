"""airflow-copycat: Kafka Connect's connector model and Gobblin's exactly-once file copy
for Apache Airflow. Airflow plans connectors, PySpark copies, Kafka keeps the offsets.

``connector_task_group`` and ``copy_task_group`` (the DAG author's entry points) are imported lazily so that
Spark executors, which import only ``airflow_copycat.connect`` / ``.runtime``,
never import Airflow.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "connector_task_group":
        from .operators.task_group import connector_task_group

        return connector_task_group
    if name == "copy_task_group":
        from .operators.copy import copy_task_group

        return copy_task_group
    raise AttributeError(name)
