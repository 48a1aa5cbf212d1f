"""Run one task group of a plan: one PySpark application (or, for tiny runs, this process)."""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.exceptions import AirflowException
from airflow.sdk import BaseOperator

from ..hooks.database import resolve_db_connection
from ..hooks.kafka import CopycatKafkaHook
from ..hooks.storage import resolve_storage_connections
from ..runtime import connector_config, submit
from ..runtime.executor import run_group, task_scrubber
from ..runtime.jobs import job_of
from ..runtime.progress import GroupProgress
from ..runtime.result import describe_group, failures, scrub_errors
from ..runtime.spec import spec_of_group
from . import metrics
from ..hooks.secrets import MasksRenderedSecrets, connector_secrets
from .links import SPARK_APPLICATION_KEY, UI_URL_EXTRA, SparkApplicationLink, application_url


GROUP_LABEL = "copycat_group_label"
MAP_INDEX_TEMPLATE = "{{ " + GROUP_LABEL + " }}"
"""``map_index_template`` of the mapped run tasks: each instance shows in the UI what its group runs
(``group 0: orders, customers``; :func:`~airflow_copycat.runtime.result.describe_group`)."""


LOCAL_MASTER = "local[*]"
"""Where a run task's group runs when its Spark connection is not defined anywhere (the Spark
provider alone would submit to ``yarn``)."""


def _defined(conn_id: str) -> bool:
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def spark_connection(conn_id: str):
    """The Spark connection ``conn_id``; when none is defined, a ``spark`` connection to
    :data:`LOCAL_MASTER` (for this lookup only: nothing is written to the environment)."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook, Connection

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return Connection(conn_id=conn_id, conn_type="spark", host=LOCAL_MASTER)


_APP_ID = re.compile(r"\b(application_\d+_\d+|app-\d{14}-\d{4,}|local-\d{10,}|spark-[0-9a-f]{32})\b")
"""Application ids as spark-submit and the driver log them: YARN, standalone, local, Kubernetes."""


@functools.cache
def submit_hook_class() -> type:
    """The Spark provider's ``SparkSubmitHook``, reading its connection through :func:`spark_connection`
    (made on first use: the provider's module is imported only by tasks that submit)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    class SubmitHook(SparkSubmitHook):
        """The Spark provider's hook, reading its connection through :func:`spark_connection`, and
        noting the application id spark-submit logs (``copycat_app_id``) in every deploy mode."""

        copycat_app_id: str | None = None

        @classmethod
        def get_connection(cls, conn_id: str):
            return spark_connection(conn_id)

        def _process_spark_submit_log(self, itr):
            def watched():
                for line in itr:
                    found = None if self.copycat_app_id else _APP_ID.search(str(line))
                    if found:
                        self.copycat_app_id = found.group(1)
                    yield line

            return super()._process_spark_submit_log(watched())

    return SubmitHook


class CopycatRunTaskGroupOperator(MasksRenderedSecrets, BaseOperator):
    """Runs the tasks of one group: each task config is one Spark task of one DataFrame job.

    How depends on the type of the connection ``spark_conn_id``:

    * ``spark``: submits ``spark_apps/task_group.py`` through the Spark provider's
      ``SparkSubmitHook``, shipping the ``airflow_copycat`` package as
      ``--py-files`` and the worker config and connector secrets as environment
      variables (never on disk).
    * ``spark_connect``: runs the group on an already running Spark over Spark
      Connect, from this task process, no spark-submit
      (:func:`spark_apps.connect.run_group_over_connect`). The provider's
      ``SparkConnectHook`` builds the ``sc://`` URL from the connection's host,
      port, password (the token), login (user id) and extra ``use_ssl``. The
      package is added to the session as a Python artifact; secrets travel only
      inside the job's pickled Python function, over the gRPC channel.

    Returns the group result (XCom); fails if any task failed, after the others
    finished, so a retry of this task instance re-runs the group from committed offsets.
    The error texts of the result (XCom ``failed_result``) and of the exception go through a
    :class:`~airflow_copycat.connect.secrets.Scrubber` of the connector's and worker's secrets.

    The task instance has an extra link, "Spark application", to the Spark application that ran
    the group: its id and URL are pushed to XCom key ``spark_application`` (see
    :mod:`~airflow_copycat.operators.links`: the URL comes from the connection's extra
    ``spark_ui_url``, a template such as ``https://history.example.com/history/{app_id}/jobs/``, or
    is a Spark Connect server's UI; empty when unknown, e.g. in process).

    While the group runs, the task log shows a progress line every ``progress.interval.ms``
    of the worker config (default 30 s): tasks done of total, records (files, for a copy
    job) and bytes so far, read from the tasks' progress records on the status topic
    (``status.storage.topic``) or, in process, straight from the tasks; then one line of
    what the group moved in all (:mod:`airflow_copycat.runtime.progress`). A copy job has no
    Kafka: over Spark Connect the lines show Spark's tasks done of total, through
    spark-submit the driver prints them.

    :param group: one group of a plan (usually mapped: ``.expand(group=plan.output)``). (templated)
    :param connector_config: the connector config the plan was made from; only its
        secret values are used, to fill the ``[hidden]`` values of the plan. (templated)
    :param kafka_conn_id: Kafka connection.
    :param worker_config: extra worker properties. (templated)
    :param spark_conn_id: a ``spark`` connection (master, deploy mode) or a ``spark_connect``
        connection (``sc://`` server), default ``spark_default``.
    :param spark_conf: Spark settings added to the defaults; over Spark Connect, Spark SQL
        settings of the session. (templated)
    :param in_process: run the tasks one after another in the Airflow worker,
        without Spark -- for tiny runs. Default False.
    :param work_dir: where the group and result JSON are written for spark-submit: a local
        path or any fsspec URL (``s3://bucket/copycat/work``) that both this worker and the Spark
        driver reach -- in cluster deploy mode the driver runs on a cluster node, so a local path
        of the Airflow worker will not do. A new directory under it is kept for inspection.
        Default: a local temporary directory, removed when the run ends (client deploy mode).
        Spark Connect needs none.
    """

    template_fields: Sequence[str] = ("group", "connector_config", "worker_config", "spark_conf")
    config_fields = ("connector_config",)  # their secrets are masked in the rendered fields
    ui_color = "#f8e8c8"
    operator_extra_links = (SparkApplicationLink(),)

    def __init__(
        self,
        *,
        group: dict[str, Any],
        connector_config: dict[str, Any] | str,
        kafka_conn_id: str = CopycatKafkaHook.default_conn_name,
        worker_config: dict[str, Any] | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        in_process: bool = False,
        work_dir: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        self.group = group
        self.connector_config = connector_config
        self.kafka_conn_id = kafka_conn_id
        self.worker_config = worker_config
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.in_process = in_process
        self.work_dir = work_dir

    def rendered_secret_keys(self) -> Sequence[str] | None:
        """The secret keys the plan named in the group's spec, as :meth:`execute` takes them."""
        try:
            spec = spec_of_group(self.group if isinstance(self.group, dict) else json.loads(self.group))
        except Exception:  # noqa: BLE001 -- a group that cannot be read: the job names them; execute fails
            return None
        return spec.secret_keys if spec else None

    @cached_property
    def hook(self) -> CopycatKafkaHook:
        return CopycatKafkaHook(self.kafka_conn_id)

    def execute(self, context) -> dict:
        group = self.group if isinstance(self.group, dict) else json.loads(self.group)
        context[GROUP_LABEL] = describe_group(group)  # the mapped instance's label: see MAP_INDEX_TEMPLATE
        # the plan validated the config and named its secret keys in the group's spec: only their values
        # are taken from the rendered config (a group without a spec: the job names them, still no validation)
        spec = spec_of_group(group)
        secrets = connector_secrets(resolve_storage_connections(resolve_db_connection(
            connector_config.load_connector_config(self.connector_config))), spec.secret_keys if spec else None)
        # a copy job (Distcp) needs no Kafka connection
        job = job_of(group["kind"])
        worker_props = self.hook.worker_props(self.worker_config) if job.needs_kafka else dict(self.worker_config or {})
        self.log.info("Running group %s of %s: %d task(s)%s", group["group"], group["connector"],
                      len(group["tasks"]), " in process" if self.in_process else " on Spark")
        progress = GroupProgress(group, worker_props, self._log_progress, local=self.in_process)
        started = time.monotonic()
        hide = task_scrubber(secrets, worker_props)
        try:
            with progress:
                result = self._run(context, group, progress, secrets)
        except AirflowException as e:  # the Spark side failed as a whole: its text may quote a secret
            raise AirflowException(hide(str(e))) from None
        result = scrub_errors(result, hide)  # what Spark or an older runtime sent back, too
        self.log.info("%s", progress.final_line(result))
        metrics.group_finished(result, time.monotonic() - started, getattr(context.get("dag"), "dag_id", None))
        for t in result["tasks"]:
            line, failed = job.task_line(t)
            self.log.info("%s", line)
            for item in failed:
                self.log.error("%s", item)
        if result["status"] != "ok":
            context["ti"].xcom_push(key="failed_result", value=result)
            raise AirflowException("copycat task(s) failed:\n" + "\n".join(failures([result])))
        return result

    def _run(self, context, group: dict, progress: GroupProgress, secrets: dict) -> dict:
        """The group's result, from running it in process, over Spark Connect or through spark-submit."""
        if self.in_process:
            return run_group(group, progress.task_props, secrets, listener=progress.record)
        if self._spark_conn_type() == "spark_connect":
            result = self._run_over_connect(group, progress.task_props, secrets, progress)
            self._push_application(context, self._connect_application(result.pop("spark_application", None)))
            return result
        try:
            return self._submit(group, progress.task_props, secrets)
        finally:
            self._push_application(context, self._submitted_application())

    def _push_application(self, context, app: dict | None) -> None:
        """XCom ``spark_application`` for the extra link (:mod:`.links`)."""
        if not app:
            return
        context["ti"].xcom_push(key=SPARK_APPLICATION_KEY, value=app)
        self.log.info("Spark application: %s%s", app.get("app_id") or "id not known",
                      f", {app['url']}" if app.get("url") else "")

    def _connect_application(self, app: dict | None) -> dict | None:
        """The Spark Connect server's application and the link's URL, from what the group's own session
        read (``spark_application`` of :func:`spark_apps.connect.run_group_over_connect`)."""
        if app is None:
            return None
        conn = spark_connection(self.spark_conn_id)
        app_id, ui = app.get("app_id"), None
        if app.get("ui_port"):
            host = re.sub(r"^sc://", "", str(conn.host or "localhost")).split("/")[0].split(":")[0]
            ui = f"http://{host}:{app['ui_port']}/jobs/"
        return {"app_id": app_id, "cluster": "spark_connect",
                "url": application_url(app_id, _extra(conn).get(UI_URL_EXTRA), default=ui)}

    def _submitted_application(self) -> dict | None:
        """The application spark-submit ran, as far as its log said (YARN, Kubernetes, standalone)."""
        hook = getattr(self, "_submit_hook", None)
        if hook is None:
            return None
        master = str(hook._connection.get("master") or "")
        pod = getattr(hook, "_kubernetes_driver_pod", None)
        app_id = (getattr(hook, "_yarn_application_id", None) or getattr(hook, "_kubernetes_application_id", None)
                  or hook.copycat_app_id)
        cluster = ("yarn" if master.startswith("yarn") else "kubernetes" if master.startswith("k8s")
                   else "standalone" if master.startswith("spark://") else "local")
        template = _extra(spark_connection(self.spark_conn_id)).get(UI_URL_EXTRA)
        return {"app_id": app_id, "cluster": cluster, "driver_pod": pod,
                "url": application_url(app_id, template, driver_pod=pod)}

    def _log_progress(self, line: str) -> None:
        self.log.info("%s", line)

    def on_kill(self) -> None:
        """The task was cleared, marked failed or timed out: stop its Spark work. spark-submit: the Spark
        provider's ``on_kill`` (the driver process; on YARN and Kubernetes the application too). Spark
        Connect: the group's operations are interrupted by their tag (the server kills their tasks). In
        process: nothing runs beyond this process, which Airflow ends. Offsets committed so far cover
        only what Kafka acknowledged (the runtime's rule), so the next run resumes from them."""
        cancel = getattr(self, "_cancel", None)
        if cancel is not None:
            interrupted = cancel.cancel()
            self.log.info("Interrupted %d Spark Connect operation(s) of this group", len(interrupted))
        hook = getattr(self, "_submit_hook", None)
        if hook is not None:
            hook.on_kill()

    def _spark_conn_type(self) -> str:
        """The type of the Spark connection. Without that connection, a ``spark`` connection to the
        embedded default ``local[*]`` (the Spark provider alone would fall back to ``yarn``)."""
        conn = spark_connection(self.spark_conn_id)
        if conn.host == LOCAL_MASTER and not _defined(self.spark_conn_id):
            self.log.warning("Spark connection %r not found: running on %s", self.spark_conn_id, LOCAL_MASTER)
        return conn.conn_type

    def _spark_master(self) -> tuple[str, str | None]:
        """The master and deploy mode of the ``spark`` connection (``spark_conf`` may set the mode)."""
        conn = submit_hook_class()(conn_id=self.spark_conn_id)._connection
        mode = (self.spark_conf or {}).get("spark.submit.deployMode") or conn.get("deploy_mode")
        return conn.get("master") or "local[*]", mode

    def _run_over_connect(self, group: dict, worker_props: dict, secrets: dict, progress: GroupProgress) -> dict:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from spark_apps.connect import display_url, run_group_over_connect

        from spark_apps.connect import Cancel

        url = SparkConnectHook(conn_id=self.spark_conn_id).get_connection_url()
        self.log.info("Over Spark Connect at %s (connection %s)", display_url(url), self.spark_conn_id)
        self._cancel = Cancel()
        try:
            return run_group_over_connect(url, group, worker_props, secrets, conf=self.spark_conf,
                                          cancel=self._cancel, spark_progress=progress.spark)
        except Exception as e:  # the server, the network or the job as a whole: this try fails, a retry reruns it
            raise AirflowException(f"group {group['group']} of {group['connector']} failed over Spark Connect at "
                                   f"{display_url(url)}: {type(e).__name__}: {e}") from e

    def _submit(self, group: dict, worker_props: dict, secrets: dict) -> dict:
        work_dir = submit.new_work_dir(self.work_dir, "copycat-")
        try:
            return self._submit_in(work_dir, group, worker_props, secrets)
        finally:
            if not self.work_dir:
                submit.remove_dir(work_dir)

    def _submit_in(self, work_dir: str, group: dict, worker_props: dict, secrets: dict) -> dict:
        group_path = submit.write_json(group, submit.join(work_dir, "group.json"))
        result_path = submit.join(work_dir, "result.json")
        master, deploy_mode = self._spark_master()
        conf = {**submit.default_spark_conf(master, deploy_mode), **(self.spark_conf or {})}
        hook = submit_hook_class()(
            conn_id=self.spark_conn_id,
            conf=conf,
            py_files=submit.package_zip(),
            env_vars=submit.submit_env(worker_props, secrets),
            name=f"copycat-{group['connector']}-group-{group['group']}",
            application_args=["--group", group_path, "--result", result_path],
        )
        submit_error = None
        self._submit_hook = hook  # on_kill() kills the application through it
        try:
            hook.submit(application=submit.application_path())
        except AirflowException as e:
            submit_error = e
        result = submit.read_json(result_path)
        if result is None:
            raise AirflowException(f"the Spark application wrote no result to {result_path} ({submit_error})")
        return result


def _extra(conn) -> dict:
    try:
        return conn.extra_dejson if conn.extra else {}
    except Exception:  # noqa: BLE001 -- an extra that is not JSON holds no template
        return {}
