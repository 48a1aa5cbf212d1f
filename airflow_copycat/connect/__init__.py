"""The connector API: records, schemas, connectors, tasks, configs and converters.

Pure Python: nothing here imports airflow or pyspark, so executors can run tasks
without either. Connector authors need only this package.
"""

from .batch import SourceBatch
from .config import ConfigDef, ConfigProblem, ConfigType, Password
from .connector import Connector, SinkConnector, SourceConnector, task_partitions
from .data import Date, Decimal, Field, Schema, SchemaBuilder, Struct, Time, Timestamp, Type
from .errors import ConfigException, ConnectException, DataException, RetriableException
from .records import ConnectRecord, SinkRecord, SourceRecord
from .sink_batch import SinkBatch
from .task import OffsetStorageReader, SinkTask, SinkTaskContext, SourceTask, SourceTaskContext, Task

__all__ = [
    "ConfigDef", "ConfigProblem", "ConfigType", "Password",
    "Connector", "SinkConnector", "SourceConnector", "task_partitions",
    "Date", "Decimal", "Field", "Schema", "SchemaBuilder", "Struct", "Time", "Timestamp", "Type",
    "ConfigException", "ConnectException", "DataException", "RetriableException",
    "ConnectRecord", "SinkRecord", "SourceRecord", "SourceBatch", "SinkBatch",
    "OffsetStorageReader", "SinkTask", "SinkTaskContext", "SourceTask", "SourceTaskContext", "Task",
]
