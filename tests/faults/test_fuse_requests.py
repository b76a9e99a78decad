"""What a scan asks of a FUSE mount (benchmarks/latfs counts every request by kind): each directory is
opened for reading once and listed; the ancestors a task re-opens on its way down (a new task starts
from the root) cost no OPENDIR/RELEASEDIR pair (``operators.core.dirfd.OPEN_PATH``); stats that are
round trips fan out over the core's threads (those the kernel has cached stay on the caller's:
tests/test_core.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO, run_pfs
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
    """156 directories on a mount with 200 ms round trips: the scan takes many tasks, each starting at the root."""
    backing = tmp_path / "backing"
    fs = Latfs(latfs_binary, backing, tmp_path / "mnt", tmp_path / "run")
    fs.dirs = _tree(backing, fanout=5, depth=3, files=3)
    fs.mount(rtt_us=200_000)
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
    listing = ("op_opendir", "op_releasedir", "op_readdir", "op_getattr", "op_statfs")
    assert not {k for k in asked if k not in listing}, asked


def test_stats_that_are_round_trips_fan_out(tmp_path, latfs_binary):
    """With no attribute caching (``--attr-timeout 0``) every ``fstatat`` after the listing is a LOOKUP
    round trip: a step with network width sends its chunks out over the core's pool."""
    backing = tmp_path / "backing"
    backing.mkdir()
    for i in range(128):
        (backing / f"f{i}").write_bytes(b"x" * i)
    fs = Latfs(latfs_binary, backing, tmp_path / "mnt", tmp_path / "run")
    fs.mount(20_000, "--attr-timeout", "0")
    try:
        code = (
            "import os, sys; from operators import _native; s = _native.Sink(); "
            "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY); "
            "c = _native.DirScan(fd, b'').step(s, 65536, 4, 16)[0]; print(c[0], _native.pool_threads())"
        )
        out = subprocess.run([sys.executable, "-c", code, str(fs.mnt)], capture_output=True, text=True, cwd=REPO)
        stats = fs.stats()
    finally:
        fs.unmount()
    assert out.returncode == 0, out.stderr
    entries, threads = map(int, out.stdout.split())
    assert entries == 128 and threads >= 15
    assert stats["inflight_max"] >= 8, stats  # 32 chunks of 4 serial LOOKUPs over 16 threads
