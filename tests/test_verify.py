"""Checksums in scans and pfs verify: real trees, the real Dask cluster, a subprocess CLI run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pyarrow.parquet as pq
import pytest
import xxhash

from dask_pfs.compare.verify import verify
from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.sql import connect
from dask_pfs.scan.api import scan
from operators.checksum import checksum_local
from tests.conftest import make_tree, run_pfs

MiB = 1 << 20


def flip_byte_keep_mtime(path, offset: int) -> None:
    s = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))
    os.utime(path, ns=(s.st_atime_ns, s.st_mtime_ns))
    assert os.stat(path).st_size == s.st_size and os.stat(path).st_mtime_ns == s.st_mtime_ns


def checksums(manifest) -> dict[str, str]:
    m = open_manifest(manifest)
    return dict(connect(m).execute(f"SELECT path, checksum FROM {m.relation_sql()} WHERE type = 'file'").fetchall())


def test_scan_checksum_column_all_algorithms(tmp_path, dask_client):
    data = os.urandom(9 * MiB + 3)  # more than one read buffer
    tree = make_tree(tmp_path / "t", {"big.bin": data, "d/small.txt": "hello", "d/empty": b"", "link": "->big.bin"})
    for algo, want in (
        ("xxh3", xxhash.xxh3_128(data).hexdigest()),
        ("sha256", hashlib.sha256(data).hexdigest()),
        ("md5", hashlib.md5(data).hexdigest()),
    ):
        out = tmp_path / f"m-{algo}"
        result = scan(tree, out, dask_client, checksum=algo)
        assert result.errors == 0
        sums = checksums(out)
        assert sums["big.bin"] == f"{algo}:{want}"
        assert sums["d/small.txt"] == checksum_local(tree / "d/small.txt", algo)
        assert set(sums) == {"big.bin", "d/small.txt", "d/empty"}  # the symlink is not hashed
    with pytest.raises(PfsError, match="unknown checksum"):
        scan(tree, tmp_path / "bad", dask_client, checksum="crc32")


def test_verify_finds_flipped_byte_with_same_size_and_mtime(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"big.bin": os.urandom(12 * MiB), "a/b.txt": "b", "a/c.txt": "c", "e": None})
    dst = tmp_path / "dst"
    shutil.copytree(src, dst, symlinks=True)
    for rel in ("big.bin", "a/b.txt", "a/c.txt"):
        shutil.copystat(src / rel, dst / rel)
    same = verify(src, dst, client=dask_client)
    assert same.exit_code == 0 and same.counts["same"] == 5 and same.report is None
    flip_byte_keep_mtime(dst / "big.bin", 7 * MiB + 123)
    (dst / "a/c.txt").unlink()
    (dst / "a/extra.txt").write_text("x")
    report = tmp_path / "report.parquet"
    result = verify(src, dst, client=dask_client, report=report)
    assert result.exit_code == 1
    assert {k: result.counts[k] for k in ("missing", "extra", "different")} == {
        "missing": 1,
        "extra": 1,
        "different": 1,
    }
    rows = {r["path"]: r for r in pq.read_table(report).to_pylist()}
    assert {p: r["status"] for p, r in rows.items()} == {
        "a/c.txt": "missing",
        "a/extra.txt": "extra",
        "big.bin": "different",
    }
    big = rows["big.bin"]
    assert big["src_size"] == big["dst_size"] and big["src_mtime"] == big["dst_mtime"]
    assert big["src_checksum"] != big["dst_checksum"]


def test_verify_manifests_without_checksums_get_a_checksum_pass(tmp_path, dask_client):
    src = make_tree(tmp_path / "src", {"x.jpg": b"J" * 5000, "y.txt": "t", "sub/z.jpg": b"Z" * 100})
    dst = tmp_path / "dst"
    shutil.copytree(src, dst)
    scan(src, tmp_path / "ms", dask_client)  # no checksums
    scan(dst, tmp_path / "md", dask_client)
    flip_byte_keep_mtime(dst / "sub/z.jpg", 50)
    (dst / "y.txt").write_text("changed but not selected")
    result = verify(
        src_manifest=tmp_path / "ms", dst_manifest=tmp_path / "md", where="name LIKE '%.jpg'", client=dask_client
    )
    assert result.exit_code == 1 and result.samples == [("sub/z.jpg", "different")]
    assert result.counts["same"] == 1
    # a manifest for one side and a live tree for the other
    one = verify(src_manifest=tmp_path / "ms", dst=dst, where="name = 'x.jpg'", client=dask_client)
    assert one.exit_code == 0 and one.counts["same"] == 1


def test_cli_verify_exit_codes_and_json(tmp_path):
    src = make_tree(tmp_path / "src", {"f.bin": os.urandom(100_000), "g.txt": "g"})
    dst = tmp_path / "dst"
    shutil.copytree(src, dst)
    flip_byte_keep_mtime(dst / "f.bin", 99_999)
    proc = run_pfs("verify", src, dst, "--workers", "1", "--json", "--report", tmp_path / "r.parquet")
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["counts"]["different"] == 1 and summary["samples"] == [["f.bin", "different"]]
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 1
    refused = run_pfs("verify", src, "--workers", "1")
    assert refused.returncode == 2 and "DST" in refused.stderr
