"""Attribute steps of a publish log (``chmod``, ``utime``) replayed after a crash: set on the staged
output while it is there, else on the published one; neither there, or something at the staged path
that cannot take them (a dangling link): the set fails and the log stays for the next run."""

from __future__ import annotations

import os

import pytest

from airflow_copycat.distcp.publish import Publisher
from airflow_copycat.distcp.publish_log import PublishError
from tests.distcp.test_publish import T0, cfile, local, stage  # noqa: F401 -- a fixture


class _Crash(Exception):
    pass


def _log_left_after(pub: Publisher, f, *, renamed: bool) -> dict:
    """Publish ``f`` until its log is written (and, ``renamed``, its renames applied), then crash;
    the log left behind."""
    left = {}

    def after_log(wal):
        left.update(pub._read_json(wal, "publish log"))
        if renamed:
            for step in left["steps"]:
                if step["op"] == "rename":
                    pub._apply_step(step, left)
        raise _Crash()

    pub._after_log_written = after_log
    with pytest.raises(_Crash):
        pub.publish("ds", [f], [])
    return left


@pytest.mark.parametrize("renamed", [False, True])
def test_a_replayed_log_sets_the_attributes_where_the_file_is(local, renamed):  # noqa: F811 -- the fixture imported above
    target, fs, staging, pub = local
    f = cfile("d/a.csv", 3, mode=0o640, mtime=T0 + 0.5)
    stage(fs, staging, f)
    _log_left_after(pub, f, renamed=renamed)
    assert os.path.exists(target / "d/a.csv") == renamed
    replayed = Publisher(fs, staging).recover()
    assert [r["status"] for r in replayed] == ["replayed"], replayed
    st = os.stat(target / "d/a.csv")
    assert (st.st_mode & 0o7777, st.st_mtime_ns) == (0o640, int((T0 + 0.5) * 1e9))


def test_an_attribute_step_of_a_file_that_is_nowhere_fails_and_the_log_stays(local):  # noqa: F811 -- the fixture imported above
    target, fs, staging, pub = local
    f = cfile("d/a.csv", 3, mode=0o640)
    stage(fs, staging, f)
    log = _log_left_after(pub, f, renamed=True)
    os.unlink(target / "d/a.csv")
    step = next(s for s in log["steps"] if s["op"] == "chmod")
    with pytest.raises(PublishError, match="sets attributes of d/a.csv, but neither it nor its staged copy exists"):
        Publisher(fs, staging)._apply_step(step, log)
    assert os.path.exists(staging.wal("ds"))


@pytest.mark.parametrize("op", ["chmod", "utime"])
def test_a_dangling_link_at_the_staged_path_fails_the_step_and_the_published_file_is_left_alone(local, op):  # noqa: F811 -- the fixture imported above
    target, fs, staging, pub = local
    f = cfile("d/a.csv", 3, mode=0o640, mtime=T0)
    stage(fs, staging, f)
    log = _log_left_after(pub, f, renamed=True)
    step = next(s for s in log["steps"] if s["op"] == op)
    os.symlink(target / "nowhere", os.path.join(str(target), step["staged"]))
    before = os.stat(target / "d/a.csv")
    with pytest.raises(PublishError, match=f"publishing file set 'ds', step {op} d/a.csv failed: FileNotFoundError"):
        Publisher(fs, staging)._apply_step(step, log)
    after = os.stat(target / "d/a.csv")
    assert (after.st_mode, after.st_mtime_ns) == (before.st_mode, before.st_mtime_ns)


def test_attribute_steps_the_staged_file_already_has_are_not_done_again(local, monkeypatch):  # noqa: F811 -- the fixture imported above
    """The staging listing's stat shows mode and mtime: a step already true costs no system call, the
    others are done (``utime`` keeping the access time that stat saw, without a stat of its own); the
    published files end the same either way, and the log still holds every step for a replay."""
    target, fs, staging, pub = local
    done = cfile("d/a.csv", 3, mode=0o640, mtime=T0 + 0.5)
    todo = cfile("d/b.csv", 3, mode=0o600, mtime=T0 + 1.5)
    for f in (done, todo):
        stage(fs, staging, f)
    staged = {f.destination: os.path.join(staging.file_dir(f), f.destination) for f in (done, todo)}
    os.chmod(staged["d/a.csv"], 0o640)
    os.utime(staged["d/a.csv"], ns=(int(T0 * 1e9), int((T0 + 0.5) * 1e9)))
    os.utime(staged["d/b.csv"], ns=(int((T0 + 7) * 1e9), int(T0 * 1e9)))
    calls = []
    real = {name: getattr(os, name) for name in ("chmod", "utime", "stat")}

    def spy(name):
        def call(path, *args, **kwargs):
            if "/_copycat/" in str(path) and str(path).endswith(".csv"):  # a staged output
                calls.append((name, os.path.basename(str(path))))
            return real[name](path, *args, **kwargs)
        return call

    saved = {}
    real_finish = Publisher._finish

    def finish(self, log, wal, *rest):
        saved.update(self._read_json(wal, "publish log"))
        real_finish(self, log, wal, *rest)

    monkeypatch.setattr(Publisher, "_finish", finish)
    for name in real:
        monkeypatch.setattr(os, name, spy(name))
    assert pub.publish("ds", [done, todo], [])["status"] == "published"
    for name in real:
        monkeypatch.setattr(os, name, real[name])
    assert sorted(calls) == [("chmod", "b.csv"), ("utime", "b.csv")], calls
    for f, atime in ((done, T0), (todo, T0 + 7)):
        st = os.stat(target / f.destination)
        assert (st.st_mode & 0o7777, st.st_mtime_ns, st.st_atime_ns) == (f.mode, int(f.mtime * 1e9), int(atime * 1e9))
    assert sorted(s["op"] for s in saved["steps"] if s["op"] in ("chmod", "utime")) == ["chmod", "chmod", "utime", "utime"]
