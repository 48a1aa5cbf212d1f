"""docker/spark/healthcheck.py, the Spark services' health checks: healthy only when the thing
compose waits for is there (a port that accepts, a worker the master lists as ALIVE), and a line
saying what is missing otherwise. Runs against sockets and a tiny HTTP server on loopback."""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tests.docker.compose_file import DOCKER_DIR

spec = importlib.util.spec_from_file_location("spark_healthcheck", DOCKER_DIR / "spark" / "healthcheck.py")
healthcheck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(healthcheck)


@pytest.fixture
def master_ui():
    """A stand-in for the master's web UI: ``/json/`` lists one ALIVE and one DEAD worker."""
    doc = {"workers": [{"host": "spark-worker-1", "state": "ALIVE"}, {"host": "spark-worker-2", "state": "DEAD"}]}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(doc).encode() if self.path == "/json/" else b"{}"
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_a_worker_is_healthy_only_once_the_master_lists_it_alive(master_ui, capsys):
    assert healthcheck.main(["worker", master_ui, "spark-worker-1"]) == 0
    assert healthcheck.main(["worker", master_ui, "spark-worker-2"]) == 1
    assert "lists no ALIVE worker spark-worker-2" in capsys.readouterr().err


def test_a_worker_is_unhealthy_while_the_master_does_not_answer():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        assert healthcheck.main(["worker", f"http://127.0.0.1:{port}", "spark-worker-1"]) == 1


def test_master_and_connect_are_healthy_when_their_port_accepts(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        assert healthcheck.main(["master", address]) == 0
        assert healthcheck.main(["connect", address]) == 0
    assert healthcheck.main(["connect", address]) == 1
    assert f"nothing listens on {address}" in capsys.readouterr().err


def test_an_unknown_role_is_unhealthy_and_says_what_to_use(capsys):
    assert healthcheck.main(["executor"]) == 1
    assert "unknown role 'executor'" in capsys.readouterr().err
