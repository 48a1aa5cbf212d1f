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

Groups run in a session shared by the clients that run the same build of the
package with the same settings (:func:`remote_session`), so a run finds the Python
workers an earlier one started; each group's operations are tagged
``copycat-<connector>-group-<n>`` (what :class:`Cancel` interrupts). The server must not run speculative task
attempts (two attempts of one task would copy the same partitions at once):
a server with ``spark.speculation=true`` is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
import urllib.parse
import uuid
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


SESSION_GENERATIONS = 50
"""How many shared session ids a client tries per day before it falls back to a session of its own."""


@contextlib.contextmanager
def remote_session(url: str, conf: Mapping[str, Any] | None = None, *, reuse: bool = True) -> Iterator[Any]:
    """A Spark Connect session on ``url`` (``sc://host:port/;token=...;use_ssl=true``) with the
    ``airflow_copycat`` package added as a Python artifact. ``conf``: Spark SQL settings of the session.

    ``reuse`` (the default): the session is **shared** by every client that runs this build of the
    package with the same settings on this server (and user): its id is derived from them
    (:func:`shared_session_ids`), so a later run attaches to the session an earlier one left
    and finds its artifact added and its Python workers started -- a new session's first job
    starts Python workers and imports the runtime, seconds a reused one does not pay. The block's
    end only closes this client's channel (after the server released its operations); the session
    stays until it idles out on the server (``spark.connect.session.manager.defaultSessionTimeout``,
    60 min by default: set it above the schedule interval to keep hourly runs warm). A session the
    server already closed is skipped for the next id. A URL that names its own ``session_id`` is
    used as it is. ``reuse=False``: a new session, stopped (released on the server) at the end.
    """
    # The Connect builder itself, not SparkSession.builder.remote(): that one also switches this
    # whole process to Connect mode (an environment variable), which breaks any classic session in it.
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    from airflow_copycat.runtime.submit import package_zip

    _require_reachable(url)
    artifact = package_zip()

    def attach(session_url: str):
        builder = RemoteSparkSession.builder.remote(session_url)
        for key, value in (conf or {}).items():
            builder = builder.config(key, str(value))
        spark = builder.create()
        spark.client.set_retry_policies([_bounded_retries()])
        try:  # the first call that reaches the server: it refuses a closed session here
            speculation = str(spark.conf.get("spark.speculation", "false")).lower() == "true"
        except Exception:
            _close_channel(spark)
            raise
        return spark, speculation

    shared = reuse and "session_id=" not in url
    if shared:
        for session_id in shared_session_ids(url, conf, os.path.basename(artifact)):
            try:
                spark, speculation = attach(_with_param(url, "session_id", session_id))
                break
            except Exception as e:
                if "SESSION_CLOSED" not in str(e):
                    raise
        else:  # every shared id of today is closed: one of our own
            shared = False
    if not shared:
        spark, speculation = attach(url)
    try:
        if speculation:
            raise RuntimeError(f"the Spark Connect server at {display_url(url)} runs with spark.speculation=true: "
                               "two attempts of one task would copy the same partitions at once; restart it with "
                               "--conf spark.speculation=false")
        spark.addArtifacts(artifact, pyfile=True)  # the same file again in a shared session: accepted, no change
        yield spark
    finally:
        _release_then_close(spark, stop=not shared)


CLIENT_RETRIES = 6
CLIENT_MAX_BACKOFF_MS = 20_000


def _bounded_retries():
    """The client's retry policy: pyspark's own, with fewer retries. Its default tolerates ten minutes
    of an unreachable server, for a server that restarts under a long-lived client; a restarted
    server has lost the session and its running job anyway, so a run waits about 40 s for the
    network (50 ms backoff x4 per retry, at most 20 s) and then fails, for Airflow to retry it."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    return DefaultPolicy(max_retries=CLIENT_RETRIES, max_backoff=CLIENT_MAX_BACKOFF_MS)


def shared_session_ids(url: str, conf: Mapping[str, Any] | None, build: str) -> list[str]:
    """The ids (UUIDs) of the shared sessions a client of ``url`` running package ``build`` (the
    artifact's name, which carries a hash of its contents) with ``conf`` tries, in order. Derived
    from the server's address, the URL's user, ``build``, ``conf`` and the day, never from the
    token: clients that would run the same code the same way meet in one session, a new build or
    other settings get another, and a new day starts a new sequence (a closed id is never reused)."""
    parsed = urllib.parse.urlparse(url)
    params = dict(p.split("=", 1) for p in url.split(";")[1:] if "=" in p)
    key = json.dumps([parsed.hostname, parsed.port, params.get("user_id", ""), build,
                      sorted((str(k), str(v)) for k, v in (conf or {}).items())])
    day = int(time.time() // 86400)
    return [str(uuid.uuid5(uuid.NAMESPACE_URL, f"copycat-session:{key}:{day}:{g}")) for g in range(SESSION_GENERATIONS)]


def _with_param(url: str, name: str, value: str) -> str:
    """``url`` with ``;name=value`` added to its parameters."""
    base, sep, params = url.partition("/;")
    return f"{base}/;{params};{name}={value}" if sep else f"{url.rstrip('/')}/;{name}={value}"


def _release_then_close(spark, *, stop: bool) -> None:
    """Close this client only after the server released its operations; ``stop`` also closes the
    session on the server. pyspark releases a finished operation in a background call and closing
    does not wait for it; the server then drops the operation with the session and logs its whole
    plan at INFO -- the job's pickled Python function included, which carries the secrets."""
    import concurrent.futures

    pending = list(getattr(getattr(spark, "client", None), "_release_futures", None) or [])
    if pending:
        concurrent.futures.wait(pending, timeout=30)
    if stop:
        spark.stop()
    else:
        _close_channel(spark)


def _close_channel(spark) -> None:
    """Close this client's channel, leaving the session on the server."""
    with contextlib.suppress(Exception):
        spark.client.close()


_SHUTDOWN_MARKS = ("stopped SparkContext", "SparkContext was shut down", "SparkContext has been shutdown")
"""What a server that is shutting down answers a running job (while it still accepts connections)."""


def _server_gone(error: BaseException, url: str) -> bool:
    """Whether ``error`` came from the server stopping (or its address no longer answering)."""
    return any(mark in str(error) for mark in _SHUTDOWN_MARKS) or not _reachable(url)


def _reachable(url: str) -> bool:
    try:
        _require_reachable(url, timeout_s=2.0)
        return True
    except (ConnectionError, ValueError):
        return False


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


def _application(spark) -> dict[str, Any]:
    """The server's Spark application as the session sees it: ``{"app_id", "ui_port"}`` (``ui_port``
    ``None`` when its UI is off); ``{}`` when the server does not say (the run's result stands)."""
    try:
        ui_on = str(spark.conf.get("spark.ui.enabled", "true")).lower() != "false"
        return {"app_id": spark.conf.get("spark.app.id", None),
                "ui_port": (spark.conf.get("spark.ui.port", None) or "4040") if ui_on else None}
    except Exception:  # noqa: BLE001 -- a convenience for the operator's link
        return {}


def run_group_over_connect(url: str, group: dict, worker_props: Mapping[str, Any],
                           secrets: Mapping[str, Any] | None = None, conf: Mapping[str, Any] | None = None,
                           cancel: Cancel | None = None,
                           spark_progress: Callable[[int, int, int], None] | None = None) -> dict:
    """Run one task group on the Spark Connect server at ``url``, one Spark task per task config,
    and return the group result, with the server's application under ``spark_application``
    (:func:`_application`, read in the same session). Raises if the server cannot be reached or the job fails as a
    whole (a failed task only fails its own result), or was interrupted through ``cancel``.
    ``spark_progress(done, total, running)``: the job's tasks, from the session's progress
    handler, while it runs (see :func:`spark_apps.task_group.run_group_on_spark`)."""
    from .task_group import _job_tag, run_group_on_spark

    attached = False
    try:
        with remote_session(url, conf) as spark:
            attached = True
            if cancel is not None:
                cancel.attach(spark, _job_tag(group))
            result = run_group_on_spark(spark, group, dict(worker_props), dict(secrets or {}),
                                        spark_progress=spark_progress)
            result["spark_application"] = _application(spark)
            return result
    except Exception as e:
        if attached and (cancel is None or not cancel.cancelled) and _server_gone(e, url):
            raise ConnectionError(
                f"the Spark Connect server at {display_url(url)} went away while group {group['group']} of "
                f"{group['connector']} ran ({type(e).__name__}); what its tasks committed stands and a rerun "
                f"resumes from there") from e
        raise
