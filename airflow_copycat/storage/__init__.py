"""Storage primitives shared by everything that writes files readers must never see half of.

Kafka Connect's storage connectors (HDFS, S3) share one library for this,
``kafka-connect-storage-common``; here it is :mod:`.atomic`: durable writes,
renames that replace their target on every fsspec filesystem (local disks, HDFS,
object stores), whole-or-nothing JSON documents, and deletes that tolerate what is
already gone. The files sink's publish protocol
(:mod:`airflow_copycat.connectors.files.publish`), Distcp's
(:mod:`airflow_copycat.distcp.publish`) and the runtime's plan, group and result files
(:mod:`airflow_copycat.runtime.json_files`) all write through it.

Imports neither Airflow nor pyspark, nor any other part of the package: every layer may use it.
"""

from .atomic import AtomicFiles, is_local, new_token

__all__ = ["AtomicFiles", "is_local", "new_token"]
