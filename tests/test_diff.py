"""``pfs diff``: two real scans of a tree before and after real changes, and a manifest against the live tree."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from dask_pfs import PfsError, diff, scan
from operators.scan.prune import Prune
from tests.conftest import make_tree, run_pfs

BEFORE = {
    "same.txt": b"same",
    "grow.txt": b"12345",
    "flip.txt": b"aaaa",  # same size and mtime after, other content: only a checksum sees it
    "gone.txt": b"bye",
    "link": "->same.txt",
    "becomes_dir": b"file",
    "sub/deep.txt": b"deep",
}


def change(root) -> None:
    (root / "grow.txt").write_bytes(b"1234567890")
    st = os.stat(root / "flip.txt")
    (root / "flip.txt").write_bytes(b"bbbb")
    os.utime(root / "flip.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    (root / "gone.txt").unlink()
    (root / "new.txt").write_bytes(b"new!")
    (root / "link").unlink()
    os.symlink("grow.txt", root / "link")
    (root / "becomes_dir").unlink()
    (root / "becomes_dir").mkdir()


@pytest.fixture(scope="module")
def versions(tmp_path_factory, dask_client):
    """A tree scanned before and after ``change`` (shared: only the live-tree test touches the tree)."""
    tmp_path = tmp_path_factory.mktemp("versions")
    root = make_tree(tmp_path / "t", BEFORE)
    scan(root, tmp_path / "v1", dask_client, checksum="xxh3")
    change(root)
    scan(root, tmp_path / "v2", dask_client, checksum="xxh3")
    return root, tmp_path / "v1", tmp_path / "v2"


def test_two_manifests(versions, tmp_path):
    _, v1, v2 = versions
    res = diff(v1, v2, tmp_path / "d.parquet")
    assert res.exit_code == 1
    assert res.counts == {"added": 1, "removed": 1, "changed": 4, "error": 0, "unchanged": 3}  # same.txt, sub/...
    rows = {r["path"]: r for r in pq.read_table(tmp_path / "d.parquet").to_pylist()}
    assert rows["new.txt"]["change"] == "added" and rows["gone.txt"]["change"] == "removed"
    assert {"size", "checksum"} <= set(rows["grow.txt"]["what"])
    assert rows["flip.txt"]["what"] == ["checksum"]  # same size and mtime: the checksum tells
    assert rows["link"]["what"] == ["target"] and rows["becomes_dir"]["what"] == ["type"]
    assert list(rows) == sorted(rows) and "same.txt" not in rows
    assert res.bytes["added"] == 4 and res.bytes["removed"] == 3 and res.bytes["delta"] == 4 - 3 + 5 - 4
    same = diff(v1, v1)
    assert same.exit_code == 0 and same.counts["unchanged"] == 8 and same.output is None
    assert diff(v1, v2, compare_mtime=False).counts["changed"] == 4  # size, checksum, target, type remain


def test_manifest_against_the_live_tree_is_scanned_like_the_manifest(versions, tmp_path, dask_client):
    root, v1, v2 = versions
    res = diff(v2, root, client=dask_client)
    assert res.exit_code == 0, res.samples  # the live scan took v2's checksum: still the same
    (root / "flip.txt").write_bytes(b"cccc")
    os.utime(root / "flip.txt", ns=(0, os.stat(v2 / "_manifest.json").st_mtime_ns))
    res = diff(v1, root, client=dask_client)
    assert res.counts["changed"] == 4 and ("flip.txt", "changed") in res.samples


def test_live_side_reuses_the_manifests_pruning(tmp_path, dask_client):
    root = make_tree(tmp_path / "t", {"keep.txt": b"k", "cache/x.bin": b"x"})
    scan(root, tmp_path / "m", dask_client, prune=Prune(exclude=("cache/",)))
    (root / "cache" / "y.bin").write_bytes(b"y")  # inside the excluded subtree: not a change
    assert diff(tmp_path / "m", root, client=dask_client).exit_code == 0


def test_unreadable_directory_is_trouble_not_a_deletion(tmp_path):
    root = make_tree(tmp_path / "t", {"open/a": b"a", "locked/b": b"b", "locked/c": b"c"})
    run_pfs("scan", root, "-o", tmp_path / "v1", "--workers", "1", check=True)
    os.chmod(root / "locked", 0o000)
    try:
        proc = run_pfs("scan", root, "-o", tmp_path / "v2", "--workers", "1", drop_dac=True)
        assert proc.returncode == 1, proc.stderr
    finally:
        os.chmod(root / "locked", 0o755)
    proc = run_pfs("diff", tmp_path / "v1", tmp_path / "v2", "--json", "-o", tmp_path / "d.parquet")
    assert proc.returncode == 2, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["counts"]["removed"] == 0 and summary["counts"]["error"] == 3  # locked, locked/b, locked/c
    changes = {r["path"]: r["change"] for r in pq.read_table(tmp_path / "d.parquet").to_pylist()}
    assert changes == {"locked": "error", "locked/b": "error", "locked/c": "error"}


def test_cli_exit_codes_and_bad_input(versions, tmp_path):
    _, v1, v2 = versions
    same = run_pfs("diff", v1, v1)
    assert same.returncode == 0 and "0 added" in same.stdout
    different = run_pfs("diff", v1, v2, "--show", "2")
    assert different.returncode == 1 and different.stdout.splitlines()[0].split() == ["changed", "becomes_dir"]
    missing = run_pfs("diff", v1, tmp_path / "nope")
    assert missing.returncode == 2 and "no such manifest or directory" in missing.stderr
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "part-0000000-0000.parquet").write_bytes(b"")
    with pytest.raises(PfsError, match="interrupted"):
        diff(v1, tmp_path / "partial")
