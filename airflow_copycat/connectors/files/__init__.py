"""Files sink: Kafka topics to JSON-lines or Parquet files on any fsspec store, exactly once.

Confluent S3 / HDFS sink configs carry over (``format.class``, ``flush.size``,
``rotate.interval.ms``, ``partitioner.class``, ``path.format``...). See
:mod:`.sink` for the whole picture and :mod:`.publish` for the commit protocol.
"""

from .sink import FilesSinkConnector, FilesSinkTask

__all__ = ["FilesSinkConnector", "FilesSinkTask"]
