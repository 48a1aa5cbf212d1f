"""Configuration of the files sink: Confluent S3 / HDFS sink keys, so their configs carry over.

Keys of Confluent's connectors that this sink does not know are passed through
untouched (``s3.part.size``, ``hive.*``...) and have no effect here; the keys
below are validated, all problems reported at once.

Where the files go: ``store.url`` (any fsspec URL or local path:
``/data/lake``, ``file:///data/lake``, ``s3://bucket/prefix``,
``hdfs://namenode:8020/lake``, ``gs://...``), else ``s3.bucket.name``
(→ ``s3://<bucket>``; then ``store.url``, if it is an ``http(s)://`` URL, is
the S3 endpoint, as in Confluent's S3 sink, e.g. MinIO), else ``hdfs.url``
(Confluent's HDFS sink's older name for ``store.url``). Credentials come from
the filesystem's usual chain (AWS environment/profile, Hadoop config) or from
``store.options``.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any
from zoneinfo import ZoneInfo

from ...connect.config import ConfigDef, ConfigProblem, ConfigType, Password, in_range, valid_regex
from .formats import FORMAT_ALIASES, PARQUET_CODECS, resolve_format
from .partitioners import (DAILY_PATH_FORMAT, FIELD, FIXED_FORMATS, HOURLY_PATH_FORMAT, TIME, resolve_extractor,
                           resolve_partitioner)
from .timeformat import compile_pattern

DEFAULT_PARTITIONER = "io.confluent.connect.storage.partitioner.DefaultPartitioner"
G_TOPICS, G_STORE, G_FORMAT, G_PART = "Topics", "Storage", "Format and rotation", "Partitioner"


def _check(resolver, what: str, choices: str):
    def check(key, v):
        if v is None or v == "":
            return None
        return None if resolver(v) is not None else f"unknown {what}; use one of {choices}"
    check.describe = choices
    return check


def _rotate_interval(key, v):
    if v is None or v == -1 or v > 0:
        return None
    return "must be -1 (no time-based rotation) or a positive number of milliseconds"


def _no_schedule(key, v):
    if v is None or v == -1:
        return None
    return ("wall-clock rotation is not supported: it would make a rerun write other files than the run it "
            "repeats; set -1 and use rotate.interval.ms (record time)")


def _timezone(key, v):
    if not v:
        return None
    try:
        ZoneInfo(v)
    except Exception:
        return "is not an IANA time zone (UTC, Europe/Amsterdam, America/New_York)"
    return None


def _locale(key, v):
    if not v or re.fullmatch(r"[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})*", v):
        return None
    return "is not a locale (en, en_US, nl-NL)"


def _must_be_false(key, v):
    return "is not supported by this sink (it writes record values only); remove it or set it to false" if v else None


def _lower_one_of(*choices):
    def check(key, v):
        return None if v is None or str(v).lower() in choices else "must be one of " + ", ".join(choices)
    check.describe = "one of " + ", ".join(choices)
    return check


_FORMATS = "json, parquet, " + ", ".join(sorted(k for k in FORMAT_ALIASES if "." in k))
_PARTITIONERS = "default, field, time, daily, hourly or io.confluent.connect.storage.partitioner.<Default|Field|TimeBased|Daily|Hourly>Partitioner"

CONFIG_DEF = (
    ConfigDef()
    .define("topics", ConfigType.LIST, None, importance="high", group=G_TOPICS,
            doc="Topics to write, comma-separated. Give this or topics.regex. The framework lists their "
                "partitions and assigns them to tasks; the sink never talks to Kafka.")
    .define("topics.regex", ConfigType.STRING, None, valid_regex, importance="high", group=G_TOPICS,
            doc="Regular expression of the topics to write (instead of topics).")
    .define("store.url", ConfigType.STRING, None, importance="high", group=G_STORE,
            doc="Where files go: any fsspec URL or a local path (s3://bucket/prefix, hdfs://nn:8020/lake, "
                "/data/lake). Required unless s3.bucket.name or hdfs.url is given; with s3.bucket.name an "
                "http(s) store.url is the S3 endpoint, as in Confluent's S3 sink.")
    .define("s3.bucket.name", ConfigType.STRING, None, group=G_STORE,
            doc="Confluent S3 sink key: the bucket; the store is s3://<bucket>.")
    .define("s3.region", ConfigType.STRING, None, group=G_STORE,
            doc="Confluent S3 sink key: the bucket's AWS region (passed to s3fs as client_kwargs.region_name).")
    .define("hdfs.url", ConfigType.STRING, None, group=G_STORE,
            doc="Confluent HDFS sink key (older name of store.url): hdfs://namenode:8020.")
    .define("store.options", ConfigType.PASSWORD, None, group=G_STORE,
            doc="JSON object of fsspec storage options for the store's filesystem (credentials, endpoint...). "
                "A secret: hidden in plans, XCom, group files and config problems.")
    .define("topics.dir", ConfigType.STRING, "topics", group=G_STORE,
            doc="Directory under the store that holds <topic>/... files and the sink's _copycat/ control files "
                "(staging, publish logs, committed-offset markers).")
    .define("format.class", ConfigType.STRING, validator=_check(resolve_format, "format", _FORMATS),
            importance="high", group=G_FORMAT,
            doc="File format: json (JSON lines, as JsonConverter with schemas.enable=false writes values) or "
                "parquet; Confluent's S3/HDFS JsonFormat and ParquetFormat class names are accepted.")
    .define("flush.size", ConfigType.INT, 1000, in_range(1), importance="high", group=G_FORMAT,
            doc="Records per batch of files of one topic-partition: when a batch holds this many records its "
                "files are closed and staged. (Required by Confluent; 1000 here when absent.)")
    .define("rotate.interval.ms", ConfigType.LONG, -1, _rotate_interval, group=G_FORMAT,
            doc="Close the batch when a record's timestamp is at least the batch's first record's timestamp plus "
                "this many ms (record time, not wall-clock, so reruns write the same files); -1 disables. The "
                "timestamp is the time-based partitioner's, else the Kafka record timestamp.")
    .define("filename.offset.zero.pad.width", ConfigType.INT, 10, in_range(1, 19), group=G_FORMAT,
            doc="Digits of the start offset in file names (topic+0+0000000000.json), zero-padded.")
    .define("parquet.codec", ConfigType.STRING, "snappy", _lower_one_of(*PARQUET_CODECS), group=G_FORMAT,
            doc="Parquet compression: " + ", ".join(PARQUET_CODECS) + ".")
    .define("s3.compression.type", ConfigType.STRING, "none", _lower_one_of("none", "gzip"), group=G_FORMAT,
            doc="JSON files: none, or gzip (files named .json.gz), as Confluent's S3 sink. Parquet uses parquet.codec.")
    .define("s3.compression.level", ConfigType.INT, -1, in_range(-1, 9), group=G_FORMAT,
            doc="gzip level 0-9 for s3.compression.type=gzip; -1 is zlib's default (6).")
    .define("rotate.schedule.interval.ms", ConfigType.LONG, -1, _no_schedule, group=G_FORMAT,
            doc="Confluent's wall-clock rotation: refused (must be -1), because files closed by the clock differ "
                "between a run and its rerun; use rotate.interval.ms (record time).")
    .define("behavior.on.null.values", ConfigType.STRING, "fail", _lower_one_of("fail", "ignore"), group=G_FORMAT,
            doc="Records with a null value (tombstones): fail the task (Confluent's default) or ignore them "
                "(skipped, counted in the task metric tombstones_skipped).")
    .define("store.kafka.keys", ConfigType.BOOLEAN, False, _must_be_false, group=G_FORMAT,
            doc="Confluent key for writing record keys to separate files: not supported, must be false.")
    .define("store.kafka.headers", ConfigType.BOOLEAN, False, _must_be_false, group=G_FORMAT,
            doc="Confluent key for writing record headers to separate files: not supported, must be false.")
    .define("partitioner.class", ConfigType.STRING, DEFAULT_PARTITIONER,
            _check(resolve_partitioner, "partitioner", _PARTITIONERS), group=G_PART,
            doc="Directory layout under <topics.dir>/<topic>/: default (partition=<p>), field "
                "(<field>=<value>/...), time (path.format), daily (" + DAILY_PATH_FORMAT + "), hourly ("
                + HOURLY_PATH_FORMAT + "); Confluent class names are accepted.")
    .define("partition.field.name", ConfigType.LIST, [], group=G_PART,
            doc="FieldPartitioner: value fields (dotted for nested) whose values name the directories, in order.")
    .define("path.format", ConfigType.STRING, "", group=G_PART,
            doc="TimeBasedPartitioner: Joda-Time pattern of the directory, e.g. 'year'=YYYY/'month'=MM/'day'=dd.")
    .define("partition.duration.ms", ConfigType.LONG, -1, group=G_PART,
            doc="TimeBasedPartitioner: length of a time bucket in ms (3600000 for hourly directories).")
    .define("locale", ConfigType.STRING, "en", _locale, group=G_PART,
            doc="Time-based partitioners: locale of month/day names in path.format (English only; numeric "
                "fields work with any locale).")
    .define("timezone", ConfigType.STRING, "UTC", _timezone, group=G_PART,
            doc="Time-based partitioners: IANA time zone in which buckets start and path.format is written.")
    .define("timestamp.extractor", ConfigType.STRING, "Record",
            _check(resolve_extractor, "timestamp extractor", "Record, RecordField"), group=G_PART,
            doc="Time-based partitioners: Record (Kafka record timestamp) or RecordField (timestamp.field). "
                "Wallclock, Confluent's default, is refused: it would make reruns write different paths.")
    .define("timestamp.field", ConfigType.STRING, "timestamp", group=G_PART,
            doc="RecordField extractor: the value field (dotted for nested) holding epoch ms, a Timestamp or "
                "an ISO-8601 string.")
)


def _blank(v) -> bool:
    return v is None or (isinstance(v, (str, list)) and len(v) == 0)


def _storage_options(raw: Any) -> dict:
    """The storage options ``store.options`` holds: a :class:`Password` (parsed config), its
    string (a task config), or a mapping. Errors never quote the value: it holds credentials."""
    if isinstance(raw, Password):
        raw = raw.value
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            options = json.loads(raw)
        except ValueError as e:
            try:  # a mapping given in a YAML/JSON config arrives as str() of it, via the PASSWORD type
                options = ast.literal_eval(raw)
            except Exception:
                raise ValueError(f"store.options is not JSON ({e.msg} at character {e.pos})") from None
    else:
        options = raw
    if not isinstance(options, dict):
        raise ValueError("store.options must be a JSON object")
    return dict(options)


def store_location(config: dict[str, Any]) -> tuple[str, dict]:
    """``(url, storage_options)`` of the store a parsed config names; ``ValueError`` saying why not."""
    url, bucket, hdfs = (config.get(k) or None for k in ("store.url", "s3.bucket.name", "hdfs.url"))
    options = _storage_options(config.get("store.options"))
    if bucket:
        if url and not url.lower().startswith(("http://", "https://")):
            raise ValueError("store.url and s3.bucket.name both name the store; give one (with s3.bucket.name, "
                             "store.url may only be the http(s) S3 endpoint)")
        client = dict(options.get("client_kwargs") or {})
        if url:
            client.setdefault("endpoint_url", url)
        if config.get("s3.region"):
            client.setdefault("region_name", config["s3.region"])
        if client:
            options["client_kwargs"] = client
        return f"s3://{bucket.strip('/')}", options
    if url and hdfs and url != hdfs:
        raise ValueError("store.url and hdfs.url name different stores; give store.url only")
    url = url or hdfs
    if not url:
        raise ValueError("no store: give store.url (an fsspec URL or local path), s3.bucket.name or hdfs.url")
    import fsspec

    protocol, _ = fsspec.core.split_protocol(url)
    if protocol and protocol not in fsspec.available_protocols() and protocol not in fsspec.registry:  # known, or registered
        raise ValueError(f"store.url protocol {protocol!r} is not an fsspec filesystem")
    return url, options


def validate_config(config: dict[str, Any]) -> list[ConfigProblem]:
    """Cross-key problems of a parsed config. Keys that failed their own check may be
    absent or hold the raw value given; checks of such keys are skipped, never crash."""
    problems: list[ConfigProblem] = []
    topics, regex = config.get("topics"), config.get("topics.regex")
    if _blank(topics) and _blank(regex):
        problems.append(ConfigProblem("topics", None, "give topics (a comma-separated list) or topics.regex"))
    elif not _blank(topics) and not _blank(regex):
        problems.append(ConfigProblem("topics.regex", regex, "give topics or topics.regex, not both"))
    try:
        store_location(config)
    except ValueError as e:
        key = "store.options" if "store.options" in str(e) else "store.url"
        value = config.get(key)
        if key == "store.options" and value is not None:
            value = "[hidden]"  # credentials: never echoed
        problems.append(ConfigProblem(key, value, str(e)))
    tdir = config.get("topics.dir")
    if tdir is not None and ".." in str(tdir).split("/"):
        problems.append(ConfigProblem("topics.dir", tdir, "must not contain '..'"))
    kind = resolve_partitioner(str(config.get("partitioner.class") or DEFAULT_PARTITIONER))
    if kind == FIELD and _blank(config.get("partition.field.name")):
        problems.append(ConfigProblem("partition.field.name", None, "FieldPartitioner needs at least one field name"))
    if kind == TIME:
        if _blank(config.get("path.format")):
            problems.append(ConfigProblem("path.format", None, "TimeBasedPartitioner needs path.format, e.g. "
                                          + DAILY_PATH_FORMAT))
        duration = config.get("partition.duration.ms", -1)
        if isinstance(duration, int) and duration <= 0:
            problems.append(ConfigProblem("partition.duration.ms", config.get("partition.duration.ms"),
                                          "TimeBasedPartitioner needs a positive bucket length in ms"))
    if kind == TIME and isinstance(config.get("path.format"), str) and config["path.format"]:
        try:
            compile_pattern(config["path.format"], str(config.get("locale") or "en"))
        except ValueError as e:
            key = "locale" if "locale is" in str(e) else "path.format"
            problems.append(ConfigProblem(key, config.get(key), str(e)))
    if kind == TIME or kind in FIXED_FORMATS:
        extractor = resolve_extractor(str(config.get("timestamp.extractor") or "Record"))
        if extractor == "Wallclock":
            problems.append(ConfigProblem("timestamp.extractor", config.get("timestamp.extractor"),
                                          "Wallclock depends on when the sink runs, so reruns would write different "
                                          "paths and exactly-once would be lost; use Record or RecordField"))
        elif extractor == "RecordField" and _blank(config.get("timestamp.field")):
            problems.append(ConfigProblem("timestamp.field", None, "RecordField needs timestamp.field"))
    return problems
