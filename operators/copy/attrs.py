"""Owner and extended attributes (ACLs among them) of entries copied outside the native ``cp_files``.

Directories, symlinks, FIFOs and device nodes, and big files written in ranges get them here, with
the core's one implementation (``operators._native.copy_xattrs``, ``native/core/src/xattr.rs``:
which names are copied, layouts only between file systems of one type).  What the destination
refuses is collected and raised once the entry is otherwise complete, as :class:`MetadataRefused`:
a counted, logged failure (``xattr user.foo: Operation not supported``), never silent.
"""

from __future__ import annotations

import os

import operators._native as _native
from operators.copy.spec import CopySpec, Entry


class MetadataRefused(OSError):
    """The entry was copied, but the destination refused some of its metadata."""

    def __init__(self, refused: list[tuple[bytes, int]]) -> None:
        text = "; ".join(f"{os.fsdecode(what)}: {os.strerror(err)}" for what, err in refused)
        super().__init__(text)


def refusals(refused: list[tuple[bytes, int]]) -> None:
    """Raise :class:`MetadataRefused` when anything was refused."""
    if refused:
        raise MetadataRefused(refused)


def chown(spec: CopySpec, e: Entry, do_chown) -> list[tuple[bytes, int]]:
    """``do_chown(uid, gid)`` with the ids a copy of ``e`` gets (none: not called); a refusal is returned."""
    ids = spec.owner_ids(e)
    if ids is None:
        return []
    try:
        do_chown(*ids)
    except OSError as exc:
        return [(b"owner %d:%d" % ids, exc.errno or 0)]
    return []


def copy_xattrs(
    spec: CopySpec, src: int | bytes | None, dst: int | bytes, clean: bool, phase: str = "all"
) -> list[tuple[bytes, int]]:
    """Extended attributes and ACLs of ``src`` (a descriptor, or a path not followed; None: a source
    without them, as fsspec's) onto ``dst``: what was refused.  ``phase``: ``layouts`` onto a file
    before its data, ``rest`` after it, ``all``."""
    if not spec.xattrs or src is None:
        return []
    return _native.copy_xattrs(src, dst, clean, phase)


__all__ = ["MetadataRefused", "chown", "copy_xattrs", "refusals"]
