"""The comparator of the differential tests: two trees, entry by entry, every attribute ``cp -a`` and
``rsync -aHAX`` keep.

:func:`snapshot` walks a tree without recursion and without ever building a path longer than one name
(every entry is reached relative to its parent's open descriptor, so depths past 1,000 and paths past
4,096 bytes are walked like any other) and records per entry: type, permission bits (set-id and sticky
included), owner and group, size, a digest of the bytes (files) or the target (symlinks), the device
number (device nodes), the mtime in nanoseconds (directories and symlinks too), whether the file's
allocated blocks cover less than its size (sparse), its extended attributes and POSIX ACLs (names and
values), and its hard-link group (the sorted names sharing its inode).  :func:`differences` lists what
differs, one line per entry and attribute, so a failing example reads as a diff.

The root is an entry too (path ``b""``): ``cp -a SRC DST`` and ``rsync -a SRC/ DST`` give it the source
root's mode, owner and times.  Access times are not compared (reading changes them).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat as st
from collections.abc import Iterable

KINDS = {
    st.S_IFREG: "file",
    st.S_IFDIR: "directory",
    st.S_IFLNK: "symlink",
    st.S_IFIFO: "fifo",
    st.S_IFSOCK: "socket",
    st.S_IFCHR: "char",
    st.S_IFBLK: "block",
}
ATTRS = ("type", "mode", "uid", "gid", "size", "data", "rdev", "mtime_ns", "sparse", "xattrs", "links")
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _xattrs(dfd: int, name: bytes) -> tuple[tuple[bytes, bytes], ...]:
    """Every extended attribute (``system.posix_acl_*`` included) of ``name`` in ``dfd``, not following it;
    by a ``/proc/self/fd`` path, so the length of the entry's own path never matters."""
    where = b"/proc/self/fd/%d/%s" % (dfd, name) if name else b"/proc/self/fd/%d" % dfd
    try:
        names = os.listxattr(where, follow_symlinks=False)
    except OSError:
        return ()
    out = []
    for attr in sorted(names):
        with contextlib.suppress(OSError):
            out.append((os.fsencode(attr), os.getxattr(where, attr, follow_symlinks=False)))
    return tuple(out)


def _digest(dfd: int, name: bytes) -> str:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    h = hashlib.sha256()
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def _entry(dfd: int, name: bytes, s: os.stat_result) -> dict:
    kind = KINDS.get(st.S_IFMT(s.st_mode), "other")
    row: dict = {
        "type": kind,
        "mode": oct(st.S_IMODE(s.st_mode)),
        "uid": s.st_uid,
        "gid": s.st_gid,
        "mtime_ns": s.st_mtime_ns,
        "xattrs": _xattrs(dfd, name),
    }
    if kind == "file":
        row["size"] = s.st_size
        row["data"] = _digest(dfd, name)
        row["sparse"] = s.st_blocks * 512 < s.st_size
    elif kind == "symlink":
        row["data"] = os.readlink(name, dir_fd=dfd)
        del row["mode"]  # a symlink's own mode is always 0777 on Linux
    elif kind in ("char", "block"):
        row["rdev"] = s.st_rdev
    return row


def snapshot(root: str | bytes) -> dict[bytes, dict]:
    """Every entry of the tree at ``root`` (the root itself as ``b""``): {relative path bytes: attributes}."""
    top = os.open(os.fsencode(root), DIR_FLAGS)
    out: dict[bytes, dict] = {}
    inodes: dict[tuple[int, int], list[bytes]] = {}
    try:
        s = os.fstat(top)
        out[b""] = _entry(top, b"", s) | {"xattrs": _xattrs(top, b"")}
        stack: list[tuple[int, bytes]] = [(top, b"")]
        opened: list[int] = []
        while stack:
            dfd, rel = stack.pop()
            subdirs = []
            for name in sorted(os.fsencode(n) for n in os.listdir(dfd)):
                path = rel + b"/" + name if rel else name
                s = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                out[path] = _entry(dfd, name, s)
                if st.S_ISDIR(s.st_mode):
                    subdirs.append((name, path))
                elif s.st_nlink > 1:
                    inodes.setdefault((s.st_dev, s.st_ino), []).append(path)
            for name, path in subdirs:
                child = os.open(name, DIR_FLAGS, dir_fd=dfd)
                opened.append(child)
                stack.append((child, path))
            if dfd != top:
                os.close(dfd)
                opened.remove(dfd)
    finally:
        os.close(top)
        for fd in opened:
            with contextlib.suppress(OSError):
                os.close(fd)
    for names in inodes.values():
        group = tuple(sorted(names))
        for path in names:
            out[path]["links"] = group
    return out


def differences(
    expected: dict[bytes, dict], got: dict[bytes, dict], ignore: Iterable[str] = (), symlink_times: bool = True
) -> list[str]:
    """One line per entry missing, extra, or differing in an attribute (``ignore``: attributes not compared;
    ``symlink_times=False``: a symlink's mtime not compared, as rsync 3.5 recreating one does not keep it)."""
    skip = set(ignore)
    lines = []
    for path in sorted(expected.keys() | got.keys()):
        a, b = expected.get(path), got.get(path)
        if b is None:
            lines.append(f"{path!r}: missing ({a and a['type']})")
        elif a is None:
            lines.append(f"{path!r}: extra ({b['type']})")
        else:
            for attr in ATTRS:
                if attr == "mtime_ns" and not symlink_times and a["type"] == "symlink":
                    continue
                if attr not in skip and a.get(attr) != b.get(attr):
                    lines.append(f"{path!r}: {attr} expected {a.get(attr)!r}, got {b.get(attr)!r}")
    return lines


__all__ = ["ATTRS", "differences", "snapshot"]
