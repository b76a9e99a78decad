"""Which file system a path lives on, from ``/proc/self/mountinfo``: local disk or network storage.

The adaptive concurrency controller starts lower on a local disk (threads only contend for the
GIL there) and higher on network storage, where every metadata call waits a round trip and the
first second of a short job would otherwise be spent climbing to a useful number in flight.
"""

from __future__ import annotations

import functools
import os

# Kernel and FUSE file-system types whose metadata calls are network round trips.
NETWORK_TYPES = frozenset(
    {"nfs", "nfs4", "lustre", "ceph", "cifs", "smb3", "smbfs", "gpfs", "beegfs", "9p", "afs", "glusterfs", "orangefs"}
)


# FUSE file systems that answer from this host's memory (procfs emulation, desktop portals).
LOCAL_FUSE = frozenset({"lxcfs", "portal", "gvfsd-fuse", "fuse-overlayfs", "squashfuse"})


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


@functools.lru_cache(maxsize=1)
def _mounts() -> tuple[tuple[str, str], ...]:
    """(mount point, file-system type), longest mount point first."""
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) >= 5 and right:
                    found.append((_unescape(fields[4]), right.split()[0]))
    except OSError:
        return ()
    return tuple(sorted(found, key=lambda m: len(m[0]), reverse=True))


def fs_type(path: str | bytes) -> str | None:
    """The type of the file system holding ``path`` (``ext4``, ``nfs4``, ``fuse.glusterfs``...), if known."""
    p = os.path.abspath(os.fsdecode(path))
    for mount, kind in _mounts():
        if p == mount or p.startswith(mount.rstrip("/") + "/"):
            return kind
    return None


def is_network(path: str | bytes) -> bool:
    """True when ``path`` is on network storage (NFS, Lustre, CephFS, SMB, GPFS, a FUSE network mount)."""
    return is_network_type(fs_type(path))


def is_network_type(kind: str | None) -> bool:
    """``nfs4``, ``lustre``, ``ceph``, any FUSE file system (``fuse.glusterfs``, ``fuse.sshfs``, ``fuseblk``...)
    yes; ``ext4``, ``xfs``, ``tmpfs`` no.  Every FUSE request is a round trip to a user-space daemon,
    most often one that goes over a network: many operations in flight, never a long core step."""
    kind = kind or ""
    if kind == "fuseblk" or kind.startswith("fuse."):
        return kind[5:] not in LOCAL_FUSE
    return kind in NETWORK_TYPES or kind.startswith(("ceph", "nfs", "sshfs"))
