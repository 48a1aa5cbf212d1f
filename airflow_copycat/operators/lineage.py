"""What a connector or copy run read and wrote, named the way OpenLineage names datasets.

One place decides the name of every dataset copycat touches, for two consumers that must agree:
the OpenLineage events of the finish and publish tasks (``get_openlineage_facets_on_complete``)
and the Airflow Asset events they emit. A :class:`Location` carries both names of one dataset:

==================  ===============================  =====================  ===============================
dataset             OpenLineage namespace            OpenLineage name       Airflow Asset URI
==================  ===============================  =====================  ===============================
Kafka topic         ``kafka://host:port``            ``topic``              ``kafka://host:port/topic``
PostgreSQL table    ``postgres://host:port``         ``db.schema.table``    ``postgres://host:port/db/schema/table``
MySQL/MariaDB       ``mysql://host:port``            ``db.table``           ``mysql://host:port/db/table``
SQLite table        ``sqlite:///abs/path/file.db``   ``table``              ``sqlite:///abs/path/file.db/table``
local file / dir    ``file``                         ``/abs/path``          ``file:///abs/path``
S3 / GCS object     ``s3://bucket`` / ``gs://bucket``  ``key``              ``s3://bucket/key``
HDFS and others     ``scheme://host:port``           ``/path``              ``scheme://host:port/path``
==================  ===============================  =====================  ===============================

(the OpenLineage naming spec, https://openlineage.io/docs/spec/naming; the Asset URIs are the forms
of Airflow's Kafka, Postgres, MySQL, common.io and Amazon providers, which translate them back into
the same namespace and name). The Kafka namespace is the *first* bootstrap server (a
``SASL_SSL://`` listener prefix dropped, port 9092 when none is given); a PostgreSQL table without a
schema is in ``public``; ``s3a``/``s3n`` are ``s3``, ``gcs`` is ``gs``. SQLite has no entry in the
spec: its database file is the datasource.

**No credentials, ever.** Every function here keeps only the scheme, host, port, database and path of
a URL: user names, passwords, query strings (``?password=``) and fragments are dropped, so neither
namespaces, names, Asset URIs nor facets can carry a secret. A value whose password was replaced by
``[hidden]`` (as in a plan) parses like any other; a URL that is hidden as a whole gives ``None``.

This module imports OpenLineage only inside :func:`operator_lineage`: without the OpenLineage
provider it still names the Asset events.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

KAFKA_DEFAULT_PORT = 9092
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
_OBJECT_STORES = {"s3", "gs", "abfs", "abfss", "wasb", "wasbs", "az", "oss", "r2"}
"""Schemes whose OpenLineage name is an object key (no leading ``/``); file systems keep the path."""
_LISTENER = re.compile(r"^[A-Za-z][A-Za-z0-9_+.-]*://")


@dataclass(frozen=True)
class Location:
    """One dataset: its OpenLineage ``namespace`` and ``name``, and its Airflow Asset ``uri``."""

    namespace: str
    name: str
    uri: str


@dataclass
class DatasetRun:
    """What one run did with one dataset. ``rows``/``bytes``/``files``: counts when known (else
    ``None``); ``fields``: its schema as ``[(name, type)]`` when known; ``column_sources``: per field,
    the ``(input location, column)`` it is a copy of (OpenLineage column lineage), only when the run
    copied columns one to one. ``topic``/``table``/``dataset``: what the connector calls it."""

    location: Location
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    fields: list[tuple[str, str]] | None = None
    column_sources: dict[str, list[tuple[Location, str]]] = field(default_factory=dict)
    topic: str | None = None
    table: str | None = None
    dataset: str | None = None


# ---------------------------------------------------------------------------------------------- naming


def kafka_topic(bootstrap_servers: str | list[str] | None, topic: str) -> Location:
    """The topic ``topic`` of the cluster whose first bootstrap server is in ``bootstrap_servers``
    (``"h1:9092,h2:9092"``, a list, ``"SASL_SSL://h1:9093"``); ``localhost`` when none is known."""
    servers = bootstrap_servers if isinstance(bootstrap_servers, list) else str(bootstrap_servers or "").split(",")
    first = next((s.strip() for s in servers if str(s).strip()), "localhost")
    first = _LISTENER.sub("", first).rsplit("@", 1)[-1].split("/", 1)[0]
    host, port = _host_port(first, KAFKA_DEFAULT_PORT)
    namespace = f"kafka://{host}:{port}"
    return Location(namespace, topic, f"{namespace}/{topic}")


def _host_port(netloc: str, default_port: int | None) -> tuple[str, int | None]:
    if netloc.startswith("["):  # [ipv6]:port
        host, _, rest = netloc[1:].partition("]")
        port = rest.lstrip(":")
        return f"[{host}]", int(port) if port.isdigit() else default_port
    host, sep, port = netloc.rpartition(":")
    if sep and port.isdigit():
        return host, int(port)
    return netloc.rstrip(":"), default_port


def database_table(url: str | None, table: str) -> Location | None:
    """Table ``table`` (``name``, ``schema.name`` or ``database.schema.name``) of the database of
    ``url`` (a SQLAlchemy or JDBC URL, as a JDBC connector's ``connection.url``). ``None`` for no
    URL, a hidden one, or one that does not parse."""
    if not url or str(url).strip() == "[hidden]":
        return None
    from ..connectors.jdbc.config import to_sqlalchemy_url

    try:
        u = to_sqlalchemy_url(str(url))
        backend = u.get_backend_name()
        host, port, database = u.host, u.port, u.database
    except Exception:  # noqa: BLE001 -- any unparsable URL: no name (never an error message with the URL)
        return None
    *qualifiers, name = str(table).split(".")  # name, schema.name, or database.schema.name (a fully qualified one)
    schema = qualifiers[-1] if qualifiers else ""
    database = qualifiers[-2] if len(qualifiers) > 1 else database
    if backend == "sqlite":
        if not database or database == ":memory:":
            return None
        namespace = "sqlite://" + _abs_path(database)
        name = name if schema in ("", "main") else f"{schema}.{name}"
        return Location(namespace, name, f"{namespace}/{name}")
    host = host or "localhost"
    if backend == "postgresql":
        namespace, parts = f"postgres://{host}:{port or 5432}", [database or "postgres", schema or "public", name]
    elif backend in ("mysql", "mariadb"):
        namespace, parts = f"mysql://{host}:{port or 3306}", [schema or database or "", name]
    elif backend == "mssql":
        namespace, parts = f"sqlserver://{host}:{port or 1433}", [database or "", schema or "dbo", name]
    elif backend == "oracle":
        namespace, parts = f"oracle://{host}:{port or 1521}", [database or "", schema or "", name]
    else:
        namespace, parts = f"{backend}://{host}" + (f":{port}" if port else ""), [database or "", schema, name]
    parts = [p for p in parts if p]
    return Location(namespace, ".".join(parts), f"{namespace}/{'/'.join(parts)}")


def file_location(url: str | None) -> Location | None:
    """A file or directory: a local path (made absolute) or any fsspec URL (``file://``,
    ``s3://bucket/key``, ``hdfs://namenode:8020/path``...). ``None`` for an empty or hidden value."""
    if not url or str(url).strip() in ("[hidden]", ""):
        return None
    text = str(url).strip()
    if "://" not in text:
        path = _abs_path(text[5:] if text.startswith("file:") else text)
        return Location("file", path, "file://" + path)
    scheme, _, rest = text.partition("://")
    authority, slash, path = rest.partition("/")
    try:  # without user and password first: a "[hidden]" one would not even parse
        parts = urlsplit(f"{scheme}://{authority.rsplit('@', 1)[-1]}{slash}{path}")
    except ValueError:
        return None
    scheme = _SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    netloc = parts.netloc
    path = posixpath.normpath(parts.path) if parts.path not in ("", "/") else "/"
    if scheme in ("file", "local"):
        namespace = f"file://{netloc}" if netloc and netloc != "localhost" else "file"
        return Location(namespace, path, f"file://{netloc if namespace != 'file' else ''}{path}")
    namespace = f"{scheme}://{netloc}"
    if scheme in _OBJECT_STORES:
        key = path.lstrip("/")
        return Location(namespace, key or "/", f"{namespace}/{key}")
    return Location(namespace, path, f"{namespace}{path}")


def _abs_path(path: str) -> str:
    return posixpath.normpath(os.path.abspath(os.path.expanduser(path)))


def from_asset_uri(uri: str) -> Location | None:
    """The location of an Asset URI (as a third-party sink's ``asset_uris`` gives it, or as Airflow
    stored it): Kafka, PostgreSQL, MySQL and SQLite URIs in the forms of the table above, anything
    else as a file URL."""
    parts = urlsplit(uri)
    segments = [s for s in parts.path.split("/") if s]
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if parts.scheme == "kafka" and segments:
        return kafka_topic(netloc, "/".join(segments))
    if parts.scheme in ("postgres", "postgresql") and len(segments) == 3:
        host, port = _host_port(netloc, 5432)
        return database_table(f"postgresql://{host}:{port}/{segments[0]}", f"{segments[1]}.{segments[2]}")
    if parts.scheme == "sqlite" and len(segments) > 1:  # Airflow keeps sqlite:///a/b.db/t as sqlite:/a/b.db/t
        return database_table("sqlite:////" + "/".join(segments[:-1]), segments[-1])
    if parts.scheme == "mysql" and len(segments) == 2:
        host, port = _host_port(netloc, 3306)
        return database_table(f"mysql://{host}:{port}/{segments[0]}", segments[1])
    return file_location(uri)


# ---------------------------------------------------------------------------------------------- runs

_JDBC_SOURCE, _JDBC_SINK, _FILE_SOURCE, _FILE_SINK, _POSTGRES_CDC = (
    "JdbcSource", "JdbcSink", "FileStreamSource", "FileStreamSink", "PostgresCdcSource")
"""The built-in connectors whose datasets this module knows, by alias (:mod:`..runtime.plugins`)."""


def connector_datasets(plan: dict, summary: dict,
                       columns: dict[str, list[tuple[str, str]]] | None = None
                       ) -> tuple[list[DatasetRun], list[DatasetRun]]:
    """``(inputs, outputs)`` of a connector run (``plan``: the plan operator's XCom, ``summary``: the
    finish task's). Inputs and outputs are only the datasets the run moved records from or to; a
    source's topics are its outputs, a sink's topics its inputs. ``columns`` (table -> ``[(column,
    type)]``, see :func:`table_columns`) adds schemas and, for a JDBC source reading whole tables
    without transforms, the column lineage table column -> topic field of the same name."""
    config, cls_path = plan.get("config") or {}, _builtin(plan)
    columns = columns or {}
    bootstrap = plan.get("bootstrap_servers")
    topics = {t: n for t, n in (summary.get("topics") or {}).items() if n}
    if plan["kind"] == "source":
        outputs = {t: DatasetRun(kafka_topic(bootstrap, t), rows=n, topic=t) for t, n in topics.items()}
        inputs: list[DatasetRun] = []
        if cls_path == _JDBC_SOURCE:
            inputs = _jdbc_source_tables(config, summary, outputs, columns)
        elif cls_path == _POSTGRES_CDC:
            for table, counts in (summary.get("tables") or {}).items():
                loc = database_table(config.get("connection.url") or _pg_url(config), table)
                if loc is not None:
                    inputs.append(DatasetRun(loc, rows=sum(int(v) for v in counts.values()), table=table,
                                             fields=columns.get(table)))
        elif cls_path == _FILE_SOURCE:
            for p in summary.get("partitions") or []:
                name = p["partition"].get("filename") if isinstance(p["partition"], dict) else None
                loc = file_location(name) if p.get("records") else None
                if loc is not None:
                    inputs.append(DatasetRun(loc, rows=p["records"], bytes=p.get("bytes"), dataset=name))
        if len(outputs) == 1 and summary.get("bytes"):
            next(iter(outputs.values())).bytes = summary["bytes"]
        return inputs, list(outputs.values())
    # a sink: the topics it read are its inputs
    inputs = [DatasetRun(kafka_topic(bootstrap, t), rows=n, topic=t) for t, n in topics.items()]
    if len(inputs) == 1 and summary.get("bytes"):
        inputs[0].bytes = summary["bytes"]
    return inputs, _sink_outputs(plan, summary, topics, columns)


def _builtin(plan: dict) -> str | None:
    """The alias of the plan's connector when it is one of the built-ins named above, else ``None``."""
    cls = _connector_class(plan.get("config") or {})
    if cls is None:
        return None
    from ..runtime import plugins

    return next((a for a in (_JDBC_SOURCE, _JDBC_SINK, _FILE_SOURCE, _FILE_SINK, _POSTGRES_CDC)
                 if plugins.resolve_connector(a) is cls), None)


def _pg_url(config: dict) -> str | None:
    if not config.get("database.hostname"):
        return None
    return (f"postgresql://{config['database.hostname']}:{config.get('database.port') or 5432}/"
            f"{config.get('database.dbname') or ''}")


def _jdbc_source_tables(config: dict, summary: dict, outputs: dict[str, DatasetRun],
                        columns: dict[str, list[tuple[str, str]]]) -> list[DatasetRun]:
    tables: dict[str, DatasetRun] = {}
    prefix = str(config.get("topic.prefix") or "")
    plain = not str(config.get("transforms") or "").strip()
    for p in summary.get("partitions") or []:
        part = p["partition"] if isinstance(p["partition"], dict) else {}
        table = part.get("table")
        if not table or not p.get("records"):
            continue  # the query mode reads no one table: its input is not named
        loc = database_table(config.get("connection.url"), table)
        if loc is None:
            continue
        run = tables.setdefault(table, DatasetRun(loc, rows=0, bytes=0, table=table, fields=columns.get(table)))
        run.rows = (run.rows or 0) + p["records"]
        run.bytes = (run.bytes or 0) + (p.get("bytes") or 0)
        out = outputs.get(prefix + table.rpartition(".")[2])
        if out is None:
            continue
        out.bytes = (out.bytes or 0) + (p.get("bytes") or 0)
        if plain and run.fields:  # no transform renames or drops a column: each field is its column
            out.fields = list(run.fields)
            out.column_sources = {name: [(loc, name)] for name, _ in run.fields}
    return list(tables.values())


def _sink_outputs(plan: dict, summary: dict, topics: dict[str, int],
                  columns: dict[str, list[tuple[str, str]]]) -> list[DatasetRun]:
    config, cls_path = plan.get("config") or {}, _builtin(plan)
    if cls_path == _JDBC_SINK:
        out = []
        for table, counts in (summary.get("tables") or {}).items():
            loc = database_table(config.get("connection.url"), table)
            if loc is not None:
                out.append(DatasetRun(loc, rows=sum(int(v) for k, v in counts.items() if k != "deleted"),
                                      table=table, fields=columns.get(table)))
        return out
    if cls_path == _FILE_SINK:
        loc = file_location(config.get("file"))
        return [DatasetRun(loc, rows=sum(topics.values()), dataset=config.get("file"))] if loc and topics else []
    out, cls = [], _connector_class(config)
    for topic, n in topics.items():
        for uri in cls.asset_uris(config, topic) if hasattr(cls, "asset_uris") else []:
            loc = from_asset_uri(uri)
            if loc is not None:
                ranges = [p for p in summary.get("partitions") or [] if p["partition"][0] == topic]
                out.append(DatasetRun(loc, rows=n, bytes=sum(p.get("bytes") or 0 for p in ranges) or None,
                                      topic=topic))
    return out


def _connector_class(config: dict):
    try:
        from ..runtime import plugins

        return plugins.resolve_connector(config["connector.class"])
    except Exception:  # noqa: BLE001
        return None


def copy_datasets(plan: dict, summary: dict) -> tuple[list[DatasetRun], list[DatasetRun]]:
    """``(inputs, outputs)`` of a copy job run: per published dataset, ``<source.url>/<dataset>``
    and ``<target.url>/<dataset>`` with the files and bytes published."""
    config = plan.get("config") or {}
    inputs, outputs = [], []
    for d in summary.get("datasets") or []:
        if d.get("status") != "published":
            continue
        sub = f"/{d['dataset']}" if d.get("dataset") else ""
        src = file_location(_join(config.get("source.url"), sub))
        dst = file_location(_join(summary.get("target") or config.get("target.url"), sub))
        files, size = d.get("published_files", 0), d.get("published_bytes", 0)
        if src is not None:
            inputs.append(DatasetRun(src, files=files, dataset=d["dataset"]))
        if dst is not None:
            outputs.append(DatasetRun(dst, files=files, bytes=size, dataset=d["dataset"]))
    return inputs, outputs


def _join(url: str | None, sub: str) -> str | None:
    return None if not url or str(url).strip() == "[hidden]" else str(url).rstrip("/") + sub


# ---------------------------------------------------------------------------------------------- schemas


def table_columns(config: dict, tables: list[str],
                  connection_url: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """The columns (name, SQL type) of ``tables`` in the database of a JDBC connector's ``config``,
    read from the database now (best effort: ``{}`` for a table that cannot be read). The password
    comes from the Airflow connection ``airflow.conn.id`` when the config names one, else from
    ``connection_url``/``connection.url`` if that still holds it; it is used to connect only."""
    if not tables:
        return {}
    try:
        import sqlalchemy as sa

        from ..connectors.jdbc.config import to_sqlalchemy_url

        url = connection_url or config.get("connection.url")
        user, password = config.get("connection.user"), None
        if config.get("airflow.conn.id"):
            from ..hooks.database import resolve_db_connection

            resolved = resolve_db_connection({k: v for k, v in config.items()
                                              if not k.startswith("connection.")})
            url, user, password = resolved.get("connection.url"), resolved.get("connection.user"), \
                resolved.get("connection.password")
        if not url or "[hidden]" in str(url):
            return {}
        u = to_sqlalchemy_url(str(url))
        if user and not u.username:
            u = u.set(username=str(user))
        if password and not u.password:
            u = u.set(password=str(password))
        engine = sa.create_engine(u)
    except Exception:  # noqa: BLE001 -- no schema rather than an error (whose text might hold the URL)
        return {}
    out: dict[str, list[tuple[str, str]]] = {}
    try:
        inspector = sa.inspect(engine)
        for table in tables:
            *qualifiers, name = table.split(".")
            schema = qualifiers[-1] if qualifiers else None  # of db.schema.name, schema.name or name
            if engine.dialect.name == "sqlite" and schema == "main":
                schema = None
            try:
                out[table] = [(c["name"], str(c["type"])) for c in inspector.get_columns(name, schema=schema or None)]
            except Exception:  # noqa: BLE001
                continue
    except Exception:  # noqa: BLE001
        pass
    finally:
        engine.dispose()
    return out


# ---------------------------------------------------------------------------------------------- OpenLineage


def operator_lineage(inputs: list[DatasetRun], outputs: list[DatasetRun], run_facets: dict | None = None):
    """The OpenLineage provider's ``OperatorLineage`` of a run: its input and output datasets with the
    ``schema``, ``columnLineage``, ``inputStatistics`` and ``outputStatistics`` facets where known.
    Imports the OpenLineage provider (only called by it)."""
    from airflow.providers.common.compat.openlineage.facet import (
        ColumnLineageDatasetFacet,
        Fields,
        InputDataset,
        InputField,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage

    def dataset_facets(d: DatasetRun) -> dict:
        facets: dict[str, Any] = {}
        if d.fields:
            facets["schema"] = SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t)
                                                          for n, t in d.fields])
        if d.column_sources:
            facets["columnLineage"] = ColumnLineageDatasetFacet(fields={
                name: Fields(inputFields=[InputField(namespace=loc.namespace, name=loc.name, field=col)
                                          for loc, col in sources],
                             transformationDescription="copied as is", transformationType="IDENTITY")
                for name, sources in d.column_sources.items()})
        return facets

    ins = []
    for d in inputs:
        input_facets = {}
        if any(v is not None for v in (d.rows, d.bytes, d.files)):
            input_facets["inputStatistics"] = _input_statistics(d)
        ins.append(InputDataset(namespace=d.location.namespace, name=d.location.name, facets=dataset_facets(d),
                                inputFacets=input_facets))
    outs = []
    for d in outputs:
        output_facets = {}
        if any(v is not None for v in (d.rows, d.bytes, d.files)):
            output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(rowCount=d.rows, size=d.bytes,
                                                                                   fileCount=d.files)
        outs.append(OutputDataset(namespace=d.location.namespace, name=d.location.name, facets=dataset_facets(d),
                                  outputFacets=output_facets))
    return OperatorLineage(inputs=ins, outputs=outs, run_facets=run_facets or {})


def _input_statistics(d: DatasetRun):
    from openlineage.client.generated.input_statistics_input_dataset import InputStatisticsInputDatasetFacet

    return InputStatisticsInputDatasetFacet(rowCount=d.rows, size=d.bytes, fileCount=d.files)
