"""Decoding PostgreSQL's ``pgoutput`` logical replication messages (protocol version 1).

pgoutput is the output plugin built into every PostgreSQL >= 10 (managed services included).
Each message is one byte of type then its fields, big-endian; strings end with a NUL byte
(see "Logical Replication Message Formats" in PostgreSQL's documentation):

* ``B`` Begin (final LSN, commit time, xid), ``C`` Commit (flags, commit LSN, end LSN, time);
* ``R`` Relation (oid, schema, table, replica identity, columns with key flag, type, typmod),
  sent before the first change of a table in a decoding session and again after its
  definition changed; ``Y`` Type (a non-built-in type's schema and name); ``O`` Origin;
* ``I`` Insert (``N`` new tuple), ``U`` Update (optional ``K`` key-only or ``O`` full old tuple,
  then ``N``), ``D`` Delete (``K`` or ``O``), ``T`` Truncate (relation oids, options);
* ``M`` logical decoding message (``pg_logical_emit_message``; sent with ``messages 'true'``).

Tuple columns are ``n`` (NULL), ``u`` (a TOASTed value the change left alone: not in the WAL)
or ``t`` (the value's text output, length-prefixed). They decode to ``None``,
:data:`~.model.UNCHANGED_TOAST` and ``str``. In a UTF-8 session an insert, an update without old
row and a delete come as a :class:`WireChange`: its tuples are decoded when first read (so a batch
can read many changes' tuples at once from their bytes, :mod:`.wire_columns`), and a malformed tuple
raises :class:`PgOutputError` then, not from :meth:`PgOutputDecoder.decode` (and not at all for a change
the stream skips: a table not captured, a change an earlier run sent).

:class:`PgOutputDecoder` is stateful like the protocol: it remembers relations (a change names
its table only by oid) and the open transaction (a change carries neither xid nor commit
time). Feed it the messages of one decoding session in order, each with its WAL position.
"""

from __future__ import annotations

import codecs
import struct
from dataclasses import dataclass, replace
from typing import Callable

from .model import UNCHANGED_TOAST, Begin, Change, Column, Commit, Relation, Truncate

PG_EPOCH_US = 946_684_800_000_000
"""PostgreSQL timestamps count microseconds from 2000-01-01; the model counts from 1970-01-01."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_BEGIN = struct.Struct(">QqI")
_COMMIT = struct.Struct(">BQQq")


class PgOutputError(ValueError):
    """A message this decoder cannot read: an unknown type, a change of a relation never described,
    a truncated message. Says which message and at which LSN."""


@dataclass(frozen=True)
class TypeInfo:
    """``Y``: a type that is not built in (an enum, a domain, a composite) as the publisher names it."""

    oid: int
    schema: str
    name: str


@dataclass(frozen=True)
class Origin:
    """``O``: the changes of the current transaction were replicated from another node."""

    commit_lsn: int
    name: str


@dataclass(frozen=True)
class LogicalMessage:
    """``M``: a ``pg_logical_emit_message(transactional, prefix, content)`` call."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes


class WireChange(Change):
    """A :class:`~.model.Change` that keeps its message's bytes and decodes ``before``/``after`` when first
    read (then as :class:`PgOutputDecoder` decodes them; equal to the eager :class:`~.model.Change`).

    ``wire`` is the message; ``old_at`` / ``new_at`` are where its old and new tuples start in it
    (their column count), -1 for none."""

    def __init__(self, relation: Relation, op: str, lsn: int, xid: int, commit_ts_us: int, wire: bytes,
                 old_at: int, new_at: int, read_tuple: Callable):
        self.__dict__.update(relation=relation, op=op, lsn=lsn, xid=xid, commit_ts_us=commit_ts_us, wire=wire,
                             old_at=old_at, new_at=new_at, _read=read_tuple)  # frozen: no __setattr__

    def _tuple(self, name: str, at: int) -> tuple | None:
        cached = self.__dict__.get(name)
        if cached is None and at >= 0:
            try:
                cached, _ = self._read(self.wire, at)
            except (struct.error, IndexError, UnicodeDecodeError) as e:
                kind = self.wire[0:1].decode()
                raise PgOutputError(f"malformed pgoutput {kind} message at LSN {self.lsn:X}: {e}") from None
            object.__setattr__(self, name, cached)
        return cached

    @property
    def before(self) -> tuple | None:
        return self._tuple("_before", self.old_at)

    @property
    def after(self) -> tuple | None:
        return self._tuple("_after", self.new_at)

    def __eq__(self, other):
        if not isinstance(other, Change):
            return NotImplemented
        return (self.relation, self.op, self.before, self.after, self.lsn, self.xid, self.commit_ts_us) == \
            (other.relation, other.op, other.before, other.after, other.lsn, other.xid, other.commit_ts_us)

    __hash__ = Change.__hash__

    def __repr__(self) -> str:
        return (f"WireChange(relation={self.relation.schema}.{self.relation.table}, op={self.op!r}, "
                f"before={self.before!r}, after={self.after!r}, lsn={self.lsn}, xid={self.xid})")


Message = Begin | Commit | Relation | Change | Truncate | TypeInfo | Origin | LogicalMessage


class PgOutputDecoder:
    """Decodes one pgoutput session's messages into :mod:`.model` objects.

    ``describe(relation)`` may return the relation with what pgoutput does not send filled in
    (``Column.type_name``, ``optional``, ``default``: from the catalog); it is called once per
    ``R`` message. ``encoding`` is the database's encoding (pgoutput sends text in it).

    :meth:`decode` returns one object per message; ``R`` returns the :class:`~.model.Relation`
    it defines (the relation cache is updated first).
    """

    def __init__(self, describe: Callable[[Relation], Relation] | None = None, encoding: str = "utf-8"):
        self.relations: dict[int, Relation] = {}
        self.types: dict[int, TypeInfo] = {}
        self.describe = describe
        self.encoding = encoding
        self._wire = codecs.lookup(encoding).name == "utf-8"  # changes as WireChange
        self.xid = 0
        self.commit_ts_us = 0
        self.final_lsn = 0

    def decode(self, data: bytes | memoryview, lsn: int = 0) -> Message:
        """One message (``data``: its bytes; ``lsn``: its WAL position). Raises :class:`PgOutputError`."""
        data = bytes(data)
        if not data:
            raise PgOutputError(f"empty pgoutput message at LSN {lsn:X}")
        kind = data[0:1]
        try:
            handler = _HANDLERS[kind]
        except KeyError:
            raise PgOutputError(f"unknown pgoutput message type {kind!r} at LSN {lsn:X} (protocol version 1 "
                                f"has B C O R Y I U D T M)") from None
        try:
            return handler(self, data, lsn)
        except (struct.error, IndexError, UnicodeDecodeError) as e:
            raise PgOutputError(f"malformed pgoutput {kind.decode()} message at LSN {lsn:X}: {e}") from None

    # ------------------------------------------------------------- transactions

    def _begin(self, data: bytes, lsn: int) -> Begin:
        final_lsn, ts, xid = _BEGIN.unpack_from(data, 1)
        self.final_lsn, self.commit_ts_us, self.xid = final_lsn, ts + PG_EPOCH_US, xid
        return Begin(final_lsn, self.commit_ts_us, xid)

    def _commit(self, data: bytes, lsn: int) -> Commit:
        _flags, commit_lsn, end_lsn, ts = _COMMIT.unpack_from(data, 1)
        return Commit(commit_lsn, end_lsn, ts + PG_EPOCH_US)

    def _origin(self, data: bytes, lsn: int) -> Origin:
        (commit_lsn,) = struct.unpack_from(">Q", data, 1)
        name, _ = self._string(data, 9)
        return Origin(commit_lsn, name)

    def _message(self, data: bytes, lsn: int) -> LogicalMessage:
        flags = data[1]
        (msg_lsn,) = struct.unpack_from(">Q", data, 2)
        prefix, pos = self._string(data, 10)
        (length,) = _I32.unpack_from(data, pos)
        return LogicalMessage(bool(flags & 1), msg_lsn, prefix, data[pos + 4:pos + 4 + length])

    # ------------------------------------------------------------- catalog

    def _relation(self, data: bytes, lsn: int) -> Relation:
        (oid,) = _U32.unpack_from(data, 1)
        schema, pos = self._string(data, 5)
        table, pos = self._string(data, pos)
        identity = chr(data[pos])
        (ncols,) = _I16.unpack_from(data, pos + 1)
        pos += 3
        columns = []
        for _ in range(ncols):
            flags = data[pos]
            name, pos = self._string(data, pos + 1)
            type_oid, typmod = struct.unpack_from(">Ii", data, pos)
            pos += 8
            known = self.types.get(type_oid)
            columns.append(Column(name, type_oid, typmod, known.name if known else "", key=bool(flags & 1)))
        relation = Relation(oid, schema, table, tuple(columns), identity)
        if self.describe is not None:
            relation = self.describe(relation)
        self.relations[oid] = relation
        return relation

    def _type(self, data: bytes, lsn: int) -> TypeInfo:
        (oid,) = _U32.unpack_from(data, 1)
        schema, pos = self._string(data, 5)
        name, _ = self._string(data, pos)
        info = self.types[oid] = TypeInfo(oid, schema, name)
        return info

    # ------------------------------------------------------------- changes

    def _known(self, oid: int, lsn: int) -> Relation:
        try:
            return self.relations[oid]
        except KeyError:
            raise PgOutputError(f"change of relation {oid} at LSN {lsn:X} before its Relation message: "
                                f"messages must be decoded from the start of the decoding session") from None

    def _insert(self, data: bytes, lsn: int) -> Change:
        (oid,) = _U32.unpack_from(data, 1)
        relation = self._known(oid, lsn)
        if self._wire:  # data[5] is 'N'
            return WireChange(relation, "c", lsn, self.xid, self.commit_ts_us, data, -1, 6, self._tuple)
        after, _ = self._tuple(data, 6)
        return Change(relation, "c", None, after, lsn, self.xid, self.commit_ts_us)

    def _update(self, data: bytes, lsn: int) -> Change:
        (oid,) = _U32.unpack_from(data, 1)
        relation = self._known(oid, lsn)
        before, pos = None, 5
        if self._wire and data[pos] == 0x4E:  # 'N' only: no old row
            return WireChange(relation, "u", lsn, self.xid, self.commit_ts_us, data, -1, 6, self._tuple)
        if data[pos] in (0x4B, 0x4F):  # 'K' key columns only, 'O' the whole old row
            before, pos = self._tuple(data, pos + 1)
        after, _ = self._tuple(data, pos + 1)  # data[pos] is 'N'
        return Change(relation, "u", before, after, lsn, self.xid, self.commit_ts_us)

    def _delete(self, data: bytes, lsn: int) -> Change:
        (oid,) = _U32.unpack_from(data, 1)
        relation = self._known(oid, lsn)
        if self._wire:  # data[5] is 'K' or 'O'
            return WireChange(relation, "d", lsn, self.xid, self.commit_ts_us, data, 6, -1, self._tuple)
        before, _ = self._tuple(data, 6)
        return Change(relation, "d", before, None, lsn, self.xid, self.commit_ts_us)

    def _truncate(self, data: bytes, lsn: int) -> Truncate:
        (count,) = _U32.unpack_from(data, 1)
        options = data[5]
        oids = struct.unpack_from(f">{count}I", data, 6)
        return Truncate(tuple(self._known(o, lsn) for o in oids), lsn, self.xid, self.commit_ts_us,
                        cascade=bool(options & 1), restart_identity=bool(options & 2))

    # ------------------------------------------------------------- wire types

    def _string(self, data: bytes, pos: int) -> tuple[str, int]:
        end = data.index(b"\0", pos)
        return data[pos:end].decode(self.encoding), end + 1

    def _tuple(self, data: bytes, pos: int) -> tuple[tuple, int]:
        (ncols,) = _I16.unpack_from(data, pos)
        pos += 2
        values = []
        append, encoding, unpack = values.append, self.encoding, _I32.unpack_from
        for _ in range(ncols):
            kind = data[pos]
            if kind == 0x74:  # 't'
                (length,) = unpack(data, pos + 1)
                start = pos + 5
                pos = start + length
                append(data[start:pos].decode(encoding))
            elif kind == 0x6E:  # 'n'
                append(None)
                pos += 1
            elif kind == 0x75:  # 'u'
                append(UNCHANGED_TOAST)
                pos += 1
            else:
                raise PgOutputError(f"tuple column kind {chr(kind)!r}: only text ('t'), null ('n') and "
                                    f"unchanged TOAST ('u') are read (is the slot read with binary 'true'?)")
        return tuple(values), pos


_HANDLERS = {
    b"B": PgOutputDecoder._begin,
    b"C": PgOutputDecoder._commit,
    b"O": PgOutputDecoder._origin,
    b"R": PgOutputDecoder._relation,
    b"Y": PgOutputDecoder._type,
    b"I": PgOutputDecoder._insert,
    b"U": PgOutputDecoder._update,
    b"D": PgOutputDecoder._delete,
    b"T": PgOutputDecoder._truncate,
    b"M": PgOutputDecoder._message,
}


def with_columns(relation: Relation, columns) -> Relation:
    """``relation`` with ``columns`` (a helper for ``describe`` callbacks)."""
    return replace(relation, columns=tuple(columns))
