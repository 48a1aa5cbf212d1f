"""Worker configuration: Kafka Connect's worker properties.

A :class:`WorkerConfig` holds what a Kafka Connect worker's properties file holds
and what every task of a run shares: ``bootstrap.servers`` and the other Kafka
client keys (``security.protocol``, ``sasl.*``, ``ssl.*``, ``client.id``), the
default ``key.converter`` / ``value.converter`` (and their ``*.converter.*``
settings), offset storage (``offset.storage.topic``, or
``offset.storage.file.filename`` for standalone use), ``offset.flush.interval.ms``,
``exactly.once.source.support`` (``enabled`` makes every source transactional, see
:mod:`.transactions`), progress (``progress.interval.ms``, ``status.storage.topic``, see
:mod:`.progress`) and per-client overrides (``producer.*``, ``consumer.*``, ``admin.*``).

Environment variables override the file: ``COPYCAT_BOOTSTRAP_SERVERS`` sets
``bootstrap.servers`` (upper case, ``.`` -> ``_``; ``__`` -> ``.`` is not needed
for the keys above). The worker config may hold secrets (SASL passwords): it is
passed to Spark through the environment, never written to disk by the framework.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Mapping

from ..connect.secrets import is_secret_key

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"

DEFAULTS: dict[str, Any] = {
    "key.converter": JSON_CONVERTER,
    "value.converter": JSON_CONVERTER,
    "offset.storage.topic": "copycat-offsets",
    "offset.storage.partitions": 25,
    "offset.storage.replication.factor": -1,
    "offset.flush.interval.ms": 10000,
    "exactly.once.source.support": "disabled",
}

_CLIENT_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "reconnect.", "retry.")
CALLBACK_KEYS = ("error_cb", "throttle_cb", "stats_cb", "log_cb", "oauth_cb")
"""confluent-kafka settings whose values are callables (``oauth_cb`` gets SASL/OAUTHBEARER tokens). In a
worker config they are dotted paths (``my_pkg.auth.oauth_cb``), as in the ``kafka`` connections of
Airflow's Kafka provider, imported in each process that makes a client (Spark executors too: the
module must be installed there). ``on_commit`` goes to consumers only."""
_CLIENT_KEYS = {"bootstrap.servers", "client.id", "client.dns.lookup", "metadata.max.age.ms", "request.timeout.ms"}
_ENV_KEYS = (
    "bootstrap.servers",
    "key.converter",
    "value.converter",
    "offset.storage.topic",
    "offset.storage.file.filename",
    "offset.storage.partitions",
    "offset.storage.replication.factor",
    "offset.flush.interval.ms",
    "security.protocol",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
)


def load_properties(path: str) -> dict[str, str]:
    """Read a Java ``.properties`` file as ``java.util.Properties.load`` does: ``#``/``!``
    comments, ``=``, ``:`` or whitespace separators, backslash escapes (``\\=``, ``\\:``,
    ``\\t``, ``\\uXXXX``...) and lines continued by an odd number of trailing backslashes."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    props: dict[str, str] = {}
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        line = line.lstrip(" \t\f")
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        logical.append(pending + line)
        pending = ""
    if pending:
        logical.append(pending)
    for entry in logical:
        key, value = _split_property(entry)
        props[_unescape(key)] = _unescape(value)
    return props


def _split_property(entry: str) -> tuple[str, str]:
    i, n = 0, len(entry)
    while i < n:
        c = entry[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key, rest = entry[:i], entry[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt == "u" and i + 6 <= len(s):
                try:
                    out.append(chr(int(s[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def resolve_callback(key: str, value: Any) -> Any:
    """The callable a callback setting (:data:`CALLBACK_KEYS`) names: ``value`` itself if callable, else
    the object at its dotted path (``pkg.module.func`` or ``pkg.module:func``). Raises ``ValueError``
    naming the key when it cannot be imported."""
    if callable(value) or value in (None, ""):
        return value
    path = str(value).strip()
    module, sep, name = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        if not sep or not module or not name:
            raise ImportError("not a dotted path to a callable (pkg.module.func)")
        target = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{key}={path!r} cannot be imported here: {e}") from None
    if not callable(target):
        raise ValueError(f"{key}={path!r} is not callable")
    return target


class WorkerConfig:
    """Worker properties with defaults; see the module docstring for the keys."""

    def __init__(self, props: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None):
        merged: dict[str, Any] = dict(DEFAULTS)
        merged.update({k: v for k, v in (props or {}).items() if v is not None})
        for key in _ENV_KEYS:
            value = (env if env is not None else os.environ).get("COPYCAT_" + key.upper().replace(".", "_"))
            if value:
                merged[key] = value
        self.props = merged

    @classmethod
    def from_file(cls, path: str | None, *, env: Mapping[str, str] | None = None) -> "WorkerConfig":
        return cls(load_properties(path) if path else {}, env=env)

    def get(self, key: str, default: Any = None) -> Any:
        return self.props.get(key, default)

    @property
    def bootstrap_servers(self) -> str | None:
        return self.props.get("bootstrap.servers")

    @property
    def offset_topic(self) -> str:
        return str(self.props["offset.storage.topic"])

    @property
    def offset_file(self) -> str | None:
        return self.props.get("offset.storage.file.filename") or None

    @property
    def exactly_once_source(self) -> bool:
        """Whether ``exactly.once.source.support=enabled``: every source task writes in transactions."""
        return str(self.props.get("exactly.once.source.support", "")).lower() == "enabled"

    @property
    def offset_flush_interval_ms(self) -> int:
        return int(self.props["offset.flush.interval.ms"])

    def client_config(self) -> dict[str, Any]:
        """Keys every Kafka client gets (bootstrap, security)."""
        if not self.bootstrap_servers:
            raise ValueError("bootstrap.servers is not set: give a worker properties file, "
                             "a Kafka connection, or COPYCAT_BOOTSTRAP_SERVERS")
        return {
            k: resolve_callback(k, v) if k in CALLBACK_KEYS else v
            for k, v in self.props.items()
            if k in _CLIENT_KEYS or k.startswith(_CLIENT_PREFIXES) or k in CALLBACK_KEYS
        }

    def _prefixed(self, prefix: str, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
        out = {k[len(prefix):]: v for k, v in self.props.items() if k.startswith(prefix)}
        out.update(overrides or {})
        return out

    def producer_config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Producer settings: idempotent, acks=all, Java's murmur2 partitioner so keyed records
        land where Kafka Connect's would; then ``producer.*``, then ``overrides``.

        Connections to the brokers open when the producer is made, not when it first needs one
        (``enable.sparse.connections=false``): an idempotent producer gets its producer id only from
        a broker it is already connected to and retries every 500 ms, so with lazy connections a
        short run's first records waited 0.5-1 s for the id (measured: a 10k-record run's final
        flush took 0.5-0.7 s, and 0.02 s with the id fetched while the run starts)."""
        cfg = {
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "partitioner": "murmur2_random",
            "enable.sparse.connections": False,
            **self.client_config(),
        }
        cfg.update(self._prefixed("producer.", overrides))
        return cfg

    def consumer_config(self, group_id: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Consumer settings for assign()-based bounded reads: no auto commit, EOF events on."""
        cfg = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            # Bounded reads: do not let the broker hold a fetch long when a partition is at its end
            # (the end is only known from a fetch that found nothing: every read of a small topic,
            # the offsets' included, waited this long; 50 ms made reading the offsets 3x slower).
            "fetch.wait.max.ms": 10,
            # librdkafka stops fetching a partition whose prefetched queue is full (queued.min.messages)
            # for this long; its default (1000 ms) idles the fetcher while a batch is processed, which
            # halved the read rate of sinks that process in large rounds (bench_kafka_to_parquet).
            "fetch.queue.backoff.ms": 10,
            **self.client_config(),
        }
        if self.props.get("on_commit"):
            cfg["on_commit"] = resolve_callback("on_commit", self.props["on_commit"])
        cfg.update(self._prefixed("consumer.", overrides))
        cfg["enable.partition.eof"] = True  # bounded runs depend on it
        return cfg

    def admin_config(self) -> dict[str, Any]:
        cfg = self.client_config()
        cfg.update(self._prefixed("admin.", None))
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return dict(self.props)

    def public_dict(self) -> dict[str, Any]:
        """The properties with secret values hidden, for logs and XCom."""
        return {k: ("[hidden]" if is_secret_key(k) else v) for k, v in self.props.items()}
