"""``make airflow``: the example DAGs in a running Airflow, to try by hand from the UI.

Starts, in the foreground, on 127.0.0.1 only:

* the embedded Kafka-protocol broker and an embedded Spark Connect server (``local[2]``);
* Airflow's api-server (UI and REST API; port 8080, or a free port when 8080 is taken),
  scheduler, dag-processor and triggerer (LocalExecutor, SQLite metadata database), with the
  example DAGs of ``dags/`` and their connections (``kafka_default``, ``spark_default`` -- a
  ``spark_connect`` connection -- and ``shop_db``) as environment variables: nothing to configure;
* the SQLite shop database the JDBC examples read (``scripts/shop_db.py``), filled with orders
  for each past hour up to the current one, and three log files for ``copycat_demo``.

It prints the UI's address and login (user ``admin``; the password Airflow generated on the
first start), then waits. Ctrl-C (or SIGTERM) stops every process it started; when one of them
dies on its own, it prints the end of that one's log and stops the others.

Everything lives in the state directory (default ``.copycat/airflow``) and is kept between
starts: Airflow's database (runs, task logs, XComs), the shop database, the input files.
The broker keeps its data in memory, so Kafka topics -- and the source offsets stored in
them -- start empty at every start; the Parquet output of ``copycat_demo``, whose offsets refer
to those topics, is cleared then too. ``--reset`` (``make airflow-clean``) removes the state
directory first.

    python scripts/airflow_stack.py [--state-dir DIR] [--port PORT] [--reset]
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STATE = ROOT / ".copycat" / "airflow"
_STATE_ENTRIES = ("home", "logs", "input", "output", "shop.db", "stack.json")
"""What the state directory holds besides ``stack.lock``."""
SHOP_HOURS = 24
"""Hours of shop orders the first start creates, ending with the hour before the current one."""


def log(msg: str) -> None:
    print(f"[airflow] {msg}", flush=True)


class _Stop(Exception):
    """SIGTERM: stop like on Ctrl-C."""


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _lock(state: Path):
    """An exclusive lock on the state directory: two stacks must not share one Airflow database."""
    state.mkdir(parents=True, exist_ok=True)
    handle = open(state / "stack.lock", "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        raise SystemExit(f"another `make airflow` (pid {handle.read().strip() or '?'}) uses {state}: "
                         f"stop it first, or pass --state-dir") from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def prepare_examples(state: Path) -> None:
    """The data the example DAGs read: log files for ``copycat_demo`` and the shop database,
    filled up to the current hour. Clears the Parquet output (its offsets refer to the topics
    of a broker that is gone)."""
    import shop_db  # scripts/shop_db.py

    from airflow_copycat.testing.examples import write_log_lines

    if not (state / "input").exists():
        write_log_lines(state / "input", 0, 1000)
        log(f"wrote 3 log files x 1000 lines to {state / 'input'} (input of copycat_demo)")
    shutil.rmtree(state / "output", ignore_errors=True)

    import sqlalchemy as sa

    now = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    engine = shop_db.engine_for(str(state / "shop.db"))
    try:
        _, orders = shop_db.create_tables(engine)
        with engine.connect() as conn:
            newest = conn.execute(sa.select(sa.func.max(orders.c.updated_at))).scalar()
        first = now - dt.timedelta(hours=SHOP_HOURS)
        if newest is not None:
            newest = (newest if isinstance(newest, dt.datetime) else dt.datetime.fromisoformat(str(newest)))
            first = max(first, newest.replace(minute=0, second=0, microsecond=0, tzinfo=dt.timezone.utc)
                        + dt.timedelta(hours=1))
        hours = int((now - first) / dt.timedelta(hours=1))
        if hours > 0:
            n = shop_db.fill(engine, first, hours, per_hour=20)
            log(f"shop database {state / 'shop.db'}: added {n} orders in the {hours} hour(s) from "
                f"{first:%Y-%m-%d %H:00} to {now:%Y-%m-%d %H:00} UTC")
    finally:
        engine.dispose()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _banner(services, servers, state: Path, logs: Path) -> str:
    from airflow_copycat.testing.airflow_services import PASSWORDS_FILE

    return "\n".join([
        "",
        "=" * 78,
        f"  Airflow UI   {services.url}",
        f"  login        {services.username} / {services.password}",
        f"               (generated on the first start, kept in {services.home / PASSWORDS_FILE})",
        f"  Kafka        {servers.broker.bootstrap} (connection kafka_default; in memory: empty at each start)",
        f"  Spark        {servers.spark.url} (connection spark_default, spark_connect)",
        f"  shop db      {state / 'shop.db'} (connection shop_db, SQLite)",
        f"  logs         {logs}/<service>.log, task logs in {logs / 'tasks'}",
        "",
        "  Try: copycat_demo (Trigger), copycat_jdbc_import (Trigger, or Trigger > Backfill",
        "       over past hours), copycat_offsets (Trigger: list the connector shop-orders).",
        "  Ctrl-C stops everything.",
        "=" * 78,
        "",
    ])


def _stop_all(services, servers) -> None:
    """Stops the Airflow services and the servers side by side (each waits for its processes to exit)."""
    stoppers = [threading.Thread(target=part.stop, name=f"stop-{type(part).__name__}")
                for part in (services, servers) if part is not None]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE,
                        help="where Airflow's home, the logs and the example data live (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080,
                        help="the api-server's port (UI and REST API); a free one when taken or 0 (default: %(default)s)")
    parser.add_argument("--reset", action="store_true", help="remove the state directory first: start from scratch")
    args = parser.parse_args(argv)
    state = args.state_dir.resolve()

    def on_term(signum, frame):
        raise _Stop()

    signal.signal(signal.SIGTERM, on_term)
    # Ctrl-C stops everything, even when started from a shell that ignores SIGINT in its background jobs
    signal.signal(signal.SIGINT, signal.default_int_handler)
    lock = _lock(state)
    if args.reset:  # only what this script creates: a mistyped --state-dir loses nothing else
        for name in _STATE_ENTRIES:
            entry = state / name
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
        log(f"removed the state of earlier starts in {state}")

    from airflow_copycat.testing.airflow_services import AirflowServices, services_env
    from airflow_copycat.testing.broker import free_port
    from airflow_copycat.testing.examples import ExampleServers

    port = args.port if args.port and _port_is_free(args.port) else free_port()
    if args.port and port != args.port:
        log(f"port {args.port} is taken: the api-server uses {port}")
    home, logs = state / "home", state / "logs"
    home.mkdir(parents=True, exist_ok=True)
    (state / "stack.json").unlink(missing_ok=True)
    servers = services = None
    status = 0
    try:
        prepare_examples(state)
        started = time.monotonic()
        servers = ExampleServers(logs).start()  # the Spark Connect server starts in the background
        log(f"embedded Kafka-protocol broker on {servers.broker.bootstrap}")
        bin_dir = str(Path(sys.executable).parent)
        env = services_env(home, ROOT / "dags", port, extra_env={
            **servers.connections(state),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(logs / "tasks"),
            # spark-submit finds python3 on PATH; Spark's Python workers run this interpreter
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON") or sys.executable,
        })
        services = AirflowServices(home, env, port, log_dir=logs)
        services.run_cli("db", "migrate")
        log(f"Airflow database {home / 'airflow.db'} migrated ({time.monotonic() - started:.0f}s)")
        services.start()
        log("api-server, scheduler, dag-processor and triggerer starting")
        servers.wait()
        log(f"embedded Spark Connect server on {servers.spark.url} ({time.monotonic() - started:.0f}s)")
        services.wait_healthy()
        services.read_password()
        log(f"ready in {time.monotonic() - started:.0f}s")
        print(_banner(services, servers, state, logs), flush=True)
        # what is running, for scripts and tests (removed when it stops)
        (state / "stack.json").write_text(json.dumps({
            "pid": os.getpid(), "url": services.url, "username": services.username,
            "kafka_bootstrap": servers.broker.bootstrap, "spark_connect_url": servers.spark.url,
            "pids": {**{name: p.pid for name, p in services.procs.items()},
                     "broker": servers.broker.proc.pid, "spark-connect": servers.spark.proc.pid},
        }, indent=2))
        while True:
            dead = services.dead()
            if dead:
                log(f"airflow {dead} exited with {services.procs[dead].returncode}; the end of its log:")
                print(_tail(services.log_path(dead)), flush=True)
                status = 1
                break
            dead = servers.dead()
            if dead:
                log(f"the {dead} server exited; the end of its log:")
                print(_tail(logs / f"{dead}.log"), flush=True)
                status = 1
                break
            time.sleep(1)
    except (KeyboardInterrupt, _Stop):
        print(flush=True)
    except Exception as e:
        log(f"failed: {e}")
        if services is not None:
            for name in services.procs:
                print(services.service_log_tail(name, 3000), flush=True)
        status = 1
    finally:
        # stopping takes a few seconds: a second Ctrl-C must not leave processes behind
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        log("stopping Airflow, Spark Connect and the broker ...")
        stopped = time.monotonic()
        try:
            _stop_all(services, servers)
        finally:
            (state / "stack.json").unlink(missing_ok=True)
            lock.close()
        log(f"stopped in {time.monotonic() - stopped:.0f}s")
        log(f"state kept in {state} (make airflow-clean removes it)")
    return status


if __name__ == "__main__":
    sys.exit(main())
