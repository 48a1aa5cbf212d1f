"""Run a task group on a Spark that is already running, over Spark Connect.

Used by ``copycat run --remote`` / ``copycat copy --remote`` and by the run
operator given a ``spark_connect`` connection: no spark-submit, no JVM start per
run. This process is the Spark Connect client; the server (``sc://host:port``,
e.g. ``start-connect-server.sh``, Databricks) plans the job and runs it on its
executors, the same DataFrame job spark-submit runs
(:func:`spark_apps.task_group.run_group_on_spark`).

What travels, and how:

* **The code.** The ``airflow_copycat`` package, zipped from this installation
  (:func:`airflow_copycat.runtime.submit.package_zip`), is added to the session as
  a Python artifact (``addArtifacts(..., pyfile=True)``): the server puts it on
  its Python workers' path for this session only, so executors need
  airflow-copycat's runtime dependencies (pyarrow, confluent-kafka, fsspec,
  fastavro, the database drivers...) in their Python, not airflow-copycat.
* **Task configs** are literals of the DataFrame plan; they carry ``[hidden]``
  in place of every secret.
* **Secrets** (connector secrets and the worker config) travel only inside the
  pickled Python function of the job, sent over the client's gRPC channel (TLS
  when the URL says ``use_ssl=true``) and unpickled in the executors' memory.
  They are never in a DataFrame column, the plan's literals, a tag, a log line
  or a file; the server logs a plan with the function's bytes cut off.
* **The URL's token** authenticates the channel; :func:`display_url` shows a URL
  with it hidden.

Each group gets a session of its own, tagged ``copycat-<connector>-group-<n>``,
released when the group ends. The server must not run speculative task
attempts (two attempts of one task would copy the same partitions at once):
a server with ``spark.speculation=true`` is refused.
"""

from __future__ import annotations

import contextlib
import re
import socket
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import Any

REMOTE_ENV = "SPARK_REMOTE"
"""The environment variable that names the Spark Connect server (as pyspark reads it)."""

DEFAULT_PORT = 15002
"""Spark Connect's port when the URL names none."""

REACH_TIMEOUT_S = 10.0


def display_url(url: str) -> str:
    """``url`` with its token (and any other secret-looking parameter) hidden, for messages and logs."""
    return re.sub(r"(?i)(;(?:token|password|secret)[^=;]*=)[^;]*", r"\1[hidden]", url)


@contextlib.contextmanager
def remote_session(url: str, conf: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A new Spark Connect session on ``url`` (``sc://host:port/;token=...;use_ssl=true``) with
    the ``airflow_copycat`` package added as a Python artifact; stopped (released on the
    server) when the block ends. ``conf``: Spark SQL settings of the session."""
    # The Connect builder itself, not SparkSession.builder.remote(): that one also switches this
    # whole process to Connect mode (an environment variable), which breaks any classic session in it.
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from airflow_copycat.runtime.submit import package_zip

    _require_reachable(url)
    builder = RemoteSparkSession.builder.remote(url)
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.create()
    try:
        if str(spark.conf.get("spark.speculation", "false")).lower() == "true":
            raise RuntimeError(f"the Spark Connect server at {display_url(url)} runs with spark.speculation=true: "
                               "two attempts of one task would copy the same partitions at once; restart it with "
                               "--conf spark.speculation=false")
        spark.addArtifacts(package_zip(), pyfile=True)
        yield spark
    finally:
        _release_then_stop(spark)


def _release_then_stop(spark) -> None:
    """Stop the session only after the server released its operations. pyspark releases a finished
    operation in a background call and ``stop()`` closes the session without waiting for it; the
    server then drops the operation with the session and logs its whole plan at INFO -- the job's
    pickled Python function included, which carries the secrets."""
    import concurrent.futures

    pending = list(getattr(getattr(spark, "client", None), "_release_futures", None) or [])
    if pending:
        concurrent.futures.wait(pending, timeout=30)
    spark.stop()


def _require_reachable(url: str, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Fail at once, clearly, when nothing listens at the URL's address: pyspark's client would
    retry for ten minutes (its tolerance for a server that restarts)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise ValueError(f"{display_url(url)!r} is not a Spark Connect URL: expected sc://host:port "
                         f"(optionally /;token=...;use_ssl=true)")
    port = parsed.port or DEFAULT_PORT
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(f"cannot reach the Spark Connect server at {display_url(url)} "
                              f"({parsed.hostname}:{port}): {e}; is it running?") from None


class Cancel:
    """A handle to stop a group that runs over Spark Connect from another thread (the run operator's
    ``on_kill``): :meth:`cancel` interrupts the Spark operations tagged with the group's job tag on the
    server -- Spark kills their tasks and the Python workers running them -- and makes a group that
    has not started yet refuse to start. What the tasks committed stays; nothing past what Kafka
    acknowledged was committed, so the next run resumes from there."""

    def __init__(self) -> None:
        self.cancelled = False
        self._spark = None
        self._tag: str | None = None

    def attach(self, spark, tag: str) -> None:
        self._spark, self._tag = spark, tag
        if self.cancelled:
            raise RuntimeError("the run was cancelled before its Spark job started")

    def cancel(self) -> list[str]:
        """Interrupt the group's Spark job; the ids of the operations interrupted (``[]`` if none ran)."""
        self.cancelled = True
        if self._spark is None or self._tag is None:
            return []
        return list(self._spark.interruptTag(self._tag) or [])


def run_group_over_connect(url: str, group: dict, worker_props: Mapping[str, Any],
                           secrets: Mapping[str, Any] | None = None, conf: Mapping[str, Any] | None = None,
                           cancel: Cancel | None = None,
                           spark_progress: Callable[[int, int, int], None] | None = None) -> dict:
    """Run one task group on the Spark Connect server at ``url``, one Spark task per task config,
    and return the group result. Raises if the server cannot be reached or the job fails as a
    whole (a failed task only fails its own result), or was interrupted through ``cancel``.
    ``spark_progress(done, total, running)``: the job's tasks, from the session's progress
    handler, while it runs (see :func:`spark_apps.task_group.run_group_on_spark`)."""
    from .task_group import _job_tag, run_group_on_spark

    with remote_session(url, conf) as spark:
        if cancel is not None:
            cancel.attach(spark, _job_tag(group))
        return run_group_on_spark(spark, group, dict(worker_props), dict(secrets or {}),
                                  spark_progress=spark_progress)
