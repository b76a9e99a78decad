"""A symlink planted in a destination never leads a write outside it (issue 27, finding 1).

Whoever can write the destination plants ``dst/a -> /elsewhere``; cp, sync and rm (and their
``--manifest`` forms) run as root.  Nothing outside the destination may change: no new entry, no
mode, owner or time, and the summary counts no directory that was not made.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dask_pfs import copy, remove, scan, sync
from dask_pfs.errors import PfsError

from ..conftest import make_tree, run_pfs
from .conftest import outside_dir, snapshot

SOURCE = {"a/b/f": "x", "a/g": "y", "c/h": "z"}


def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(source tree, destination with ``a`` a link to outside, outside)."""
    src = make_tree(tmp_path / "src", SOURCE)
    out = outside_dir(tmp_path / "outside")
    dst = tmp_path / "dst"
    dst.mkdir()
    os.symlink(out, dst / "a")
    return src, dst, out


def test_cp_cli_the_reported_case(tmp_path):
    """The issue's reproduction, through the real CLI: exit 1, outside untouched, 'a' not counted."""
    src, dst, out = planted(tmp_path)
    before = snapshot(out)
    proc = run_pfs("cp", f"{src}/", dst, "--json", "--no-progress")
    assert proc.returncode == 1, proc.stderr
    assert snapshot(out) == before
    assert os.path.islink(dst / "a")
    assert json.loads(proc.stdout)["counts"]["dirs"] == 1  # c only: never a (a link) nor a/b (below it)
    assert (dst / "c" / "h").read_text() == "z"


def test_cp_manifest_into_a_planted_destination(tmp_path, dask_client):
    src, dst, out = planted(tmp_path)
    scan(src, tmp_path / "m", dask_client)
    before = snapshot(out)
    r = copy(None, dst, dask_client, manifest=tmp_path / "m")
    assert r.exit_code == 1 and r.counts["dirs"] == 1, r.summary()
    failed = {path for path, _ in r.samples}
    assert {"a", "a/b", "a/b/f", "a/g"} <= failed, r.samples
    assert snapshot(out) == before


def test_cp_overwrite_with_a_link_deeper_down(tmp_path, dask_client):
    """A real ``a`` whose child ``b`` is the link: the files and metadata below it stay out."""
    src = make_tree(tmp_path / "src", SOURCE)
    out = outside_dir(tmp_path / "outside")
    dst = tmp_path / "dst"
    (dst / "a").mkdir(parents=True)
    os.symlink(out, dst / "a" / "b")
    before = snapshot(out)
    r = copy(f"{src}/", dst, dask_client, overwrite=True)
    assert r.exit_code == 1
    assert snapshot(out) == before
    assert (dst / "a" / "g").read_text() == "y"


def test_sync_replaces_the_link_and_never_follows_it(tmp_path, dask_client):
    """sync sees the link as a type change: the link itself goes, a real directory comes."""
    src, dst, out = planted(tmp_path)
    before = snapshot(out)
    r = sync(src, dst, dask_client, **work_dir_manifests(tmp_path))
    assert r.exit_code == 0, r.summary()
    assert snapshot(out) == before
    assert not os.path.islink(dst / "a") and (dst / "a" / "b" / "f").read_text() == "x"


def work_dir_manifests(tmp_path: Path) -> dict:
    return {"src_manifest": tmp_path / "sm", "dst_manifest": tmp_path / "dm"}


def test_sync_with_a_manifest_older_than_the_link(tmp_path, dask_client):
    """The destination's manifest was scanned before ``a`` became a link: the plan trusts it, the
    writes do not (exit 1), and deleting below the link is refused outright (exit 2)."""
    src = make_tree(tmp_path / "src", SOURCE)
    dst = make_tree(tmp_path / "dst", {"a/old": "o"})
    scan(dst, tmp_path / "dm", dask_client)
    out = outside_dir(tmp_path / "outside")
    make_tree(out, {"old": "theirs"})
    os.utime(out, (1577836800, 1577836800))
    (dst / "a" / "old").unlink()
    (dst / "a").rmdir()
    os.symlink(out, dst / "a")
    before = snapshot(out)
    r = sync(src, dst, dask_client, dst_manifest=tmp_path / "dm", src_manifest=tmp_path / "sm")
    assert r.exit_code == 1
    assert snapshot(out) == before
    with pytest.raises(PfsError, match="symlink"):
        sync(src, dst, dask_client, dst_manifest=tmp_path / "dm", src_manifest=tmp_path / "sm", delete=True)
    assert snapshot(out) == before


def test_rm_manifest_with_a_directory_swapped_for_a_link(tmp_path, dask_client):
    tree = make_tree(tmp_path / "t", {"a/b/f": "x", "a/g": "y"})
    scan(tree, tmp_path / "m", dask_client)
    out = outside_dir(tmp_path / "outside")
    make_tree(out, {"b/f": "theirs", "g": "theirs"})
    os.utime(out, (1577836800, 1577836800))
    for name in ("b/f", "g"):
        (tree / "a" / name).unlink()
    (tree / "a" / "b").rmdir()
    (tree / "a").rmdir()
    os.symlink(out, tree / "a")
    before = snapshot(out)
    with pytest.raises(PfsError, match="symlink"):
        remove(manifest=tmp_path / "m", client=dask_client)
    assert snapshot(out) == before


def test_rm_tree_unlinks_a_planted_link_not_its_target(tmp_path, dask_client):
    tree = make_tree(tmp_path / "t", {"d/f": "x"})
    out = outside_dir(tmp_path / "outside")
    os.symlink(out, tree / "d" / "link")
    before = snapshot(out)
    r = remove(tree, dask_client)
    assert r.exit_code == 0 and not tree.exists()
    assert snapshot(out) == before
