"""A root's identity across hosts (operators.root_identity): the same tree seen through another host's
mount (another ``st_dev``) is accepted, and that host's own (device, inode) goes to the compiled core;
another tree, file system or mounted volume is refused; one host still compares the device.

Another host is an identity whose ``host`` is not this process's (what a worker on another machine
gets from the driver); tests/test_multinode.py runs the same across real network-namespace hosts.
"""

from __future__ import annotations

import dataclasses
import errno
import os

import pytest

from dask_pfs.errors import PfsError
from dask_pfs.manifests.root import check_root as check_manifest_root
from dask_pfs.manifests.root import root_identity
from operators.checksum import checksum_local_files
from operators.remove.backends import LocalRemover
from operators.remove.tasks import RemoveSpec
from operators.root_identity import RootChangedError, RootIdentity, check_root, host_pin, identify, job_pin, mount_of

from .conftest import make_tree

TREE = {"d/f": "hello", "h": "yy"}


def elsewhere(ident: RootIdentity, dev_delta: int = 1000) -> RootIdentity:
    """``ident`` as a driver on another host pinned it: its own device number for the same tree."""
    return dataclasses.replace(ident, dev=ident.dev + dev_delta, host="another-boot/4:1").for_job()


def test_identity_names_the_mount(tmp_path):
    ident = identify(str(tmp_path))
    s = os.stat(tmp_path)
    assert (ident.ino, ident.dev, ident.fsid) == (s.st_ino, s.st_dev, os.statvfs(tmp_path).f_fsid)
    with open("/proc/self/mounts") as f:
        types = {line.split()[1]: line.split()[2] for line in f}
    point, fstype, _ = mount_of(str(tmp_path), s.st_dev) or ("", "", "")
    assert types[point] == fstype == ident.fstype
    assert ident.source is None  # not a mount point: its inode says which directory it is
    assert identify("/proc").source == "proc"  # a mount point: the source says which volume


def test_the_same_tree_through_another_hosts_mount_is_accepted_and_pinned_here(tmp_path):
    tree = make_tree(tmp_path / "t", TREE)
    job = elsewhere(identify(str(tree)))
    assert not job.same_host
    s = os.stat(tree)
    assert check_root(str(tree), job) == (s.st_dev, s.st_ino)  # not refused for its device
    assert host_pin(str(tree), job) == (s.st_dev, s.st_ino)  # the core gets this host's device
    sums = checksum_local_files(tree, [b"h"], root_id=job)
    assert sums[0][0], sums
    # the host pinned its mount at its first look: a directory renamed into the root's place since
    # is refused by the core (ESTALE), as on one host
    os.rename(tree, tmp_path / "was")
    make_tree(tmp_path / "t", TREE)
    sums = checksum_local_files(tree, [b"h"], root_id=job)
    assert not sums[0][0] and os.strerror(errno.ESTALE) in sums[0][1], sums
    with pytest.raises(RootChangedError, match="inode"):
        check_root(str(tree), job)


def test_another_tree_is_refused_at_a_hosts_first_task(tmp_path):
    """A worker whose host sees another tree at the path (swapped before its first task, another volume
    mounted there) refuses the task: nothing is removed."""
    tree = make_tree(tmp_path / "t", TREE)
    spec = RemoveSpec(protocol="file", root=str(tree))
    job = elsewhere(identify(str(tree)))
    os.rename(tree, tmp_path / "was")
    make_tree(tmp_path / "t", TREE)
    with pytest.raises(RootChangedError, match=r"no longer the file system the job started on \(inode"):
        LocalRemover(dataclasses.replace(spec, root_id=job)).unlink_chunk([("h", None, "file", None, None)])
    assert (tree / "h").exists()
    for field, value, why in [
        ("fstype", "nfs4", "file system type"),
        ("fsid", 12345, "file system id"),
        ("source", "nas:/other", None),  # compared only where the root is a mount point
    ]:
        other = dataclasses.replace(job, **{field: value})
        assert (other.differs(identify(str(tmp_path / "was"))) or "").startswith(why or "-") == bool(why)
    mounted = dataclasses.replace(identify("/proc"), host="another-boot/4:1")
    assert "mounted from" in (dataclasses.replace(mounted, source="nas:/other").differs(identify("/proc")) or "")


def test_one_host_still_compares_the_device(tmp_path):
    tree = make_tree(tmp_path / "t", TREE)
    here = job_pin(str(tree), True)
    assert here is not None and here.same_host and host_pin(str(tree), here) == (here.dev, here.ino)
    remounted = dataclasses.replace(here, dev=here.dev + 1)
    with pytest.raises(RootChangedError, match=f"device {here.dev + 1}, now {here.dev}"):
        check_root(str(tree), remounted)
    # a marker of an older pfs (no host): its device is compared, as before
    old = {"dev": here.dev + 1, "ino": here.ino, "fsid": here.fsid}
    assert RootIdentity.from_dict(old).differs(identify(str(tree))) == f"device {here.dev + 1}, now {here.dev}"


def test_a_manifest_marker_written_on_another_host_is_accepted(tmp_path):
    tree = make_tree(tmp_path / "t", TREE)
    info = {"root": str(tree), "root_identity": elsewhere(identify(str(tree))).as_dict()}
    assert "token" not in info["root_identity"]
    check_manifest_root(info, "m", destructive=True)  # same tree, another host's device: fine
    info["root_identity"]["ino"] += 1
    with pytest.raises(PfsError, match=r"not the tree manifest m was scanned from \(inode"):
        check_manifest_root(info, "m", destructive=True)
    assert root_identity(str(tree)) == identify(str(tree)).as_dict()


def test_rows_scanned_on_another_host_carry_the_jobs_device(tmp_path):
    """A manifest's (dev, ino) groups hard links across rows that different hosts scanned: rows of the
    root's file system get the job's device number, whichever host's mount they were read through."""
    from operators.scan.task import ScanSpec, scan_chunk
    from operators.scan.walk import Budget

    tree = make_tree(tmp_path / "t", TREE)
    os.link(tree / "h", tree / "d" / "h2")
    job = elsewhere(identify(str(tree)))
    (tmp_path / "out").mkdir()
    spec = ScanSpec("file", str(tree), str(tmp_path / "out"), root_id=job)
    result = scan_chunk(spec, [(b"", None)], "0000000", Budget(10**6, 60))
    import pyarrow.parquet as pq

    rows = [
        r
        for part in result.parts
        for r in pq.read_table(tmp_path / "out" / part, columns=["path", "dev", "ino"]).to_pylist()
    ]
    assert {r["dev"] for r in rows} == {job.dev} != {os.stat(tree).st_dev}
    linked = [r for r in rows if r["path"] in ("h", "d/h2")]
    assert len(linked) == 2 and linked[0]["ino"] == linked[1]["ino"]
