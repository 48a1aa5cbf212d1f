"""Connect schemas and values <-> Avro, mapped as Confluent's ``io.confluent.connect.avro.AvroData`` maps them.

Schemas (``AvroData.from_connect_schema`` / ``to_connect_schema``; an Avro schema
is its JSON as Python: ``"string"``, ``{"type": "record", ...}``, ``[...]``):

=======================  ======================================================================
Connect                  Avro
=======================  ======================================================================
int8, int16              ``int`` with ``"connect.type": "int8"`` / ``"int16"``
int32, int64             ``int``, ``long``
float32, float64         ``float``, ``double``
boolean, string, bytes   ``boolean``, ``string``, ``bytes``
array                    ``array``
map, string keys         ``map``
map, other keys          ``array`` of records ``io.confluent.connect.avro.MapEntry`` {key, value}
                         (a named map: a record of the map's name, ``"connect.internal.type":
                         "MapEntry"``)
struct                   ``record``: the schema's name split at its last dot into namespace and
                         name; an unnamed struct is ``io.confluent.connect.avro.ConnectDefault``
optional schema          union ``["null", T]``, a field of it defaulting to ``null``
                         (``[T, "null"]`` when the schema has a non-null default)
default                  the record field's ``default`` and ``"connect.default"``
Date                     ``int``, ``"logicalType": "date"``
Time                     ``int``, ``"logicalType": "time-millis"``
Timestamp                ``long``, ``"logicalType": "timestamp-millis"``
Decimal                  ``bytes``, ``"logicalType": "decimal"``, ``"scale"`` and ``"precision"``
                         (the parameter ``connect.decimal.precision``, else 64)
named bytes with         ``fixed`` of that name and size (a Decimal: named by the parameter
``connect.fixed.size``   ``connect.fixed.name``, else ``...connect.data.Decimal``)
name, version, doc,      ``"connect.name"``, ``"connect.version"``, ``"connect.doc"``,
parameters               ``"connect.parameters"`` (a JSON object of strings); parameters whose
                         key starts with ``avro`` are also copied as Avro properties
struct ``io.confluent.   a union of its fields' schemas (Avro unions other than ``[null, T]``
connect.avro.Union``     read as such a struct, one optional field per branch, named by the
                         branch's type, or its name for a record, enum or fixed); a value is
                         written in the branch of its first non-null field and read into the
                         field of the branch it was written in
no schema                ``io.confluent.connect.avro.Anything`` (Confluent's schemaless record)
=======================  ======================================================================

Reading Avro that Connect did not write: ``enum`` becomes ``string`` with the
parameters ``io.confluent.connect.avro.Enum`` (full name) and
``io.confluent.connect.avro.Enum.<symbol>``; ``fixed`` becomes ``bytes`` named by the
fixed's full name with the parameter ``connect.fixed.size`` (so it is written back as
that ``fixed``); a decimal's scale defaults to 0, as the spec says; a
record's and its fields' ``doc`` become the parameters
``io.confluent.connect.avro.record.doc`` / ``...field.doc.<field>``; a field
default without ``connect.default`` becomes the Connect default plus the
parameter ``io.confluent.connect.avro.field.default=true``; other logical types
(``timestamp-micros``, ``uuid``, ...) stay their primitive type; the version is
``connect.version`` or, failing that, the one passed in (the registry's).
Recursive Avro schemas cannot become Connect schemas and raise :class:`DataException`.
So ``to_connect_schema(from_connect_schema(s)) == s`` for every Connect schema
``s`` (but a schema read from a registry gains the registry's version when it
had none).

Deliberate differences from Confluent (each where Java would fail or write
invalid Avro): different unnamed structs (or non-string-keyed maps) in one
schema become ``ConnectDefault``, ``ConnectDefault2``, ... (``MapEntry``,
``MapEntry2``, ...; both read back as unnamed) instead of "Can't redefine";
an optional struct with a non-null default is ``[record, "null"]``; a
non-string-keyed map's field default is written as Avro requires (an array of
``{"key":…, "value":…}``); a decimal on a ``fixed`` reads as Decimal, its fixed's name
kept in the parameter ``connect.fixed.name`` (Java fails: "Mismatched names"), and is
written sign-extended to the fixed's size; a union with an enum branch and a string
branch writes the enum as an Avro ``enum`` even without enhanced support (Java would
write two ``string`` branches, which Avro refuses); a named type used with different
field defaults is defined once (those defaults are the fields'). Names Avro does not
allow (``my-field``, ``1st``, ``com.ex.my-record``) raise :class:`DataException`, as
Java's Avro refuses them (it checks names, not namespaces, and takes non-ASCII letters);
``scrub.invalid.names`` replaces invalid characters with ``_`` as Confluent does. A struct without namespace used twice inside a
namespaced one is referred to by its bare name, as Java writes it: the spec reads that
name in the enclosing namespace, Java's Avro (and this module) falls back to the
type without namespace, but spec-strict readers (fastavro, Python's ``avro``) refuse
the schema -- give such structs a namespace.

Values: :meth:`AvroData.writer` compiles, once per Connect schema, what turns a
Connect value into the bytes of Avro's binary encoding (logical values as
Kafka Connect defines them: :class:`~.data.Date` days, :class:`~.data.Time` ms,
:class:`~.data.Timestamp` ms, :class:`~.data.Decimal` big-endian unscaled
bytes; a union's value as fastavro's ``(branch name, datum)``, so that the branch
written is the value's); :meth:`AvroData.reader` compiles, once per writer (and reader) schema,
the inverse, resolving the writer's data onto a reader schema when one is given
(Avro schema resolution: added fields take their defaults, removed fields are
skipped, ``int`` widens to ``long``, ...). Encoding and decoding run in
``fastavro``. Both are cached (``schemas.cache.size`` entries each), so a
record costs one dictionary lookup plus the encoding itself.
"""


from __future__ import annotations

import json
from typing import Any

from ...connect.data import Schema
from ...connect.errors import DataException
from .codec import AvroReader, AvroWriter
from .from_avro import _ToConnect
from .names import _LRU, _PRIMITIVES, ANYTHING_SCHEMA
from .resolution import _ANYTHING_KEY, _is_anything, _parse, _read_views, compatibility_problems
from .to_avro import _emit, _FromConnect

__all__ = ["AvroData"]


class AvroData:
    """Confluent's Connect <-> Avro mapping (see the module docstring), with caches.

    ``connect_meta_data`` (``connect.meta.data``, default true) writes and reads the
    ``connect.*`` annotations; ``enhanced_schema_support``
    (``enhanced.avro.schema.support``, default false) writes strings carrying Avro enum
    parameters back as Avro enums and names union branches by full name;
    ``scrub_invalid_names`` (``scrub.invalid.names``, default false) replaces characters
    Avro does not allow in names with ``_`` (else such a name raises :class:`DataException`);
    ``cache_size`` (``schemas.cache.size``) bounds each cache. Thread-safe.
    """

    def __init__(self, *, connect_meta_data: bool = True, enhanced_schema_support: bool = False,
                 scrub_invalid_names: bool = False, cache_size: int = 1000):
        self.connect_meta_data = connect_meta_data
        self.enhanced_schema_support = enhanced_schema_support
        self.scrub_invalid_names = scrub_invalid_names
        self.cache_size = cache_size
        self._writers = _LRU(cache_size)
        self._readers = _LRU(cache_size)
        self._schemas = _LRU(cache_size)
        self._last: tuple[Schema, AvroWriter] | None = None

    # schemas
    def from_connect_schema(self, schema: Schema | None) -> Any:
        """The Avro schema (JSON as Python) of a Connect schema; ``None`` gives ``ANYTHING_SCHEMA``."""
        if schema is None:
            return ANYTHING_SCHEMA
        return _emit(_FromConnect(self).convert(schema), None, set())

    def to_connect_schema(self, avro_schema: Any, version: int | None = None) -> Schema | None:
        """The Connect schema of an Avro schema (JSON text or as Python); ``None`` for
        :data:`ANYTHING_SCHEMA`. ``version``: the Connect version when the schema has no
        ``connect.version`` (the registry's version of it)."""
        if isinstance(avro_schema, (str, bytes)) and not (isinstance(avro_schema, str) and avro_schema in _PRIMITIVES):
            try:
                avro_schema = json.loads(avro_schema)
            except ValueError as e:
                raise DataException(f"Avro schema is not valid JSON: {e}") from None
        return self._to_connect(avro_schema, version)

    def _to_connect(self, avro_schema: Any, version: int | None) -> Schema | None:
        if _is_anything(avro_schema):
            return None
        return _ToConnect(self).convert(avro_schema, None, version=version)

    # values
    def writer(self, schema: Schema | None) -> AvroWriter:
        """The (cached) :class:`AvroWriter` of a Connect schema."""
        last = self._last
        if last is not None and last[0] is schema:
            return last[1]
        key = schema if schema is not None else _ANYTHING_KEY
        w = self._writers.get(key)
        if w is None:
            if schema is None:
                w = AvroWriter(None, ANYTHING_SCHEMA)
            else:
                ctx = _FromConnect(self)
                w = AvroWriter(schema, _emit(ctx.convert(schema), None, set()), ctx)
            w = self._writers.put(key, w)
        self._last = (schema, w)
        return w

    def reader(self, writer_schema: str, reader_schema: str | None = None, *, version: int | None = None,
               key: Any = None) -> AvroReader:
        """The (cached) :class:`AvroReader` for data written with ``writer_schema`` (JSON text),
        read as ``reader_schema`` (JSON text) if given. ``key`` caches it under something
        cheaper than the schema text (a registry id)."""
        cache_key = key if key is not None else (writer_schema, reader_schema, version)
        r = self._readers.get(cache_key)
        if r is not None:
            return r
        writer = self._avro(writer_schema, "writer")
        reader = self._avro(reader_schema, "reader") if reader_schema is not None else None
        connect = self._to_connect(reader if reader is not None else writer, version)
        if reader is not None:
            problems = compatibility_problems(reader, writer)
            if problems:
                raise DataException("data of the writer schema cannot be read with the reader schema: "
                                    + "; ".join(problems))
        writer_view, reader_view = _read_views(writer, reader)
        writer_parsed = _parse(writer_view)
        reader_parsed = _parse(reader_view) if reader_view is not None else None
        return self._readers.put(cache_key, AvroReader(connect, writer_parsed, reader_parsed))

    def _avro(self, text: str, which: str) -> Any:
        hit = self._schemas.get(text)
        if hit is None:
            try:
                hit = self._schemas.put(text, json.loads(text))
            except ValueError as e:
                raise DataException(f"the {which} schema is not valid JSON: {e}") from None
        return hit

    def from_connect_data(self, schema: Schema | None, value: Any) -> Any:
        """A Connect value as the Avro datum of ``from_connect_schema(schema)`` (logical values
        as their primitives, maps of non-string keys as key/value records, a union's value as
        fastavro's ``(branch name, datum)``)."""
        if value is None:
            return None
        return self.writer(schema).datum(value)

    def to_connect_data(self, avro_schema: Any, datum: Any) -> Any:
        """The Connect value of an Avro datum (as fastavro reads it, logical values as their
        primitives) of ``avro_schema``. (A general union's branch is then told by the value's
        type: bytes read through :meth:`reader` keep the branch written.)"""
        schema = self.to_connect_schema(avro_schema)
        return AvroReader(schema, None, None).convert(datum)
