"""Switch the data path's fast paths off, to compare them with the code they stand in for.

Inside ``with slow_paths():`` JsonConverter quotes strings with its Jackson-style escaper
only, looks every schema up in its cache, parses every message with ``json.loads`` (no
envelope prefix, no module-level decoder), builds Structs with ``Struct.put``; Schemas find fields by scanning and Structs
by name; the Parquet format builds tables a row at a time. Which is what the code did
before these fast paths were added.
"""

from __future__ import annotations

import contextlib

from airflow_copycat.connect.data import Schema
from airflow_copycat.connectors.files import formats
from airflow_copycat.converters import json_converter as jc
from airflow_copycat.converters import json_decoding, json_encoding, json_schemas, json_text


def _no_fast_decode(*args):
    raise ValueError("fast decoding switched off")


def _slot_reading(name: str, value):
    """A property that reads ``value`` for the slot ``name`` but still stores what is set."""
    slot = Schema.__dict__[name]
    return property(lambda self: value, lambda self, v: slot.__set__(self, v))


@contextlib.contextmanager
def slow_paths():
    patches = [
        (json_schemas, "_quote", json_text._jackson_quote),
        (json_encoding, "_quote", json_text._jackson_quote),
        (jc, "_split_envelope", lambda raw: None),
        (jc.JsonConverter, "_learned_envelope", lambda self, raw: None),
        (json_schemas.JsonSchemaMixin, "as_json_schema", lambda self, schema: self._schema_json(schema)[1]),
        (json_text, "_decode_deep", _no_fast_decode),
        (json_decoding, "_fits_unchecked", lambda schema: False),
        (Schema, "_positional", _slot_reading("_positional", False)),
        (Schema, "_by_name", _slot_reading("_by_name", None)),
        (Schema, "_memoized", lambda self, key, compute: compute(self)),
        (formats, "_struct_columns", lambda schema, values: None),
        (formats, "_arrow_values", lambda schema, values: [formats.to_arrow_value(schema, v) for v in values]),
    ]
    saved = [(obj, name, obj.__dict__[name]) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)
