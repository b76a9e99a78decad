"""A manifest part truncated or overwritten on disk: ``rm --manifest``, ``cp --manifest`` and ``query``
exit 2 naming the part, and nothing is removed or copied."""

from __future__ import annotations

import glob
import os

import pytest

from dask_pfs import scan
from dask_pfs.scan.engine import ScanTuning

from ..conftest import make_balanced, run_pfs, tree_digest


def truncate(part: str) -> None:
    os.truncate(part, os.path.getsize(part) * 2 // 3)


def overwrite_middle(part: str) -> None:
    """64 bytes of the middle of the part (a data page) replaced; the footer is intact."""
    size = os.path.getsize(part)
    with open(part, "r+b") as f:
        f.seek(size // 3)
        old = f.read(64)
        f.seek(size // 3)
        f.write(bytes(b ^ 0x5A for b in old))


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, dask_client):
    base = tmp_path_factory.mktemp("damage")
    tree = base / "tree"
    make_balanced(tree, dirs=12, files_per_dir=100, size=10)
    m = base / "m"
    scan(tree, m, client=dask_client, tuning=ScanTuning(max_entries=100, max_dirs_per_task=1))
    return tree, m


@pytest.mark.parametrize("damage", [truncate, overwrite_middle], ids=["truncated", "overwritten"])
def test_damaged_part_refused_by_rm_cp_and_query(tmp_path, scanned, damage):
    tree, pristine = scanned
    m = tmp_path / "m"
    os.system(f"cp -r {pristine} {m}")
    parts = sorted(glob.glob(f"{m}/part-*.parquet"))
    victim = parts[len(parts) // 2]
    damage(victim)
    before = tree_digest(tree)
    name = os.path.basename(victim)
    for args in (
        ["rm", "--manifest", m, "--where", "type = 'file'", "--yes"],
        ["cp", "--manifest", m, tmp_path / "dst"],
        ["query", m, "--where", "size > 0"],
    ):
        proc = run_pfs(*args, "--no-progress" if args[0] != "query" else "--limit=1")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, f"{args[0]}: {out}"
        assert name in out and "damaged manifest part" in out, f"{args[0]}: {out}"
    assert tree_digest(tree) == before  # nothing removed
    assert not (tmp_path / "dst").exists()  # nothing copied


def test_missing_part_refused(tmp_path, scanned):
    tree, pristine = scanned
    m = tmp_path / "m"
    os.system(f"cp -r {pristine} {m}")
    os.unlink(sorted(glob.glob(f"{m}/part-*.parquet"))[0])
    proc = run_pfs("rm", "--manifest", m, "--yes", "--no-progress")
    assert proc.returncode == 2 and "part files where the scan wrote" in proc.stderr, proc.stdout + proc.stderr
    assert len(tree_digest(tree)) == 12 * 102
