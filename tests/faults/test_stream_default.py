"""``pfs cp`` streams (copies while the scan walks) into a new local destination, except from or to a
network or FUSE mount, where the whole scan then the copy measured 16-32 % faster (issue 30,
docs/performance.md): a real latfs mount here, as the storage faults use."""

from __future__ import annotations

from dask_pfs import copy
from operators import mounts

from ..conftest import make_balanced, tree_digest
from .test_storage_gone import _mounted  # latfs_binary: a fixture of tests/faults/conftest.py


def test_cp_on_a_fuse_mount_copies_after_the_scan_unless_asked(tmp_path, latfs_binary):
    fs = _mounted(tmp_path, latfs_binary, rtt_us=1000)
    mounts._mounts.cache_clear()  # this process read the mount table before the mount (earlier tests)
    make_balanced(tmp_path / "local", dirs=2, files_per_dir=5, size=100)
    want = tree_digest(fs.backing)
    try:
        phased = copy(f"{fs.mnt}/", tmp_path / "phased")
        streamed = copy(f"{fs.mnt}/", tmp_path / "streamed", stream=True)
        into = copy(f"{tmp_path / 'local'}/", fs.mnt / "into")  # local -> FUSE: phased too
    finally:
        fs.unmount()
    assert phased.exit_code == 0 and phased.counts["files"] == 800 and phased.streamed == 0
    assert streamed.exit_code == 0 and streamed.streamed == 800
    assert into.exit_code == 0 and into.counts["files"] == 10 and into.streamed == 0
    assert tree_digest(fs.backing / "into") == tree_digest(tmp_path / "local")
    assert tree_digest(tmp_path / "phased") == want == tree_digest(tmp_path / "streamed")


def test_cp_between_local_disks_streams_by_default(tmp_path):
    make_balanced(tmp_path / "src", dirs=3, files_per_dir=4, size=100)
    res = copy(f"{tmp_path / 'src'}/", tmp_path / "dst")
    assert res.exit_code == 0 and res.streamed == 12
    assert tree_digest(tmp_path / "dst") == tree_digest(tmp_path / "src")
