"""An embedded Spark Connect server for the demo and tests.

Starts the server the pyspark wheel ships (``sbin/start-connect-server.sh``,
``jars/spark-connect_*.jar``) in the foreground (``SPARK_NO_DAEMONIZE``) on
127.0.0.1 and a free port, with the Spark UI off. Its executors run
``PYSPARK_PYTHON`` (default: this interpreter). A ``token`` makes the server
require it from every client (Spark's ``spark.connect.authenticate.token``,
handed over in the server's environment, never on its command line); clients
then connect to ``localhost``, where pyspark sends a token without TLS.

Starting takes a JVM start (about 6 s on an idle machine); the first job of a
new client about 3 s more, later jobs well under a second.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .broker import free_port

_TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


def spark_home() -> Path:
    """The Spark distribution inside the pyspark wheel."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded Spark Connect server needs pyspark installed")
    return Path(list(spec.submodule_search_locations)[0])


class EmbeddedSparkConnect:
    """One Spark Connect server on 127.0.0.1; ``url`` is what clients pass to
    ``SparkSession.builder.remote`` (it carries the token, if any).

    :param master: the server's Spark master (``local[2]``: two executor threads).
    :param conf: Spark settings added to the defaults.
    :param log_path: where the server's output (its log) goes; default a file in its state directory.
    :param event_log_dir: write Spark's event log there, uncompressed (tests read it).
    :param token: the token clients must present.
    :param python: the interpreter of its Python workers (default ``PYSPARK_PYTHON``, else this one).
    :param env: environment variables added to the server's (its Python workers inherit them).
    """

    def __init__(self, *, master: str = "local[2]", conf: dict[str, str] | None = None, port: int | None = None,
                 log_path: str | None = None, event_log_dir: str | None = None, token: str | None = None,
                 python: str | None = None, env: dict[str, str] | None = None):
        self.master = master
        self.port = port or free_port()
        self.token = token
        self.state_dir = Path(tempfile.mkdtemp(prefix="copycat-spark-connect-"))
        self.log_path = Path(log_path) if log_path else self.state_dir / "server.log"
        self.event_log_dir = event_log_dir
        self.python = python or os.environ.get("PYSPARK_PYTHON") or sys.executable
        self.env = dict(env or {})
        self.conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
            "spark.sql.shuffle.partitions": "2",
            "spark.speculation": "false",
            "spark.local.dir": str(self.state_dir / "local"),
        }
        if event_log_dir:
            self.conf.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": Path(event_log_dir).as_uri(),
                              "spark.eventLog.compress": "false"})
        self.conf.update(conf or {})
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if self.token:
            return f"sc://localhost:{self.port}/;token={self.token}"
        return f"sc://127.0.0.1:{self.port}"

    def airflow_connection(self) -> str:
        """This server as an Airflow connection (JSON, for an ``AIRFLOW_CONN_*`` variable) of type
        ``spark_connect``: the Spark provider's ``SparkConnectHook`` makes :attr:`url` of it, the
        token travelling as the connection's password."""
        conn = {"conn_type": "spark_connect", "host": "localhost" if self.token else "127.0.0.1", "port": self.port}
        if self.token:
            conn["password"] = self.token
        return json.dumps(conn)

    def start(self, timeout: float = 180.0) -> "EmbeddedSparkConnect":
        home = spark_home()
        cmd = [str(home / "sbin" / "start-connect-server.sh"), "--master", self.master]
        for k, v in self.conf.items():
            cmd += ["--conf", f"{k}={v}"]
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_NO_DAEMONIZE="1", SPARK_LOCAL_IP="127.0.0.1",
                   # its own pid and log directories: another server of this user does not block this one
                   SPARK_PID_DIR=str(self.state_dir), SPARK_LOG_DIR=str(self.state_dir),
                   PYSPARK_PYTHON=self.python,
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        env.update(self.env)
        env.pop(_TOKEN_ENV, None)
        if self.token:
            env[_TOKEN_ENV] = self.token
        if self.event_log_dir:
            Path(self.event_log_dir).mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.state_dir)
        try:
            self._wait_until_listening(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited with code {self.proc.returncode}; "
                                   f"its log:\n{self.log_text()[-3000:]}")
            with socket.socket() as s:
                s.settimeout(1)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.3)
        raise RuntimeError(f"the Spark Connect server did not listen on 127.0.0.1:{self.port} within {timeout:g}s; "
                           f"its log:\n{self.log_text()[-3000:]}")

    def log_text(self) -> str:
        """What the server logged so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def event_log_text(self) -> str:
        """Spark's event log of the server so far (jobs, stages, SQL plans, properties), if it writes one."""
        if not self.event_log_dir:
            return ""
        files = sorted(p for p in Path(self.event_log_dir).rglob("*") if p.is_file() and not p.name.endswith(".crc"))
        return "".join(p.read_text(encoding="utf-8", errors="replace") for p in files)

    def stop(self, timeout: float = 30.0) -> None:
        """Stops the server and every process it started (its process group)."""
        if self.proc is None:
            return
        group = self.proc.pid  # start_new_session: the launcher leads the group the JVM runs in
        _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _signal_group(group, 0) and time.monotonic() < deadline:
            self.proc.poll()  # reap the launcher once it exits
            time.sleep(0.2)
        if _signal_group(group, 0):
            _signal_group(group, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None
        # its scratch space; the log stays when it was written into the state directory
        shutil.rmtree(self.state_dir / "local", ignore_errors=True)
        if self.log_path.parent != self.state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedSparkConnect":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(group: int, sig: int) -> bool:
    """Sends ``sig`` to a process group; False once no process of it is left."""
    try:
        os.killpg(group, sig)
        return True
    except ProcessLookupError:
        return False
