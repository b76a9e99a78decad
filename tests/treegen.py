"""Trees for the differential tests: a Hypothesis strategy of tree specs, and :func:`build` making one.

A spec is a list of :class:`Node`: each names its parent (an earlier directory, or the root), has a name
(bytes: non-UTF-8, newline, backslash, 255 bytes, names like pfs's own temp and journal files), a kind
(directory, file, sparse file, symlink, FIFO, socket, character device, or a hard link to an earlier
non-directory of any kind), a mode (set-id, sticky, read-only directories), an owner, an mtime in
nanoseconds (before 1970, after 2262 where the file system keeps it), extended attributes and an
access ACL.  :func:`build` creates the entries, then sets metadata deepest first (a directory's mtime
after everything in it; modes after owners, since chown clears set-id bits).
"""

from __future__ import annotations

import os
import stat as st
import struct
from dataclasses import dataclass, field

from hypothesis import strategies as hs

KINDS = ("directory", "file", "sparse", "symlink", "fifo", "socket", "char", "link")
OWNERS = (0, 1000, 65534)
# mtimes: before 1970, nanoseconds, a whole second, and past 2262 (2**63 ns; ext4 keeps up to 2446)
TIMES = (-86_400_000_000_123, 1, 1_700_000_000_123_456_789, 1_000_000_000_000_000_000, 10_000_000_000_000_000_001)
SPECIAL_NAMES = (
    b"n" * 255,
    b"\xfe\xff",
    b"new\nline",
    b"back\\slash",
    b".x.pfs-tmp-0123456789abcdef",  # like a temp file of a pfs copy
    b".pfs-journal-cp",  # like a journal
    b"-rf",
    b" ",
)


@dataclass
class Node:
    parent: int  # index of an earlier directory node, or -1 for the root
    name: bytes
    kind: str
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    mtime_ns: int = TIMES[2]
    data: bytes = b""
    target: int = 0  # symlink: an index into TARGETS; link: an earlier node (the first non-directory at or before)
    xattrs: dict[bytes, bytes] = field(default_factory=dict)
    acl: bool = False


TARGETS = (b"nowhere", b"../..", b"/etc/passwd", b"\xfe", b"a/b/c", b".")

PFS_LIKE = (b".x.pfs-tmp-0123456789abcdef", b".pfs-journal-cp")
plain = hs.binary(min_size=1, max_size=12).map(lambda b: b.replace(b"/", b"_").replace(b"\x00", b"0"))
plain = plain.filter(lambda b: b not in (b".", b"..") and b"pfs-tmp" not in b and not b.startswith(b".pfs-journal-"))


def names(own_names: bool = True) -> hs.SearchStrategy[bytes]:
    """Entry names; ``own_names=False``: none like pfs's temp and journal names."""
    special = SPECIAL_NAMES if own_names else tuple(n for n in SPECIAL_NAMES if n not in PFS_LIKE)
    return hs.one_of(hs.sampled_from(special), plain)


@hs.composite
def nodes(draw: hs.DrawFn, max_nodes: int = 12, kinds: tuple[str, ...] = KINDS, own_names: bool = True) -> list[Node]:
    """A tree spec of up to ``max_nodes`` entries (names unique per directory; ``own_names``: see :func:`names`)."""
    count = draw(hs.integers(1, max_nodes))
    out: list[Node] = []
    taken: set[tuple[int, bytes]] = set()
    for _ in range(count):
        dirs = [-1] + [i for i, n in enumerate(out) if n.kind == "directory"]
        parent = draw(hs.sampled_from(dirs))
        name = draw(names(own_names))
        if (parent, name) in taken:
            continue
        taken.add((parent, name))
        kind = draw(hs.sampled_from(kinds))
        others = [i for i, n in enumerate(out) if n.kind not in ("directory", "link")]
        if kind == "link" and not others:
            kind = "file"
        node = Node(parent, name, kind)
        node.uid, node.gid = draw(hs.sampled_from(OWNERS)), draw(hs.sampled_from(OWNERS))
        node.mtime_ns = draw(hs.sampled_from(TIMES))
        if kind == "directory":
            node.mode = draw(hs.sampled_from((0o755, 0o700, 0o1777, 0o2755, 0o555)))
        elif kind in ("file", "sparse"):
            node.mode = draw(hs.sampled_from((0o644, 0o600, 0o4755, 0o2711, 0o444, 0o000)))
            node.data = draw(hs.binary(max_size=64))
        elif kind in ("fifo", "socket", "char"):
            node.mode = draw(hs.sampled_from((0o644, 0o600, 0o666)))
        elif kind == "symlink":
            node.target = draw(hs.integers(0, len(TARGETS) - 1))
        elif kind == "link":
            node.target = draw(hs.sampled_from(others))
        if kind in ("directory", "file", "sparse") and draw(hs.booleans()):  # user.* only on these (kernel)
            node.xattrs = {b"user.k": draw(hs.binary(max_size=8)), **draw(hs.sampled_from(({}, {b"user.\xfe": b"v"})))}
        if kind in ("directory", "file") and draw(hs.booleans()):
            node.acl = True
        out.append(node)
    return out


def acl_value(mode: int, uid: int = 1000) -> bytes:
    """A ``system.posix_acl_access`` value (the kernel's binary form): the owner, group and other bits of
    ``mode``, a named user ``uid`` with read, and the mask."""
    entries = [
        (0x01, (mode >> 6) & 7, 0xFFFFFFFF),  # ACL_USER_OBJ
        (0x02, 4, uid),  # ACL_USER
        (0x04, (mode >> 3) & 7, 0xFFFFFFFF),  # ACL_GROUP_OBJ
        (0x10, 7, 0xFFFFFFFF),  # ACL_MASK
        (0x20, mode & 7, 0xFFFFFFFF),  # ACL_OTHER
    ]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def build(root: str, spec: list[Node]) -> None:
    """Create ``spec`` below the (existing) directory ``root``."""
    base = os.fsencode(root)
    paths: list[bytes] = []
    for node in spec:
        parent = base if node.parent < 0 else paths[node.parent]
        path = parent + b"/" + node.name
        paths.append(path)
        if node.kind == "directory":
            os.mkdir(path, 0o700)
        elif node.kind in ("file", "sparse"):
            with open(path, "wb") as f:
                if node.kind == "sparse":
                    f.seek(1 << 20)
                f.write(node.data)
                if node.kind == "sparse":
                    f.truncate((2 << 20) + len(node.data))
        elif node.kind == "symlink":
            os.symlink(TARGETS[node.target], path)
        elif node.kind == "fifo":
            os.mkfifo(path, 0o600)
        elif node.kind == "socket":
            os.mknod(path, st.S_IFSOCK | 0o600)
        elif node.kind == "char":
            os.mknod(path, st.S_IFCHR | 0o600, os.makedev(1, 3))
        elif node.kind == "link":
            os.link(paths[node.target], path, follow_symlinks=False)
    for node, path in zip(spec, paths, strict=True):
        if node.kind == "link":
            continue
        for key, value in node.xattrs.items():
            os.setxattr(path, key, value, follow_symlinks=False)
    order = sorted(range(len(spec)), key=lambda i: -paths[i].count(b"/"))
    for i in order:
        node, path = spec[i], paths[i]
        if node.kind == "link":
            continue
        os.chown(path, node.uid, node.gid, follow_symlinks=False)
        if node.kind != "symlink":
            os.chmod(path, node.mode)
            if node.acl:
                os.setxattr(path, "system.posix_acl_access", acl_value(node.mode))
        os.utime(path, ns=(node.mtime_ns, node.mtime_ns), follow_symlinks=False)
    os.utime(base, ns=(TIMES[2], TIMES[2]))


__all__ = ["KINDS", "Node", "acl_value", "build", "nodes"]
