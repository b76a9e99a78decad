"""cp into a file system that refuses every extended attribute (latfs, a real FUSE mount made here):
each refused attribute is a counted failure naming it, the data is copied all the same, and the failed
run's journal binds its attribute options (tests/test_cp_xattrs.py has the trees and the other cases)."""

from __future__ import annotations

from .. import test_cp_xattrs
from ..conftest import run_pfs
from ..test_cp_xattrs import make_tree, shm  # noqa: F401  (shm: a fixture)
from .harness import Latfs

pytestmark = test_cp_xattrs.pytestmark  # root, setfacl and getfattr


def test_a_destination_refusing_attributes_counts_each_failure(shm, tmp_path, latfs_binary):  # noqa: F811
    src = make_tree(shm / "src")
    (tmp_path / "backing").mkdir()
    fs = Latfs(latfs_binary, tmp_path / "backing", tmp_path / "mnt", tmp_path / "run")
    fs.mount(rtt_us=0)
    dst = fs.mnt
    try:
        log = shm / "failures.parquet"
        got = run_pfs("cp", "--no-owner", "--failure-log", log, "--json", f"{src}/", dst / "d")
        assert got.returncode == 1, got.stderr
        import pyarrow.parquet as pq

        failed = {r["path"]: r["error"] for r in pq.read_table(log).to_pylist()}
        assert "xattr user.bin: Operation not supported" in failed["a"]
        assert "xattr user.kind: Operation not supported" in failed["sparse"]
        assert "xattr user.dir: Operation not supported" in failed["sub"]
        assert "fifo" not in failed and "link" not in failed  # nothing of theirs to refuse
        assert (dst / "d" / "a").read_bytes() == b"alpha"  # copied all the same
        # the failed run kept its journal: resuming it with other attribute options is refused
        other = run_pfs("cp", "--no-owner", "--no-xattrs", "--resume", f"{src}/", dst / "d")
        assert other.returncode == 2 and "with --xattrs true, this run with --xattrs false" in other.stderr
        assert "Traceback" not in other.stderr
        ok = run_pfs("cp", "--no-xattrs", "--no-owner", f"{src}/", dst / "e")
        assert ok.returncode == 0, ok.stderr
    finally:
        fs.unmount()
