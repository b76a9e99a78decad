"""Trees 1,100 levels deep and paths past ``PATH_MAX`` (issue 42, part C): scan, cp, sync and rm of them
work, as ``cp -a`` and ``rsync -aHAX`` do, with nothing missing and every attribute kept.

A deep tree is compared with what ``cp -a`` makes of it (``tests/treecmp.py``, which walks relative to open
directories).  A tree whose paths pass 4,096 bytes (20 levels of 250-byte names) cannot be: coreutils'
``cp -a`` and rsync fail there ("File name too long"); its copy is compared with the source itself, every
directory carrying an xattr and a nanosecond mtime.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import tempfile

import pytest

from tests.conftest import run_pfs
from tests.treecmp import differences, snapshot

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="owners kept as cp -a keeps them: needs root")

DEEP = 1_100
LONG_LEVELS = 20  # of 250-byte names: paths of 5,000 bytes and more
OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _chain(root: str, levels: int, name_of, fill) -> None:
    """``levels`` directories each inside the previous one (``name_of(i)``), made relative to the one
    above (no full path), ``fill(fd, i)`` adding entries in each; their times set deepest first."""
    fds = [os.open(root, OPEN)]
    try:
        for i in range(levels):
            fill(fds[-1], i)
            os.mkdir(name_of(i), dir_fd=fds[-1])
            fds.append(os.open(name_of(i), OPEN, dir_fd=fds[-1]))
        for i, fd in reversed(list(enumerate(fds))):
            os.utime(fd, ns=(1_600_000_000_000_000_001 + i, 1_600_000_000_000_000_001 + i))
    finally:
        for fd in fds:
            os.close(fd)


def _file(dfd: int, name: bytes, data: bytes, mtime_ns: int, xattr: bytes | None = None) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640, dir_fd=dfd)
    try:
        os.write(fd, data)
        if xattr is not None:
            os.setxattr(fd, "user.k", xattr)
        os.utime(fd, ns=(mtime_ns, mtime_ns))
    finally:
        os.close(fd)


def _deep(root: str) -> None:
    def fill(dfd: int, i: int) -> None:
        _file(dfd, b"f", b"%d" % i, 1_700_000_000_123_456_789 + i)
        if i % 100 == 0:
            os.symlink(b"../f", b"s", dir_fd=dfd)
            os.link(b"f", b"h", src_dir_fd=dfd, dst_dir_fd=dfd)

    os.mkdir(root)
    _chain(root, DEEP, lambda i: b"d", fill)


def _long(root: str) -> None:
    def fill(dfd: int, i: int) -> None:
        _file(dfd, b"f" * 250, b"data %d" % i, 1_700_000_000_123_456_789 + i, xattr=b"v%d" % i)
        os.symlink(b"t" * 200, b"s" * 250, dir_fd=dfd)

    def name(i: int) -> bytes:
        return b"%03d" % i + b"n" * 247

    os.mkdir(root)
    _chain(root, LONG_LEVELS, name, fill)
    fd = os.open(root, OPEN)
    try:  # an xattr on every directory (was: "MetadataRefused: xattr *: File name too long" past 4,096 bytes)
        for i in range(LONG_LEVELS):
            sub = os.open(name(i), OPEN, dir_fd=fd)
            os.close(fd)
            fd = sub
            os.setxattr(fd, "user.d", b"dir %d" % i)
            os.utime(fd, ns=(1_600_000_000_000_000_001 + i + 1,) * 2)  # the xattr moved no mtime; ctime only
    finally:
        os.close(fd)


def _ok(*args) -> str:
    proc = run_pfs(*args)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout


def _deepest(root: str) -> int:
    return max(p.count(b"/") for p in snapshot(root)) + 1


@contextlib.contextmanager
def _scratch(prefix: str):
    """A directory outside pytest's ``tmp_path`` (whose clean-up, ``shutil.rmtree``, recurses and fails 1,000
    levels down, also in another session sharing the base directory), removed by ``rm -rf``."""
    where = tempfile.mkdtemp(prefix=prefix)
    try:
        yield where
    finally:
        subprocess.run(["rm", "-rf", where], check=True)


@pytest.fixture
def scratch():
    with _scratch("pfs-deep-long-") as where:
        yield pathlib.Path(where)


@pytest.fixture(scope="module")
def deep():
    with _scratch("pfs-deep-") as where:
        _deep(os.path.join(where, "src"))
        yield os.path.join(where, "src")


@pytest.fixture(scope="module")
def long():
    with _scratch("pfs-long-") as where:
        _long(os.path.join(where, "src"))
        yield os.path.join(where, "src")


def _empty(root: str) -> None:
    assert os.listdir(root) == [], "rm --manifest left entries of the tree"


def test_deep_tree_scan_cp_sync_rm(deep, scratch):
    """1,100 levels: no RecursionError, nothing missing (was: RecursionError at 1,000, 159 files missing at
    1,100); each command's result compared with ``cp -a``'s (cp, sync) or with the tree (scan, rm)."""
    ref = str(scratch / "ref")
    subprocess.run(["cp", "-a", deep, ref], check=True)
    want = snapshot(ref)
    assert _deepest(ref) >= DEEP
    out, mirror = str(scratch / "out"), str(scratch / "mirror")
    _ok("cp", deep, out)
    assert differences(want, snapshot(out)) == []
    os.mkdir(mirror)
    _ok("sync", deep, mirror, "-y")
    assert differences(want, snapshot(mirror)) == []
    said = _ok("scan", mirror, "-o", scratch / "m", "--json")
    assert f'"entries": {len(want) - 1},' in said, said
    _ok("rm", "--manifest", scratch / "m", "-y")
    _empty(mirror)
    _ok("rm", out, "-y")
    assert not os.path.lexists(out)


def _bottom(root: str) -> int:
    """The deepest directory of the long tree, opened level by level."""
    fd = os.open(root, OPEN)
    for _ in range(LONG_LEVELS):
        sub = os.open(next(n for n in os.listdir(fd) if n.endswith("n")), OPEN, dir_fd=fd)
        os.close(fd)
        fd = sub
    return fd


def test_paths_past_path_max_scan_cp_sync_rm(long, scratch):
    """Paths of more than 4,096 bytes: copied with every xattr and nanosecond mtime, scanned with their xattrs,
    synced after a change at the bottom, removed (was: "MetadataRefused: xattr *: File name too long" on every
    directory, mtimes cut to microseconds)."""
    want = snapshot(long)
    assert max(len(p) for p in want) > 4096
    out = str(scratch / "out")
    _ok("cp", long, out)
    assert differences(want, snapshot(out)) == []
    said = _ok("scan", long, "-o", scratch / "m", "--xattrs", "--json")
    assert f'"entries": {len(want) - 1},' in said and '"errors": 0' in said, said
    fd = _bottom(long)
    try:
        _file(fd, b"new", b"new data", 1_700_000_000_000_000_007, xattr=b"new")
        os.utime(fd, ns=(1_600_000_000_000_000_999,) * 2)
    finally:
        os.close(fd)
    _ok("sync", long, out, "-y")
    assert differences(snapshot(long), snapshot(out)) == []
    _ok("scan", out, "-o", scratch / "m2")
    _ok("rm", "--manifest", scratch / "m2", "-y")
    _empty(out)
    _ok("cp", long, out, "--update")
    _ok("rm", out, "-y")
    assert not os.path.lexists(out)


def test_airflow_watcher_sees_a_change_past_path_max(long, scratch):
    """The Airflow tree watcher (``airflow_pfs.tree_changes``) stats each watched directory relative to its
    parent (was: a full path, "File name too long" read as "unchanged": a landing there was never seen)."""
    from airflow_pfs import tree_changes

    _ok("scan", long, "-o", scratch / "m")
    base = tree_changes.load_baseline(str(scratch / "m"))
    assert base is not None and max(len(rel) for rel in base.dirs) > 4096
    fd = _bottom(long)
    try:
        _file(fd, b"landed", b"x", 1_700_000_000_000_000_000)
    finally:
        os.close(fd)
    changes = tree_changes.find_changes(base)
    assert changes.changed == 1, changes
