"""The built-in single message transforms and predicates: Kafka Connect's, with the same keys and behaviour.

Their interfaces (:class:`~airflow_copycat.connect.transforms.Transformation`,
:class:`~airflow_copycat.connect.transforms.Predicate`) and the table of which module holds
which transform are in :mod:`airflow_copycat.connect.transforms`; the runtime resolves Kafka
Connect's class names (``org.apache.kafka.connect.transforms.Cast$Value``) and short names
(``Cast$Value``) to the classes here (:mod:`airflow_copycat.runtime.transforms`). Kept apart from
the API as Kafka Connect keeps ``connect-transforms`` apart from ``connect-api``.
"""
