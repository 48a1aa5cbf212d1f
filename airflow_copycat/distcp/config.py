"""The keys of a copy job (``copycat copy CONFIG``, the copy operator).

Parsed with :class:`~airflow_copycat.connect.config.ConfigDef`, so every bad key
is reported at once, before anything is listed or copied.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigProblem, ConfigType, in_range, non_empty
from ..connect.errors import ConfigException
from ..connect.secrets import HIDDEN
from .limits import DECOMPRESS_MAX_RATIO, UNTAR_MAX_BYTES, UNTAR_MAX_ENTRIES
from .encryption import EncryptionKeys
from .model import PRESERVABLE

CONVERTERS = ("gunzip", "bunzip2", "unxz", "unzstd", "decompress", "untar", "encrypt", "decrypt")
"""``decompress`` picks by extension (``.gz``, ``.bz2``, ``.xz``, ``.zst``); the others are explicit."""


def _converters(key: str, value: Any) -> str | None:
    names = value if isinstance(value, list) else [v.strip() for v in str(value or "").split(",") if v.strip()]
    bad = [n for n in names if n not in CONVERTERS]
    if bad:
        return f"unknown converter(s) {', '.join(bad)}; known: {', '.join(CONVERTERS)}"
    if "encrypt" in names and "decrypt" in names:
        return "encrypt and decrypt cancel out: use one"
    return None


def _preserve(key: str, value: Any) -> str | None:
    names = value if isinstance(value, list) else [v.strip() for v in str(value or "").split(",") if v.strip()]
    bad = [n for n in names if n not in PRESERVABLE]
    return f"unknown attribute(s) {', '.join(bad)}; known: {', '.join(PRESERVABLE)}" if bad else None


def _glob(key: str, value: Any) -> str | None:
    """A glob in fsspec's dialect (the one ``fs.glob`` and :func:`.selection.glob_matcher` use)."""
    from fsspec.utils import glob_translate

    pattern = str(value or "").strip().strip("/")
    try:
        if pattern:
            glob_translate(pattern)
    except ValueError as e:
        return f"is not a glob: {e}"
    return None


def _date_format(key: str, value: Any) -> str | None:
    if value and not re.search(r"%[YmdHjUW]", str(value)):
        return "must be a strftime pattern with date fields, such as %Y/%m/%d"
    return None


COPY_CONFIG = (
    ConfigDef()
    .define("name", ConfigType.STRING, validator=non_empty, importance="high",
            doc="The copy job's name: names its plan, results and Airflow asset alias (copycat/<name>).")
    .define("source.url", ConfigType.STRING, validator=non_empty, importance="high",
            doc="Root to copy from: a path or an fsspec URL (file://, s3://bucket/prefix, hdfs://nn/path, memory://).")
    .define("target.url", ConfigType.STRING, validator=non_empty, importance="high",
            doc="Root to copy to (a path or an fsspec URL). Staging and the publish log live under <target>/_copycat/.")
    .define("dataset.pattern", ConfigType.STRING, "", validator=_glob,
            doc="Glob under source.url; each match is a dataset, published atomically as one file set "
                "(e.g. 'tables/*', 'logs/*/*'). Empty: the whole source is one dataset.")
    .define("file.pattern", ConfigType.STRING, "**", validator=_glob,
            doc="Glob of the files to copy inside each dataset (e.g. '**/*.parquet'), in the same dialect as "
                "dataset.pattern (fsspec's: * and ? stay within a directory, ** is a whole path component "
                "that crosses directories, also none).")
    .define("partition.date.format", ConfigType.STRING, "", validator=_date_format,
            doc="strftime pattern of date-partitioned directories inside a dataset (e.g. %Y/%m/%d): only files "
                "under a date in [date.range.start, date.range.end) are copied.")
    .define("date.range.start", ConfigType.STRING, "",
            doc="Start (inclusive) of the date range, ISO date or datetime; e.g. {{ data_interval_start }}.")
    .define("date.range.end", ConfigType.STRING, "",
            doc="End (exclusive) of the date range; e.g. {{ data_interval_end }}.")
    .define("update", ConfigType.BOOLEAN, True,
            doc="Skip files whose target has the same size and modification time (or checksum); false copies all.")
    .define("diff.policy", ConfigType.STRING, "update", non_empty,
            doc="How a dataset is diffed with the target: update (Distcp's -update, the default), or module:Class "
                "of a DiffPolicy (airflow_copycat.distcp.diff), or of a function returning one per dataset.")
    .define("delete", ConfigType.BOOLEAN, False,
            doc="Delete target files of a dataset that are not in the source (published with the dataset).")
    .define("converters", ConfigType.LIST, "", validator=_converters,
            doc="Converters applied while copying, in order, each to the files whose names it fits (others are "
                "copied as they are): gunzip, bunzip2, unxz, unzstd, decompress (any of them, by extension; the "
                "extension is dropped), untar (tar archives; expands into a directory named like the archive), "
                "encrypt (all files; adds .enc), decrypt (.enc and .age files): the age format with "
                "encryption.recipients / encryption.identity / encryption.passphrase, or the earlier copycat "
                "AES-256-GCM stream with encryption.key.")
    .define("encryption.recipients", ConfigType.LIST, "",
            doc="encrypt writes the age format (age-encryption.org/v1) to these X25519 recipients: comma-separated "
                "age1... public keys (age-keygen -y prints one). Any of their identities decrypts, e.g. age -d -i.")
    .define("encryption.identity", ConfigType.PASSWORD, None,
            doc="decrypt: age X25519 identities (AGE-SECRET-KEY-1... lines, as in an age-keygen key file; "
                "# comments allowed) that open age files.")
    .define("encryption.passphrase", ConfigType.PASSWORD, None,
            doc="age with a passphrase (scrypt): encrypt to it when encryption.recipients is empty; decrypt "
                "passphrase-encrypted age files (age -p). Costs about 1 s and 256 MiB per file at the default "
                "work factor: prefer recipients for many files.")
    .define("encryption.scrypt.work.factor", ConfigType.INT, 18, in_range(1, 22),
            doc="log2 of scrypt's N for files encrypt writes to encryption.passphrase (age's default 18).")
    .define("encryption.key", ConfigType.PASSWORD, None,
            doc="The earlier copycat format (AES-256-GCM stream, CPYCAT header): decrypt reads it with this key; "
                "encrypt writes it only when neither encryption.recipients nor encryption.passphrase is set. "
                "64 hex characters (32 bytes).")
    .define("untar.max.bytes", ConfigType.LONG, UNTAR_MAX_BYTES, in_range(0),
            doc="Most bytes the archives of one source file may expand to with untar (nested archives and the "
                "copies made for links included); 0: no bound. Default 100 GiB. Past it the file fails, naming "
                "the archive and the entry.")
    .define("untar.max.entries", ConfigType.LONG, UNTAR_MAX_ENTRIES, in_range(0),
            doc="Most entries the archives of one source file may have with untar (each copy made for a link "
                "counts as one); 0: no bound. Default 1,000,000.")
    .define("decompress.max.ratio", ConfigType.DOUBLE, DECOMPRESS_MAX_RATIO, in_range(0),
            doc="Most bytes a decompressor may produce per compressed byte read, checked as bytes come out; any "
                "stream may produce 16 MiB whatever the ratio. Also bounds what an archive expands to (link copies "
                "included) relative to the source file's size. Past it the file fails as a likely bomb; 0: no "
                "bound. Default 1000 (gzip cannot exceed about 1032).")
    .define("block.split.size", ConfigType.LONG, 0, in_range(0),
            doc="Files larger than this many bytes are copied as byte ranges in parallel and concatenated at "
                "publish (0: never split). Not combined with converters.")
    .define("checksum", ConfigType.STRING, "md5",
            doc="Checksum computed while copying (md5, sha256, or none); compared with the source's when it has "
                "one (S3 ETag of a single-part upload, or a <file>.<algorithm> sidecar with checksum.sidecar).")
    .define("checksum.sidecar", ConfigType.BOOLEAN, False,
            doc="Read the source checksum of <file> from <file>.md5 / <file>.sha256 (sidecars are not copied).")
    .define("preserve", ConfigType.LIST, "perm,mtime", validator=_preserve,
            doc="Attributes set on copied files where the target filesystem supports them: perm, mtime, owner, group.")
    .define("tasks.max", ConfigType.INT, 4, in_range(1),
            doc="Most tasks (Spark tasks); work is balanced by bytes, largest files first.")
    .define("copycat.groups.max", ConfigType.INT, 1, in_range(1),
            doc="Most task groups: each is one Spark application and one mapped Airflow task.")
    .define("source.options", ConfigType.PASSWORD, None,
            doc="JSON of fsspec storage options for the source (credentials: kept secret).")
    .define("target.options", ConfigType.PASSWORD, None,
            doc="JSON of fsspec storage options for the target (credentials: kept secret).")
)


def parse_copy_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Every key typed, or one :class:`ConfigException` naming every problem."""
    values, problems = COPY_CONFIG._parse(dict(raw))
    converters = values.get("converters") or []
    if values.get("block.split.size") and converters:
        problems.append(ConfigProblem("block.split.size", values["block.split.size"],
                                      "cannot be combined with converters (a converted stream has no byte ranges)"))
    for key, shown, problem in EncryptionKeys.from_config(values).problems(converters):
        problems.append(ConfigProblem(key, shown, problem))
    if values.get("partition.date.format") and not (values.get("date.range.start") and values.get("date.range.end")):
        problems.append(ConfigProblem("date.range.start", values.get("date.range.start"),
                                      "date.range.start and date.range.end are required with partition.date.format"))
    if values.get("checksum") not in (None, "md5", "sha256", "none"):
        problems.append(ConfigProblem("checksum", values.get("checksum"), "must be md5, sha256 or none"))
    for key in ("source.options", "target.options"):
        problem = _options_problem(values.get(key))
        if problem:
            problems.append(ConfigProblem(key, HIDDEN, problem))  # options hold credentials: never shown
    if problems:
        raise ConfigException(problems, context=f"copy {raw.get('name')!r}" if raw.get("name") else "copy")
    return values


def _options_problem(value: Any) -> str | None:
    """What is wrong with a ``source.options`` / ``target.options`` value (a mapping, or JSON object text,
    maybe inside a ``Password``); ``None``: nothing, or not set. Never quotes the value."""
    value = getattr(value, "value", value)
    if value in (None, "") or isinstance(value, Mapping):
        return None
    try:
        parsed = json.loads(str(value))
    except ValueError as e:
        return f"is not valid JSON (line {e.lineno}, column {e.colno}): give a JSON object of fsspec storage options"
    return None if isinstance(parsed, dict) else "must be a JSON object of fsspec storage options"
