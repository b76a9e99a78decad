"""A manifest bound to the tree it was scanned from: the root's identity in its marker, checked before use.

A manifest names its root by path (``_manifest.json``'s ``root``), and a path can come to name
another tree: a copy made with ``cp -a`` (same names, sizes and times), a remount, a marker edited
by whoever can write the manifest directory.  rm would then delete the other tree's files, since
every row still matches what is there.  So the marker records the root's identity when it is
written (``operators.root_identity``: inode, file system type and id, the mount's source for a mount
point, and the device with the host it means something on), and rm, cp and sync with ``--manifest``
compare it with the live root before acting (:func:`check_root`), from any host that mounts the tree:

* another tree (the identity differs): refused, exit 2, unless ``allow_other_root``;
* a relative root: refused always (it would resolve against whatever the current directory is);
* a marker without identity (an older pfs, or a root that did not exist yet): rm refuses unless
  ``allow_other_root``; cp and sync warn (they read that tree; rm deletes in it).

What this proves, and what not (docs/reliability.md, threat model): that the live root is the very
directory the scan saw (the same inode on the same file system), not that the manifest is honest.
Whoever can write the marker can also write the identity of another tree into it; against that,
keep manifests where only the job's owner can write.  Object-store roots have no identity: skipped.

A job that reads the files of a manifest's rows (the checksum pass of verify and sync) also pins the
root to that identity (:func:`pinned_root`): another tree renamed into its place later is not read.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from dask_pfs.errors import PfsError
from dask_pfs.options import named
from dask_pfs.places import local_path, local_text
from operators.root_identity import RootIdentity, identify

OPTION = named("allow_other_root", True)


def _local_path(root: str) -> str | None:
    """The local path of ``root``, or None for a root on another file system (object store, sftp)."""
    return local_path(root)  # the one reading of a place (dask_pfs.urls)


def root_identity(root: Any) -> dict[str, Any] | None:
    """A local root's identity as it is now, for a marker (:meth:`RootIdentity.as_dict`; None: not
    local, or not there)."""
    path = _local_path(str(root)) if root else None
    if path is None:
        return None
    try:
        return identify(path).as_dict()
    except OSError:
        return None


def check_root(info: dict, url: str, root: str | None = None, *, destructive: bool, allow_other: bool = False) -> None:
    """Refuse (PfsError, exit 2) to act on ``root`` (default: the marker's) with the manifest ``url``
    when the live root is not the tree its marker recorded (see the module docstring)."""
    marked = info.get("root")
    target = root or marked
    if not target or _local_path(str(target)) is None:
        return
    written = local_text(str(marked)) if marked else None  # as the marker says it, before any resolving
    if written is not None and not os.path.isabs(written):
        raise PfsError(f"{url}: its marker names a relative root ({marked!r}); refusing (a root must be absolute)")
    recorded = info.get("root_identity")
    if recorded is None:
        if allow_other:
            return
        message = (
            f"{url}: its marker records no root identity (an older pfs, or edited), so {target} cannot be "
            f"checked to be the tree that was scanned"
        )
        if destructive:
            raise PfsError(f"{message}; rescan it, or pass ", OPTION)
        warnings.warn(message, stacklevel=3)
        return
    path = _local_path(str(target))
    try:
        live = identify(path or "")
    except OSError:
        return  # not there: the job reports the missing root in its own words
    expected = RootIdentity.from_dict(recorded)
    why = expected.differs(live) if expected is not None else None
    if why and not allow_other:
        raise PfsError(
            f"{target} is not the tree manifest {url} was scanned from ({why}: another copy, a remount, another "
            "volume or an edited marker); rescan it, or pass ",
            OPTION,
        )


def pinned_root(info: dict, url: str, root: str, allow_other: bool = False) -> RootIdentity | None:
    """The identity a job reading files below the local ``root`` pins it to, so that every host fails
    every file (ESTALE) of another directory renamed into its place while the job runs.

    ``root`` the tree the manifest ``url`` was scanned from: the identity its marker recorded, and
    another tree there already is refused (:func:`check_root`, exit 2); rows read below another root
    (or a marker without identity, or ``allow_other``): that root's identity now, as the job starts.
    None: not local.
    """
    path = _local_path(str(root))
    if path is None:
        return None
    marked, recorded = info.get("root"), info.get("root_identity")
    scanned = _local_path(str(marked)) if marked else None
    if recorded and not allow_other and scanned is not None and os.path.normpath(scanned) == os.path.normpath(path):
        check_root(info, url, root, destructive=False)
        pinned = RootIdentity.from_dict(recorded)
        return pinned.for_job() if pinned is not None else None
    try:
        return identify(path).for_job()
    except OSError:
        return None  # not there: the job reports the missing root in its own words


__all__ = ["OPTION", "check_root", "pinned_root", "root_identity"]
