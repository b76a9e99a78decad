"""Guards in the engine: ``max_entries`` of rm and cp (N or N% of the manifest's rows) refuses a
larger selection before anything is done or written; ``open_manifest`` on S3 with explicit options."""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from dask_pfs import PfsError, copy, open_manifest, remove, scan
from dask_pfs.cli import run
from dask_pfs.manifests.caps import Cap
from dask_pfs.manifests.sql import connect
from tests.conftest import make_tree, tree_digest

FILES = {f"d{i % 3}/f{i}.dat": b"x" * i for i in range(10)}  # 10 files in 3 directories: 13 rows


@pytest.fixture
def scanned(tmp_path, dask_client, monkeypatch):
    """A scanned tree and a stale failure log beside its manifest (a refused rm must not touch it)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = make_tree(tmp_path / "src", FILES)
    scan(src, tmp_path / "m", dask_client)
    stale = tmp_path / "m" / "_rm-failures.parquet"
    stale.write_bytes(b"an earlier run's log")
    return src, tmp_path / "m"


def snapshot(tmp_path) -> dict:
    """Every path below tmp_path with its bytes (files) and mtime: any write shows."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(tmp_path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            with contextlib.suppress(IsADirectoryError):
                with open(p, "rb") as f:
                    out[p] = (st.st_mtime_ns, f.read())
                continue
            out[p] = (st.st_mtime_ns, None)
    return out


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cap_parses_counts_and_shares():
    assert Cap.parse(None, "--x") is None and Cap.parse("  ", "--x") is None
    assert Cap.parse(100, "--x") == Cap("--x", count=100) == Cap.parse(" 100 ", "--x")
    assert Cap.parse("5%", "--x") == Cap("--x", percent=5.0) and str(Cap.parse("0.5%", "--x")) == "0.5%"
    for bad in ("abc", "5 %%", "-1", "-2%", True, "1e3"):
        with pytest.raises(PfsError, match="--x"):
            Cap.parse(bad, "--x")
    cap = Cap.parse("10", "--max-entries")
    cap.check(10, 20, "the selection has")  # equal is allowed
    with pytest.raises(PfsError, match="refusing: the selection has 11 entries, more than --max-entries 10"):
        cap.check(11, 20, "the selection has")
    with pytest.raises(PfsError, match=r"3 of 4 manifest rows \(75.0%\), more than --max-entries 50%"):
        Cap.parse("50%", "--max-entries").check(3, 4, "the selection has")


def test_rm_max_entries_refuses_before_anything(tmp_path, scanned, capsys, dask_client):
    src, m = scanned
    before = snapshot(tmp_path)
    for argv, message in (
        (["--where", "type = 'file'", "--max-entries", "9", "-y"], "the selection has 10 entries, more than"),
        (["--where", "type = 'file'", "--max-entries", "50%", "-y"], "10 of 13 manifest rows (76.9%)"),
        (["--where", "type = 'file'", "--max-entries", "9", "--dry-run"], "more than --max-entries 9"),
        (["--max-entries", "12", "-y"], "the selection has 13 entries"),  # the whole manifest
        (["--where", "type = 'file'", "--max-entries", "ten", "-y"], "--max-entries: not a count"),
    ):
        code, out, err = cli(capsys, "rm", "--manifest", m, *argv)
        assert code == 2 and message in err and err.count("\n") == 1, err
        assert snapshot(tmp_path) == before  # no unlink, no journal, no log, not even the stale log removed
    with pytest.raises(PfsError, match="more than max_entries='10%'"):
        remove(manifest=m, where="name LIKE 'f%'", max_entries="10%", client=dask_client)
    with pytest.raises(PfsError, match="max_entries= needs manifest="):
        remove(src, max_entries=5, client=dask_client)
    assert snapshot(tmp_path) == before
    code, out, err = cli(capsys, "rm", "--manifest", m, "--where", "type = 'file'", "--max-entries", "10", "-y",
                         "--json", "--workers", "1")  # fmt: skip
    summary = json.loads(out)
    assert code == 0 and (summary["selected"], summary["removed_files"]) == (10, 10), err
    assert sorted(p.name for p in src.iterdir()) == ["d0", "d1", "d2"] and not any(src.rglob("*.dat"))


def test_cp_max_entries_refuses_before_anything(tmp_path, scanned, capsys, dask_client):
    src, m = scanned
    dst = tmp_path / "dst"
    before = snapshot(tmp_path)
    code, _, err = cli(
        capsys, "cp", "--manifest", m, "--where", "type = 'file' AND size > 2", "--max-entries", "6", dst
    )
    assert code == 2 and "the selection has 7 entries, more than --max-entries 6" in err
    with pytest.raises(PfsError, match=r"13 of 13 manifest rows \(100.0%\), more than max_entries=\'99%\'"):
        copy(None, dst, manifest=m, max_entries="99%", client=dask_client)
    with pytest.raises(PfsError, match="max_entries= needs manifest="):
        copy(src, dst, max_entries=5, client=dask_client)
    assert snapshot(tmp_path) == before and not dst.exists()
    result = copy(None, dst, manifest=m, where="type = 'file'", max_entries="100%", client=dask_client)
    assert (result.selected, result.counts["files"], result.exit_code) == (10, 10, 0)
    assert tree_digest(dst) == tree_digest(src)


def test_open_manifest_on_s3_with_explicit_options(tmp_path, s3_server, s3fs_fs, dask_client, monkeypatch):
    """A manifest written to S3 with explicit credentials is read back (and acted on) with them alone."""
    s3fs_fs.makedirs("guard-bucket", exist_ok=True)
    for key in ("data/keep.txt", "data/x.tmp", "data/sub/y.tmp", "data/sub/z.txt"):
        s3fs_fs.pipe(f"guard-bucket/{key}", key.encode())
    url = "s3://guard-bucket/manifests/m"
    scan("s3://guard-bucket/data", url, dask_client, storage_options=s3_server, out_storage_options=s3_server)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    options = {**s3_server, "skip_instance_cache": True}  # a new client: only these credentials
    m = open_manifest(url, storage_options=options)
    assert m.root == "s3://guard-bucket/data" and m.storage_options == options and not m.is_local
    con = connect(m)  # registered as a pyarrow dataset, then locked
    assert con.execute(f"SELECT count(*) FROM {m.relation_sql()} WHERE name LIKE '%.tmp'").fetchall() == [(2,)]
    with pytest.raises(PfsError, match="more than max_entries=1"):
        remove(manifest=url, where="name LIKE '%.tmp'", max_entries=1, storage_options=options, client=dask_client)
    result = remove(manifest=url, where="name LIKE '%.tmp'", max_entries=2, storage_options=options, client=dask_client)
    assert (result.selected, result.removed_files, result.failed) == (2, 2, 0)
    s3fs_fs.invalidate_cache()
    assert sorted(s3fs_fs.find("guard-bucket/data")) == ["guard-bucket/data/keep.txt", "guard-bucket/data/sub/z.txt"]
