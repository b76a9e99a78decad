"""S3 object metadata as ``user.*`` attributes (``operators.objmeta``): scan ``--xattrs`` of objects, cp
local -> S3 -> local and S3 -> S3 keeping them (whole files and multipart/ranged ones), what S3 cannot
keep as counted failures, and verify/sync ``--xattrs`` across a local tree and its S3 copy.

A real moto S3 server on loopback, real temp trees with user xattrs, the real Dask cluster.
"""

from __future__ import annotations

import base64
import errno
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import xxhash

from dask_pfs.compare.sync import sync
from dask_pfs.compare.verify import verify
from dask_pfs.copy import copy
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.sql import connect
from dask_pfs.scan.api import scan
from operators import objmeta
from tests.conftest import can_xattr, have, make_tree, run_pfs

KiB, MiB = 1 << 10, 1 << 20
BIN = bytes(range(256))  # binary: stored as base64:
MPU = {"split_size": 5 * MiB, "part_size": 5 * MiB, "chunk_files": 4}  # the big file: 2 parts / 2 ranges


@pytest.fixture
def tree(tmp_path) -> Path:
    """``f`` with a text and a binary user attribute, ``big`` (two ranges) with one, ``plain`` with none."""
    if not (can_xattr(tmp_path) and have("getfattr")):
        pytest.skip("needs user xattrs on the temp file system and getfattr (scripts/ensure-tools.sh)")
    src = make_tree(tmp_path / "src", {"f": "hello", "d/plain": "p", "big": os.urandom(6 * MiB)})
    os.setxattr(src / "f", "user.a", b"1")
    os.setxattr(src / "f", "user.bin", BIN)
    os.setxattr(src / "big", "user.kind", b"large file")
    return src


def getfattr(root: Path) -> str:
    """``getfattr -R -d`` (``user.*``) of a tree, paths relative, in hex: equal trees print the same."""
    out = subprocess.run(["getfattr", "-R", "-d", "-e", "hex", "."], cwd=root, capture_output=True, check=True)
    return out.stdout.decode()


def rows(manifest) -> dict[str, dict]:
    m = open_manifest(manifest)
    cur = connect(m).execute(f"SELECT path, xattrs, has_acl, error FROM {m.relation_sql()}")
    return {r[0]: {"xattrs": r[1], "has_acl": r[2], "error": r[3]} for r in cur.fetchall()}


def test_values_map_to_text_and_back():
    for value in (b"1", b"large file", BIN, b"", b" edge", b"edge ", b"base64:AAAA", "ünï".encode(), b"a\nb"):
        text = objmeta.encode(value)
        assert text.isascii() and text.isprintable() and text == text.strip()
        assert objmeta.decode(text) == value
    assert objmeta.encode(b"plain text") == "plain text"
    assert objmeta.encode(BIN) == "base64:" + base64.b64encode(BIN).decode()
    assert objmeta.decode("base64:not base64!") == b"base64:not base64!"  # set by someone else: as it is
    meta, refused = objmeta.to_metadata({b"user.ok": b"1", b"user.Upper": b"2", b"security.x": b"3"})
    assert meta == {"ok": "1"}
    assert [what for what, _ in refused] == [
        b"xattr security.x on s3",
        b"xattr user.Upper on s3 (names are lower-case ASCII)",
    ]
    meta, refused = objmeta.to_metadata({b"user.a": b"1", b"user.big": b"x" * 2100})
    assert meta == {} and refused == [(b"xattrs on s3 (user metadata over 2 KB)", errno.E2BIG)]
    assert objmeta.to_metadata({b"user.a": b"x" * 2047})[0] == {"a": "x" * 2047}  # 2,048 bytes: taken


def test_scan_xattrs_records_object_metadata(tmp_path, dask_client, s3_server, s3fs_fs):
    s3fs_fs.makedirs("meta-scan", exist_ok=True)
    s3fs_fs.pipe("meta-scan/t/o", b"data", Metadata={"a": "1", "bin": objmeta.encode(BIN)})
    s3fs_fs.pipe("meta-scan/t/sub/none", b"x")
    out = tmp_path / "m"
    res = scan("s3://meta-scan/t", out, dask_client, storage_options=s3_server, xattrs=True)
    assert res.exit_code == 0
    got = rows(out)
    o = {x["name"]: x for x in got["o"]["xattrs"]}
    assert set(o) == {"user.a", "user.bin"}
    assert o["user.a"]["value"] == b"1" and o["user.bin"]["value"] == BIN
    assert o["user.bin"]["digest"] == f"xxh3:{xxhash.xxh3_128(BIN).hexdigest()}"  # as the core digests local ones
    assert got["sub"]["xattrs"] == [] and got["sub"]["has_acl"] is False  # as a local directory without any
    assert got["o"]["has_acl"] is False and got["sub/none"]["xattrs"] == [] and got["sub/none"]["error"] is None
    one = scan("s3://meta-scan/t/o", tmp_path / "one", dask_client, storage_options=s3_server, xattrs=True)
    assert one.exit_code == 0
    assert {x["name"] for x in rows(tmp_path / "one")["o"]["xattrs"]} == {"user.a", "user.bin"}


def test_cp_local_s3_local_keeps_user_attributes(tree, tmp_path, dask_client, s3_server, s3fs_fs):
    s3fs_fs.makedirs("meta-cp", exist_ok=True)
    up = copy(f"{tree}/", "s3://meta-cp/t", client=dask_client, dst_storage_options=s3_server, **MPU)
    assert up.exit_code == 0, up.failure_samples
    assert objmeta.head(s3fs_fs, "meta-cp/t/f") == {"a": "1", "bin": objmeta.encode(BIN)}
    assert objmeta.head(s3fs_fs, "meta-cp/t/big") == {"kind": "large file"}  # the multipart upload's
    assert objmeta.head(s3fs_fs, "meta-cp/t/d/plain") == {}
    s3 = copy("s3://meta-cp/t/", "s3://meta-cp/u", client=dask_client, storage_options=s3_server,
              dst_storage_options=s3_server, **MPU)  # fmt: skip
    assert s3.exit_code == 0, s3.failure_samples
    assert objmeta.head(s3fs_fs, "meta-cp/u/f") == objmeta.head(s3fs_fs, "meta-cp/t/f")
    assert objmeta.head(s3fs_fs, "meta-cp/u/big") == {"kind": "large file"}  # server-side multipart copy
    back = tmp_path / "back"
    down = copy("s3://meta-cp/u/", back, client=dask_client, storage_options=s3_server, **MPU)
    assert down.exit_code == 0, down.failure_samples
    assert getfattr(back) == getfattr(tree) and "user.bin=0x00010203" in getfattr(back)
    bare = copy("s3://meta-cp/u/", tmp_path / "bare", client=dask_client, storage_options=s3_server, xattrs=False)
    assert bare.exit_code == 0 and getfattr(tmp_path / "bare") == ""  # --no-xattrs
    none = copy(f"{tree}/", "s3://meta-cp/n", client=dask_client, dst_storage_options=s3_server, xattrs=False, **MPU)
    assert none.exit_code == 0 and objmeta.head(s3fs_fs, "meta-cp/n/f") == {}


def test_attributes_s3_cannot_keep_are_counted_failures(tree, dask_client, s3_server, s3fs_fs):
    os.setxattr(tree / "d" / "plain", "user.Upper", b"x")
    os.setxattr(tree / "big", "user.Big", b"x")  # the multipart upload's refusal
    (tree / "huge").write_bytes(b"h")
    os.setxattr(tree / "huge", "user.h", b"y" * 3000)  # over S3's 2 KB: the object gets no metadata
    os.setxattr(tree / "f", "trusted.t", b"x") if os.geteuid() == 0 else None
    s3fs_fs.makedirs("meta-refuse", exist_ok=True)
    res = copy(f"{tree}/", "s3://meta-refuse/t", client=dask_client, dst_storage_options=s3_server, **MPU)
    assert res.exit_code == 1
    text = " ".join(str(s) for s in res.failure_samples)
    assert "xattr user.Upper on s3 (names are lower-case ASCII)" in text
    assert "xattr user.Big on s3" in text
    assert "xattrs on s3 (user metadata over 2 KB)" in text
    assert res.failed == (4 if os.geteuid() == 0 else 3)
    assert s3fs_fs.cat_file("meta-refuse/t/huge") == b"h" and objmeta.head(s3fs_fs, "meta-refuse/t/huge") == {}
    assert objmeta.head(s3fs_fs, "meta-refuse/t/f") == {"a": "1", "bin": objmeta.encode(BIN)}  # the rest is kept
    assert objmeta.head(s3fs_fs, "meta-refuse/t/big") == {"kind": "large file"}
    assert copy(f"{tree}/", "s3://meta-refuse/u", client=dask_client, dst_storage_options=s3_server,
                xattrs=False, **MPU).exit_code == 0  # fmt: skip


def test_verify_and_sync_xattrs_between_local_and_s3(tree, tmp_path, dask_client, s3_server, s3fs_fs):
    s3fs_fs.makedirs("meta-verify", exist_ok=True)
    assert copy(f"{tree}/", "s3://meta-verify/t", client=dask_client, dst_storage_options=s3_server,
                **MPU).exit_code == 0  # fmt: skip
    kw = {"client": dask_client, "dst_storage_options": s3_server, "xattrs": True}
    ok = verify(tree, "s3://meta-verify/t", **kw)
    assert ok.failed == 0, ok.samples
    bucket_key = {"Bucket": "meta-verify", "Key": "t/f"}
    s3fs_fs.call_s3("copy_object", CopySource=bucket_key, **bucket_key, MetadataDirective="REPLACE",
                    Metadata={"a": "2", "bin": objmeta.encode(BIN)})  # fmt: skip
    bad = verify(tree, "s3://meta-verify/t", **kw)
    assert bad.failed == 1 and bad.samples == [("f", "xattrs")]
    assert verify(tree, "s3://meta-verify/t", client=dask_client, dst_storage_options=s3_server).failed == 0
    fixed = sync(tree, "s3://meta-verify/t", client=dask_client, dst_storage_options=s3_server, split_size=5 * MiB)
    assert fixed.exit_code == 0
    assert objmeta.head(s3fs_fs, "meta-verify/t/f")["a"] == "1"  # the changed attribute was copied again
    assert verify(tree, "s3://meta-verify/t", **kw).failed == 0


def test_cli_scan_and_diff_xattrs_of_s3(tree, tmp_path, s3_server, s3fs_fs):
    """The CLI end to end (botocore takes the endpoint from ``AWS_ENDPOINT_URL``): scan --xattrs of S3 exits 0
    and diff --xattrs lists the object whose metadata changed."""
    env = {"AWS_ENDPOINT_URL": s3_server["client_kwargs"]["endpoint_url"]}
    s3fs_fs.makedirs("meta-cli", exist_ok=True)
    s3fs_fs.pipe("meta-cli/t/o", b"data", Metadata={"a": "1"})
    scanned = run_pfs("scan", "--xattrs", "s3://meta-cli/t", "-o", tmp_path / "m", env=env)
    assert scanned.returncode == 0, scanned.stdout + scanned.stderr
    assert rows(tmp_path / "m")["o"]["xattrs"][0]["name"] == "user.a"
    assert run_pfs("diff", "--xattrs", tmp_path / "m", "s3://meta-cli/t", env=env).returncode == 0
    bucket_key = {"Bucket": "meta-cli", "Key": "t/o"}
    s3fs_fs.call_s3(
        "copy_object", CopySource=bucket_key, **bucket_key, MetadataDirective="REPLACE", Metadata={"a": "2"}
    )
    changed = run_pfs("diff", "--xattrs", "-o", tmp_path / "d.parquet", tmp_path / "m", "s3://meta-cli/t", env=env)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    (row,) = pq.read_table(tmp_path / "d.parquet").to_pylist()  # a new LastModified too: mtime and xattrs
    assert row["path"] == "o" and "xattrs" in row["what"], row
