"""What a scan asks of a FUSE mount (benchmarks/latfs counts every request by kind): each directory is
opened for reading once and listed; the ancestors a task re-opens on its way down (a new task starts
from the root) cost no OPENDIR/RELEASEDIR pair (``operators.core.dirfd.OPEN_PATH``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import run_pfs
from .harness import Latfs


def _tree(root: Path, fanout: int, depth: int, files: int) -> int:
    """A complete ``fanout``-ary tree ``depth`` levels below ``root``, ``files`` files in each directory;
    returns the number of directories, the root included."""
    level, dirs = [root], [root]
    for _ in range(depth):
        level = [d / f"d{i}" for d in level for i in range(fanout)]
        dirs += level
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        for i in range(files):
            (d / f"f{i}").write_bytes(b"x" * i)
    return len(dirs)


@pytest.fixture
def slow_nas(tmp_path, latfs_binary):
    """A tree of 156 directories on a mount with 50 ms round trips: the scan takes many tasks (each starting from the root)."""
    backing = tmp_path / "backing"
    fs = Latfs(latfs_binary, backing, tmp_path / "mnt", tmp_path / "run")
    fs.dirs = _tree(backing, fanout=5, depth=3, files=3)
    fs.mount(rtt_us=50_000)
    yield fs
    fs.unmount()


def test_scan_opens_each_directory_once(tmp_path, slow_nas):
    before = slow_nas.stats()
    res = run_pfs("scan", slow_nas.mnt, "-o", tmp_path / "m", "--no-progress", "--json", check=True)
    after = slow_nas.stats()
    asked = {k: after[k] - before.get(k, 0) for k in after if k.startswith("op_") and after[k] != before.get(k, 0)}
    assert json.loads(res.stdout)["counts"]["entries"] == slow_nas.dirs - 1 + 3 * slow_nas.dirs  # the root has no row
    # one OPENDIR and one RELEASEDIR per directory listed, whatever the number of tasks that reached it
    assert asked["op_opendir"] == slow_nas.dirs, asked
    assert asked["op_releasedir"] == slow_nas.dirs, asked
    assert not {k for k in asked if k not in ("op_opendir", "op_releasedir", "op_readdir", "op_getattr", "op_statfs")}, (
        asked
    )
