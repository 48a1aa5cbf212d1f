"""File formats: turn the records of one file into its bytes.

A format gets the ``(value_schema, value)`` pairs of one file (all with the
same value schema: the sink starts a new file when the schema changes) and
returns the whole file. Files are small by design (at most ``flush.size``
records), so they are built in memory and written in one go.

* ``json``, ``io.confluent.connect.s3.format.json.JsonFormat``,
  ``io.confluent.connect.hdfs.json.JsonFormat`` -- ``.json``
  (``.json.gz`` with ``s3.compression.type=gzip``);
* ``parquet``, ``io.confluent.connect.s3.format.parquet.ParquetFormat`` --
  ``.<codec>.parquet`` (``.snappy.parquet``; ``.parquet`` uncompressed);
* ``io.confluent.connect.hdfs.parquet.ParquetFormat`` -- ``.parquet``.

The extensions are Confluent's: the S3 sink puts the Parquet codec in the
name (``topic+0+0000000000.snappy.parquet``), the HDFS sink does not.

JSON lines: one document per record, the bytes Kafka Connect's
``JsonConverter`` writes with ``schemas.enable=false``, each followed by
``\\n``.

Parquet (pyarrow): with a value schema, a struct's fields become columns
(optional → nullable; Date → ``date32``, Time → ``time32[ms]``, Timestamp →
``timestamp[ms, UTC]``, Decimal → ``decimal128(p, scale)`` with ``p`` from
the schema parameter ``connect.decimal.precision``, else 38; arrays → lists,
maps → maps, nested structs → structs) and any other value is one column
``value``. A struct schema is also stored, as Avro JSON (Confluent's mapping), in the
file's key-value metadata under ``parquet.avro.schema``, as Confluent's Parquet
writer does. Without a schema, dict values become columns inferred by pyarrow
over every record of the file (missing keys are null) and other values one
inferred column ``value``.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import io
from operator import attrgetter, itemgetter
from typing import Any, Sequence

from ...connect.data import Date, Decimal, Schema, Struct, Time, Timestamp, Type
from ...connect.errors import DataException

JSON, PARQUET = "json", "parquet"
_S3, _HDFS = "s3", "hdfs"
FORMAT_ALIASES = {
    "json": (JSON, _S3),
    "io.confluent.connect.s3.format.json.jsonformat": (JSON, _S3),
    "io.confluent.connect.hdfs.json.jsonformat": (JSON, _HDFS),
    "parquet": (PARQUET, _S3),
    "io.confluent.connect.s3.format.parquet.parquetformat": (PARQUET, _S3),
    "io.confluent.connect.hdfs.parquet.parquetformat": (PARQUET, _HDFS),
}
PARQUET_CODECS = {
    # parquet.codec -> (pyarrow compression, Confluent S3 file-name part: parquet-mr CompressionCodecName extension)
    "none": ("none", ""), "uncompressed": ("none", ""),
    "snappy": ("snappy", ".snappy"), "gzip": ("gzip", ".gz"), "zstd": ("zstd", ".zstd"),
    "brotli": ("brotli", ".br"),
    "lz4": ("lz4", ".lz4raw"),  # pyarrow writes the LZ4_RAW codec
}

Rows = Sequence[tuple[Schema | None, Any]]


def resolve_format(name: str) -> tuple[str, str] | None:
    """``(kind, flavour)`` for a ``format.class`` value (``("parquet", "s3")``), else ``None``."""
    return FORMAT_ALIASES.get((name or "").strip().lower())


class RecordFormat:
    """Encodes the records of one file."""

    extension = ""

    def encode(self, topic: str, rows: Rows) -> bytes:
        raise NotImplementedError


class JsonLinesFormat(RecordFormat):
    """JSON lines through Kafka Connect's ``JsonConverter`` (``schemas.enable=false``);
    with ``compression="gzip"`` (Confluent's ``s3.compression.type``) the file is gzipped
    (``.json.gz``, no timestamp in the gzip header, so reruns write identical bytes)."""

    def __init__(self, compression: str = "none", level: int = -1):
        from ...converters.json_converter import JsonConverter  # imported on use

        if compression not in ("none", "gzip"):
            raise ValueError(f"unknown s3.compression.type {compression!r}; use none or gzip")
        self.converter = JsonConverter()
        self.converter.configure({"schemas.enable": False}, False)
        self.gzip_level = (6 if level < 0 else level) if compression == "gzip" else None
        self.extension = ".json.gz" if self.gzip_level is not None else ".json"

    def encode(self, topic, rows):
        out = io.BytesIO()
        for schema, value in rows:
            data = self.converter.from_connect_data(topic, schema, value)
            if data is None:
                raise DataException(f"topic {topic}: the JSON converter wrote nothing for a value; "
                                    "null values are handled by behavior.on.null.values before formatting")
            out.write(data)
            out.write(b"\n")
        if self.gzip_level is not None:
            import gzip

            return gzip.compress(out.getvalue(), compresslevel=self.gzip_level, mtime=0)
        return out.getvalue()


class ParquetFormat(RecordFormat):
    """Parquet through pyarrow, compressed with ``codec`` (a key of :data:`PARQUET_CODECS`)."""

    def __init__(self, codec: str = "snappy", flavour: str = _S3):
        if codec not in PARQUET_CODECS:
            raise ValueError(f"unknown parquet.codec {codec!r}; use one of {', '.join(PARQUET_CODECS)}")
        self.compression, codec_ext = PARQUET_CODECS[codec]
        self.extension = (codec_ext if flavour == _S3 else "") + ".parquet"

    def encode(self, topic, rows):
        return self.encode_table(topic, rows[0][0] if rows else None, to_arrow_table(rows))

    def encode_table(self, topic: str, schema: Schema | None, table) -> bytes:
        """The file of ``table`` (as :func:`to_arrow_table` makes it, possibly in several chunks)
        whose rows have the value schema ``schema``."""
        import pyarrow.parquet as pq

        if any(c.num_chunks > 1 for c in table.columns):
            table = table.combine_chunks()  # the pages a one-chunk table of the same rows gets
        avro = _parquet_avro_schema(schema)
        if avro is not None:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"parquet.avro.schema": avro})
        buf = io.BytesIO()
        pq.write_table(table, buf, compression=self.compression)
        return buf.getvalue()


def _parquet_avro_schema(schema: Schema | None) -> bytes | None:
    """The Avro schema (JSON, UTF-8) of a struct value schema, as Confluent's Parquet writer stores it
    under ``parquet.avro.schema``; ``None`` without a struct schema or when it has no Avro form."""
    if schema is None or schema.type is not Type.STRUCT:
        return None

    def compute(s: Schema) -> bytes | None:
        from ...converters.avro.data import AvroData
        from ...converters.avro.names import schema_json

        try:
            return schema_json(AvroData(cache_size=0).from_connect_schema(s)).encode("utf-8")
        except DataException:
            return None

    return schema._memoized("parquet.avro.schema", compute)


def build_format(format_class: str, codec: str = "snappy", compression: str = "none", level: int = -1) -> RecordFormat:
    """The format of a ``format.class`` value (``codec`` for Parquet, ``compression`` and
    ``level`` for JSON); ``ValueError`` when unknown."""
    resolved = resolve_format(format_class)
    if resolved is None:
        raise ValueError(f"unknown format.class {format_class!r}")
    kind, flavour = resolved
    return JsonLinesFormat(compression, level) if kind == JSON else ParquetFormat(codec, flavour)


# ---------------------------------------------------------------- Connect -> Arrow

def arrow_type(schema: Schema):
    """The pyarrow type of a Connect schema (logical types as in the module docstring)."""
    import pyarrow as pa

    name = schema.name or ""
    if name == Date.LOGICAL_NAME:
        return pa.date32()
    if name == Time.LOGICAL_NAME:
        return pa.time32("ms")
    if name == Timestamp.LOGICAL_NAME:
        return pa.timestamp("ms", tz="UTC")
    if name == Decimal.LOGICAL_NAME:
        params = schema.parameters
        precision = int(params.get("connect.decimal.precision") or 38)
        return pa.decimal128(precision, Decimal.scale(schema))
    t = schema.type
    simple = {
        Type.INT8: pa.int8(), Type.INT16: pa.int16(), Type.INT32: pa.int32(), Type.INT64: pa.int64(),
        Type.FLOAT32: pa.float32(), Type.FLOAT64: pa.float64(), Type.BOOLEAN: pa.bool_(),
        Type.STRING: pa.string(), Type.BYTES: pa.binary(),
    }
    if t in simple:
        return simple[t]
    if t is Type.ARRAY:
        return pa.list_(arrow_field("element", schema.value_schema))
    if t is Type.MAP:
        return pa.map_(arrow_type(schema.key_schema), arrow_field("value", schema.value_schema))
    return pa.struct([arrow_field(f.name, f.schema) for f in schema.fields])


def arrow_field(name: str, schema: Schema):
    import pyarrow as pa

    return pa.field(name, arrow_type(schema), nullable=schema.optional)


def to_arrow_value(schema: Schema | None, value: Any) -> Any:
    """A Connect value as pyarrow accepts it for :func:`arrow_type` of ``schema``."""
    if value is None:
        return None
    if isinstance(value, Struct):
        return {f.name: to_arrow_value(f.schema, value.get(f.name)) for f in value.schema.fields}
    if schema is not None and schema.type is Type.MAP:
        return [(to_arrow_value(schema.key_schema, k), to_arrow_value(schema.value_schema, v)) for k, v in value.items()]
    if schema is not None and schema.type is Type.ARRAY:
        return [to_arrow_value(schema.value_schema, v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


# Python types whose values to_arrow_value returns as they are, whatever the (non-container) schema
_AS_IS = frozenset({type(None), bool, int, float, str, bytes, _decimal.Decimal, _dt.date, _dt.datetime, _dt.time,
                    dict, list, tuple})
_second = itemgetter(1)
_values_of = attrgetter("_values")
_schema_of = attrgetter("schema")


def _arrow_values(schema: Schema | None, values: list) -> list:
    """``[to_arrow_value(schema, v) for v in values]``: ``values`` itself when every value is
    one that to_arrow_value returns as it is (a column of plain values, the common case)."""
    if (schema is None or (schema.type is not Type.MAP and schema.type is not Type.ARRAY)) \
            and set(map(type, values)) <= _AS_IS:
        return values
    return [to_arrow_value(schema, v) for v in values]


def _struct_columns(schema: Schema, values: list) -> list[list] | None:
    """The columns ``pa.Table.from_pylist([to_arrow_value(schema, v) for v in values], ...)``
    builds from its rows, built a column at a time; ``None`` unless every value is a
    ``Struct`` of this very schema (of fields that are plain positions) and each conversion
    succeeds (the row-at-a-time path then does what it did, errors included)."""
    fields = schema._fields
    if not values or not schema._positional or set(map(type, values)) != {Struct} \
            or set(map(id, map(_schema_of, values))) != {id(schema)} \
            or set(map(len, map(_values_of, values))) != {len(fields)}:
        return None
    try:
        columns = []
        # value.get(f.name) for each value, a field at a time: the values at f's position, the
        # field's default for None
        for f, column in zip(fields, zip(*map(_values_of, values))):
            column = list(column)
            default = f.schema.default
            if default is not None:
                column = [default if v is None else v for v in column]
            columns.append(_arrow_values(f.schema, column))
        return columns
    except Exception:  # noqa: BLE001 - the row path does it again, and fails as it did
        return None


def to_arrow_table(rows: Rows):
    """The table of one file's ``(schema, value)`` rows (see the module docstring)."""
    import pyarrow as pa

    distinct = {id(s): s for s, _ in rows}.values()
    schema = rows[0][0] if rows else None
    if any(s is not schema and s != schema for s in distinct):
        raise DataException("one Parquet file got records with different value schemas; the sink should have "
                            "started a new file (this is a bug)")
    try:
        if schema is not None:
            if schema.type is Type.STRUCT:
                arrow_schema = pa.schema([arrow_field(f.name, f.schema) for f in schema.fields])
                columns = _struct_columns(schema, list(map(_second, rows)))
                if columns is not None:
                    # what Table.from_pylist(rows, schema=...) does with the rows' columns
                    return pa.Table.from_arrays(columns, schema=arrow_schema, metadata=None)
                return pa.Table.from_pylist([to_arrow_value(schema, v) for _, v in rows], schema=arrow_schema)
            arrow_schema = pa.schema([arrow_field("value", schema)])
            return pa.table({"value": pa.array(_arrow_values(schema, list(map(_second, rows))),
                                                type=arrow_schema.field("value").type)}, schema=arrow_schema)
        values = _arrow_values(None, list(map(_second, rows)))
        if all(isinstance(v, dict) for v in values):
            keys: dict[str, None] = {}
            for v in values:
                keys.update(dict.fromkeys(v))
            return pa.table({k: pa.array([v.get(k) for v in values]) for k in keys})
        if any(isinstance(v, dict) for v in values):
            raise DataException("schemaless values of one file mix maps and non-maps; Parquet needs one shape "
                                "per file: give the records a value schema or use format.class=json")
        return pa.table({"value": pa.array(values)})
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as e:
        raise DataException(f"values do not fit a Parquet table: {e}") from e
