"""A root directory replaced by another one (renamed into its place) is never worked in.

Between the scan and ``rm``/``cp --manifest``: the manifest's root identity refuses it (exit 2).
After the job started: the job's spec pins the root's identity (``operators.root_identity``; on one
host its (device, inode): ``RemoveSpec.pinned``, ``CopySpec.pinned``, ``root_id=`` of
``checksum_local_files``) and the core opens the root once per call and compares
(``native/core/src/parents.rs``, ``Root::open``): every row fails with ESTALE,
nothing is removed, read or copied in the other tree.
"""

from __future__ import annotations

import errno
import os

import pyarrow.dataset as ds

from dask_pfs import scan
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.root import pinned_root
from operators.checksum import checksum_local_files, checksum_table
from operators.copy.local_destination import LocalDestination
from operators.copy.spec import CopySpec, Entry
from operators.remove.backends import LocalRemover
from operators.remove.tasks import RemoveSpec
from operators.schema import SCHEMA

from ..conftest import make_tree, tree_digest
from .conftest import cli, one_line_error

TREE = {"d/f": "hello", "d/e/g": "x", "h": "yy"}


def swap(tmp_path, tree):
    """Rename ``tree`` away and another directory with the same names into its place."""
    other = make_tree(tmp_path / "other", {"d/f": "other", "d/e/g": "x2", "h": "zz"})
    os.rename(tree, tmp_path / "was")
    os.rename(other, tree)
    return tmp_path / "was"


def test_rm_and_cp_refuse_a_root_replaced_between_scan_and_job(tmp_path, capsys, dask_client, scheduler_address):
    tree = make_tree(tmp_path / "t", TREE)
    scan(tree, tmp_path / "m", dask_client)
    was = swap(tmp_path, tree)
    before, before_was = tree_digest(tree), tree_digest(was)
    code, _, err = cli(capsys, "rm", "--manifest", tmp_path / "m", "-y", "--scheduler", scheduler_address)
    one_line_error(code, err)
    assert "not the tree manifest" in err
    code, _, err = cli(capsys, "cp", "--manifest", tmp_path / "m", tmp_path / "out", "--scheduler", scheduler_address)
    one_line_error(code, err)
    assert not (tmp_path / "out").exists()
    assert tree_digest(tree) == before and tree_digest(was) == before_was


def test_a_root_replaced_after_the_job_started_is_refused_by_the_core(tmp_path):
    tree = make_tree(tmp_path / "t", TREE)
    rm_spec = RemoveSpec(protocol="file", root=str(tree)).pinned()
    cp_spec = CopySpec("file", str(tree), "file", str(tmp_path / "out"), token="t0", check_existing=False).pinned()
    assert rm_spec.root_id and cp_spec.src_root_id  # one host: the core compares (device, inode)
    pins = {(i.dev, i.ino) for i in (rm_spec.root_id, cp_spec.src_root_id)}
    assert pins == {(os.stat(tree).st_dev, os.stat(tree).st_ino)}
    sums = checksum_local_files(tree, [b"h"], root_id=rm_spec.root_id)
    assert sums[0][0], sums  # the same root: read
    was = swap(tmp_path, tree)
    before, before_was = tree_digest(tree), tree_digest(was)

    counts = LocalRemover(rm_spec).unlink_chunk([("d/f", None, "file", None, None), ("h", None, "file", None, None)])
    assert counts.removed_files == 0 and counts.failed == 2, counts
    assert all(os.strerror(errno.ESTALE) in str(p[2]) for p in counts.problems), counts.problems
    counts = LocalRemover(rm_spec).rmdir_chunk([b""], check=True)
    assert counts.removed_dirs == 0 and counts.failed == 1, counts

    (tmp_path / "out").mkdir()
    results = LocalDestination(cp_spec).copy_local([Entry(b"h", "file", 2), Entry(b"d/f", "file", 5)])
    assert all(isinstance(r, OSError) and r.errno == errno.ESTALE for r in results), results
    assert list((tmp_path / "out").iterdir()) == []

    sums = checksum_local_files(tree, [b"h", b"d/f"], root_id=rm_spec.root_id)
    assert [ok for ok, _ in sums] == [False, False] and os.strerror(errno.ESTALE) in sums[0][1], sums
    assert tree_digest(tree) == before and tree_digest(was) == before_was


def test_verify_and_sync_checksums_refuse_a_root_replaced_since_the_scan(
    tmp_path, capsys, dask_client, scheduler_address
):
    """The checksum pass of verify/sync over a manifest scanned without checksums reads the tree it
    was scanned from (its marker's root identity), never another one renamed into its place."""
    tree = make_tree(tmp_path / "t", TREE)
    copy = make_tree(tmp_path / "copy", TREE)
    scan(tree, tmp_path / "m", dask_client)  # no checksums: verify and sync --checksum hash the tree
    sched = ["--scheduler", scheduler_address]
    code, out, err = cli(capsys, "verify", "--src-manifest", tmp_path / "m", copy, *sched)
    assert code == 0, (out, err)  # the same tree: hashed, and the same as its copy
    was = swap(tmp_path, tree)
    before, before_was = tree_digest(tree), tree_digest(was)
    code, out, err = cli(capsys, "verify", "--src-manifest", tmp_path / "m", copy, *sched)
    one_line_error(code, err)
    assert "not the tree manifest" in err and "different" not in out, (out, err)
    dst = tmp_path / "dst"
    code, out, err = cli(capsys, "sync", tree, dst, "--src-manifest", tmp_path / "m", "--checksum", "xxh3", *sched)
    one_line_error(code, err)
    assert "not the tree manifest" in err
    assert not dst.exists() or not any(dst.iterdir())
    # rows read below another root on purpose: that root, as it is when the pass starts
    code, out, err = cli(capsys, "verify", "--src-manifest", tmp_path / "m", was, copy, *sched)
    assert code == 0, (out, err)
    assert tree_digest(tree) == before and tree_digest(was) == before_was


def test_a_root_replaced_during_the_checksum_pass_fails_its_rows(tmp_path, dask_client):
    """``checksum_table`` on a worker with the pinned root: a swap after the pass started fails every
    row (ESTALE, counted) and writes no checksum of the other tree."""
    tree = make_tree(tmp_path / "t", TREE)
    scan(tree, tmp_path / "m", dask_client)
    m = open_manifest(tmp_path / "m")
    pinned = pinned_root(m.info, m.url, str(tree))
    assert pinned and (pinned.dev, pinned.ino) == (os.stat(tree).st_dev, os.stat(tree).st_ino)
    table = ds.dataset(str(tmp_path / "m"), format="parquet").to_table().cast(SCHEMA)
    swap(tmp_path, tree)
    args = ("file", str(tree), {}, table, str(tmp_path / "sums"), "part-sum-0000.parquet", "xxh3", None, pinned)
    (tmp_path / "sums").mkdir()
    files, nbytes, failures = dask_client.submit(checksum_table, *args, pure=False).result()
    assert files == 0 and nbytes == 0 and len(failures) == 3, failures
    assert all(os.strerror(errno.ESTALE) in f for f in failures), failures
    sums = ds.dataset(str(tmp_path / "sums"), format="parquet").to_table(columns=["checksum"]).column(0)
    assert sums.null_count == len(sums)
    # unpinned (what the pass did before): the other tree is hashed as if it were the scanned one
    files, _, failures = checksum_table(*args[:-2], None, None)
    assert files == 3 and not failures
