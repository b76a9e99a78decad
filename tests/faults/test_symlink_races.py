"""Symlink races between a scan and the job that acts on it: a scanned directory swapped for a
symlink to outside the tree, or a symlink planted in the destination.  Nothing outside the tree
may be read into a copy, written, or removed (``rm --manifest``, ``cp``, ``cp --manifest``,
``sync --delete``)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from dask_pfs import scan

from ..conftest import make_balanced, make_tree, run_pfs, tree_digest
from .harness import finish, start_pfs

SECRET = b"outside the tree"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A directory next to the trees, holding names the trees also have."""
    return make_tree(tmp_path / "outside", {"f1": SECRET, "f2": SECRET, "sub/f3": SECRET, "extra": SECRET})


def swap_for_link(directory: Path, target: Path) -> None:
    shutil.rmtree(directory)
    os.symlink(target, directory)


def tree(root: Path) -> Path:
    return make_tree(root, {"keep": b"k", "a/f1": b"1", "a/f2": b"2", "a/sub/f3": b"3", "b/g": b"g"})


def test_rm_manifest_through_a_swapped_directory(tmp_path, outside, dask_client):
    """Swapped before the job: the driver's safety pass refuses the whole job (exit 2, nothing removed)."""
    root = tree(tmp_path / "tree")
    m = tmp_path / "m"
    scan(root, m, client=dask_client)
    swap_for_link(root / "a", outside)
    before, rest = tree_digest(outside), tree_digest(root)
    proc = run_pfs("rm", "--manifest", m, "--yes", "--no-progress")
    assert proc.returncode == 2 and "ancestor 'a' is a symlink" in proc.stderr, proc.stdout + proc.stderr
    assert tree_digest(outside) == before and tree_digest(root) == rest


def swap_once_running(proc, journal_glob: str, directory: Path, target: Path, untouched) -> None:
    """Swap ``directory`` for a link once ``proc`` has journaled a chunk (past every check of the driver).

    The job's whole process group is stopped (SIGSTOP) for the swap, so the test controls where it
    lands: ``untouched()`` must still hold (nothing below ``directory`` acted on yet), or the race was
    lost and the test says so instead of passing on a job that never met the link."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and not glob.glob(journal_glob) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        assert proc.poll() is None, "the job ended before the swap"
        assert untouched(), f"the job acted below {directory.name}/ before the swap"
        swap_for_link(directory, target)
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


def failed_rows(out: str) -> int:
    """The ``N entries failed`` count of a summary (0 when none failed)."""
    found = re.search(r"(\d+) entries failed", out)
    return int(found.group(1)) if found else 0


def test_rm_manifest_while_a_directory_is_swapped(tmp_path, outside, dask_client):
    """Swapped mid-job, after the driver checked every row: each unlink goes through directory
    descriptors opened with O_NOFOLLOW, so the rows below the link fail and nothing outside goes."""
    root = tree(tmp_path / "tree")
    make_balanced(root / "early", dirs=4, files_per_dir=10)  # removed before z/
    os.rename(root / "a", root / "z")
    m = tmp_path / "m"
    scan(root, m, client=dask_client)
    before = tree_digest(outside)
    args = ["rm", "--manifest", m, "--where", "type = 'file'", "--yes", "--no-progress", "--chunk-files", "4"]
    proc = start_pfs(*args, "--max-ops-per-second", "15", log=tmp_path / "rm.log")
    below = [root / "z" / "f1", root / "z" / "f2", root / "z" / "sub" / "f3"]
    swap_once_running(
        proc, f"{m}/.pfs-journal-*/done.jsonl", root / "z", outside, lambda: all(map(os.path.lexists, below))
    )
    rc, out = finish(proc)
    assert rc == 1, out  # the rows below the link failed
    assert "; 3 failed" in out, out
    for rel in ("z/f1", "z/f2", "z/sub/f3"):
        assert f"{rel}: ancestor 'z' is a symlink or no longer a directory: not followed" in out, out
    assert tree_digest(outside) == before
    assert not (root / "keep").exists() and not (root / "b" / "g").exists()  # the rest went


def test_cp_while_a_destination_directory_is_swapped(tmp_path, outside):
    """A destination directory swapped for a link between chunks: nothing is written through it."""
    src = tree(tmp_path / "src")
    make_balanced(src / "early", dirs=4, files_per_dir=10)
    os.rename(src / "a", src / "z")
    dst = tmp_path / "dst"
    make_tree(dst, {"z/f1": b"old", "keep": b"old"})
    before = tree_digest(outside)
    args = ["cp", f"{src}/", dst, "--overwrite", "--no-progress", "--chunk-files", "4"]
    proc = start_pfs(*args, "--max-ops-per-second", "15", log=tmp_path / "cp.log")
    untouched = lambda: (dst / "z" / "f1").read_bytes() == b"old" and not (dst / "z" / "f2").exists()  # noqa: E731
    swap_once_running(proc, f"{dst}/.pfs-journal-*/done.jsonl", dst / "z", outside, untouched)
    rc, out = finish(proc)
    assert rc == 1, out  # every file below the swapped directory failed, by name
    for rel in ("z/f1", "z/f2", "z/sub/f3"):  # opened below z/ with O_NOFOLLOW: not a directory, not written
        assert f"{rel}: NotADirectoryError: [Errno 20]" in out, out
    assert "z: PlantedLinkError: [Errno 20] destination 'z' is a symlink or not a directory; not followed" in out, out
    assert tree_digest(outside) == before
    assert (dst / "keep").read_bytes() == b"k" and (dst / "early").is_dir()  # the rest was copied


def test_cp_manifest_through_a_swapped_source_directory(tmp_path, outside, dask_client):
    root = tree(tmp_path / "tree")
    m = tmp_path / "m"
    scan(root, m, client=dask_client)
    swap_for_link(root / "a", outside)
    dst = tmp_path / "dst"
    proc = run_pfs("cp", "--manifest", m, dst, "--no-progress")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and failed_rows(out) == 5, out  # the link and the rows below it, and only those
    assert "a: NotADirectoryError: the manifest says directory, the source holds a symlink; not made" in out, out
    for rel in ("a/f1", "a/f2", "a/sub", "a/sub/f3"):  # each reached through a/ with O_NOFOLLOW: not a directory
        assert f"{rel}: NotADirectoryError: [Errno 20]" in out, out
    assert (dst / "keep").read_bytes() == b"k" and (dst / "b" / "g").read_bytes() == b"g"
    copied = [p for p, what in tree_digest(dst).items() if what[0] == "file"]
    for rel in copied:  # nothing read through the link into the copy
        assert (dst / os.fsdecode(rel)).read_bytes() != SECRET, rel


@pytest.mark.parametrize("manifest", [False, True], ids=["live", "manifest"])
def test_cp_into_a_destination_with_a_planted_link(tmp_path, outside, dask_client, manifest):
    src = tree(tmp_path / "src")
    dst = tmp_path / "dst"
    make_tree(dst, {"keep": b"old", "b/g": b"old"})
    os.symlink(outside, dst / "a")  # planted: the copy of src/a must not land in outside/
    before = tree_digest(outside)
    if manifest:
        m = tmp_path / "m"
        scan(src, m, client=dask_client)
        proc = run_pfs("cp", "--manifest", m, dst, "--no-progress", "--overwrite")
    else:
        proc = run_pfs("cp", f"{src}/", dst, "--no-progress", "--overwrite")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    for rel in ("a/f1", "a/f2", "a/sub/f3"):  # each file below the link failed, by name
        assert f"{rel}: destination ancestor 'a' is a symlink; not written" in out, out
    assert tree_digest(outside) == before  # nothing written through the link
    assert (dst / "keep").read_bytes() == b"k"  # the rest of the copy went on


def test_sync_delete_through_a_swapped_destination_directory(tmp_path, outside, dask_client):
    src = make_tree(tmp_path / "src", {"keep": b"k"})
    dst = tree(tmp_path / "dst")
    dm = tmp_path / "dm"
    scan(dst, dm, client=dask_client)  # a/ and everything in it are extras
    swap_for_link(dst / "a", outside)
    before = tree_digest(outside)
    rest = tree_digest(dst)
    proc = run_pfs("sync", f"{src}/", dst, "--delete", "--dst-manifest", dm, "--no-progress")
    assert proc.returncode == 2 and "ancestor 'a' is a symlink" in proc.stderr, proc.stdout + proc.stderr
    assert tree_digest(outside) == before and tree_digest(dst) == rest  # refused: nothing removed
