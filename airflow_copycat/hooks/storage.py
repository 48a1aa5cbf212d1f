"""Object storage through Airflow connections.

``store.url`` (files sink) and ``source.url`` / ``target.url`` (Distcp copy
jobs) may name an Airflow connection the way Airflow's ``ObjectStoragePath``
does: ``s3://aws_default@bucket/prefix``, ``gs://google_cloud_default@bucket/x``,
``sftp://my_sftp@host/upload``. The Airflow layer (plan, run and publish
operators) calls :func:`resolve_storage_connections`, which

* asks Airflow for that connection's filesystem -- ``airflow.sdk.io``'s
  ``get_fs(protocol, conn_id)``, what ``ObjectStoragePath`` and ``attach()``
  use, served by the provider of the scheme (amazon: s3, google: gs, sftp:
  sftp, microsoft-azure: abfs, ...) -- and takes its fsspec storage options;
* puts them in the URL key's options key (``store.options``,
  ``source.options``, ``target.options``), PASSWORD keys: plans, XCom and
  logs show ``[hidden]``, Spark tasks get them through the environment like a
  database password (:mod:`airflow_copycat.runtime.submit`), and their secret
  values are registered with Airflow's secrets masker. Options the config
  gives itself in that key are laid over the connection's (e.g.
  ``{"default_block_size": 8388608}``);
* leaves the URL the runtime sees a plain fsspec URL without the connection
  id (``s3://bucket/prefix``); Asset events and summaries name that URL.

Options must be plain data to travel to Spark. A filesystem built around a live
client object is translated where that is known: S3 (amazon provider) gets
the session's current credentials as ``key`` / ``secret`` / ``token`` (temporary
credentials expire: long runs should use an instance role or ``store.options``).
Anything else that is not plain data is refused, naming the option. The
``copycat`` CLI does not import Airflow: give the options there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException
from ..connect.secrets import Scrubber
from ..runtime.worker import is_secret_key

URL_OPTION_KEYS = {"store.url": "store.options", "source.url": "source.options", "target.url": "target.options"}
"""The URL keys that may name an Airflow connection, and the options key each fills."""

_SECRET_OPTION = {"secret", "passphrase", "sas_token", "account_key", "client_secret", "token", "client_keys"}


def resolve_storage_connections(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the flat connector or copy job config ``raw`` in which every URL key
    (:data:`URL_OPTION_KEYS`) of the form ``scheme://conn_id@rest`` is the plain ``scheme://rest`` and its
    options key holds the storage options of Airflow connection ``conn_id`` (JSON), with the options
    ``raw`` gave laid over them. ``raw`` is copied unchanged where no URL names a connection.

    Raises :class:`~airflow_copycat.connect.errors.ConfigException` naming the key when the connection
    does not exist, no installed provider serves the scheme, or its options cannot travel to Spark.
    Never puts a secret in an error."""
    out = dict(raw)
    context = f"connector {raw.get('name')!r}"
    for url_key, options_key in URL_OPTION_KEYS.items():
        named = _conn_id_of(raw.get(url_key))
        if named is None:
            continue
        protocol, conn_id, plain = named
        if protocol in _USER_IN_URL and not _connection_exists(conn_id):
            continue  # sftp://user@host/...: fsspec's own user name, as before connections were read here
        if not _has_fs(protocol):
            if not _connection_exists(conn_id):
                continue  # fsspec reads the user name itself (hdfs://user@namenode/...)
            raise ConfigException([ConfigProblem(url_key, f"{protocol}://{conn_id}@...", (
                f"names Airflow connection {conn_id!r}, but no installed Airflow provider serves {protocol}:// "
                f"filesystems (amazon for s3, google for gs, microsoft-azure for abfs, sftp for sftp; with their "
                f"fsspec package: s3fs, gcsfs, adlfs, sshfs)"))], context=context)
        options = _connection_options(protocol, conn_id, url_key, context)
        options.update(_given_options(raw.get(options_key), options_key, context))
        _mask(options)
        out[url_key] = plain
        out[options_key] = json.dumps(options)
    return out


_USER_IN_URL = frozenset({"sftp", "ssh", "ftp", "hdfs", "webhdfs", "smb"})
"""Schemes whose fsspec filesystem reads a user name from the URL: there, user info that is no Airflow
connection stays the user name."""


def _conn_id_of(url: Any) -> tuple[str, str, str] | None:
    """``(protocol, conn_id, url without it)`` when ``url`` may name a connection as ``ObjectStoragePath``
    reads it (``scheme://conn_id@...``: user info without ``:``); ``None`` otherwise (a local path, a
    plain fsspec URL, ``ftp://user:password@host``). On a scheme no Airflow provider serves, user info
    that is no Airflow connection is fsspec's (``hdfs://user@namenode/...``)."""
    if not isinstance(url, str) or "://" not in url:
        return None
    parts = urlsplit(url.strip())
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or not userinfo or ":" in userinfo or not parts.scheme:
        return None
    return parts.scheme, userinfo, parts._replace(netloc=host).geturl()


def _has_fs(protocol: str) -> bool:
    from airflow.sdk.io.fs import has_fs

    return has_fs(protocol)


def _connection_exists(conn_id: str) -> bool:
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(conn_id)
        return True
    except Exception:  # noqa: BLE001 -- not found (or no backend answers): not a connection id
        return False


def _connection_options(protocol: str, conn_id: str, url_key: str, context: str) -> dict[str, Any]:
    from airflow.sdk import BaseHook
    from airflow.sdk.io.fs import get_fs

    def problem(message: str) -> ConfigException:
        return ConfigException([ConfigProblem(url_key, f"{protocol}://{conn_id}@...", message)], context=context)

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as e:  # AirflowNotFoundException, or the secrets backend failing
        raise problem(f"names Airflow connection {conn_id!r} (scheme://conn_id@... as ObjectStoragePath reads it), "
                      f"which is not usable: {e}") from None
    if conn.password:
        mask_secret(conn.password)
    try:
        fs = get_fs(protocol, conn_id)
        options = dict(getattr(fs, "storage_options", None) or {})
        options = _portable(protocol, options)
    except ConfigException:
        raise
    except Exception as e:  # noqa: BLE001 -- the provider's filesystem failing to start (wrong host, key...)
        # the provider's text may quote any of the connection's values (an sftp private_key passed on as a
        # key file name shows in the FileNotFoundError, escaped): every string of its extra is hidden
        extra = conn.extra_dejson if conn.extra else {}
        _mask(extra)  # its secret-named values also as they read escaped, wherever else they show
        hide = Scrubber([conn.password, *_strings(extra)])
        raise problem(f"Airflow could not open the {protocol} filesystem of connection {conn_id!r}: "
                      f"{type(e).__name__}: {hide(e)}") from None
    unportable = sorted(k for k, v in options.items() if not _plain(v))
    if unportable:
        raise problem(f"the {protocol} filesystem of connection {conn_id!r} holds options {unportable} that are no "
                      f"plain data and cannot travel to Spark tasks: give the storage options in "
                      f"{URL_OPTION_KEYS[url_key]} and a URL without the connection id")
    return options


def _portable(protocol: str, options: dict[str, Any]) -> dict[str, Any]:
    """Storage options that can be sent as JSON: an S3 filesystem's botocore session becomes its current
    credentials and region (what s3fs makes a session from)."""
    session = options.get("session")
    if session is not None and hasattr(session, "get_credentials"):
        import asyncio
        import inspect

        def wait(value):
            return asyncio.run(value) if inspect.isawaitable(value) else value

        options.pop("session")
        credentials = wait(session.get_credentials())
        if credentials is not None:
            frozen = wait(credentials.get_frozen_credentials())
            options.update({k: v for k, v in (("key", frozen.access_key), ("secret", frozen.secret_key),
                                               ("token", frozen.token)) if v})
        region = session.get_config_variable("region") if hasattr(session, "get_config_variable") else None
        if region:
            options.setdefault("client_kwargs", {}).setdefault("region_name", region)
    return options


def _plain(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _given_options(value: Any, options_key: str, context: str) -> dict[str, Any]:
    value = getattr(value, "value", value)  # a connect.config.Password
    if value in (None, ""):
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json.loads(str(value))
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigException([ConfigProblem(options_key, None, "must be a JSON object of fsspec storage options")],
                              context=context)
    return parsed


def _strings(value: Any) -> list[str]:
    """Every string in ``value`` (a connection's extra, storage options), nested mappings and lists too."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _strings(v)]
    return []


def _mask(options: Mapping[str, Any]) -> None:
    """Register the secret values of storage options (nested mappings and lists too: an sftp filesystem's
    ``client_keys``) with Airflow's secrets masker, also as they read escaped (JSON, a repr: a PEM key's
    line breaks as ``\\n``)."""
    for key, value in options.items():
        if isinstance(value, Mapping):
            _mask(value)
        elif value not in (None, "") and (is_secret_key(str(key)) or str(key) in _SECRET_OPTION):
            texts = _strings(value) if isinstance(value, (list, tuple)) else \
                [str(value)] if isinstance(value, (str, int, float)) else []
            for text in texts:
                mask_secret(text)
                if json.dumps(text)[1:-1] != text:
                    mask_secret(json.dumps(text)[1:-1])
