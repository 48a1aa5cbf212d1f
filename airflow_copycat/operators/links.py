"""The run task's extra link: the Spark application that ran its task group.

The run operator pushes what it learnt about the application to XCom (key
:data:`SPARK_APPLICATION_KEY`): ``{"app_id": ..., "cluster": ..., "url": ...}``. Where the id
comes from:

* ``spark_connect`` connection: the server's ``spark.app.id`` (one long-running application serves
  every group; its UI shows the group's jobs among others);
* ``spark`` connection (spark-submit): YARN's ``application_...`` id, Kubernetes' ``spark-...``
  application id (or the driver pod), standalone's ``app-...`` id, as spark-submit logs them. In
  ``local`` mode the driver does not log its id: unknown;
* ``in_process``: no Spark application, nothing is pushed.

The URL is the connection's extra ``spark_ui_url`` when it has one, a template filled with
``{app_id}`` (and ``{driver_pod}``): ``https://history.example.com/history/{app_id}/jobs/`` for a
Spark History Server, ``https://rm.example.com:8088/cluster/app/{app_id}`` for YARN's
ResourceManager. Without it, a Spark Connect server whose UI is on links to its UI
(``http://<connection host>:<spark.ui.port>/jobs/``); otherwise there is no URL and the link is
empty (the button shows, leading nowhere: Airflow renders an empty link as disabled).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

SPARK_APPLICATION_KEY = "spark_application"
"""XCom key of the run task's Spark application (see the module docstring)."""

UI_URL_EXTRA = "spark_ui_url"
"""Extra key of a ``spark`` / ``spark_connect`` connection: the URL template of an application."""


def application_url(app_id: str | None, template: str | None, *, driver_pod: str | None = None,
                    default: str | None = None) -> str | None:
    """The URL of application ``app_id``: ``template`` filled in (``None`` when it needs an id or pod
    that is unknown), else ``default``."""
    if template:
        if ("{app_id}" in template and not app_id) or ("{driver_pod}" in template and not driver_pod):
            return None
        return template.replace("{app_id}", app_id or "").replace("{driver_pod}", driver_pod or "")
    return default


class SparkApplicationLink(BaseOperatorLink):
    """"Spark application": the UI (or history server / cluster manager page) of the Spark
    application that ran the task group; empty when unknown (see :mod:`.links`)."""

    name = "Spark application"

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.providers.common.compat.sdk import XCom

        app: Any = XCom.get_value(ti_key=ti_key, key=SPARK_APPLICATION_KEY)
        return str(app.get("url") or "") if isinstance(app, dict) else ""
