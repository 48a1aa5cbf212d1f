"""What the example DAGs in ``dags/`` run on, on one machine: ``make demo`` and ``make airflow``.

:class:`ExampleServers` starts the embedded Kafka-protocol broker and an embedded Spark Connect
server (``local[2]``) on 127.0.0.1 -- the server in the background, since its JVM takes a few
seconds to start, so callers can prepare Airflow meanwhile -- and :meth:`ExampleServers.connections`
gives the Airflow connections the example DAGs use, as ``AIRFLOW_CONN_*`` environment
variables:

* ``kafka_default`` -- the broker;
* ``spark_default`` -- a ``spark_connect`` connection to the server: each task group runs
  there, no spark-submit;
* ``shop_db`` -- the SQLite shop database ``shop.db`` in the example directory
  (``scripts/shop_db.py`` fills it);

and ``COPYCAT_DEMO_DIR``, the example directory the DAGs ``copycat_demo`` and
``copycat_jdbc_discovery`` take their default paths from.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from .broker import EmbeddedBroker
from .spark_connect import EmbeddedSparkConnect


class ExampleServers:
    """The broker and the Spark Connect server; their logs ``broker.log`` and
    ``spark-connect.log`` go to ``log_dir``."""

    def __init__(self, log_dir: Path | str):
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.broker = EmbeddedBroker(log_path=str(log_dir / "broker.log"))
        self.spark = EmbeddedSparkConnect(master="local[2]", log_path=str(log_dir / "spark-connect.log"))
        self._spark_thread: threading.Thread | None = None
        self._spark_error: BaseException | None = None

    def start(self) -> "ExampleServers":
        """Starts the broker (ready on return) and the Spark Connect server (ready after :meth:`wait`)."""
        self.broker.start()

        def start_spark() -> None:
            try:
                self.spark.start()
            except BaseException as e:  # handed to wait()
                self._spark_error = e

        self._spark_thread = threading.Thread(target=start_spark, name="spark-connect-start", daemon=True)
        self._spark_thread.start()
        return self

    def wait(self) -> "ExampleServers":
        """Waits until the Spark Connect server listens; raises what its start raised."""
        if self._spark_thread is not None:
            self._spark_thread.join()
        if self._spark_error is not None:
            raise RuntimeError(f"the Spark Connect server did not start: {self._spark_error}") from self._spark_error
        return self

    def dead(self) -> str | None:
        """``"broker"`` or ``"spark-connect"`` when that server's process exited, else None."""
        for name, server in (("broker", self.broker), ("spark-connect", self.spark)):
            if server.proc is not None and server.proc.poll() is not None:
                return name
        return None

    def connections(self, example_dir: Path | str) -> dict[str, str]:
        """The environment variables of the example DAGs' connections (see the module docstring)."""
        example_dir = Path(example_dir)
        return {
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                      "extra": {"bootstrap.servers": self.broker.bootstrap}}),
            "AIRFLOW_CONN_SPARK_DEFAULT": self.spark.airflow_connection(),
            "AIRFLOW_CONN_SHOP_DB": json.dumps({"conn_type": "sqlite", "host": str(example_dir / "shop.db")}),
            "COPYCAT_DEMO_DIR": str(example_dir),
        }

    def stop(self) -> None:
        """Stops both servers (waits for a Spark Connect server still starting, then stops it)."""
        if self._spark_thread is not None:
            self._spark_thread.join()
        try:
            self.spark.stop()
        finally:
            self.broker.stop()


def write_log_lines(input_dir: Path | str, start: int, count: int, files: int = 3) -> None:
    """Appends ``count`` access-log lines, numbered from ``start``, to each of ``files`` files
    ``app-<n>.log`` in ``input_dir`` (the input of ``copycat_demo``)."""
    input_dir = Path(input_dir)
    input_dir.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        with open(input_dir / f"app-{f}.log", "a", encoding="utf-8") as out:
            for i in range(start, start + count):
                out.write(f"2026-11-22T00:00:00Z host{f} GET /item/{i} status=200 bytes={100 + i}\n")
