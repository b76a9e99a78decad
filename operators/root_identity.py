"""A root's identity that means the same on every host that mounts the tree: the one place that says
whether the directory a host sees at a job's root is the tree the job started on.

Why not ``(st_dev, st_ino)``: ``st_dev`` is a number the local kernel gives each mount, so every
host's mount of one NFS, Lustre, CephFS or GlusterFS volume has its own (and so does every pod's on
another node); a job whose driver pinned its device refused every worker on every other host.  What
the file system itself keeps cluster-wide is compared instead (:meth:`RootIdentity.differs`):

* ``ino``: the root directory's inode number (NFS file ids, Lustre FIDs, CephFS inodes, GlusterFS
  GFIDs: the same on every client);
* ``fstype``: the file system type of the mount holding it (``/proc/self/mountinfo``);
* ``fsid``: ``statvfs().f_fsid`` (cluster-wide on Lustre and CephFS; 0 on NFS and FUSE on every host);
* ``source``: the mount's source (``server:/export``, ``10.201.0.2:vol``), only where the root *is* the
  mount's root directory, whose inode says nothing (every FUSE root is 1, every ext4 root 2);
* ``dev``: compared only between processes on one host (same kernel boot and mount namespace:
  ``host``), where it still tells a remount or another file system mounted there.

A job pins its root on the driver (:func:`job_pin`); each host pins its own mount of the root at its
first task and checks it against the job's identity (:func:`host_pin`), then hands the compiled core
its own ``(device, inode)``, which the core compares every time it opens the root (ESTALE for
another directory renamed into its place).  A root that changed (swapped, unmounted, another volume
mounted there) is refused on every host with :class:`RootChangedError`.  A file system whose inode
numbers differ between clients (sshfs, SMB without ``serverino``) is refused on every host but the
driver's: safe, and the error says so (docs/deploy.md).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from functools import cache
from typing import Any


class RootChangedError(OSError):
    """The root of the job is gone or is no longer the file system the job started on."""


@cache
def this_host() -> str | None:
    """Where ``st_dev`` means one thing: this kernel's boot and this process's mount namespace (network
    namespace hosts share a kernel but not their mounts); None when /proc does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        ns = os.stat("/proc/self/ns/mnt")
    except OSError:
        return None
    return f"{boot}/{ns.st_dev}:{ns.st_ino}"


def _unescape(field: bytes) -> str:
    """A mountinfo field, its octal escapes (``\\040`` for a space) decoded."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i] == 0x5C and len(field[i + 1 : i + 4]) == 3 and field[i + 1 : i + 4].isdigit():
            out.append(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return os.fsdecode(bytes(out))


def _under(path: str, mount_point: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


def mount_of(path: str, dev: int) -> tuple[str, str, str] | None:
    """``(mount point, fstype, source)`` of the mount holding ``path`` (followed), as this process's
    mount table says: the deepest mount point above it, one of ``dev`` preferred (over-mounts come last)."""
    real = os.path.realpath(path)
    best: tuple[str, str, str] | None = None
    best_dev = False
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        pre, _, post = line.partition(b" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        point = _unescape(fields[4])
        if not _under(real, point):
            continue
        major, _, minor = fields[2].partition(b":")
        same_dev = os.makedev(int(major), int(minor)) == dev
        if best is None or (same_dev, len(point)) >= (best_dev, len(best[0])):
            best, best_dev = (point, _unescape(rest[0]), _unescape(rest[1])), same_dev
    return best


@dataclass(frozen=True)
class RootIdentity:
    """What a root is, as one host saw it (see the module docstring for what each field is worth)."""

    ino: int
    dev: int
    fsid: int
    fstype: str | None = None
    source: str | None = None  # the mount's source, when the root is its mount point (else None)
    host: str | None = None  # where ``dev`` is meaningful (:func:`this_host`); None: an older marker
    token: str = ""  # the job that pinned it (:func:`job_pin`): a host's pin is kept per job; never compared

    @property
    def same_host(self) -> bool:
        """Seen from this process's host (so ``dev`` can be compared); an identity of unknown host
        (an older manifest marker) counts as this host's, as it did before identities had one."""
        return self.host is None or self.host == this_host()

    def differs(self, here: RootIdentity) -> str | None:
        """Why ``here`` (a root as this host sees it now) is not this root, or None when it is."""
        if here.ino != self.ino:
            return f"inode {self.ino}, now {here.ino}"
        if self.fstype and here.fstype and here.fstype != self.fstype:
            return f"file system type {self.fstype}, now {here.fstype}"
        if here.fsid != self.fsid:
            return f"file system id {self.fsid:#x}, now {here.fsid:#x}"
        if self.source and here.source and here.source != self.source:
            return f"mounted from {self.source}, now {here.source}"
        if (self.host is None or self.host == here.host) and here.dev != self.dev:
            return f"device {self.dev}, now {here.dev}"
        return None

    def as_dict(self) -> dict[str, Any]:
        """For a manifest's marker (JSON); the job token is not part of what a tree is."""
        d = asdict(self)
        del d["token"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RootIdentity | None:
        """The identity a marker recorded (None: none; an older marker's ``{dev, ino, fsid}`` works)."""
        if not d:
            return None
        return cls(
            ino=int(d["ino"]),
            dev=int(d["dev"]),
            fsid=int(d.get("fsid") or 0),
            fstype=d.get("fstype"),
            source=d.get("source"),
            host=d.get("host"),
        )

    def for_job(self) -> RootIdentity:
        """This identity as a new job's pin (its hosts pin their mounts afresh)."""
        return replace(self, token=uuid.uuid4().hex)


def identify(path: str) -> RootIdentity:
    """``path`` (followed: a root may be a symlink) as this host sees it now; OSError if not there."""
    s, v = os.stat(path), os.statvfs(path)
    mount = mount_of(path, s.st_dev)
    source = mount[2] if mount and os.path.realpath(path) == mount[0] else None
    return RootIdentity(
        ino=s.st_ino,
        dev=s.st_dev,
        fsid=int(v.f_fsid),
        fstype=mount[1] if mount else None,
        source=source,
        host=this_host(),
    )


def job_pin(path: str, local: bool) -> RootIdentity | None:
    """The identity a job pins its root to when it starts (None: not a local root, or not there)."""
    if not local:
        return None
    try:
        return identify(path).for_job()
    except OSError:
        return None


_PINS: OrderedDict[tuple[str, RootIdentity], tuple[int, int]] = OrderedDict()
_PINS_LOCK = threading.Lock()
_MAX_PINS = 256


def _changed(path: str, why: str) -> RootChangedError:
    return RootChangedError(
        f"{path}: the root is no longer the file system the job started on ({why}): was it unmounted?"
    )


def _look(path: str) -> RootIdentity:
    try:
        return identify(path)
    except OSError as exc:
        raise RootChangedError(f"{path}: the root of the job is gone ({exc.strerror}): was it unmounted?") from None


def host_pin(path: str | bytes, job: RootIdentity | None) -> tuple[int, int] | None:
    """This host's ``(device, inode)`` of the job's root, for the compiled core to compare on every
    open: on the job's own host the job's; elsewhere this host's own mount, looked at (and checked
    against ``job``: :class:`RootChangedError`) at its first task of the job and kept for the rest."""
    if job is None:
        return None
    if job.same_host:
        return job.dev, job.ino
    spath = os.fsdecode(path)
    key = (spath, job)
    with _PINS_LOCK:
        pinned = _PINS.get(key)
    if pinned is None:
        here = _look(spath)
        why = job.differs(here)
        if why:
            raise _changed(spath, why)
        pinned = here.dev, here.ino
        with _PINS_LOCK:
            pinned = _PINS.setdefault(key, pinned)
            while len(_PINS) > _MAX_PINS:
                _PINS.popitem(last=False)
    return pinned


def check_root(path: str, job: RootIdentity | None) -> tuple[int, int] | None:
    """:class:`RootChangedError` unless ``path`` is still the job's root, on this host as it is now
    (a task checks before and after its work: an unmounted root lists as empty); returns this host's
    ``(device, inode)`` of it (None: nothing to check)."""
    if job is None:
        return None
    here = _look(path)
    why = job.differs(here)
    if why is None:
        pinned = host_pin(path, job)  # this host's first look, or the one it kept: a remount since is refused
        if pinned is not None and pinned != (here.dev, here.ino):
            why = f"device {pinned[0]}, now {here.dev}"
    if why:
        raise _changed(path, why)
    return here.dev, here.ino


__all__ = ["RootChangedError", "RootIdentity", "check_root", "host_pin", "identify", "job_pin", "mount_of", "this_host"]
