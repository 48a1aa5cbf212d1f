"""Filter: drop records (Kafka Connect's ``Filter``), normally only those a predicate selects."""

from __future__ import annotations

from ..connect.transforms import Transformation
from ._keyvalue import KAFKA_PACKAGE


class Filter(Transformation):
    """Drop every record it is applied to. With a predicate it drops the records that
    match (``negate=true``: those that do not)::

        transforms=dropTombstones
        transforms.dropTombstones.type=org.apache.kafka.connect.transforms.Filter
        transforms.dropTombstones.predicate=isTombstone
        predicates=isTombstone
        predicates.isTombstone.type=org.apache.kafka.connect.transforms.predicates.RecordIsTombstone
    """

    kafka_class = KAFKA_PACKAGE + "Filter"

    def apply(self, record):
        return None
