"""Is the tree still the one the job started on?  A mount that disappears (``umount -l``, an
automounter timing out, a FUSE daemon restarted) leaves its mount point as an empty directory of
the file system below: a walk there finds nothing and would report an empty tree as complete.

The driver notes the root's identity (device and inode) once; every task checks it before and
after its work and raises :class:`RootChangedError` when the root is gone or is another file
system, so the task fails (it is not journaled) instead of returning an empty listing.
"""

from __future__ import annotations

import os

RootId = tuple[int, int]


class RootChangedError(OSError):
    """The root of the job is gone or is no longer the file system the job started on."""


def root_id(path: str) -> RootId:
    """The (device, inode) of ``path`` followed (a root may be a symlink)."""
    s = os.stat(path)
    return s.st_dev, s.st_ino


def pin(path: str, local: bool) -> RootId | None:
    """The (device, inode) a job pins its root to when it starts, for the core to refuse another
    directory renamed into its place later (None: not a local root, or not there)."""
    if not local:
        return None
    try:
        return root_id(path)
    except OSError:
        return None


def check_root(path: str, expected: RootId | None) -> None:
    """:class:`RootChangedError` unless ``path`` is still ``expected`` (None: nothing to check)."""
    if expected is None:
        return
    try:
        now = root_id(path)
    except OSError as exc:
        raise RootChangedError(f"{path}: the root of the job is gone ({exc.strerror}): was it unmounted?") from None
    if now != expected:
        raise RootChangedError(
            f"{path}: the root is no longer the file system the job started on (device {expected[0]}, "
            f"now {now[0]}): was it unmounted?"
        )
