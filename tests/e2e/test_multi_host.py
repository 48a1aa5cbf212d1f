"""The same topology across hosts: Spark, Kafka and the source database each on a host of its own.

The hosts are Linux network namespaces (:mod:`airflow_copycat.testing.netns`), each with its own
address on a private subnet: a Spark standalone master, two Spark workers, the Kafka-protocol
broker and a PostgreSQL source that listens only on its host's address. This machine -- the
Airflow side -- runs ``copycat`` (the operators' code path) with ``--master spark://<master>``:
the driver runs here, the executors on the worker hosts call it back, read the database and the
broker across the network, and write files to a directory every host sees under the same path
(the hosts share this machine's filesystem: the model of an NFS or other shared volume).

Every job is checked exactly against its source, then one worker host is cut off (every process
on it killed) in the middle of a Kafka -> Parquet sink: the job must finish on the other worker
with every row once and no partial file published.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from airflow_copycat.testing import netns
from tests.e2e.test_distcp_crash import make_tree, tree
from tests.jdbc.reader_helpers import jdbc_config
from tests.support.jdbc_airflow import read_topic
from tests.support.java import java_home

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COPYCAT = Path(sys.executable).parent / "copycat"
ROWS = 120_000
"""Rows of the source table: enough that a sink task of half of them publishes in several rounds."""

# Small JVMs, one core per executor, and no job before both executors are up (else one worker might
# take every task and the cut-off would prove nothing).
SPARK_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}


def _env(**extra: str) -> dict[str, str]:
    """This machine's environment for Spark and copycat processes, without COPYCAT_* overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COPYCAT_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = env.get("PYSPARK_PYTHON") or sys.executable
    env["JAVA_HOME"] = java_home()
    env.update(extra)
    return env


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _alive_workers(master: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{master}:8080/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


@dataclass
class Cluster:
    net: netns.Topology
    master_url: str
    bootstrap: str
    db_url: str
    """SQLAlchemy URL of the source database: its host's address, nothing else reaches it."""
    shared: Path
    """The directory every host sees (the shared volume)."""
    worker_file: Path
    work: Path
    """Where each Spark worker keeps its executors' logs (``<work>/<worker>/<app>/<executor>/stderr``)."""
    started: list[subprocess.Popen] = field(default_factory=list)

    def copycat(self, *argv: str, **popen) -> subprocess.Popen:
        """``copycat argv... --master spark://... --json`` started on this machine (the Airflow side)."""
        conf = [a for k, v in SPARK_CONF.items() for a in ("--spark-conf", f"{k}={v}")]
        proc = subprocess.Popen([str(COPYCAT), *argv, "--master", self.master_url, "--json", *conf], env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                start_new_session=True, **popen)
        self.started.append(proc)
        return proc

    def kill_left_over(self) -> None:
        """Kill every ``copycat`` still running (a failed test's), with its spark-submit and driver."""
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


def _summary(proc: subprocess.Popen, timeout: float = 300) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Cluster:
    """The hosts, their servers, and a source table of ``ROWS`` rows; all gone at the end, also
    after a failure (the topology kills whatever still runs on its hosts)."""
    from airflow_copycat.testing.broker import EmbeddedBroker
    from airflow_copycat.testing.postgres_logical import LogicalPostgres

    why = netns.available()
    if why:
        pytest.fail(f"the multi-host test builds hosts from network namespaces: {why}")
    work = tmp_path_factory.mktemp("multi-host")
    logs = work / "logs"
    logs.mkdir()
    with netns.Topology(["master", "worker1", "worker2", "kafka", "db"]) as net:
        h = net.hosts
        spark = [_spark_class()]
        env = _env(SPARK_DAEMON_MEMORY="256m")
        h["master"].popen([*spark, "org.apache.spark.deploy.master.Master", "--host", h["master"].address,
                           "--port", "7077", "--webui-port", "8080"],
                          env={**env, "SPARK_LOCAL_IP": h["master"].address}, log=str(logs / "master.log"))
        master_url = f"spark://{h['master'].address}:7077"
        for name in ("worker1", "worker2"):
            (work / name).mkdir()
            h[name].popen([*spark, "org.apache.spark.deploy.worker.Worker", master_url, "--host", h[name].address,
                           "--cores", "1", "--memory", "1g", "--work-dir", str(work / name), "--webui-port", "8081"],
                          env={**env, "SPARK_LOCAL_IP": h[name].address}, log=str(logs / f"{name}.log"))
        broker = EmbeddedBroker(9092, str(logs / "broker.log"), host=h["kafka"].address,
                                exec_prefix=h["kafka"].argv([])).start()
        pg = LogicalPostgres(port=5432, host=h["db"].address, exec_prefix=h["db"].argv([]))
        cluster = None
        try:
            pg.start()
            db_url = pg.url.replace("postgresql://", "postgresql+psycopg://")
            engine = sa.create_engine(db_url)
            with engine.begin() as conn:
                conn.execute(sa.text("CREATE TABLE orders (id BIGINT PRIMARY KEY, item TEXT NOT NULL)"))
                conn.execute(sa.text(f"INSERT INTO orders SELECT i, 'item ' || i FROM generate_series(1, {ROWS}) i"))
            engine.dispose()
            worker_file = work / "worker.properties"
            worker_file.write_text(f"bootstrap.servers={broker.bootstrap}\noffset.storage.topic=copycat-offsets\n"
                                   f"offset.storage.partitions=3\noffset.flush.interval.ms=1000\n")
            deadline = time.monotonic() + 90
            while _alive_workers(h["master"].address) < 2:
                assert time.monotonic() < deadline, "the Spark workers did not register: see " + str(logs)
                time.sleep(0.5)
            shared = work / "shared"
            shared.mkdir()
            cluster = Cluster(net, master_url, broker.bootstrap, db_url, shared, worker_file, work)
            yield cluster
        finally:
            if cluster is not None:
                cluster.kill_left_over()
            pg.stop()
            broker.stop()


def _jdbc_import(cluster: Cluster) -> dict:
    config = jdbc_config(cluster.db_url, "incrementing", **{
        "name": "mh-orders", "topic.prefix": "mh-", "table.whitelist": "orders", "tasks.max": 4,
        "copycat.split.column": "id", "copycat.split.count": 4, "topic.creation.default.partitions": 4})
    path = cluster.shared / "jdbc.json"
    path.write_text(json.dumps(config))
    return _summary(cluster.copycat("run", "-w", str(cluster.worker_file), str(path)))


@pytest.fixture(scope="module")
def imported(cluster) -> dict:
    """The JDBC import of the source table (the other tests read its topic)."""
    return _jdbc_import(cluster)


def test_jdbc_import_with_a_4_way_split_reads_every_row_once(cluster, imported):
    # Given a table on the database host, read by 4 tasks on executors of two worker hosts
    assert imported["status"] == "ok", imported
    assert imported["tasks"] == 4 and imported["records"] == ROWS
    # Then every row is in Kafka exactly once
    ids = [value["id"] for _, _, _, value in read_topic(cluster.bootstrap, "mh-orders")]
    assert len(ids) == ROWS and sorted(ids) == list(range(1, ROWS + 1))
    # And both worker hosts ran tasks of it (their executors' logs say so)
    assert all(_task_running_on(cluster.work / w, set()) is not None for w in ("worker1", "worker2"))


def _sink(cluster: Cluster, name: str, worker_file: Path, **extra) -> tuple[Path, subprocess.Popen]:
    store = cluster.shared / name
    config = {"name": name, "connector.class": "FilesSink", "topics": "mh-orders", "store.url": str(store),
              "format.class": "parquet", **extra}
    path = cluster.shared / f"{name}.json"
    path.write_text(json.dumps(config))
    # the group and result files at a URL (any fsspec URL the driver reaches; here the shared volume)
    return store, cluster.copycat("run", "-w", str(worker_file), str(path), "--work-dir",
                                  (cluster.shared / f"{name}-work").as_uri())


def _published(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*.parquet") if "_copycat" not in p.parts)


def _rows(store: Path) -> list[int]:
    """The ids of every published Parquet file (each must read whole)."""
    return [i for f in _published(store) for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]


def test_kafka_to_parquet_into_the_shared_directory_is_exact(cluster, imported):
    # When the topic is sunk to Parquet files by executors on the worker hosts
    store, proc = _sink(cluster, "mh-lake", cluster.worker_file, **{"tasks.max": 4, "flush.size": 20000})
    summary = _summary(proc)
    # Then the files in the shared directory hold every row once
    assert summary["status"] == "ok" and summary["records"] == ROWS, summary
    ids = _rows(store)
    assert len(ids) == ROWS and sorted(ids) == list(range(1, ROWS + 1))


def test_distcp_between_shared_directories_is_byte_exact(cluster):
    # Given 2 datasets of 24 files in the shared directory
    source = make_tree(cluster.shared / "src", 2, 24, 200_000)
    config = {"name": "mh-copy", "source.url": str(cluster.shared / "src"), "target.url": str(cluster.shared / "dst"),
              "dataset.pattern": "*", "tasks.max": 4}
    path = cluster.shared / "copy.json"
    path.write_text(json.dumps(config))
    # When copycat copy runs them on the worker hosts
    summary = _summary(cluster.copycat("copy", str(path)))
    # Then the target is byte-identical to the source
    assert summary["status"] == "ok", summary
    assert tree(cluster.shared / "dst") == source


def _published_per_partition(store: Path) -> Counter:
    """Kafka partition -> published files (named ``<topic>+<partition>+<start offset>``)."""
    return Counter(int(f.name.split("+")[1]) for f in _published(store))


def _task_running_on(worker_dir: Path, old_apps: set[Path]) -> int | None:
    """The Spark task (= the index of the task config in the group) an executor of a new application
    on this worker started, from the executor's log; ``None`` before it started one."""
    for log in (f for app in worker_dir.iterdir() if app not in old_apps for f in app.glob("*/stderr")):
        found = re.search(r"Running task (\d+)\.\d+ in stage", log.read_text(errors="replace"))
        if found:
            return int(found.group(1))
    return None


def test_a_worker_host_cut_off_mid_sink_loses_nothing_and_duplicates_nothing(cluster, imported):
    # Given a Parquet sink of the topic's 4 partitions in 2 tasks, one per worker host, publishing a file per
    # 2,000 records of a partition every 200 ms
    flush = 2000
    sizes = Counter(p for p, _, _, _ in read_topic(cluster.bootstrap, "mh-orders"))  # partition -> records
    files_of = {p: -(-n // flush) for p, n in sizes.items()}  # partition -> files once all is published
    worker_file = cluster.shared / "worker-cut.properties"
    worker_file.write_text(cluster.worker_file.read_text().replace("offset.flush.interval.ms=1000",
                                                                   "offset.flush.interval.ms=200"))
    worker2 = cluster.work / "worker2"
    old_apps = set(worker2.iterdir())
    store, proc = _sink(cluster, "mh-cut", worker_file, **{"tasks.max": 2, "flush.size": flush})
    # When worker2's host dies (every process on it killed) once the task it runs has published some of its
    # partitions' files, not all
    deadline, tasks, mine = time.monotonic() + 240, None, None
    while proc.poll() is None and time.monotonic() < deadline:
        if tasks is None:
            found = list((cluster.shared / "mh-cut-work").rglob("group.json"))
            tasks = [[p for _, p in t["partitions"]] for t in json.loads(found[0].read_text())["tasks"]] if found else None
        if mine is None:
            mine = _task_running_on(worker2, old_apps)
        if tasks is not None and mine is not None:
            published = _published_per_partition(store)
            if any(published[p] for p in tasks[mine]) and not all(published[p] == files_of[p] for p in tasks[mine]):
                break
        time.sleep(0.005)
    assert proc.poll() is None, f"the sink ended before worker2's task was half done (task {mine}): give it more rows"
    assert len(tasks) == 2
    killed = cluster.net.hosts["worker2"].kill_all()
    assert killed >= 2  # the Worker and its executor (and their Python workers)
    # Then the job still succeeds, on worker1 alone
    summary = _summary(proc)
    assert summary["status"] == "ok", summary
    # And the dead host's task ran again, from where its published files ended: it read only the rest
    (result_file,) = (cluster.shared / "mh-cut-work").rglob("result.json")
    (rerun,) = [t for t in json.loads(result_file.read_text())["tasks"] if t["spark_task"]["attempt"] >= 1]
    assert rerun["spark_task"]["partition"] == mine
    assert 0 < rerun["records"] < sum(sizes[p] for p in tasks[mine])
    # And every row is published exactly once, in whole files only
    ids = _rows(store)
    assert len(ids) == ROWS and sorted(ids) == list(range(1, ROWS + 1))


def test_a_crashed_runs_hosts_do_not_outlive_the_next_run():
    # Given a process that built hosts and died without tearing them down
    code = ("import os, signal; from airflow_copycat.testing.netns import Topology; "
            "t = Topology(['a']).start(); print(t.hosts['a'].netns, t.bridge, flush=True); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == -9, proc.stderr
    leftover_netns, leftover_bridge = proc.stdout.split()
    assert leftover_netns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    # When the next run builds its hosts
    with netns.Topology(["a"]) as net:
        # Then the leftovers are gone, and the new hosts have names of their own
        assert leftover_netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert subprocess.run(["ip", "link", "show", leftover_bridge], capture_output=True).returncode != 0
        assert net.hosts["a"].netns != leftover_netns
