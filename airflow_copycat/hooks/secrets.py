"""Keeping connector secrets out of Airflow's task logs and exception text.

Plans and the group JSON handed to Spark never carry secret values (they read
``[hidden]``, see :mod:`airflow_copycat.runtime.plan`). The operators also
register every secret value of a connector config with Airflow's secrets
masker before anything runs, so that a connector that logs its password, or
an error message that quotes it, shows ``***`` in the task log.

Rendered template fields (the UI's "Rendered Template") are stored before
``execute`` runs. So the operators and the sensor register the secrets of their
rendered config fields as soon as the fields are rendered, before Airflow
serialises them (:class:`MasksRenderedSecrets`): every secret value of the
config, each URL's password, and the secret-named values of ``worker_config``
then read ``***`` there too. Still, keep secrets out of the DAG file:
``"api.credential": "{{ conn.my_api.password }}"`` (Airflow masks connection
passwords as it renders them) or a Variable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..connect.secrets import has_url_password, is_secret_key, url_passwords
from ..runtime.jobs import job_for_config

__all__ = ["MasksRenderedSecrets", "connector_secrets", "mask_secret", "mask_value", "worker_secrets"]


def _secret_texts(value: Any, *, inside: bool = False) -> list[str]:
    """The texts of a secret value to mask: the value as text, each URL password in it, and -- a JSON
    object or array (storage options), as text or not -- each string inside it (not the numbers and
    flags inside it: a port or a timeout masked in every log line would garble them)."""
    value = getattr(value, "value", value)  # a Password
    if isinstance(value, str):
        try:
            doc = json.loads(value) if value.lstrip()[:1] in ("{", "[") else None
        except ValueError:
            doc = None
        return [value, *url_passwords(value), *(_secret_texts(doc, inside=True) if doc is not None else [])]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _secret_texts(v, inside=True)]
    if isinstance(value, (list, tuple, set)):
        return [t for v in value for t in _secret_texts(v, inside=True)]
    return [] if value is None or inside else [str(value)]


def mask_value(value: Any) -> None:
    """Register a secret value with Airflow's secrets masker, in each of its :func:`_secret_texts`
    (with no name: Airflow masks a named value only if the name looks secret)."""
    for text in _secret_texts(value):
        mask_secret(text)


def connector_secrets(raw: Mapping[str, Any], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """The secret values of a flat, rendered connector (or copy job) config (key -> value), each
    registered with Airflow's secrets masker. ``keys``: the secret keys the plan recorded (its
    spec's); ``None``: the job's :meth:`~airflow_copycat.runtime.jobs.Job.secret_keys` of ``raw`` -- the
    ``PASSWORD`` keys and any key named like a secret (an unknown ``connector.class`` leaves only the
    keys named like secrets; the plan reports the class). The config is not validated here."""
    keys = job_for_config(raw).secret_keys(raw) if keys is None else keys
    secrets = {k: raw[k] for k in keys if raw.get(k) not in (None, "")}
    for value in secrets.values():
        mask_value(value)
    return secrets


def worker_secrets(worker_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The secret values of worker properties (``sasl.jaas.config``, ``sasl.password``, a schema
    registry URL with a password...), each registered with Airflow's secrets masker."""
    secrets = {k: v for k, v in (worker_config or {}).items()
               if v not in (None, "") and (is_secret_key(str(k)) or has_url_password(v))}
    for value in secrets.values():
        mask_value(value)
    return secrets


class MasksRenderedSecrets:
    """Mixin of the operators and sensors whose template fields hold a connector or copy config: as
    soon as Airflow has rendered the fields -- before it stores them as the task instance's rendered
    fields, which happens before ``execute`` -- the secrets in them are registered with Airflow's
    secrets masker, so the stored fields show ``***``.

    ``config_fields`` name the fields holding a config (a dict, JSON text or a file path: its secrets
    are those of :func:`connector_secrets`), ``worker_fields`` those holding worker properties
    (:func:`worker_secrets`). A config that cannot be read yet still has its URL passwords
    registered; ``execute`` reports what is wrong with it."""

    config_fields: Sequence[str] = ()
    worker_fields: Sequence[str] = ("worker_config",)

    def _do_render_template_fields(self, parent, template_fields, context, jinja_env, seen_oids) -> None:
        # the one step that renders fields both of a task and of a mapped task's instance (a
        # MappedOperator renders its unmapped operator through it, not through render_template_fields)
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
        if parent is self:
            self.mask_rendered_secrets()

    def rendered_secret_keys(self) -> Iterable[str] | None:
        """The secret keys of the config fields when the task knows them already (the run task: its
        group's spec); ``None``: the job names them (:func:`connector_secrets`)."""
        return None

    def mask_rendered_secrets(self) -> None:
        """Register the secrets of the (rendered) config and worker fields with Airflow's masker."""
        from ..runtime.connector_config import load_connector_config

        for field in self.config_fields:
            value = getattr(self, field, None)
            if value in (None, ""):
                continue
            try:
                raw = load_connector_config(value)
            except Exception:  # noqa: BLE001 -- unreadable: execute fails naming why
                for password in url_passwords(json.dumps(value) if isinstance(value, Mapping) else str(value)):
                    mask_secret(password)
                continue
            connector_secrets(raw, self.rendered_secret_keys())
        for field in self.worker_fields:
            value = getattr(self, field, None)
            if isinstance(value, Mapping):
                worker_secrets(value)
