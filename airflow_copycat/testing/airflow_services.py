"""Real Airflow 3 services on one machine: api-server, scheduler, dag-processor, triggerer.

One way to start them, used by ``make airflow`` (scripts/airflow_stack.py) and by the
end-to-end tests (tests/support/airflow_services.py). :func:`services_env` builds their
environment -- ``AIRFLOW_HOME``, the metadata database (SQLite in the home unless a URL is
given), LocalExecutor, the simple auth manager with one ``admin`` user, everything bound to
127.0.0.1 -- and :class:`AirflowServices` starts the four processes, each in its own process
group (``scheduler`` and ``triggerer`` with ``--skip-serve-logs``: nothing listens on
0.0.0.0), waits until ``/api/v2/monitor/health`` reports all of them healthy, logs in to the
REST API with a JWT from ``POST /auth/token`` (the password Airflow generated into
``simple_auth_manager_passwords.json.generated`` in the home) and stops every process group
(SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from .broker import free_port

SERVICES = {
    "api-server": ["api-server", "--host", "127.0.0.1", "--port", "{api_port}", "--workers", "1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
"""Service name -> ``airflow`` sub-command (``{api_port}`` is filled in)."""

HEALTH_COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")

USERNAME = "admin"
"""The one user of the simple auth manager (role admin); Airflow generates its password."""

PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"


def airflow_bin() -> str:
    """The ``airflow`` command of this interpreter's environment."""
    return str(Path(sys.executable).parent / "airflow")


def services_env(home: Path | str, dags_folder: Path | str, api_port: int, *, db_url: str | None = None,
                 extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every service and ``airflow`` command of one installation.

    It is this process's environment without its ``AIRFLOW*`` variables (a caller's own Airflow
    settings, e.g. a test session's, must not leak into the services), plus the settings above.
    ``db_url`` is a SQLAlchemy URL of the metadata database (PostgreSQL with psycopg 3 serves
    async too); default a SQLite file ``airflow.db`` in ``home``. ``extra_env`` is added last:
    ``AIRFLOW_CONN_*`` connections, ``PATH``, ``JAVA_HOME``...
    """
    home = Path(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "COPYCAT_TEST_AIRFLOW"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__API__WORKERS": "1",
        # every process signs and checks the same tokens (new ones each start: log in again)
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        # not served (--skip-serve-logs: the api-server reads the task logs from the files), but
        # never the shared default ports either
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
    })
    if db_url:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = db_url
        if db_url.startswith("postgresql+psycopg"):  # psycopg 3 serves async too (else Airflow asks for asyncpg)
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] = db_url
    else:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{home / 'airflow.db'}"
    env.update(extra_env or {})
    return env


class AirflowServiceError(RuntimeError):
    """A service died, never became healthy, or the REST API refused a call."""


class AirflowServices:
    """The services of one Airflow installation.

    ``url`` is the api-server's base URL (UI and REST API), ``home`` the AIRFLOW_HOME,
    ``env`` the environment every service runs with (:func:`services_env`),
    ``username``/``password`` the UI login (the password once :meth:`login` ran), ``log_dir``
    where each service's output goes (``<name>.log``; default ``service-logs`` in the home).
    """

    def __init__(self, home: Path, env: dict[str, str], api_port: int, *, log_dir: Path | None = None):
        self.home = Path(home)
        self.env = env
        self.api_port = api_port
        self.url = f"http://127.0.0.1:{api_port}"
        self.log_dir = Path(log_dir) if log_dir else self.home / "service-logs"
        self.procs: dict[str, subprocess.Popen] = {}
        self.username = USERNAME
        self.password: str | None = None
        self._token: str | None = None
        self.http = httpx.Client(base_url=self.url, timeout=60)

    # ------------------------------------------------------------------ processes
    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def run_cli(self, *args: str, timeout: float = 300) -> str:
        """Runs ``airflow ARGS`` with the services' environment; raises with its output when it fails."""
        done = subprocess.run([airflow_bin(), *args], env=self.env, cwd=self.home, capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode:
            raise AirflowServiceError(f"airflow {' '.join(args)} exited {done.returncode}:\n"
                                      f"{done.stdout[-5000:]}\n{done.stderr[-5000:]}")
        return done.stdout

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for name, argv in SERVICES.items():
            out = open(self.log_path(name), "ab")
            try:
                self.procs[name] = subprocess.Popen(
                    [airflow_bin(), *(a.format(api_port=self.api_port) for a in argv)], env=self.env,
                    cwd=self.home, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True)  # its own process group: stop() ends its children too
            finally:
                out.close()

    def dead(self) -> str | None:
        """The name of a service that exited, if any."""
        return next((name for name, proc in self.procs.items() if proc.poll() is not None), None)

    def check_alive(self) -> None:
        name = self.dead()
        if name:
            raise AirflowServiceError(f"airflow {name} exited with {self.procs[name].returncode}")

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to each service's process group, SIGKILL to what is left after ``timeout``."""
        self.http.close()
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            _signal_group(proc, signal.SIGKILL)  # also children that outlived their parent
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)

    def wait_healthy(self, timeout: float = 180) -> dict:
        """Waits until the health endpoint reports every component healthy; returns its answer."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            self.check_alive()
            try:
                r = self.http.get("/api/v2/monitor/health", timeout=10)
                last = r.text
                if r.status_code == 200:
                    health = r.json()
                    if all((health.get(c) or {}).get("status") == "healthy" for c in HEALTH_COMPONENTS):
                        return health
            except httpx.TransportError as e:
                last = repr(e)
            if time.monotonic() > deadline:
                raise AirflowServiceError(f"Airflow not healthy after {timeout:.0f}s; last answer: {last}")
            time.sleep(1)

    # ------------------------------------------------------------------ REST API
    def read_password(self, timeout: float = 60) -> str:
        """The admin password the api-server generated (it writes the file on its first start
        and keeps it afterwards)."""
        passwords = self.home / PASSWORDS_FILE
        deadline = time.monotonic() + timeout
        while not passwords.exists():
            if time.monotonic() > deadline:
                raise AirflowServiceError(f"the api-server wrote no {passwords.name}")
            time.sleep(0.5)
        self.password = json.loads(passwords.read_text())[self.username]
        return self.password

    def login(self) -> str:
        """A JWT for the admin user from ``POST /auth/token``; also kept for :meth:`api`."""
        r = self.http.post("/auth/token", json={"username": self.username, "password": self.read_password()})
        if r.status_code not in (200, 201):
            raise AirflowServiceError(f"POST /auth/token: {r.status_code} {r.text}")
        self._token = r.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, *, expect: tuple[int, ...] = (200, 201), **kwargs) -> Any:
        """One REST API call (``path`` under ``/api/v2``) with the JWT; the decoded JSON answer.
        Raises naming the call, status and body when the status is not in ``expect``."""
        headers = {"Authorization": f"Bearer {self._token or self.login()}"}
        r = self.http.request(method, f"/api/v2{path}", headers=headers, **kwargs)
        if r.status_code not in expect:
            raise AirflowServiceError(f"{method} /api/v2{path}: {r.status_code} {r.text[:3000]}")
        return r.json() if r.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> dict:
        """Waits until the dag-processor has parsed ``dag_id``; fails at once on an import error."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            errors = self.api("GET", "/importErrors")["import_errors"]
            if errors:
                raise AirflowServiceError("DAG import errors:\n" + "\n".join(
                    f"{e['filename']}: {e['stack_trace']}" for e in errors))
            found = self.api("GET", f"/dags/{dag_id}", expect=(200, 404))
            if found and found.get("dag_id") == dag_id:
                return found
            if time.monotonic() > deadline:
                raise AirflowServiceError(f"DAG {dag_id} not parsed after {timeout:.0f}s")
            time.sleep(1)

    def dag_runs(self, dag_id: str) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100, "order_by": "logical_date"})[
            "dag_runs"]

    def wait_for_runs(self, dag_id: str, select, count: int, timeout: float = 600,
                      done_states=("success", "failed")) -> list[dict]:
        """Waits until ``count`` runs of ``dag_id`` for which ``select(run)`` is true are in
        ``done_states`` (and no selected run is unfinished); returns them, by logical date."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            runs = [r for r in self.dag_runs(dag_id) if select(r)]
            if len(runs) >= count and all(r["state"] in done_states for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise AirflowServiceError(f"after {timeout:.0f}s, runs of {dag_id}: " + json.dumps(
                    [(r["dag_run_id"], r["run_type"], r["state"]) for r in runs]))
            time.sleep(2)

    def wait_for_backfills_completed(self, dag_id: str, timeout: float = 300) -> list[dict]:
        """Waits until every backfill of ``dag_id`` is marked completed (the scheduler does that a
        while after its last run finished; Airflow refuses a new backfill of a DAG while one is
        active); returns them."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            backfills = self.api("GET", "/backfills", params={"dag_id": dag_id, "limit": 100})["backfills"]
            if all(b["completed_at"] for b in backfills):
                return backfills
            if time.monotonic() > deadline:
                raise AirflowServiceError(f"backfills of {dag_id} not completed after {timeout:.0f}s: {backfills}")
            time.sleep(2)

    def task_instances(self, dag_id: str, run_id: str) -> list[dict]:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100})[
            "task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """The deserialized value of one XCom entry."""
        entry = self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                         params={"deserialize": "true", "stringify": "false"})
        return entry["value"]

    # ------------------------------------------------------------------ diagnostics
    def service_log_tail(self, name: str, chars: int = 6000) -> str:
        path = self.log_path(name)
        text = path.read_text(errors="replace") if path.exists() else ""
        return f"===== airflow {name} ({path}) =====\n{text[-chars:]}"

    def logs_tail(self, chars: int = 6000) -> str:
        """The last ``chars`` characters of each service log and of every task log."""
        parts = [self.service_log_tail(name, chars) for name in self.procs]
        task_logs = Path(self.env.get("AIRFLOW__LOGGING__BASE_LOG_FOLDER") or self.home / "logs")
        for path in sorted(task_logs.rglob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"===== task log {path.relative_to(task_logs)} =====\n{text[-chars:]}")
        return "\n".join(parts)

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """Prints :meth:`logs_tail` (pytest shows it with the failure) when the block raises."""
        try:
            yield
        except BaseException:
            print(self.logs_tail(), flush=True)
            raise


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the service's pid
