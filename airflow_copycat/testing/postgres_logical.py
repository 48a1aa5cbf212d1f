"""A PostgreSQL cluster with ``wal_level=logical``, for change-data-capture tests and demos.

Most PostgreSQL servers run with ``wal_level=replica``, which has no logical decoding, and
changing it needs a restart. :class:`LogicalPostgres` therefore initialises a cluster of its
own: ``initdb`` into a temporary directory (as the ``postgres`` OS user when run as root,
because PostgreSQL refuses to run as root), ``wal_level=logical``, room for replication
slots and WAL senders, trust authentication on 127.0.0.1 only, a free port, started with
``pg_ctl``; :meth:`LogicalPostgres.stop` stops it and removes the directory. Startup takes a
few seconds (``initdb --no-sync``, ``fsync=off``: the cluster is disposable).

``COPYCAT_TEST_POSTGRES_CDC_URL`` names an existing server instead (it must have
``wal_level=logical``; :func:`check_logical` says so if not); then nothing is started.

Failures raise :class:`RuntimeError` with the command, its output and the server log's tail:
a test run without a usable cluster must fail loudly, never skip.

Command line (for a demo)::

    python -m airflow_copycat.testing.postgres_logical start --dir DIR   # prints the URL
    python -m airflow_copycat.testing.postgres_logical stop --dir DIR
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ENV_URL = "COPYCAT_TEST_POSTGRES_CDC_URL"

_SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "32",
    "max_wal_senders": "32",
    "max_connections": "60",
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "wal_sender_timeout": "0",
    "log_min_messages": "warning",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_bindir() -> str:
    """The directory holding ``initdb`` and ``pg_ctl``: ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/<version>/bin`` (Debian, Ubuntu), or ``PATH``."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0:
            candidates.append(out.stdout.strip())
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                      if Path(p).parent.name.isdigit() else 0, reverse=True)
    candidates += versions
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(str(Path(initdb).parent))
    for d in candidates:
        if os.access(os.path.join(d, "initdb"), os.X_OK) and os.access(os.path.join(d, "pg_ctl"), os.X_OK):
            return d
    raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found: install the server package "
                       "(Debian: apt-get install postgresql) or set " + ENV_URL + " to a server with "
                       "wal_level=logical")


class LogicalPostgres:
    """One disposable cluster with ``wal_level=logical``; ``url`` is its libpq URL (user ``postgres``,
    database ``postgres``, no password). Use as a context manager, or :meth:`start` / :meth:`stop`.

    ``host``: the one address the server listens on (default 127.0.0.1). On another address it
    trusts clients of the subnets it is directly on (``samenet``), as a database on a private
    network that executors on other hosts read. ``exec_prefix``: a command the server runs under
    (e.g. ``ip netns exec NS``, to run it in another network namespace)."""

    def __init__(self, directory: str | None = None, port: int | None = None, *, host: str = "127.0.0.1",
                 exec_prefix: Sequence[str] = ()):
        self._own_dir = directory is None
        self.directory = directory
        self.port = port or _free_port()
        self.host = host
        self.exec_prefix = list(exec_prefix)
        self.user = "postgres"
        self.dbname = "postgres"
        self._bindir: str | None = None
        self._started = False

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    @property
    def data_dir(self) -> str:
        return os.path.join(self.directory, "data")

    @property
    def log_file(self) -> str:
        return os.path.join(self.directory, "server.log")

    def _as_owner(self, argv: list[str]) -> list[str]:
        """PostgreSQL will not run as root: as root, run ``argv`` as the ``postgres`` user."""
        if os.geteuid() != 0:
            return argv
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", "postgres", "--", *argv]
        return ["su", "postgres", "-s", "/bin/sh", "-c", " ".join(map(_quote, argv))]

    def _run(self, argv: list[str], what: str, timeout: float = 60, prefix: Sequence[str] = ()) -> None:
        out = subprocess.run([*prefix, *self._as_owner(argv)], capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {out.returncode}): {' '.join(argv)}\n{out.stdout}{out.stderr}"
                               f"{self._log_tail()}")

    def _log_tail(self, lines: int = 30) -> str:
        try:
            text = Path(self.log_file).read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(text)

    def start(self, timeout: float = 60) -> "LogicalPostgres":
        self._bindir = find_bindir()
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="copycat-pg-logical-")
        os.makedirs(self.directory, exist_ok=True)
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root, but there is no 'postgres' OS user to run PostgreSQL as "
                                   "(PostgreSQL refuses to run as root)") from None
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            os.chmod(self.directory, 0o700)
        bindir = self._bindir
        if not os.path.exists(os.path.join(self.data_dir, "PG_VERSION")):
            self._run([os.path.join(bindir, "initdb"), "-D", self.data_dir, "-U", self.user, "-A", "trust",
                       "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"], "initdb", timeout)
            conf = "".join(f"{k} = {v}\n" for k, v in {**_SETTINGS, "listen_addresses": f"'{self.host}'"}.items())
            conf += f"port = {self.port}\nunix_socket_directories = '{self.directory}'\n"
            with open(os.path.join(self.data_dir, "postgresql.auto.conf"), "a") as f:
                f.write(conf)
            with open(os.path.join(self.data_dir, "pg_hba.conf"), "w") as f:
                peers = "127.0.0.1/32" if self.host == "127.0.0.1" else "samenet"
                f.write(f"local all all trust\nhost all all {peers} trust\n"
                        f"local replication all trust\nhost replication all {peers} trust\n")
        self._run([os.path.join(bindir, "pg_ctl"), "-D", self.data_dir, "-l", self.log_file, "-w", "-t",
                   str(int(timeout)), "-o", f"-p {self.port}", "start"], "pg_ctl start", timeout + 5,
                  prefix=self.exec_prefix)
        self._started = True
        wait_until_ready(self.url, timeout)
        check_logical(self.url)
        return self

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove a directory this object created. Idempotent."""
        if self._started and self._bindir:
            try:
                self._run([os.path.join(self._bindir, "pg_ctl"), "-D", self.data_dir, "-m", "fast", "-w", "stop"],
                          "pg_ctl stop", 60)
            except (RuntimeError, subprocess.TimeoutExpired):
                self._run([os.path.join(self._bindir, "pg_ctl"), "-D", self.data_dir, "-m", "immediate", "stop"],
                          "pg_ctl stop (immediate)", 30)
            self._started = False
        if self._own_dir and self.directory and os.path.isdir(self.directory):
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "LogicalPostgres":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


def wait_until_ready(url: str, timeout: float = 30) -> None:
    """Wait until ``url`` accepts a connection; raise :class:`RuntimeError` with the last error otherwise."""
    import psycopg

    deadline, error = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(url, connect_timeout=3):
                return
        except psycopg.OperationalError as e:
            error = e
            time.sleep(0.1)
    raise RuntimeError(f"PostgreSQL at {url} did not accept connections within {timeout:.0f} s: {error}")


def check_logical(url: str) -> None:
    """Raise :class:`RuntimeError` unless the server at ``url`` has ``wal_level=logical``."""
    import psycopg

    with psycopg.connect(url, connect_timeout=5) as conn:
        level = conn.execute("SHOW wal_level").fetchone()[0]
    if level != "logical":
        raise RuntimeError(f"PostgreSQL at {url} has wal_level={level}; change data capture needs "
                           f"wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart the server)")


def external_url() -> str | None:
    """The server ``COPYCAT_TEST_POSTGRES_CDC_URL`` names (checked for ``wal_level=logical``), or ``None``."""
    url = os.environ.get(ENV_URL)
    if not url:
        return None
    wait_until_ready(url, 10)
    check_logical(url)
    return url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("--dir", required=True, help="the cluster's directory (kept until stop)")
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.dir)
    if args.action == "start":
        port_file = Path(directory, "port")
        port = args.port or (int(port_file.read_text()) if port_file.exists() else None)
        pg = LogicalPostgres(directory, port).start()
        port_file.write_text(str(pg.port))
        print(pg.url)
    else:
        port_file = Path(directory, "port")
        pg = LogicalPostgres(directory, int(port_file.read_text()) if port_file.exists() else None)
        pg._bindir, pg._started = find_bindir(), True
        pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
