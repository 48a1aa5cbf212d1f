"""Avro: Confluent's ``AvroConverter`` (:mod:`.converter`, with its keys in :mod:`.config`, the Schema
Registry client in :mod:`.registry`, and the bytes of the Confluent wire format and the registry-less layouts in
:mod:`.layouts`), Avro's single-object encoding (:mod:`.single_object`), and the mapping between
Connect schemas and Avro schemas with Avro's binary codec (:mod:`.data`).
"""
