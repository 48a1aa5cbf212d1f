"""Avro: Confluent's ``AvroConverter`` (:mod:`.converter`: the Schema Registry wire format, and the
registry-less layouts), Avro's single-object encoding (:mod:`.single_object`), and the mapping between
Connect schemas and Avro schemas with Avro's binary codec (:mod:`.data`).
"""
