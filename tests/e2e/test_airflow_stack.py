"""``make airflow`` (scripts/airflow_stack.py) as a newcomer uses it: started with no
configuration, it prints the UI's address and login, serves every example DAG of ``dags/``
without an import error, runs a DAG triggered through the REST API, and Ctrl-C (SIGINT) stops
it leaving no process and no listening port behind.

The quickest example DAG is triggered: ``copycat_offsets`` listing the offsets of
``shop-orders`` (one task, Kafka only). The runs through Spark Connect are the demo's and the
end-to-end backfill tests' subject."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from airflow_copycat.testing.broker import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "airflow_stack.py"


def _example_dag_ids() -> set[str]:
    return {m for f in (REPO / "dags").glob("*.py")
            for m in re.findall(r'dag_id="([^"]+)"', f.read_text(encoding="utf-8"))}


def _wait(what: str, check, proc: subprocess.Popen, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the stack exited with {proc.returncode} while waiting for {what}"
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f}s"
        time.sleep(every)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _sessions_alive(sessions: set[int]) -> list[str]:
    alive = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getsid(p.pid) in sessions and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:150]}")
        except (ProcessLookupError, PermissionError):
            pass
    return alive


def test_make_airflow_serves_the_examples_and_stops_everything_on_ctrl_c(tmp_path: Path):
    # Given the stack started on a free port with a new state directory, nothing configured
    state, output = tmp_path / "state", tmp_path / "stack-output.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    with open(output, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(SCRIPT), "--state-dir", str(state), "--port", str(free_port())],
                                env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    sessions = {proc.pid}
    started = time.monotonic()
    try:
        _wait("the stack to be ready", lambda: (state / "stack.json").exists(), proc, timeout=300)
        ready_s = time.monotonic() - started
        stack = json.loads((state / "stack.json").read_text())
        sessions |= {os.getsid(pid) for pid in stack["pids"].values()}
        printed = output.read_text(encoding="utf-8")
        # Then it printed the UI's address and a login that works
        url = re.search(r"Airflow UI\s+(http://127\.0\.0\.1:\d+)", printed).group(1)
        user, password = re.search(r"login\s+(\S+) / (\S+)", printed).groups()
        http = httpx.Client(base_url=url, timeout=60)
        token = http.post("/auth/token", json={"username": user, "password": password})
        assert token.status_code in (200, 201), token.text
        headers = {"Authorization": f"Bearer {token.json()['access_token']}"}

        def api(method: str, path: str, **kwargs):
            r = http.request(method, f"/api/v2{path}", headers=headers, **kwargs)
            assert r.status_code in (200, 201), f"{method} {path}: {r.status_code} {r.text[:2000]}"
            return r.json()

        # and every example DAG is listed, none with an import error
        expected = _example_dag_ids()
        assert "copycat_offsets" in expected and len(expected) >= 5, expected

        def all_listed():
            errors = api("GET", "/importErrors")["import_errors"]
            assert not errors, [(e["filename"], e["stack_trace"][-1500:]) for e in errors]
            return expected <= {d["dag_id"] for d in api("GET", "/dags", params={"limit": 100})["dags"]}

        _wait("the example DAGs to be parsed", all_listed, proc, timeout=120)

        # When the offsets DAG is triggered (unpaused, as the trigger dialog does)
        triggered = time.monotonic()
        api("PATCH", "/dags/copycat_offsets", json={"is_paused": False})
        run = api("POST", "/dags/copycat_offsets/dagRuns",
                  json={"logical_date": None, "conf": {"connector": "shop-orders", "action": "list"}})
        run_path = f"/dags/copycat_offsets/dagRuns/{run['dag_run_id']}"
        state_of_run = _wait("the triggered run to finish",
                             lambda: api("GET", run_path)["state"] in ("success", "failed") and
                             api("GET", run_path)["state"], proc, timeout=180)
        run_s = time.monotonic() - triggered
        # Then it succeeded and listed the connector's offsets (none yet: the broker starts empty)
        assert state_of_run == "success", output.read_text(encoding="utf-8")[-3000:]
        listed = api("GET", f"{run_path}/taskInstances/offsets/xcomEntries/return_value",
                     params={"deserialize": "true", "stringify": "false"})["value"]
        assert listed["connector"] == "shop-orders" and listed["offsets"] == [], listed

        # When Ctrl-C reaches it
        ports = [int(url.rsplit(":", 1)[1]), int(stack["kafka_bootstrap"].rsplit(":", 1)[1]),
                 int(stack["spark_connect_url"].rsplit(":", 1)[1])]
        assert all(_listening(p) for p in ports), ports
        sessions |= {os.getsid(c.pid) for c in psutil.Process(proc.pid).children(recursive=True)}
        http.close()
        stopping = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(90) == 0, output.read_text(encoding="utf-8")[-3000:]
        stop_s = time.monotonic() - stopping
        # Then no process it started is left, and none of its ports listens
        assert _sessions_alive(sessions) == []
        assert [p for p in ports if _listening(p)] == []
        print(f"ready in {ready_s:.0f}s, offsets run in {run_s:.0f}s, stopped in {stop_s:.0f}s")
    except BaseException:
        print(output.read_text(encoding="utf-8", errors="replace")[-6000:])
        for log in sorted((state / "logs").glob("*.log")):
            print(f"===== {log.name} =====\n{log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
        for sid in sessions:  # a failed test leaves nothing behind either
            try:
                os.killpg(sid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
