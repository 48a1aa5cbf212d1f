"""The built-in converters beyond the trivial ones: Kafka's ``JsonConverter`` (:mod:`.json_converter`,
its parts in :mod:`.json_schemas`, :mod:`.json_encoding`, :mod:`.json_decoding`, :mod:`.json_text`, :mod:`.java_numbers`),
Confluent's ``AvroConverter`` and the registry-less Avro layouts (:mod:`.avro`), and the dead-letter
record format built on the JSON converter (:mod:`.dead_letters`).

The :class:`~airflow_copycat.connect.converters.Converter` interface, and the String and ByteArray
converters, are part of the API in :mod:`airflow_copycat.connect.converters`; the runtime resolves
Kafka Connect's class names (``org.apache.kafka.connect.json.JsonConverter``,
``io.confluent.connect.avro.AvroConverter``) to the classes here (:mod:`airflow_copycat.runtime.plugins`).
Kept apart from the API as Kafka Connect keeps ``connect-json`` apart from ``connect-api``.
"""
