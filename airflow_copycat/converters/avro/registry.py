"""The Confluent Schema Registry as the Avro converter uses it: one client, caches, clear errors.

Contract: ``_Registry(urls, conf, secrets, normalize, cache_size)`` makes its client on first
use (confluent-kafka's ``SchemaRegistryClient``) and caches, bounded by ``schemas.cache.size``:
``register`` / ``lookup`` a schema's id under a subject, ``latest`` version of a subject, a
``schema`` by id (Avro only), a schema's ``version`` under a subject (``None`` when unknown).
Failures become the framework's exceptions: an unreachable registry, 5xx, 408 or 429 a
``RetriableException``; a refused login a ``ConnectException``; an incompatible (409), missing
(404) or invalid (422) schema a ``DataException`` saying what to do. Secrets (passwords, user
info in URLs) never appear in messages or logs: :func:`_safe_url` cuts user info from URLs.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Mapping

from ...connect.errors import ConnectException, DataException, RetriableException
from ...connect.secrets import Scrubber
from .config import AUTO_REGISTER
from .names import _LRU

log = logging.getLogger("airflow_copycat.avro")

# user info runs to the last @ of the URL (a password may hold a raw @ or /): all of it is cut
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:(?!,[a-z][a-z0-9+.-]*://)\S)*@")


def _safe_url(url: str) -> str:
    """``url`` without any ``user:password@``."""
    return _USERINFO.sub(r"\1", url)


def _user_info(url: str) -> str | None:
    """What precedes the last ``@`` of an http(s) URL (its ``user:password`` when the URL is
    well-formed), ``None`` without an ``@``."""
    m = re.match(r"(?i)https?://", url)
    if not m:
        return None
    rest = url[m.end():]
    at = rest.rfind("@")
    return rest[:at] if at >= 0 else None


class _Registry:
    """The Confluent Schema Registry, through confluent-kafka's client, with caches; errors become
    the framework's exceptions with secrets removed."""

    def __init__(self, urls: list[str], conf: Mapping[str, Any], secrets: list[str], normalize: bool,
                 cache_size: int = 1000):
        self.shown = ", ".join(_safe_url(u) for u in urls)
        self._conf = dict(conf, url=",".join(urls))
        self._hide = Scrubber(secrets)
        self._normalize = normalize
        self._client = None
        # bounded as schemas.cache.size: (subject, schema text) -> id, id -> text, subject -> latest
        self._ids = _LRU(cache_size)
        self._schemas = _LRU(cache_size)
        self._latest = _LRU(cache_size)

    @property
    def client(self):
        if self._client is None:
            try:
                from confluent_kafka.schema_registry import SchemaRegistryClient
            except ImportError as e:  # pragma: no cover - a dependency of this package
                raise ConnectException(f"the schema registry client needs confluent-kafka[schemaregistry]: {e}") from None
            try:
                self._client = SchemaRegistryClient(self._conf)
            except (ValueError, TypeError, OSError) as e:
                raise ConnectException(f"schema registry {self.shown}: {self._scrub(str(e))}") from None
        return self._client

    def _scrub(self, text: str) -> str:
        return self._hide(_safe_url(str(text)))

    def _schema(self, text: str):
        from confluent_kafka.schema_registry import Schema as RegistrySchema

        return RegistrySchema(text, "AVRO")

    def register(self, subject: str, text: str) -> int:
        key = (subject, text)
        hit = self._ids.get(key)
        if hit is None:
            hit = self._call(lambda: self.client.register_schema(subject, self._schema(text), self._normalize),
                             "registering the schema", subject)
            log.info("schema registry %s: subject %s has the Avro schema as id %s", self.shown, subject, hit)
            self._ids.put(key, hit)
            if self._schemas.get(hit) is None:
                self._schemas.put(hit, text)
        return hit

    def lookup(self, subject: str, text: str) -> int:
        key = (subject, text)
        hit = self._ids.get(key)
        if hit is None:
            found = self._call(lambda: self.client.lookup_schema(subject, self._schema(text), self._normalize),
                               "looking the schema up", subject, auto_register_off=True)
            hit = found.schema_id
            self._ids.put(key, hit)
        return hit

    def latest(self, subject: str) -> tuple[int, str, int | None]:
        hit = self._latest.get(subject)
        if hit is None:
            found = self._call(lambda: self.client.get_latest_version(subject), "reading the latest schema", subject)
            hit = self._latest.put(subject, (found.schema_id, found.schema.schema_str, found.version))
            if self._schemas.get(found.schema_id) is None:
                self._schemas.put(found.schema_id, found.schema.schema_str)
        return hit

    def schema(self, schema_id: int) -> str:
        hit = self._schemas.get(schema_id)
        if hit is None:
            found = self._call(lambda: self.client.get_schema(schema_id), f"reading schema id {schema_id}", None,
                               schema_id=schema_id)
            if (found.schema_type or "AVRO").upper() != "AVRO":
                raise DataException(f"schema id {schema_id} in the schema registry {self.shown} is a "
                                    f"{found.schema_type} schema, not Avro: use the converter for that format")
            hit = found.schema_str
            self._schemas.put(schema_id, hit)
        return hit

    def version(self, subject: str, text: str) -> int | None:
        """The version of ``text`` under ``subject``, ``None`` when it is not registered there."""
        try:
            found = self.client.lookup_schema(subject, self._schema(text), self._normalize)
        except Exception as e:  # noqa: BLE001 - the version only names the Connect schema; reading goes on
            log.debug("schema registry %s: no version of the schema under %s: %s", self.shown, subject,
                      self._scrub(str(e)))
            return None
        return found.version

    def compatibility(self, subject: str) -> str:
        for args in ((subject,), ()):
            try:
                return self.client.get_compatibility(*args)
            except Exception:  # noqa: BLE001 - only for the message
                continue
        return "unknown"

    def _call(self, fn, what: str, subject: str | None, *, schema_id: int | None = None,
              auto_register_off: bool = False):
        try:
            return fn()
        except ConnectException:
            raise
        except Exception as e:  # noqa: BLE001 - translated below
            raise self._error(e, what, subject, schema_id, auto_register_off) from None

    def _error(self, e: Exception, what: str, subject, schema_id, auto_register_off) -> ConnectException:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        where = f"schema registry {self.shown}"
        about = f" for subject {subject!r}" if subject else ""
        if isinstance(e, SchemaRegistryError):
            status, code = e.http_status_code, e.error_code
            message = self._scrub(e.error_message or "")
            if status == 409:
                level = self.compatibility(subject) if subject else "unknown"
                return DataException(
                    f"{where} rejected the Avro schema{about}: it is incompatible with the subject's earlier "
                    f"versions (compatibility {level}): {message}. Evolve the schema compatibly -- add fields "
                    "with defaults (an optional field defaults to null), remove only fields that have defaults -- "
                    f"or change the subject's compatibility level (PUT /config/{subject})")
            if status in (401, 403):
                return ConnectException(
                    f"{where} refused the credentials while {what}{about} (HTTP {status}): check "
                    "basic.auth.credentials.source and basic.auth.user.info, or the user:password in the URL")
            if status == 404:
                if schema_id is not None:
                    return DataException(f"schema id {schema_id} is not in the {where} (HTTP 404, code {code}): "
                                         "was the record written against another registry?")
                if auto_register_off:
                    return DataException(f"the record's Avro schema is not registered{about} in the {where} and "
                                         f"{AUTO_REGISTER}=false: register it first, or set {AUTO_REGISTER}=true "
                                         f"({message})")
                return DataException(f"{where}: nothing{about} while {what} (HTTP 404): {message}")
            if status == 422:
                return DataException(f"{where} rejected the Avro schema{about} as invalid: {message}")
            if status >= 500 or status in (408, 429):
                return RetriableException(f"{where} failed while {what}{about} (HTTP {status}): {message}")
            return DataException(f"{where} failed while {what}{about} (HTTP {status}, code {code}): {message}")
        names = {c.__name__ for c in type(e).__mro__}
        if isinstance(e, (OSError, TimeoutError)) or names & {"TransportError", "TimeoutException", "NetworkError"}:
            return RetriableException(f"{where} is unreachable while {what}{about}: {type(e).__name__}: "
                                      f"{self._scrub(str(e))}")
        return ConnectException(f"{where} failed while {what}{about}: {type(e).__name__}: {self._scrub(str(e))}")
