"""Framework keys are read once, typed, with the defaults the config declares (not other defaults by hand)."""

from __future__ import annotations

import pytest

from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.runtime.connector_config import FRAMEWORK_CONFIG
from airflow_copycat.runtime.retry import RetryPolicy
from airflow_copycat.runtime.settings import FrameworkSettings

MINIMAL = {"name": "c", "connector.class": "FileStreamSource"}
BY_KEY = {
    "copycat.run.max.records": "run_max_records", "copycat.run.max.ms": "run_max_ms",
    "copycat.eof.timeout.ms": "eof_timeout_ms", "copycat.put.retry.timeout.ms": "put_retry_timeout_ms",
    "errors.retry.timeout": "retry_timeout_ms", "errors.retry.delay.max.ms": "retry_delay_max_ms",
    "errors.log.enable": "log_errors", "errors.log.include.messages": "log_error_messages",
    "errors.deadletterqueue.topic.name": "dlq_topic",
    "errors.deadletterqueue.topic.replication.factor": "dlq_replication_factor",
    "errors.deadletterqueue.context.headers.enable": "dlq_context_headers",
    "transaction.boundary": "transaction_boundary", "transaction.boundary.interval.ms": "transaction_interval_ms",
    "topic.creation.default.partitions": "new_topic_partitions",
    "topic.creation.default.replication.factor": "new_topic_replication_factor",
}


@pytest.mark.parametrize("given", [MINIMAL, {**MINIMAL, **{k: "" for k in BY_KEY}}])
def test_absent_or_empty_keys_take_their_declared_defaults(given):
    settings = FrameworkSettings.of(given)
    for key, attr in BY_KEY.items():
        declared = FRAMEWORK_CONFIG.keys[key].default
        assert getattr(settings, attr) == (declared if declared is not None or key != "errors.deadletterqueue.topic.name"
                                           else ""), key
    assert settings.put_retry_timeout_ms == 300000  # a sink retries put() for 5 minutes unless told otherwise
    assert (settings.tolerate_errors, settings.exactly_once_required) == (False, False)


def test_task_config_strings_are_typed_and_case_is_forgiven():
    settings = FrameworkSettings.of({**MINIMAL, "copycat.run.max.records": "500", "errors.tolerance": "ALL",
                                     "errors.log.enable": "true", "transaction.boundary": "Interval"})
    assert (settings.run_max_records, settings.tolerate_errors, settings.log_errors,
            settings.transaction_boundary) == (500, True, True, "interval")
    assert (RetryPolicy.from_config({**MINIMAL, "errors.retry.timeout": "2500"}).timeout_ms,
            RetryPolicy.from_config(MINIMAL).delay_max) == (2500, 60.0)


def test_a_value_of_the_wrong_type_names_its_key():
    with pytest.raises(ConfigException, match="copycat.run.max.ms"):
        FrameworkSettings.of({**MINIMAL, "copycat.run.max.ms": "soon"})
