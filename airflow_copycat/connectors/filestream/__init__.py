"""FileStream connectors: Kafka Connect's ``FileStreamSource`` / ``FileStreamSink``.

The source reads lines of local files (paths or globs, one partition per file,
byte offsets that survive log rotation); the sink appends one line per record to
a local file. See :mod:`.source` and :mod:`.sink` for the keys and guarantees.
"""

from .sink import FileStreamSinkConnector, FileStreamSinkTask
from .source import FileStreamSourceConnector, FileStreamSourceTask

__all__ = ["FileStreamSinkConnector", "FileStreamSinkTask", "FileStreamSourceConnector", "FileStreamSourceTask"]
