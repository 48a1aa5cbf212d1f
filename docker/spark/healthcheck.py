"""Health checks of the Spark services of the compose stack (master, worker, Spark Connect).

Run by compose as ``python3 /opt/copycat/healthcheck.py <role> [args]``; exits 0 when healthy,
1 with one line on stderr saying what is missing. Standard library only (the Spark image has no
curl).

* ``master HOST:PORT``: the master's RPC port accepts connections (it binds to its host name,
  not to localhost, so HOST is the service name).
* ``worker MASTER_UI_URL [HOST]``: the master lists HOST (default: this container's host name)
  as an ALIVE worker -- a worker whose process runs but which never registered gives the cluster
  no cores, so it is not healthy.
* ``connect HOST:PORT``: the Spark Connect server's gRPC port accepts connections.
"""

from __future__ import annotations

import json
import socket
import sys
import urllib.request


def port_open(hostport: str, timeout: float = 5.0) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds within ``timeout`` seconds."""
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def alive_worker_hosts(master_json: dict) -> set[str]:
    """Host names of the ALIVE workers in the master's ``/json/`` document."""
    return {str(w.get("host")) for w in master_json.get("workers", []) if w.get("state") == "ALIVE"}


def worker_registered(master_ui: str, host: str, timeout: float = 5.0) -> bool:
    """Whether the master at ``master_ui`` (``http://spark-master:8080``) lists ``host`` as ALIVE."""
    try:
        with urllib.request.urlopen(master_ui.rstrip("/") + "/json/", timeout=timeout) as response:
            doc = json.load(response)
    except (OSError, ValueError):
        return False
    return host in alive_worker_hosts(doc)


def main(argv: list[str]) -> int:
    role, arg, extra = (argv + ["", "", ""])[:3]
    if role in ("master", "connect"):
        ok, what = port_open(arg), f"{role}: nothing listens on {arg}"
    elif role == "worker":
        host = extra or socket.gethostname()
        ok, what = worker_registered(arg, host), f"worker: the master at {arg} lists no ALIVE worker {host}"
    else:
        ok, what = False, f"unknown role {role!r}: use master HOST:PORT, worker MASTER_UI_URL [HOST] or connect HOST:PORT"
    if not ok:
        print(what, file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
