"""What it takes to run a task group as a PySpark application.

Shared by the Airflow run operator (which hands these to the Spark provider's
``SparkSubmitHook``) and ``copycat run --master`` (which calls ``spark-submit``
itself), so both submit the same application the same way:

* the application: ``spark_apps/task_group.py`` of this installation;
* ``--py-files``: a zip of the ``airflow_copycat`` package built from this
  installation, so executors need only confluent-kafka, pyarrow and fsspec
  installed, not airflow-copycat itself (:func:`package_zip`);
* the environment: worker config and secrets as JSON (never on disk),
  ``PYSPARK_PYTHON`` = this interpreter unless set, ``PATH`` with pyspark's ``bin``;
* Spark settings that make local start-up fast, and, with a standalone master on
  another host, the driver's address executors call back (:func:`default_spark_conf`);
* where the group and result JSON go: a new directory under a work directory, a local
  path or any fsspec URL (:func:`new_work_dir`), which the Spark driver must reach -- on
  the Airflow worker in client deploy mode, on a cluster node in cluster deploy mode.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any, Mapping

from .json_files import read_json, write_json  # noqa: F401 -- the group and result files' reader and writer

WORKER_ENV = "COPYCAT_WORKER_JSON"
SECRETS_ENV = "COPYCAT_SECRETS_JSON"

_LOCAL_FAST_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def application_path() -> str:
    """Path of the PySpark entry script of this installation."""
    spec = importlib.util.find_spec("spark_apps")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("package spark_apps is not installed next to airflow_copycat")
    return str(Path(list(spec.submodule_search_locations)[0]) / "task_group.py")


def default_spark_conf(master: str | None, deploy_mode: str | None = None) -> dict[str, str]:
    """Always: no speculative task attempts (two attempts of one task would copy the same
    partitions at once). On a single machine (``local[...]`` or a master on 127.0.0.1):
    settings for a fast start, the driver on 127.0.0.1.

    With a standalone master on another host (``spark://host:port``) in client deploy mode,
    the driver runs here and executors on other hosts must call it back:
    ``spark.driver.host`` is this machine's address on the route to the master
    (:func:`driver_host_for`), unless ``SPARK_LOCAL_IP`` is set (Spark then uses it). Other
    masters (YARN, Kubernetes) and cluster deploy mode keep Spark's own choice. Settings the
    caller gives (``--spark-conf``, the operator's ``spark_conf``) override all of these."""
    conf = {"spark.speculation": "false", "spark.ui.showConsoleProgress": "false"}
    if master and (master.startswith("local") or "127.0.0.1" in master or "localhost" in master):
        conf.update(_LOCAL_FAST_CONF)
    elif master and master.startswith("spark://") and deploy_mode != "cluster" and not os.environ.get("SPARK_LOCAL_IP"):
        host = driver_host_for(master)
        if host:
            conf["spark.driver.host"] = host
    return conf


def driver_host_for(master: str) -> str | None:
    """The address this machine sends from to reach the (first) host of a ``spark://`` master URL:
    the one a cluster on that network can reach it at. ``None`` if the host does not resolve or
    has no route (Spark then picks an address itself). Sends nothing."""
    hostport = master.split("://", 1)[-1].split(",")[0]
    host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host.strip("[]"), int(port or 7077)))
            address = s.getsockname()[0]
    except (OSError, ValueError):
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def package_zip(dest_dir: str | None = None) -> str:
    """A zip of the ``airflow_copycat`` package for ``--py-files``; rebuilt only when a
    source file changed (its name carries a hash of the contents)."""
    root = Path(importlib.util.find_spec("airflow_copycat").submodule_search_locations[0])
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(root)).encode())
        digest.update(p.read_bytes())
    dest = Path(dest_dir) if dest_dir else _private_dir()
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"airflow_copycat-{digest.hexdigest()[:16]}.zip"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=dest, prefix=".zip-")  # unique: concurrent groups do not collide
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for p in files:
                z.write(p, str(Path("airflow_copycat") / p.relative_to(root)))
        os.replace(tmp, path)
    return str(path)


def _private_dir() -> Path:
    """A directory only this user can write, so nobody can plant code that ships to executors."""
    path = Path(tempfile.gettempdir()) / f"airflow-copycat-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{path} is not a private directory of this user; remove it")
    return path


def submit_env(worker_props: Mapping[str, Any], secrets: Mapping[str, Any], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables for the spark-submit process."""
    base = os.environ if base is None else base
    env = {
        WORKER_ENV: json.dumps(dict(worker_props), default=str),
        SECRETS_ENV: json.dumps(dict(secrets), default=str),
        "PYSPARK_PYTHON": base.get("PYSPARK_PYTHON") or sys.executable,
    }
    bins = [str(Path(sys.executable).parent)]
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.submodule_search_locations:
        bins.append(str(Path(list(spec.submodule_search_locations)[0]) / "bin"))
    env["PATH"] = os.pathsep.join(bins + [base.get("PATH", "")])
    if base.get("JAVA_HOME"):
        env["JAVA_HOME"] = base["JAVA_HOME"]
    return env


def spark_submit_binary() -> str:
    """``spark-submit`` next to this interpreter (the pyspark wheel installs it), else from PATH."""
    candidate = Path(sys.executable).parent / "spark-submit"
    return str(candidate) if candidate.exists() else "spark-submit"


def _is_url(path: str) -> bool:
    return "://" in path


def new_work_dir(base: str | None, prefix: str) -> str:
    """A new directory for one group's JSON files: under ``base`` -- a local path or any fsspec
    URL (``s3://bucket/copycat/work``, ``hdfs://nn/tmp/copycat``) -- or, without one, a local
    temporary directory. Local directories are private to this user (``mkdtemp``)."""
    if base and _is_url(base):
        import fsspec

        url = f"{base.rstrip('/')}/{prefix}{uuid.uuid4().hex[:12]}"
        fs, path = fsspec.core.url_to_fs(url)  # the URL as given is returned: its host (hdfs://nn:8020) stays
        fs.makedirs(path, exist_ok=True)
        return url
    if base:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def join(directory: str, name: str) -> str:
    """``directory/name`` for a local path or a URL."""
    return f"{directory.rstrip('/')}/{name}" if _is_url(directory) else os.path.join(directory, name)


def remove_dir(path: str) -> None:
    """Remove a directory :func:`new_work_dir` made, local or remote; errors are ignored."""
    try:
        if _is_url(path):
            import fsspec

            fs, root = fsspec.core.url_to_fs(path)
            fs.rm(root, recursive=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except (OSError, FileNotFoundError):
        pass


def spark_submit_command(master: str, group_path: str, result_path: str,
                         conf: Mapping[str, Any] | None = None, name: str | None = None, *,
                         deploy_mode: str | None = None, py_files: str | None = None) -> list[str]:
    """The ``spark-submit`` command line that runs one group: ``copycat run --master``'s (the run
    operator gives the Spark provider's ``SparkSubmitHook`` the same application, zip and settings).
    ``conf`` is added to :func:`default_spark_conf` (and wins); ``py_files``: the package zip when
    the caller made it already (:func:`package_zip`)."""
    cmd = [spark_submit_binary(), "--master", master]
    if name:
        cmd += ["--name", name]
    cmd += ["--py-files", py_files or package_zip()]
    for k, v in {**default_spark_conf(master, deploy_mode), **(conf or {})}.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [application_path(), "--group", group_path, "--result", result_path]
    return cmd
