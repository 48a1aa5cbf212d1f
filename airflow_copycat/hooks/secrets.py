"""Keeping connector secrets out of Airflow's task logs and exception text.

Plans and the group JSON handed to Spark never carry secret values (they read
``[hidden]``, see :mod:`airflow_copycat.runtime.plan`). The operators also
register every secret value of a connector config with Airflow's secrets
masker before anything runs, so that a connector that logs its password, or
an error message that quotes it, shows ``***`` in the task log.

Rendered template fields are written before ``execute`` runs, so there Airflow
hides only keys it recognises by name (``password``, ``secret``, ``token``...).
Keep secrets out of the DAG file: ``"api.credential": "{{ conn.my_api.password }}"``
(Airflow masks connection passwords as it renders them) or a Variable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

try:
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import mask_secret

from ..runtime.jobs import job_for_config

__all__ = ["connector_secrets", "mask_secret"]


def connector_secrets(raw: Mapping[str, Any], keys: Iterable[str] | None = None) -> dict[str, Any]:
    """The secret values of a flat, rendered connector (or copy job) config (key -> value), each
    registered with Airflow's secrets masker. ``keys``: the secret keys the plan recorded (its
    spec's); ``None``: the job's :meth:`~airflow_copycat.runtime.jobs.Job.secret_keys` of ``raw`` -- the
    ``PASSWORD`` keys and any key named like a secret (an unknown ``connector.class`` leaves only the
    keys named like secrets; the plan reports the class). The config is not validated here."""
    keys = job_for_config(raw).secret_keys(raw) if keys is None else keys
    secrets = {k: raw[k] for k in keys if raw.get(k) not in (None, "")}
    for value in secrets.values():
        mask_secret(str(value))  # no name: Airflow masks a named value only if the name looks secret
    return secrets
