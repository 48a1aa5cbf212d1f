"""The initial snapshot: tables as the catalog describes them, and their rows read under an exported snapshot.

A snapshot is consistent with the slot when it reads under the snapshot the slot's creation
exported (``CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT`` / ``pg_export_snapshot()``): every change
after it is in the slot, every change before it in the rows read. :func:`snapshot_transaction`
opens that transaction; :func:`read_table` reads one table in it.

Reading is **resumable per table**: rows come in the order of the table's key (primary key, else
replica identity index), ``chunk_size`` rows per ``COPY (SELECT ... WHERE key > last ORDER BY key
LIMIT n) TO STDOUT``; the caller records :func:`key_of` the last row it handed on (with the table,
in its offset) and a later call with ``after_key`` continues after it. A table without a key is read
in one statement and cannot resume (it is read again from the start). A read resumed in another
run reads under a newer snapshot; the rows it reads may then already hold changes the stream will
send again from the slot's start, so consumers converge on the table's state (as with Debezium's
incremental snapshots), possibly passing through older values.

Values are PostgreSQL's text output, ``None`` for NULL, as :mod:`.values` reads them. The session
settings that fix those formats are set by :func:`prepare_session`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Iterator, Sequence

from ...extras import require

from .model import Column, Relation
from .pgtypes import PgType

sql = require("psycopg.sql", "cdc", "PostgresCdcSource")

SESSION_SETTINGS = {
    "DateStyle": "ISO, YMD",
    "IntervalStyle": "postgres",
    "bytea_output": "hex",
    "extra_float_digits": "3",
    "TimeZone": "UTC",
    "lc_monetary": "C",
}
"""The output formats :mod:`.values` reads (set on every connection that reads values as text)."""

_BUILTIN_MAX_OID = 9999  # FirstGenbkiObjectId - 1: types below are built in (and stable)


def prepare_session(conn) -> None:
    """Set :data:`SESSION_SETTINGS` on ``conn`` (a psycopg 3 connection) for the session."""
    with conn.cursor() as cur:
        for name, value in SESSION_SETTINGS.items():
            cur.execute("SELECT set_config(%s, %s, false)", (name, value))


@contextmanager
def snapshot_transaction(conn, snapshot_id: str | None):
    """A ``REPEATABLE READ, READ ONLY`` transaction on ``conn`` reading as of the exported snapshot
    ``snapshot_id`` (``None``: the transaction's own snapshot). ``conn`` must be idle, in autocommit
    mode (psycopg 3); the session gets :data:`SESSION_SETTINGS`. Raises psycopg's error when the
    snapshot is no longer valid (its exporting session ended or ran another command)."""
    if not conn.autocommit:
        raise ValueError("snapshot_transaction needs an autocommit connection (it issues BEGIN itself)")
    prepare_session(conn)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    try:
        if snapshot_id:
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_id)))
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


_COLUMNS_SQL = """
SELECT a.attname, a.atttypid::int, a.atttypmod, t.typname, format_type(a.atttypid, NULL), t.typcategory,
       a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
       coalesce(a.attnum = ANY (pk.indkey), false) AS in_pk,
       coalesce(a.attnum = ANY (ri.indkey), false) AS in_identity_index
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_index pk ON pk.indrelid = a.attrelid AND pk.indisprimary
LEFT JOIN pg_index ri ON ri.indrelid = a.attrelid AND ri.indisreplident
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


def relation_from_catalog(conn, schema: str, table: str) -> Relation:
    """The :class:`~.model.Relation` of ``schema.table`` as the catalog describes it now: columns in
    order with type OID, modifier, name (``format_type`` without modifier; ``_elem`` for arrays),
    nullability and default expression, and the replica identity letter.

    Key columns follow Debezium: the primary key; without one, the replica identity index's columns
    (``REPLICA IDENTITY USING INDEX``); otherwise none (no event key), also with ``REPLICA IDENTITY
    FULL``. Raises ``LookupError`` naming the table when it does not exist."""
    row = conn.execute(
        "SELECT c.oid::int, c.relreplident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')", (schema, table)).fetchone()
    if row is None:
        raise LookupError(f"table {schema}.{table} does not exist (or is not a table)")
    oid, identity = row
    identity = identity.decode() if isinstance(identity, bytes) else str(identity)
    rows = conn.execute(_COLUMNS_SQL, (oid,)).fetchall()
    has_pk = any(r[8] for r in rows)
    columns = []
    for name, type_oid, modifier, typname, formatted, category, notnull, default, in_pk, in_ri in rows:
        category = category.decode() if isinstance(category, bytes) else category
        columns.append(Column(
            name=name, type_oid=type_oid, type_modifier=modifier,
            type_name=typname if category == "A" else formatted,
            key=bool(in_pk if has_pk else (identity == "i" and in_ri)),
            optional=not notnull, default=default))
    return Relation(oid=oid, schema=schema, table=table, columns=tuple(columns), replica_identity=identity)


def load_types(conn, oids) -> dict[int, PgType]:
    """The catalog's description of the non-built-in types among ``oids`` (enums with their labels in
    sort order, domains with their base type, arrays with their element type, extension types such
    as hstore or citext), following element and base types; built-in OIDs are left out."""
    out: dict[int, PgType] = {}
    todo = {int(o) for o in oids if int(o) > _BUILTIN_MAX_OID}
    while todo:
        rows = conn.execute(
            "SELECT t.oid::int, t.typname, t.typtype, CASE WHEN t.typcategory = 'A' THEN t.typelem ELSE 0 END::int,"
            " t.typbasetype::int, t.typtypmod,"
            " (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid)"
            " FROM pg_type t WHERE t.oid = ANY(%s)", (sorted(todo),)).fetchall()
        todo = set()
        for oid, name, kind, element, base, base_mod, labels in rows:
            kind = kind.decode() if isinstance(kind, bytes) else kind
            out[oid] = PgType(oid, name, kind, element, base, base_mod, tuple(labels or ()))
            for nxt in (element, base):
                if nxt > _BUILTIN_MAX_OID and nxt not in out:
                    todo.add(nxt)
    return out


def key_of(relation: Relation, row: Sequence) -> list | None:
    """The key values (text) of ``row``, for an offset; None when the table has no key columns."""
    positions = [i for i, c in enumerate(relation.columns) if c.key]
    return [row[i] for i in positions] if positions else None


def _select(relation: Relation, after_key: Sequence | None, limit: int | None) -> sql.Composed:
    cols = sql.SQL(", ").join(sql.Identifier(c.name) for c in relation.columns)
    query = sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(relation.schema, relation.table))
    keys = relation.key_columns
    if keys and after_key is not None:
        left = sql.SQL(", ").join(sql.Identifier(c.name) for c in keys)
        # type_name is format_type's output (quoted where needed) or an array's _elem name: both valid casts
        right = sql.SQL(", ").join(sql.SQL("CAST({} AS {})").format(sql.Literal(v), sql.SQL(c.type_name))
                                   for v, c in zip(after_key, keys))
        query += sql.SQL(" WHERE ({}) > ({})").format(left, right)
    if keys:
        query += sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(sql.Identifier(c.name) for c in keys))
    if limit is not None:
        query += sql.SQL(" LIMIT {}").format(sql.Literal(limit))
    return query


def read_table(conn, relation: Relation, *, after_key: Sequence | None = None,
               chunk_size: int = 10240) -> Iterator[list[tuple]]:
    """The rows of ``relation``'s table after ``after_key`` (all when None), in key order, as lists
    of at most ``chunk_size`` tuples of text values in ``relation.columns`` order.

    Call it inside :func:`snapshot_transaction`. Each chunk is one ``COPY (SELECT ...) TO STDOUT``;
    the last chunk may be empty or short. A table without key columns comes as one statement's rows
    (still yielded ``chunk_size`` at a time) and ``after_key`` must be None for it. Stopping the
    iteration between chunks leaves nothing open on ``conn``."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    if not relation.key_columns:
        if after_key is not None:
            raise ValueError(f"{relation.schema}.{relation.table} has no key: its read cannot resume")
        yield from _chunks(_copy_rows(conn, _select(relation, None, None)), chunk_size)
        return
    last = list(after_key) if after_key is not None else None
    positions = [i for i, c in enumerate(relation.columns) if c.key]
    while True:
        chunk = list(_copy_rows(conn, _select(relation, last, chunk_size)))
        if chunk:
            yield chunk
        if len(chunk) < chunk_size:
            return
        last = [chunk[-1][i] for i in positions]


def _copy_rows(conn, query: sql.Composed) -> Iterator[tuple]:
    with conn.cursor() as cur:
        with cur.copy(sql.SQL("COPY ({}) TO STDOUT").format(query)) as copy:
            yield from copy.rows()


def _chunks(rows: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def is_partitioned(conn, oid: int) -> bool:
    """Whether the table ``oid`` is a partitioned table (``relkind 'p'``: no rows of its own); False when gone."""
    row = conn.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = %s", (oid,)).fetchone()
    return bool(row and row[0])


def snapshot_tables(conn, config) -> list[tuple[str, str]]:
    """The ``(schema, table)`` pairs the snapshot reads, sorted: the tables holding rows (ordinary
    tables and the partitions of partitioned tables, never a partitioned parent, whose rows are its
    partitions': pgoutput sends their changes under the partitions' names, as
    ``publish.via.partition.root=false`` has it) that the config captures and
    ``snapshot.include.collection.list`` keeps."""
    rows = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' ORDER BY 1, 2").fetchall()
    return [(s, t) for s, t in rows if config.snapshot_included(s, t)]


def complete_relation(conn, relation: Relation) -> Relation:
    """A pgoutput Relation message completed from the catalog (type names, nullability, defaults,
    Debezium's key: the primary key); columns the catalog no longer has keep what pgoutput said."""
    try:
        known = relation_from_catalog(conn, relation.schema, relation.table)
    except LookupError:
        known = None
    by_name = {col.name: col for col in known.columns} if known else {}
    columns = []
    for col in relation.columns:
        k = by_name.get(col.name)
        if k is not None and k.type_oid == col.type_oid:
            columns.append(replace(k, type_modifier=col.type_modifier))
        else:
            name = conn.execute("SELECT format_type(%s, NULL)", (col.type_oid,)).fetchone()[0]
            columns.append(replace(col, type_name=name, key=col.key and relation.replica_identity != "f"))
    return replace(relation, columns=tuple(columns))


def python_encoding(conn) -> str:
    """The database's encoding as Python names it (pgoutput sends text in the server's encoding)."""
    name = conn.execute("SHOW server_encoding").fetchone()[0]
    if name.upper() in ("UTF8", "UNICODE"):
        return "utf-8"
    try:
        from psycopg._encodings import pg2pyenc  # psycopg's own table of PostgreSQL -> Python names

        return pg2pyenc(name.encode())
    except Exception:  # noqa: BLE001 -- SQL_ASCII and the like: bytes as they come
        return "latin-1"
