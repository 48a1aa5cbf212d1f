"""Provider metadata read by Airflow's providers manager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from . import __version__

KAFKA_PROVIDER = "apache-airflow-providers-apache-kafka"


def get_provider_info() -> dict:
    """Validated against Airflow's ``provider_info.schema.json``.

    The ``kafka`` connection type is declared only when Apache Airflow's Kafka
    provider is not installed: that provider owns the type (same extra: the
    client config), and declaring it twice makes the providers manager warn in
    every process. Either way, :class:`~airflow_copycat.hooks.kafka.CopycatKafkaHook`
    reads any connection whose extra holds ``bootstrap.servers`` (or whose host does).
    """
    info = {
        "package-name": "airflow-copycat",
        "name": "Copycat",
        "description": "Kafka Connect's connector model and Gobblin's exactly-once file copy for Airflow: "
        "Airflow plans connectors, PySpark copies, Kafka keeps the offsets.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Copycat",
                "external-doc-url": "https://github.com/airflow-copycat/airflow-copycat",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "Copycat",
                "python-modules": [
                    "airflow_copycat.operators.plan",
                    "airflow_copycat.operators.run",
                    "airflow_copycat.operators.finish",
                    "airflow_copycat.operators.copy",
                    "airflow_copycat.operators.offsets",
                ],
            }
        ],
        "hooks": [
            {"integration-name": "Copycat", "python-modules": ["airflow_copycat.hooks.kafka"]},
        ],
        "sensors": [
            {"integration-name": "Copycat", "python-modules": ["airflow_copycat.sensors.partitions"]},
        ],
        "triggers": [
            {"integration-name": "Copycat", "python-modules": ["airflow_copycat.triggers.partitions"]},
        ],
        # the run task's link to its Spark application (Airflow resolves serialized DAGs' links through these)
        "extra-links": ["airflow_copycat.operators.links.SparkApplicationLink"],
        # the offsets page; also the entry point airflow.plugins (loaded when providers are discovered lazily)
        "plugins": [
            {"name": "copycat_offsets", "plugin-class": "airflow_copycat.plugins.offsets_plugin.CopycatOffsetsPlugin"},
        ],
    }
    if not _kafka_provider_installed():
        info["connection-types"] = [
            {
                "connection-type": "kafka",
                "hook-class-name": "airflow_copycat.hooks.kafka.CopycatKafkaHook",
                "hook-name": "Apache Kafka (Copycat)",
            }
        ]
    return info


def _kafka_provider_installed() -> bool:
    try:
        distribution(KAFKA_PROVIDER)
    except PackageNotFoundError:
        return False
    return True
