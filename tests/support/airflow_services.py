"""Real Airflow 3 services for end-to-end tests, on a throwaway PostgreSQL metadata database.

:func:`airflow_services` is a context manager that gives the services
(``airflow_copycat.testing.airflow_services``, the same code ``make airflow`` starts them
with) a fresh ``AIRFLOW_HOME`` and a fresh PostgreSQL metadata database (LocalExecutor, as in
production), migrates it, starts the four processes on 127.0.0.1, waits until they are all
healthy and logs in to the REST API. On exit it stops every process group and drops the
database.

When anything fails -- start-up, or a block run inside :meth:`AirflowServices.logs_on_failure`
-- the tails of the services' logs and of the task logs are printed, so pytest shows them.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from airflow_copycat.testing.airflow_services import (
    AirflowServiceError,
    AirflowServices,
    airflow_bin,
    services_env,
)
from airflow_copycat.testing.broker import free_port

__all__ = ["AirflowServiceError", "AirflowServices", "airflow_bin", "airflow_services", "free_port"]


@contextlib.contextmanager
def _postgres_database(server_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database on the server of ``server_url``; dropped on exit.
    Yields its SQLAlchemy URL (psycopg 3 driver)."""
    import sqlalchemy as sa

    base = sa.engine.make_url(server_url).set(drivername="postgresql+psycopg")
    name = f"copycat_e2e_airflow_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(base.set(database="postgres"), isolation_level="AUTOCOMMIT",
                             poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def airflow_services(dags_folder: Path | str, *, postgres_url: str, extra_env: dict[str, str] | None = None,
                     home: Path | None = None, keep_home: bool = False) -> Iterator[AirflowServices]:
    """Starts the Airflow services for ``dags_folder`` and yields them, healthy and logged in.

    ``postgres_url`` names the PostgreSQL server for the metadata database (a new database
    is created on it and dropped afterwards). ``extra_env`` is added to the services'
    environment (:func:`services_env`) -- ``AIRFLOW_CONN_*`` connections, ``PATH``,
    ``JAVA_HOME``... ``home`` defaults to a new temporary directory, removed on exit unless
    ``keep_home``.
    """
    own_home = home is None
    home = Path(home or tempfile.mkdtemp(prefix="copycat-e2e-airflow-"))
    home.mkdir(parents=True, exist_ok=True)
    api_port = free_port()
    with _postgres_database(postgres_url) as db_url:
        env = services_env(home, dags_folder, api_port, db_url=db_url, extra_env=extra_env)
        services = AirflowServices(home, env, api_port)
        try:
            try:
                services.run_cli("db", "migrate")
                services.start()
                services.wait_healthy()
                services.login()
            except BaseException:
                print(services.logs_tail(), flush=True)
                raise
            yield services
        finally:
            services.stop()
            if own_home and not keep_home:
                shutil.rmtree(home, ignore_errors=True)
