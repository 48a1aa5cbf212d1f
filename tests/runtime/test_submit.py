"""What spark-submit gets when the driver, the executors and the Airflow worker are not one machine."""

from __future__ import annotations

import socket
from pathlib import Path

from airflow_copycat.runtime import submit


def _route_address(host: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 7077))
        return s.getsockname()[0]


def test_a_local_master_keeps_the_driver_on_loopback():
    conf = submit.default_spark_conf("local[2]")
    assert conf["spark.driver.host"] == "127.0.0.1" and conf["spark.speculation"] == "false"


def test_a_standalone_master_elsewhere_gets_the_address_executors_can_call_back(monkeypatch):
    # Given a master on another network (TEST-NET-2: routed like any remote address, nothing is sent)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    conf = submit.default_spark_conf("spark://198.51.100.7:7077")
    # Then the driver advertises the address this machine reaches the master from, not loopback
    assert conf["spark.driver.host"] == _route_address("198.51.100.7")
    assert not conf["spark.driver.host"].startswith("127.")
    # And a multi-master URL takes its first host
    assert submit.default_spark_conf("spark://198.51.100.7:7077,198.51.100.8:7077")["spark.driver.host"] == \
        conf["spark.driver.host"]


def test_the_driver_host_is_left_to_spark_when_the_driver_runs_elsewhere_or_is_set(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert "spark.driver.host" not in submit.default_spark_conf("spark://198.51.100.7:7077", "cluster")
    assert "spark.driver.host" not in submit.default_spark_conf("yarn")
    assert "spark.driver.host" not in submit.default_spark_conf("spark://no-such-host.invalid:7077")
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.1.2.3")
    assert "spark.driver.host" not in submit.default_spark_conf("spark://198.51.100.7:7077")


def test_group_and_result_files_can_live_at_any_fsspec_url():
    # Given a work directory on a non-local filesystem (what a driver in cluster deploy mode can reach)
    work = submit.new_work_dir("memory://copycat-test/work", "copycat-")
    other = submit.new_work_dir("memory://copycat-test/work", "copycat-")
    assert work.startswith("memory://") and work != other
    # When the group is written and a result read back
    path = submit.write_json({"group": 0}, submit.join(work, "group.json"))
    assert submit.read_json(path) == {"group": 0}
    # Then a missing result reads as none, and the directory goes away when removed
    assert submit.read_json(submit.join(work, "result.json")) is None
    submit.remove_dir(work)
    assert submit.read_json(path) is None


def test_a_local_work_dir_is_a_new_private_directory_under_the_given_one(tmp_path):
    work = submit.new_work_dir(str(tmp_path / "base"), "copycat-")
    assert work.startswith(str(tmp_path / "base")) and (tmp_path / "base").is_dir()
    submit.write_json([1], submit.join(work, "x.json"))
    assert submit.read_json(submit.join(work, "x.json")) == [1]
    submit.remove_dir(work)
    assert not Path(work).exists()
