"""The kernel copy of :class:`airflow_copycat.distcp.localcopy.RangeCopy` with a checksum -- blocks
copied by ``copy_file_range`` and hashed as read back from the target -- is proven equal to the
read/write path it replaces (each block read into a buffer, written and hashed from it) and to the
bytes themselves: for generated files, ranges and block sizes, with the kernel copy available, not
available (another filesystem), or failing after some blocks (read/write goes on from there), the
target holds the same bytes, the hashes are the same, the count and the progress calls are the same,
and a source with a byte past the range fails alike. Whole copy units through it stage and publish
what the streaming path does."""

from __future__ import annotations

import errno
import hashlib
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_copycat.distcp import localcopy
from airflow_copycat.distcp.localcopy import RangeCopy, SourceChanged
from tests.distcp.test_fast_copy import assert_same, copy_both, whole

B = 4096
WAYS = ("kernel", "read_write", "kernel_fails_after_1", "kernel_fails_after_2")


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(localcopy, "BLOCK", B)


def copy_file_range_failing_after(k: int):
    """``os.copy_file_range`` that copies ``k`` times, then fails as between two filesystems (EXDEV)."""
    real = os.copy_file_range
    calls = [0]

    def copy(*args):
        calls[0] += 1
        if calls[0] > k:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(*args)

    return copy


def copy_range(monkeypatch, way: str, src: Path, target: Path, offset: int, limit: int, algorithms, *,
               progress_every: int, strict_end: bool):
    """RangeCopy ``src`` -> ``target`` the way named: ``(count, hex digests, progress calls, error)``."""
    with monkeypatch.context() as m:
        if way == "read_write":
            m.delattr(os, "copy_file_range")
        elif way.startswith("kernel_fails_after_"):
            m.setattr(os, "copy_file_range", copy_file_range_failing_after(int(way.rsplit("_", 1)[1])))
        hashers = [hashlib.new(a) for a in algorithms]
        calls: list[int] = []
        copy = RangeCopy(str(src), limit, hashers, calls.append, progress_every, strict_end=strict_end)
        try:
            copy.run(str(src), offset, str(target))
            error = None
        except SourceChanged as e:
            error = str(e)
    return copy.count, [h.hexdigest() for h in hashers], calls, error


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(0, 7 * B + 5), offset_in=st.integers(0, 3 * B), limit_in=st.integers(0, 8 * B),
       to_end=st.booleans(), progress_every=st.sampled_from([1, B - 1, B, 2 * B + 3, 1 << 30]),
       algorithms=st.sampled_from([("md5",), ("sha256",), ("md5", "sha256")]), seed=st.integers(0, 2**16))
@example(size=0, offset_in=0, limit_in=0, to_end=True, progress_every=B, algorithms=("md5",), seed=0)
@example(size=5 * B, offset_in=0, limit_in=0, to_end=True, progress_every=B, algorithms=("md5",), seed=1)
@example(size=5 * B, offset_in=0, limit_in=3 * B, to_end=False, progress_every=B, algorithms=("md5",), seed=2)
def test_kernel_copy_and_read_back_hash_is_the_read_write_path(small_blocks, monkeypatch, size, offset_in,
                                                                 limit_in, to_end, progress_every, algorithms,
                                                                 seed):
    data = random.Random(seed).randbytes(size)
    offset = min(offset_in, size)
    limit = size - offset if to_end else limit_in  # to_end: the listed range ends at the end of the file
    expected_bytes = data[offset:offset + limit]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src.bin"
        src.write_bytes(data)
        seen = {}
        for way in WAYS:
            target = Path(tmp) / f"{way}.out"
            seen[way] = copy_range(monkeypatch, way, src, target, offset, limit, algorithms,
                                   progress_every=progress_every, strict_end=to_end or offset + limit >= size)
            assert target.read_bytes() == expected_bytes, way
        # a file with a byte more than listed fails alike
        src.write_bytes(data + b"!")
        grown = {way: copy_range(monkeypatch, way, src, Path(tmp) / f"{way}.grown", offset, size - offset,
                                 algorithms, progress_every=progress_every, strict_end=True)[3]
                 for way in WAYS}
    assert all(seen[way] == seen["read_write"] for way in WAYS), seen
    count, digests, _, error = seen["read_write"]
    assert count == len(expected_bytes) and error is None
    assert digests == [hashlib.new(a, expected_bytes).hexdigest() for a in algorithms]
    assert set(grown.values()) == {f"{src} changed during the copy: it has more than the {size - offset} bytes listed"}


@pytest.mark.parametrize("fails_after", [0, 1, 3])
@pytest.mark.parametrize("checksum", ["none", "md5"])
def test_a_kernel_copy_that_fails_midway_stages_what_the_streaming_path_does(tmp_path, monkeypatch, fails_after,
                                                                             checksum):
    """Whole copy units: the kernel copy failing after some blocks (EXDEV) -- read/write takes over --
    stages, records and publishes the same as the streaming path."""
    for module, name in (("airflow_copycat.distcp.whole_copy.CHUNK", B), ("airflow_copycat.distcp.whole_copy.PROGRESS_EVERY", B),
                         ("airflow_copycat.distcp.reading.PROGRESS_EVERY", B),
                         ("airflow_copycat.distcp.localcopy.BLOCK", B)):
        monkeypatch.setattr(module, name)
    monkeypatch.setattr(os, "copy_file_range", copy_file_range_failing_after(fails_after))
    data = random.Random(fails_after).randbytes(5 * B + 7)
    seen = copy_both(tmp_path, data, whole, {"checksum": checksum})
    assert_same(seen)
    assert seen[True]["published"]["d/sub/f.bin"] == data
