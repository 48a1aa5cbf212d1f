"""Finding datasets and listing their files: real files in tmp_path, and fsspec's memory:// as a second filesystem."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import uuid

import fsspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_copycat.connect.config import Password
from airflow_copycat.connect.errors import ConfigException
from airflow_copycat.distcp.config import parse_copy_config
from airflow_copycat.distcp.converters import destination_for
from airflow_copycat.distcp.destination_names import destination_name, source_name_candidates
from airflow_copycat.distcp.entries import _fs_checksum
from airflow_copycat.distcp.listing import filesystem, find_datasets, list_files
from airflow_copycat.distcp.model import Dataset
from airflow_copycat.distcp.selection import glob_matcher


def write(root, files: dict[str, bytes | str]) -> None:
    for rel, data in files.items():
        path = os.path.join(str(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)


def config(**keys) -> dict:
    raw = {"name": "t", "source.url": "/src", "target.url": "/elsewhere"}
    raw.update({k.replace("_", "."): v for k, v in keys.items()})
    return parse_copy_config(raw)


def listing(url: str, pattern: str = "", **keys) -> list:
    fs, root = filesystem(url, None)
    cfg = config(**keys)
    return [f for d in find_datasets(fs, root, pattern) for f in list_files(fs, root, d, cfg)]


@pytest.fixture
def memory_root():
    root = f"/distcp-test-{uuid.uuid4().hex[:8]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


# ------------------------------------------------------------------ filesystem()


def test_filesystem_opens_paths_and_urls_without_protocol(tmp_path):
    fs, root = filesystem(str(tmp_path) + "/", None)
    assert root == str(tmp_path) and "file" in fs.protocol
    fs2, root2 = filesystem(f"file://{tmp_path}", '{"auto_mkdir": true}')
    assert root2 == str(tmp_path) and "file" in fs2.protocol
    fs3, root3 = filesystem("memory://bucket/prefix", {})
    assert root3 == "/bucket/prefix" and "memory" in fs3.protocol


def test_filesystem_options_from_a_config_password(tmp_path):
    cfg = parse_copy_config({"name": "t", "source.url": str(tmp_path), "target.url": "/x",
                             "source.options": '{"auto_mkdir": true}'})
    assert isinstance(cfg["source.options"], Password)
    fs, root = filesystem(cfg["source.url"], cfg["source.options"])
    assert root == str(tmp_path)


def test_filesystem_errors_never_show_secrets():
    # Given options holding a secret, in JSON that does not parse
    with pytest.raises(ValueError) as bad_json:
        filesystem("memory://x", '{"secret": "s3cr3t-value", ')
    assert "not valid JSON" in str(bad_json.value) and "s3cr3t-value" not in str(bad_json.value)
    # and a URL with a password, on a protocol fsspec does not know
    with pytest.raises(ValueError) as unknown:
        filesystem("nosuchproto://user:pa55word@host/x", {"key": "s3cr3t-value"})
    text = str(unknown.value)
    assert "nosuchproto" in text and "pa55word" not in text and "s3cr3t-value" not in text
    with pytest.raises(ValueError, match="JSON object"):
        filesystem("memory://x", "[1, 2]")


# ------------------------------------------------------------------ find_datasets()


def test_dataset_glob_matches_directories_and_files_sorted(tmp_path):
    # Given tables as directories, a loose file, and hidden or control directories
    write(tmp_path, {"tables/b/part-0": "b", "tables/a/part-0": "a", "tables/c.csv": "c",
                     "tables/_tmp/x": "t", "tables/.hidden/x": "h", "_copycat/distcp/wal/x.json": "{}"})
    fs, root = filesystem(str(tmp_path), None)
    # When the datasets are found
    found = find_datasets(fs, root, "tables/*")
    # Then every visible match is a dataset, sorted, a file match being a one-file dataset
    assert found == [Dataset("tables/a", f"{tmp_path}/tables/a"), Dataset("tables/b", f"{tmp_path}/tables/b"),
                     Dataset("tables/c.csv", f"{tmp_path}/tables/c.csv")]
    one = list_files(fs, root, found[2], config())
    assert [(f.relative, f.destination, f.dataset) for f in one] == [("tables/c.csv", "tables/c.csv", "tables/c.csv")]


def test_empty_pattern_is_the_whole_root_and_nested_matches_collapse(tmp_path):
    write(tmp_path, {"a/b/c/x": "1", "a/y": "2"})
    fs, root = filesystem(str(tmp_path), None)
    assert find_datasets(fs, root, "") == [Dataset("", str(tmp_path))]
    # "**" matches a, a/b, a/b/c...: only the outermost is a dataset, so each file is in one file set
    assert [d.name for d in find_datasets(fs, root, "**")] == ["a"]
    assert find_datasets(fs, root, "nothing/*") == []


def test_missing_root_is_a_clear_error(tmp_path):
    fs, root = filesystem(str(tmp_path / "nope"), None)
    with pytest.raises(FileNotFoundError, match=r"source root .*nope.* does not exist"):
        find_datasets(fs, root, "*")


def test_datasets_inside_the_target_are_excluded(tmp_path):
    write(tmp_path, {"in/a/x": "1", "mirror/a/x": "1"})
    fs, root = filesystem(str(tmp_path), None)
    assert [d.name for d in find_datasets(fs, root, "*/*", exclude=[f"{tmp_path}/mirror"])] == ["in/a"]


def test_the_target_inside_the_source_is_never_a_dataset(tmp_path):
    # Given a target inside the source that an earlier run filled, and the job's config
    write(tmp_path, {"a/x": "1", "mirror/a/x": "1", "mirror/_copycat/distcp/wal/w.json": "{}"})
    fs, root = filesystem(str(tmp_path), None)
    cfg = parse_copy_config({"name": "t", "source.url": str(tmp_path), "target.url": f"file://{tmp_path}/mirror"})
    # Then the target's tree is not a dataset, without an explicit exclude
    assert [d.name for d in find_datasets(fs, root, "*", config=cfg)] == ["a"]
    # also when the pattern would match inside it
    assert [d.name for d in find_datasets(fs, root, "*/*", config=cfg)] == ["a/x"]
    # and a target elsewhere (or the source itself) excludes nothing
    same = parse_copy_config({"name": "t", "source.url": str(tmp_path), "target.url": str(tmp_path)})
    assert [d.name for d in find_datasets(fs, root, "*", config=same)] == ["a", "mirror"]


def test_datasets_on_memory_filesystem(memory_root):
    fs = fsspec.filesystem("memory")
    for rel in ("logs/web/2026/11/21/a.log", "logs/api/2026/11/21/b.log"):
        fs.pipe(f"{memory_root}/{rel}", b"line\n")
    mfs, root = filesystem(f"memory://{memory_root}", None)
    assert [d.name for d in find_datasets(mfs, root, "logs/*")] == ["logs/api", "logs/web"]


# ------------------------------------------------------------------ list_files()


def test_listing_relative_paths_sizes_mtimes_and_file_set(tmp_path):
    write(tmp_path, {"t/a/x.csv": "hello", "t/a/sub/y.csv": "hi", "t/a/_SUCCESS": "", "t/a/.crc": "",
                     "t/a/_temporary/0/z.csv": "no"})
    os.utime(tmp_path / "t/a/x.csv", (1_700_000_000.25, 1_700_000_000.25))
    files = listing(str(tmp_path), "t/*")
    assert [(f.relative, f.destination, f.size, f.file_set) for f in files] == [
        ("t/a/sub/y.csv", "t/a/sub/y.csv", 2, "t/a"), ("t/a/x.csv", "t/a/x.csv", 5, "t/a")]
    assert files[1].mtime == pytest.approx(1_700_000_000.25)
    assert files[1].origin == f"{tmp_path}/t/a/x.csv"
    assert files[1].preserve == ("perm", "mtime")


def test_listing_is_one_recursive_listing_not_a_call_per_file(tmp_path, monkeypatch):
    # Given a dataset of 300 files in 3 directories
    write(tmp_path, {f"d/{i % 3}/f{i}": "x" for i in range(300)})
    fs, root = filesystem(str(tmp_path), None)
    calls = {"find": 0, "info(str)": 0, "open": 0}
    real_find, real_info = fs.find, fs.info

    def find(*a, **k):
        calls["find"] += 1
        return real_find(*a, **k)

    def info(path, **k):
        if isinstance(path, str):  # LocalFileSystem.ls stats scandir entries itself; count only lookups by path
            calls["info(str)"] += 1
        return real_info(path, **k)

    monkeypatch.setattr(fs, "find", find)
    monkeypatch.setattr(fs, "info", info)
    monkeypatch.setattr(fs, "open", lambda *a, **k: calls.__setitem__("open", calls["open"] + 1))
    # When it is listed
    files = list_files(fs, root, Dataset("d", f"{tmp_path}/d"), config())
    # Then one find, one info per directory (fsspec's ls), no open
    assert len(files) == 300
    assert calls["find"] == 1 and calls["info(str)"] <= 5 and calls["open"] == 0


def test_file_pattern_is_a_glob_relative_to_the_dataset(tmp_path):
    write(tmp_path, {"d/a.parquet": "1", "d/x/b.parquet": "2", "d/x/c.json": "3", "d/x/y/d.parquet": "4"})
    assert [f.relative for f in listing(str(tmp_path), "d", file_pattern="**/*.parquet")] == [
        "d/a.parquet", "d/x/b.parquet", "d/x/y/d.parquet"]
    assert [f.relative for f in listing(str(tmp_path), "d", file_pattern="*.parquet")] == ["d/a.parquet"]
    assert [f.relative for f in listing(str(tmp_path), "d", file_pattern="x/?.*")] == ["d/x/b.parquet", "d/x/c.json"]
    assert [f.relative for f in listing(str(tmp_path), "d", file_pattern="x/[!b]*")] == ["d/x/c.json"]


DAYS = {f"events/2026/11/{d:02d}/part-{d}.json": str(d) for d in (19, 20, 21, 22, 23)}


def test_date_range_selects_partition_directories(tmp_path):
    # Given daily partitions 2026/11/19 .. 2026/11/23 and files without a date
    write(tmp_path, {**DAYS, "events/README": "no date", "events/2026/11/31/bad": "not a day"})
    # When a backfill window [21, 23) is listed
    files = listing(str(tmp_path), "events", partition_date_format="%Y/%m/%d",
                    date_range_start="2026-11-21", date_range_end="2026-11-23")
    # Then exactly the days 21 and 22 are selected (start inclusive, end exclusive)
    assert [f.relative for f in files] == ["events/2026/11/21/part-21.json", "events/2026/11/22/part-22.json"]


def test_date_range_with_times_and_time_zones(tmp_path):
    write(tmp_path, {**DAYS, "hourly/2026-11-21/05/x": "5", "hourly/2026-11-21/06/x": "6"})
    # tz-aware: 2026-11-21T01:00+02:00 is 2026-11-20T23:00Z, so day 21 (00:00Z) is inside, day 20 is not
    files = listing(str(tmp_path), "events", partition_date_format="%Y/%m/%d",
                    date_range_start="2026-11-21T01:00:00+02:00", date_range_end="2026-11-22T00:00:00Z")
    assert [f.relative for f in files] == ["events/2026/11/21/part-21.json"]
    hourly = listing(str(tmp_path), "hourly", partition_date_format="%Y-%m-%d/%H",
                     date_range_start="2026-11-21T05:00:00", date_range_end="2026-11-21T06:00:00")
    assert [f.relative for f in hourly] == ["hourly/2026-11-21/05/x"]


def test_date_found_in_dataset_names_and_in_key_value_directories(tmp_path):
    write(tmp_path, {"2026/11/21/a": "1", "2026/11/22/b": "2", "t/dt=2026-11-21/c": "3", "t/dt=2026-11-22/d": "4"})
    by_day = listing(str(tmp_path), "*/*/*", partition_date_format="%Y/%m/%d",
                     date_range_start="2026-11-21", date_range_end="2026-11-22")
    assert [f.relative for f in by_day] == ["2026/11/21/a"]
    hive = listing(str(tmp_path), "t", partition_date_format="%Y-%m-%d",
                   date_range_start="2026-11-22", date_range_end="2026-11-23")
    assert [f.relative for f in hive] == ["t/dt=2026-11-22/d"]


def test_converters_destination_names(tmp_path):
    write(tmp_path, {"d/a.csv.gz": "1", "d/b.log.bz2": "2", "d/c.xz": "3", "d/e.zst": "4", "d/plain.txt": "5",
                     "d/bundle.tar.gz": "6", "d/other.tgz": "7"})
    files = {f.relative: f for f in listing(str(tmp_path), "d", converters="decompress")}
    assert {r: (f.destination, f.converters) for r, f in files.items()} == {
        "d/a.csv.gz": ("d/a.csv", ("gunzip",)), "d/b.log.bz2": ("d/b.log", ("bunzip2",)),
        "d/c.xz": ("d/c", ("unxz",)), "d/e.zst": ("d/e", ("unzstd",)), "d/plain.txt": ("d/plain.txt", ()),
        "d/bundle.tar.gz": ("d/bundle.tar", ("gunzip",)), "d/other.tgz": ("d/other.tar", ("gunzip",)),
    }
    untar = {f.relative: f for f in listing(str(tmp_path), "d", converters="gunzip,untar")}
    assert untar["d/bundle.tar.gz"].destination == "d/bundle" and untar["d/other.tgz"].destination == "d/other"
    entries = {f.relative: f for f in listing(str(tmp_path), "d", converters="untar,decompress")}
    assert (entries["d/bundle.tar.gz"].destination, entries["d/bundle.tar.gz"].converters) == (
        "d/bundle", ("untar", "decompress"))  # decompress applies to the archive's entries, by their names


@pytest.mark.parametrize("name,converters,expected", [
    ("a.tar", ["untar"], "a"),
    ("a.tar.gz", ["untar"], "a"),
    ("a.tgz", ["untar"], "a"),
    ("a.csv", ["encrypt"], "a.csv.enc"),
    ("a.csv.gz", ["gunzip", "encrypt"], "a.csv.enc"),
    ("a.csv.gz.enc", ["decrypt", "decompress"], "a.csv"),
    ("a.csv", ["decrypt"], "a.csv"),
    ("dir/a.csv.gz", ["gunzip"], "dir/a.csv"),
    ("a.bz2", ["gunzip"], "a.bz2"),
    ("a.tar.bz2", ["decompress", "untar"], "a"),
    ("logs.tar", ["untar", "decompress"], "logs"),  # after untar, converters act on the entries
    ("b.tgz", ["untar", "encrypt"], "b"),
])
def test_destination_name(name, converters, expected):
    assert destination_name(name, converters)[0] == expected
    assert destination_name(name, converters)[0] == destination_for(name, converters)  # the copier's rules
    assert name.rsplit("/", 1)[-1] in source_name_candidates(expected.rsplit("/", 1)[-1], converters)


def test_sidecar_checksums_are_read_and_not_copied(tmp_path):
    md5 = hashlib.md5(b"payload").hexdigest()
    sha = hashlib.sha256(b"other").hexdigest()
    write(tmp_path, {"d/a.bin": "payload", "d/a.bin.md5": f"{md5}  a.bin\n", "d/b.bin": "other",
                     "d/b.bin.sha256": sha.upper(), "d/c.bin": "none", "d/orphan.md5": md5})
    files = {f.relative: f for f in listing(str(tmp_path), "d", checksum_sidecar="true")}
    assert sorted(files) == ["d/a.bin", "d/b.bin", "d/c.bin"]
    assert files["d/a.bin"].checksum == f"md5:{md5}"
    assert files["d/b.bin"].checksum == f"sha256:{sha}"
    assert files["d/c.bin"].checksum is None
    # without checksum.sidecar, .md5 files are ordinary files
    assert "d/a.bin.md5" in {f.relative for f in listing(str(tmp_path), "d")}


def test_a_bad_sidecar_names_itself(tmp_path):
    write(tmp_path, {"d/a.bin": "x", "d/a.bin.md5": "not-a-digest"})
    with pytest.raises(ValueError, match=r"a\.bin\.md5.*md5 hex digest"):
        listing(str(tmp_path), "d", checksum_sidecar="true")


def test_filesystem_checksums_only_when_they_are_content_hashes():
    hexd = "5d41402abc4b2a76b9719d911017c592"
    assert _fs_checksum({"ETag": f'"{hexd}"'}) == f"md5:{hexd}"
    assert _fs_checksum({"ETag": f'"{hexd}-3"'}) is None  # multipart
    assert _fs_checksum({"ETag": f'"{hexd}"', "ServerSideEncryption": "aws:kms"}) is None
    assert _fs_checksum({"md5Hash": "XUFAKrxLKna5cZ2REBfFkg=="}) == f"md5:{hexd}"  # GCS, base64
    assert _fs_checksum({"mtime": 1.0, "mode": 0o100644}) is None  # local disk has none


def test_ids_are_stable_and_change_with_mtime_and_size(tmp_path):
    write(tmp_path, {"d/a": "one"})
    os.utime(tmp_path / "d/a", (1_700_000_000, 1_700_000_000))
    first, again = listing(str(tmp_path), "d")[0], listing(str(tmp_path), "d")[0]
    assert first.id == again.id and len(first.id) == 32
    os.utime(tmp_path / "d/a", (1_700_000_100, 1_700_000_100))
    touched = listing(str(tmp_path), "d")[0]
    assert touched.id != first.id
    write(tmp_path, {"d/a": "one!"})
    os.utime(tmp_path / "d/a", (1_700_000_100, 1_700_000_100))
    grown = listing(str(tmp_path), "d")[0]
    assert grown.id not in (first.id, touched.id)


def test_permissions_and_owner_from_the_listing(tmp_path):
    write(tmp_path, {"d/a": "x"})
    os.chmod(tmp_path / "d/a", 0o640)
    f = listing(str(tmp_path), "d", preserve="perm,owner,group")[0]
    st = os.stat(tmp_path / "d/a")
    assert f.mode == 0o640
    assert f.owner == pwd.getpwuid(st.st_uid).pw_name and f.group == grp.getgrgid(st.st_gid).gr_name
    assert f.preserve == ("perm", "owner", "group")


def test_symlinks_are_followed_and_directory_links_skipped(tmp_path):
    write(tmp_path, {"real/data.bin": "12345", "d/x": "1"})
    os.symlink(tmp_path / "real/data.bin", tmp_path / "d/link.bin")
    os.symlink(tmp_path / "real", tmp_path / "d/dirlink")
    files = {f.relative: f for f in listing(str(tmp_path), "d")}
    assert sorted(files) == ["d/link.bin", "d/x"]
    assert files["d/link.bin"].size == 5


def test_source_and_target_overlap(tmp_path):
    # Given a target inside the source, with its control directory
    write(tmp_path, {"a/x": "1", "mirror/a/x": "1", "mirror/_copycat/distcp/wal/w.json": "{}"})
    fs, root = filesystem(str(tmp_path), None)
    cfg = parse_copy_config({"name": "t", "source.url": str(tmp_path), "target.url": f"file://{tmp_path}/mirror"})
    # Then its own output is never listed as source
    assert [f.relative for f in list_files(fs, root, Dataset("", root), cfg)] == ["a/x"]
    # and with target == source, only the control directory is left out
    same = parse_copy_config({"name": "t", "source.url": str(tmp_path), "target.url": str(tmp_path)})
    write(tmp_path, {"_copycat/distcp/manifest/m.json": "{}"})
    assert [f.relative for f in list_files(fs, root, Dataset("", root), same)] == ["a/x", "mirror/a/x"]


def test_a_single_file_source(tmp_path):
    write(tmp_path, {"only.csv.gz": "x"})
    fs, root = filesystem(str(tmp_path / "only.csv.gz"), None)
    files = [f for d in find_datasets(fs, root, "") for f in list_files(fs, root, d, config(converters="gunzip"))]
    assert [(f.relative, f.destination, f.dataset) for f in files] == [("only.csv.gz", "only.csv", "")]


def test_listing_on_memory_filesystem(memory_root):
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{memory_root}/d/2026/11/21/a.json.gz", b"abc")
    fs.pipe(f"{memory_root}/d/2026/11/22/b.json.gz", b"defg")
    files = listing(f"memory://{memory_root}", "d", converters="decompress", partition_date_format="%Y/%m/%d",
                    date_range_start="2026-11-22", date_range_end="2026-11-23")
    assert [(f.relative, f.destination, f.size, f.mode) for f in files] == [
        ("d/2026/11/22/b.json.gz", "d/2026/11/22/b.json", 4, None)]
    assert files[0].origin == f"{memory_root}/d/2026/11/22/b.json.gz" and files[0].mtime > 1_700_000_000


# ---- one glob dialect: file.pattern matches what fs.glob matches for dataset.pattern

_NAMES = ["a", "b", "ab", "x.csv", "y.json", "a.csv"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.sets(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=3).map("/".join), min_size=1, max_size=12),
       pattern=st.lists(st.sampled_from(["*", "?", "**", "a", "*.csv", "[ab]*", "[!a]*", "x.*", "b?", "a**", "[!b]"]),
                        min_size=1, max_size=3).map("/".join))
def test_file_pattern_selects_exactly_what_fsspec_glob_finds(tree, pattern):
    """Generated trees and patterns: glob_matcher (file.pattern) and fs.glob (dataset.pattern) agree on every
    file, so one config has one dialect."""
    files = {p for p in tree if not any(q.startswith(p + "/") for q in tree)}  # a name is a file or a directory
    fs = fsspec.filesystem("memory")
    root = f"/glob-{uuid.uuid4().hex}"
    for p in files:
        fs.pipe(f"{root}/{p}", b"x")
    try:
        try:
            expected = {p[len(root) + 1:] for p in fs.glob(f"{root}/{pattern}") if fs.isfile(p)}
        except ValueError:  # '**' inside a component: refused by both
            with pytest.raises(ValueError):
                glob_matcher(pattern)
            return
        match = glob_matcher(pattern)
        got = set(files) if match is None else {p for p in files if match(p)}
        assert got == expected, (pattern, sorted(files))
    finally:
        fs.rm(root, recursive=True)


def test_a_pattern_that_is_not_a_glob_fails_the_config_naming_the_key():
    with pytest.raises(ConfigException) as e:
        parse_copy_config({"name": "t", "source.url": "/src", "target.url": "/elsewhere",
                           "file.pattern": "logs/a**b", "dataset.pattern": "t**"})
    assert "file.pattern" in str(e.value) and "dataset.pattern" in str(e.value)
    assert "entire path component" in str(e.value)


@pytest.mark.parametrize("url", ["ftp://mirror:Kx7pQ2mZ9w/cdSecret987@127.0.0.1:9/data",
                                 "sftp://mirror:Kx7pQ2mZ9w/cdSecret987@127.0.0.1:9/data"])
@pytest.mark.parametrize("options", [None, "{not json"])
def test_a_url_password_holding_a_slash_is_never_shown_in_a_filesystem_error(url, options):
    """A raw '/' ends urlsplit's host early: the password's head stands where the port should. Neither the
    URL shown nor the parser's message may hold any part of the password."""
    from airflow_copycat.distcp import listing

    with pytest.raises(ValueError) as raised:
        listing.filesystem(url, options)
    text = str(raised.value)
    assert "Kx7pQ2mZ9w" not in text and "cdSecret987" not in text
    assert "mirror:[hidden]@127.0.0.1:9/data" in text
