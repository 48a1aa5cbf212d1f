"""Provider metadata read by Airflow's providers manager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-copycat",
        "name": "Copycat",
        "description": "Kafka Connect's connector model and Gobblin's exactly-once file copy for Airflow: "
        "Airflow plans connectors, PySpark copies, Kafka keeps the offsets.",
        "versions": ["0.1.0"],
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
                ],
            }
        ],
        "hooks": [
            {"integration-name": "Copycat", "python-modules": ["airflow_copycat.hooks.kafka"]},
        ],
    }
