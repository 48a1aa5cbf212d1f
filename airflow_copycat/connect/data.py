"""The data model: schemas, structs and logical types (Kafka Connect's ``connect.data``).

A :class:`Schema` describes a value: a primitive type (``int8`` .. ``int64``,
``float32``/``float64``, ``boolean``, ``string``, ``bytes``) or a container
(``array`` of one value schema, ``map`` of key and value schemas, ``struct``
of named, ordered fields). Any schema may be optional (the value may be
``None``), carry a default, a name, a version, a doc string and string
parameters. Logical types are named schemas over a primitive:

=============  ==========  =======================================  ================
logical type   over        Connect value (what converters write)    Python value
=============  ==========  =======================================  ================
Date           int32       days since 1970-01-01                    ``datetime.date``
Time           int32       milliseconds since midnight              ``datetime.time``
Timestamp      int64       milliseconds since the epoch (UTC)       ``datetime.datetime``
Decimal        bytes       two's-complement big-endian unscaled     ``decimal.Decimal``
=============  ==========  =======================================  ================

Values are plain Python: ``int``, ``float``, ``bool``, ``str``, ``bytes``,
``list``, ``dict``, :class:`Struct`, and the Python values of the logical types.

Over 500 lines because its classes refer to each other at import and call time (a Schema validates
its default with ``validate_value``, which checks Structs and the logical types, which are built with
``SchemaBuilder``), so split apart they would import each other in a cycle; most lines are docstrings.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from enum import Enum
from typing import Any, Iterable, Mapping

from .errors import DataException


class Type(str, Enum):
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    BOOLEAN = "boolean"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"

    @property
    def is_primitive(self) -> bool:
        return self not in (Type.ARRAY, Type.MAP, Type.STRUCT)


_type_of = type  # Schema.__init__ has a parameter named type
_MISSING = object()

_INT_RANGES = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}


class Field:
    """A named field of a struct schema, with its position."""

    __slots__ = ("name", "index", "schema")

    def __init__(self, name: str, index: int, schema: "Schema"):
        self.name, self.index, self.schema = name, index, schema

    def __eq__(self, other):
        return isinstance(other, Field) and (self.name, self.index, self.schema) == (
            other.name,
            other.index,
            other.schema,
        )

    def __hash__(self):
        return hash((self.name, self.index))

    def __repr__(self):
        return f"Field({self.name!r}, {self.index}, {self.schema!r})"


class Schema:
    """An immutable schema. Build one with :class:`SchemaBuilder` or use the constants
    (``Schema.STRING``, ``Schema.OPTIONAL_INT64``, ...)."""

    __slots__ = (
        "type",
        "optional",
        "default",
        "name",
        "version",
        "doc",
        "_parameters",
        "_fields",
        "key_schema",
        "value_schema",
        "_by_name",  # field name -> its first Field (Schema.field is O(1)); None unless every name is a str
        "_positional",  # names all different and each field's index its position: a name finds its position
        "_hash",  # hash(), computed once (the schema is immutable); None if a member is unhashable
        "_memo",  # None, or what users (converters, formats) derived from this schema, by their own keys
    )

    def __init__(
        self,
        type: Type | str,
        *,
        optional: bool = False,
        default: Any = None,
        name: str | None = None,
        version: int | None = None,
        doc: str | None = None,
        parameters: Mapping[str, str] | None = None,
        fields: Iterable[Field] | None = None,
        key_schema: "Schema | None" = None,
        value_schema: "Schema | None" = None,
    ):
        t = Type(type)
        if t is Type.MAP and (key_schema is None or value_schema is None):
            raise DataException("a map schema needs a key schema and a value schema")
        if t is Type.ARRAY and value_schema is None:
            raise DataException("an array schema needs a value schema")
        s = object.__setattr__
        s(self, "type", t)
        s(self, "optional", bool(optional))
        s(self, "name", name)
        s(self, "version", version)
        s(self, "doc", doc)
        # insertion order, as Kafka's LinkedHashMap: converters write parameters in this order
        s(self, "_parameters", tuple((parameters or {}).items()))
        s(self, "_fields", tuple(fields or ()))
        by_name: dict | None = {}
        for f in self._fields:
            if _type_of(getattr(f, "name", None)) is not str:  # only str names (else Schema.field scans, as it did)
                by_name = None
                break
            by_name.setdefault(f.name, f)  # the first of equal names, as a scan finds it
        s(self, "_by_name", by_name)
        s(self, "_positional", by_name is not None and len(by_name) == len(self._fields)
          and all(getattr(f, "index", None) == i for i, f in enumerate(self._fields)))
        s(self, "key_schema", key_schema)
        s(self, "value_schema", value_schema)
        s(self, "default", None)
        try:
            h = hash((t, self.optional, name, version, len(self._fields)))
        except TypeError:  # __hash__ raises it again, as before
            h = None
        s(self, "_hash", h)
        s(self, "_memo", None)
        if default is not None:
            validate_value(self, default, "default")
        s(self, "default", default)

    def __setattr__(self, key, value):
        raise AttributeError("Schema is immutable; build a new one with SchemaBuilder")

    def _memoized(self, key: str, compute):
        """``compute(self)``, computed once per schema object and ``key`` (the schema is immutable,
        so whatever depends on it alone can be kept with it)."""
        memo = self._memo
        if memo is None:
            memo = {}
            object.__setattr__(self, "_memo", memo)
        value = memo.get(key, _MISSING)
        if value is _MISSING:
            value = memo[key] = compute(self)
        return value

    @property
    def parameters(self) -> dict[str, str]:
        return dict(self._parameters)

    @property
    def fields(self) -> list[Field]:
        if self.type is not Type.STRUCT:
            raise DataException(f"cannot list fields of a {self.type.value} schema, only of a struct")
        return list(self._fields)

    def field(self, name: str) -> Field | None:
        """The field called ``name``, or ``None`` if this struct has none."""
        if self.type is not Type.STRUCT:
            raise DataException(f"cannot look up field {name!r} of a {self.type.value} schema")
        by_name = self._by_name
        if by_name is not None and type(name) is str:
            return by_name.get(name)
        for f in self._fields:
            if f.name == name:
                return f
        return None

    def _key(self):
        return (
            self.type,
            self.optional,
            _hashable(self.default),
            self.name,
            self.version,
            self.doc,
            tuple(sorted(self._parameters)),  # equality ignores parameter order, as Map.equals
            self._fields,
            self.key_schema,
            self.value_schema,
        )

    def __eq__(self, other):
        return self is other or (isinstance(other, Schema) and self._key() == other._key())

    def __hash__(self):
        h = self._hash
        if h is None:
            return hash((self.type, self.optional, self.name, self.version, len(self._fields)))
        return h

    def __repr__(self):
        bits = [self.type.value]
        if self.name:
            bits.append(f"name={self.name!r}")
        if self.optional:
            bits.append("optional")
        if self.type is Type.STRUCT:
            bits.append("fields=[" + ", ".join(f"{f.name}:{f.schema!r}" for f in self._fields) + "]")
        return "Schema(" + ", ".join(bits) + ")"

    def copy(self, **changes) -> "Schema":
        """A new schema equal to this one but for ``changes`` (``optional=True``, ``name=...``)."""
        args = dict(
            optional=self.optional,
            default=self.default,
            name=self.name,
            version=self.version,
            doc=self.doc,
            parameters=self.parameters,
            fields=self._fields if self.type is Type.STRUCT else None,
            key_schema=self.key_schema,
            value_schema=self.value_schema,
        )
        args.update(changes)
        return Schema(self.type, **args)


def _hashable(v):
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, Struct):
        return (v.schema, tuple(_hashable(x) for x in v.values()))
    return v


for _t in Type:
    if _t.is_primitive:
        setattr(Schema, _t.name, Schema(_t))
        setattr(Schema, "OPTIONAL_" + _t.name, Schema(_t, optional=True))


class SchemaBuilder:
    """Fluent builder, as in Kafka Connect::

        schema = (SchemaBuilder.struct().name("com.example.Order")
                  .field("id", Schema.INT64)
                  .field("note", Schema.OPTIONAL_STRING)
                  .build())
    """

    def __init__(self, type: Type | str):
        self._type = Type(type)
        self._args: dict[str, Any] = {}
        self._fields: list[Field] = []
        self._params: dict[str, str] = {}

    # constructors
    @classmethod
    def struct(cls) -> "SchemaBuilder":
        return cls(Type.STRUCT)

    @classmethod
    def array(cls, value_schema: Schema) -> "SchemaBuilder":
        b = cls(Type.ARRAY)
        b._args["value_schema"] = value_schema
        return b

    @classmethod
    def map(cls, key_schema: Schema, value_schema: Schema) -> "SchemaBuilder":
        b = cls(Type.MAP)
        b._args.update(key_schema=key_schema, value_schema=value_schema)
        return b

    @classmethod
    def type(cls, type: Type | str) -> "SchemaBuilder":
        return cls(type)

    for _t in Type:
        if _t.is_primitive:
            locals()[_t.value] = classmethod(lambda cls, _t=_t: cls(_t))
    del _t

    # modifiers
    def optional(self) -> "SchemaBuilder":
        self._args["optional"] = True
        return self

    def required(self) -> "SchemaBuilder":
        self._args["optional"] = False
        return self

    def name(self, name: str) -> "SchemaBuilder":
        self._args["name"] = name
        return self

    def version(self, version: int) -> "SchemaBuilder":
        self._args["version"] = version
        return self

    def doc(self, doc: str) -> "SchemaBuilder":
        self._args["doc"] = doc
        return self

    def default_value(self, value) -> "SchemaBuilder":
        self._args["default"] = value
        return self

    def parameter(self, key: str, value: str) -> "SchemaBuilder":
        self._params[key] = value
        return self

    def parameters(self, params: Mapping[str, str]) -> "SchemaBuilder":
        self._params.update(params)
        return self

    def field(self, name: str, schema: "Schema | SchemaBuilder") -> "SchemaBuilder":
        if self._type is not Type.STRUCT:
            raise DataException("only struct schemas have fields")
        if any(f.name == name for f in self._fields):
            raise DataException(f"duplicate field {name!r}")
        if isinstance(schema, SchemaBuilder):
            schema = schema.build()
        self._fields.append(Field(name, len(self._fields), schema))
        return self

    def build(self) -> Schema:
        return Schema(self._type, fields=self._fields, parameters=self._params or None, **self._args)


# ---------------------------------------------------------------- logical types

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class Date:
    """Logical Date: int32 days since the epoch; Python value ``datetime.date``."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Date"

    @staticmethod
    def builder() -> SchemaBuilder:
        return SchemaBuilder.int32().name(Date.LOGICAL_NAME).version(1)

    @staticmethod
    def from_logical(value: _dt.date) -> int:
        if isinstance(value, _dt.datetime):
            raise DataException("Date values must be datetime.date, not datetime.datetime")
        return (value - _EPOCH_DATE).days

    @staticmethod
    def to_logical(value: int) -> _dt.date:
        return _EPOCH_DATE + _dt.timedelta(days=int(value))


class Time:
    """Logical Time: int32 milliseconds since midnight; Python value ``datetime.time``."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Time"

    @staticmethod
    def builder() -> SchemaBuilder:
        return SchemaBuilder.int32().name(Time.LOGICAL_NAME).version(1)

    @staticmethod
    def from_logical(value: _dt.time) -> int:
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000

    @staticmethod
    def to_logical(value: int) -> _dt.time:
        value = int(value)
        if not 0 <= value < 86_400_000:
            raise DataException(f"Time value {value} is outside one day in milliseconds")
        s, ms = divmod(value, 1000)
        m, s = divmod(s, 60)
        h, m = divmod(m, 60)
        return _dt.time(h, m, s, ms * 1000)


class Timestamp:
    """Logical Timestamp: int64 milliseconds since the epoch; Python value ``datetime.datetime``
    (aware, UTC; a naive datetime is taken to be UTC)."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Timestamp"

    @staticmethod
    def builder() -> SchemaBuilder:
        return SchemaBuilder.int64().name(Timestamp.LOGICAL_NAME).version(1)

    @staticmethod
    def from_logical(value: _dt.datetime) -> int:
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000

    @staticmethod
    def to_logical(value: int) -> _dt.datetime:
        return _EPOCH + _dt.timedelta(milliseconds=int(value))


class Decimal:
    """Logical Decimal: bytes holding the two's-complement big-endian unscaled value,
    with parameter ``scale``; Python value ``decimal.Decimal``."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Decimal"
    SCALE_FIELD = "scale"

    @staticmethod
    def builder(scale: int) -> SchemaBuilder:
        return SchemaBuilder.bytes().name(Decimal.LOGICAL_NAME).parameter(Decimal.SCALE_FIELD, str(scale)).version(1)

    @staticmethod
    def schema(scale: int) -> Schema:
        return Decimal.builder(scale).build()

    @staticmethod
    def scale(schema: Schema) -> int:
        try:
            return int(schema.parameters[Decimal.SCALE_FIELD])
        except (KeyError, ValueError):
            raise DataException(f"Decimal schema {schema!r} has no integer 'scale' parameter") from None

    @staticmethod
    def unscaled(schema: Schema, value: _decimal.Decimal) -> int:
        """The unscaled integer of ``value`` at the schema's scale, computed exactly (no
        decimal-context rounding); raises if ``value`` has more fractional digits than the scale."""
        return Decimal.unscaled_at(value, Decimal.scale(schema))

    @staticmethod
    def unscaled_at(value: _decimal.Decimal, scale: int) -> int:
        """:meth:`unscaled` for a scale already known (converters compute it once per schema)."""
        sign, digits, exp = value.as_tuple()
        if not isinstance(exp, int):
            raise DataException(f"Decimal {value} is not a finite number")
        n = int("".join(map(str, digits)) or "0")
        shift = exp + scale
        if shift >= 0:
            n *= 10**shift
        else:
            n, rest = divmod(n, 10**-shift)
            if rest:
                raise DataException(f"Decimal {value} has more digits than scale {scale} allows")
        return -n if sign else n

    @staticmethod
    def from_logical(schema: Schema, value: _decimal.Decimal) -> bytes:
        n = Decimal.unscaled(schema, value)
        # minimal two's complement, as java.math.BigInteger.toByteArray (-128 is one byte, 0x80)
        bits = n.bit_length() if n >= 0 else (~n).bit_length()
        return n.to_bytes(bits // 8 + 1, "big", signed=True)

    @staticmethod
    def to_logical(schema: Schema, value: bytes) -> _decimal.Decimal:
        n = int.from_bytes(bytes(value), "big", signed=True)
        # built from a string so that no decimal context rounds it (Kafka's BigDecimal is exact)
        return _decimal.Decimal(f"{n}E{-Decimal.scale(schema)}")


Schema.DATE = Date.builder().build()
Schema.OPTIONAL_DATE = Date.builder().optional().build()
Schema.TIME = Time.builder().build()
Schema.TIMESTAMP = Timestamp.builder().build()
Schema.OPTIONAL_TIMESTAMP = Timestamp.builder().optional().build()

_LOGICAL_PY_TYPES = {
    Date.LOGICAL_NAME: (_dt.date,),
    Time.LOGICAL_NAME: (_dt.time,),
    Timestamp.LOGICAL_NAME: (_dt.datetime,),
    Decimal.LOGICAL_NAME: (_decimal.Decimal,),
}

_PY_TYPES = {
    Type.INT8: (int,),
    Type.INT16: (int,),
    Type.INT32: (int,),
    Type.INT64: (int,),
    Type.FLOAT32: (float, int),
    Type.FLOAT64: (float, int),
    Type.BOOLEAN: (bool,),
    Type.STRING: (str,),
    Type.BYTES: (bytes, bytearray, memoryview),
    Type.ARRAY: (list, tuple),
    Type.MAP: (dict,),
}


def validate_value(schema: Schema, value: Any, where: str = "value") -> None:
    """Raise :class:`DataException` naming ``where`` if ``value`` does not fit ``schema``."""
    if value is None:
        if schema.optional or schema.default is not None:
            return
        raise DataException(f"{where}: null for a required {schema.type.value} schema")
    logical = _LOGICAL_PY_TYPES.get(schema.name or "")
    if logical is not None:
        if not isinstance(value, logical) or (logical == (_dt.date,) and isinstance(value, _dt.datetime)):
            raise DataException(
                f"{where}: {type(value).__name__} is not valid for logical type {schema.name}; expected {logical[0].__name__}"
            )
        return
    t = schema.type
    if t is Type.STRUCT:
        if not isinstance(value, Struct):
            raise DataException(f"{where}: {type(value).__name__} is not a Struct")
        if value.schema is not schema and value.schema != schema:
            raise DataException(f"{where}: Struct schema {value.schema!r} does not match {schema!r}")
        value.validate()
        return
    ok = _PY_TYPES[t]
    if not isinstance(value, ok) or (t is not Type.BOOLEAN and isinstance(value, bool)):
        raise DataException(f"{where}: {type(value).__name__} {value!r:.50} is not valid for a {t.value} schema")
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        if not lo <= value <= hi:
            raise DataException(f"{where}: {value} is out of range for {t.value}")
    elif t is Type.ARRAY:
        for i, item in enumerate(value):
            validate_value(schema.value_schema, item, f"{where}[{i}]")
    elif t is Type.MAP:
        for k, v in value.items():
            validate_value(schema.key_schema, k, f"{where} key {k!r}")
            validate_value(schema.value_schema, v, f"{where}[{k!r}]")


class Struct:
    """A value of a struct schema: field values by name, validated against the schema.

    ``put`` checks the field exists and the value fits; ``validate`` checks every
    required field is set. ``get`` of an unset field returns the field's default.
    """

    __slots__ = ("schema", "_values")

    def __init__(self, schema: Schema, values: Mapping[str, Any] | None = None):
        if schema.type is not Type.STRUCT:
            raise DataException(f"a Struct needs a struct schema, not {schema!r}")
        self.schema = schema
        self._values: list[Any] = [None] * len(schema._fields)
        for k, v in (values or {}).items():
            self.put(k, v)

    @classmethod
    def _trusted(cls, schema: Schema, values: list[Any]) -> Struct:
        """A Struct of ``schema`` holding ``values`` (one per field, in field order) as they are:
        no check at all. Only for converters whose values are known to fit (what ``put`` of
        each would have accepted); ``schema`` must be a struct schema."""
        s = cls.__new__(cls)
        s.schema = schema
        s._values = values
        return s

    def _field(self, name: str) -> Field:
        if type(name) is str:
            try:
                return self.schema._by_name[name]
            except (KeyError, TypeError):  # not a field, or no name index (TypeError: it is None)
                pass
        f = self.schema.field(name)
        if f is None:
            raise DataException(f"{name!r} is not a field of {self.schema.name or 'the struct schema'}")
        return f

    def put(self, name: str, value: Any) -> "Struct":
        f = self._field(name)
        validate_value(f.schema, value, f"field {name!r}")
        self._values[f.index] = value
        return self

    def get(self, name: str) -> Any:
        f = self._field(name)
        v = self._values[f.index]
        return f.schema.default if v is None else v

    def get_without_default(self, name: str) -> Any:
        """The value put for ``name``, ``None`` if none was (the field's default is not applied)."""
        return self._values[self._field(name).index]

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def values(self) -> list[Any]:
        schema = self.schema
        if schema._positional:  # get(f.name) reads position i
            return [f.schema.default if v is None else v for f, v in zip(schema._fields, self._values)]
        return [self.get(f.name) for f in schema.fields]

    def validate(self) -> None:
        for f in self.schema.fields:
            validate_value(f.schema, self.get(f.name), f"field {f.name!r}")

    def to_dict(self) -> dict[str, Any]:
        """Field values by name, nested structs as dicts too."""
        return {f.name: _plain(self.get(f.name)) for f in self.schema.fields}

    def __eq__(self, other):
        return isinstance(other, Struct) and self.schema == other.schema and self.values() == other.values()

    def __hash__(self):
        return hash(tuple(_hashable(v) for v in self.values()))

    def __repr__(self):
        return "Struct{" + ",".join(f"{f.name}={self.get(f.name)!r}" for f in self.schema.fields) + "}"


def _plain(v):
    if isinstance(v, Struct):
        return v.to_dict()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v
