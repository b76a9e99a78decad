"""Where a copy reads: a local tree (descriptors, kernel-side copies) or one read through fsspec.

One class per kind of storage, chosen once per task from the spec (:func:`source_of`); the
destinations (``copy_local_destination``, ``copy_fsspec_destination``) ask a source for an
entry's fresh metadata, its bytes or a byte range.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat as st
from collections.abc import Iterator
from typing import TYPE_CHECKING

from operators.copy.attrs import refusals
from operators.copy.kernel import copy_range, is_sparse
from operators.copy.spec import CopySpec, Entry, local_path, remote_path, with_stat
from operators.core.dirfd import OpenDirs
from operators.names import check_relative
from operators.objmeta import Refused, has_metadata, head, head_object, local_attrs, set_local, to_metadata

if TYPE_CHECKING:
    import fsspec

    from operators.copy.local_destination import LocalDestination

STREAM_BLOCK = 16 << 20


def fs_of(protocol: str, options: dict) -> fsspec.AbstractFileSystem:
    import fsspec  # only for a remote side: a local copy never imports it (issue 43)

    return fsspec.filesystem(protocol, **options)


class LocalSource:
    """A local or mounted tree; every entry reached relative to its open parent directory.

    One mechanism for every read of the source outside the core: :meth:`at` hands out the descriptor of an
    entry's parent (``operators.core.dirfd.OpenDirs``: opened down from the root one component at a time,
    ``O_NOFOLLOW``, the most recent kept open) and the entry's own name, so no call hands the kernel a
    full path: a path longer than ``PATH_MAX`` (4,096 bytes) works as a short one does (was: "File name
    too long"), and a directory swapped for a symlink mid-copy is not followed.  :meth:`close` when the task
    ends (``tasks``: with the destination).
    """

    local = True

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self._dirs: OpenDirs | None = None

    def path(self, rel: bytes) -> bytes:
        """The full path of ``rel``: for messages only (never handed to the kernel: see :meth:`at`)."""
        return local_path(self.spec.src_root, rel)

    def close(self) -> None:
        if self._dirs is not None:
            self._dirs.close()
            self._dirs = None

    @contextlib.contextmanager
    def at(self, rel: bytes) -> Iterator[tuple[int | None, bytes]]:
        """``(descriptor of rel's parent, rel's last name)`` held while the caller acts on the name; the
        root itself (``b""``) is ``(None, root path)``: the path the user gave, as ``os.*`` takes it."""
        if not rel:
            yield None, local_path(self.spec.src_root, rel)
            return
        check_relative(rel)
        if self._dirs is None:
            self._dirs = OpenDirs(os.fsencode(self.spec.src_root))
        parent_rel, _, name = rel.rpartition(b"/")
        handle = self._dirs.handle(parent_rel)
        try:
            yield handle.fd, name
        finally:
            handle.release()

    @contextlib.contextmanager
    def proc_path(self, rel: bytes) -> Iterator[bytes]:
        """A short path to ``rel`` for calls that take only paths (``l*xattr`` on a symlink, an upload):
        ``/proc/self/fd/<parent>/<name>``, resolved through the held parent."""
        with self.at(rel) as (fd, name):
            yield name if fd is None else b"/proc/self/fd/%d/%s" % (fd, name)

    def stat(self, rel: bytes, follow: bool = False) -> os.stat_result:
        with self.at(rel) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=follow)

    def open(self, rel: bytes, flags: int) -> int:
        """``os.open`` of ``rel`` relative to its parent (``flags`` decide whether a link is followed)."""
        with self.at(rel) as (fd, name):
            return os.open(name, flags | os.O_CLOEXEC, dir_fd=fd)

    def fresh(self, e: Entry, follow: bool = False) -> Entry:
        """``e`` with the metadata the source has now (the manifest's when it cannot be read)."""
        try:
            return with_stat(e, self.stat(e.rel, follow))
        except OSError:
            return e

    def kind_now(self, e: Entry) -> str | None:
        """What the source holds at ``e`` now, not following a link (None: nothing, or unreadable)."""
        try:
            mode = self.stat(e.rel).st_mode
        except OSError:
            return None
        if st.S_ISDIR(mode):
            return "directory"
        return "file" if st.S_ISREG(mode) else "symlink" if st.S_ISLNK(mode) else "other"

    def kind_followed(self, e: Entry) -> str:
        s = self.stat(e.rel, follow=True)
        return "file" if st.S_ISREG(s.st_mode) else "directory" if st.S_ISDIR(s.st_mode) else "other"

    def device(self, e: Entry) -> int | None:
        return self.stat(e.rel).st_rdev

    def read_range(self, e: Entry, dfd: int, offset: int, length: int) -> None:
        """Copy ``[offset, offset+length)`` of ``e`` to the same offsets of ``dfd``."""
        sfd = self.open(e.rel, os.O_RDONLY | (0 if self.spec.follow_symlinks else os.O_NOFOLLOW))
        try:
            s = os.fstat(sfd)
            copy_range(sfd, dfd, offset, length, is_sparse(s), (s.st_dev, 0))
        finally:
            os.close(sfd)

    def object_metadata(self, e: Entry) -> tuple[dict[str, str], Refused]:
        """The S3 metadata that carries the ``user.*`` attributes of ``e`` (``operators.objmeta``), and the
        attributes it cannot carry."""
        try:
            with self.proc_path(e.rel) as path:
                return to_metadata(local_attrs(path, self.spec.follow_symlinks))
        except OSError as exc:
            return {}, [(b"xattrs", exc.errno or 0)]

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str, keep: bool) -> Refused:
        """Upload ``e`` to ``target`` on ``fs`` (``keep``: its ``user.*`` attributes as the object's S3
        metadata); returns the attributes S3 cannot carry."""
        meta, refused = self.object_metadata(e) if keep else ({}, [])
        with self.proc_path(e.rel) as path:
            fs.put_file(os.fsdecode(path), target, **({"Metadata": meta} if meta else {}))
        return refused


class FsspecSource:
    """A tree read through fsspec (object stores, sftp, ...); whole files or byte ranges."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.fs = fs_of(spec.src_protocol, spec.src_options)

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.src_root, rel)

    def close(self) -> None:
        pass  # nothing held

    def fresh(self, e: Entry, follow: bool = False) -> Entry:
        return e  # the manifest's metadata: nothing cheaper to ask

    def kind_now(self, e: Entry) -> str | None:
        return None  # not asked: object stores have no directories to forge

    def kind_followed(self, e: Entry) -> str:
        return "file"

    def device(self, e: Entry) -> int | None:
        return None

    def fill(self, dst: LocalDestination, e: Entry, fd: int) -> Entry:
        """Download ``e`` into the new local file open as ``fd`` (created by the destination relative to
        its held parent, never through a link), with its mode."""
        got = self._head(e) if self.spec.xattrs else None
        with self._open(e, got) as f, os.fdopen(os.dup(fd), "wb") as g:
            shutil.copyfileobj(f, g, STREAM_BLOCK)
        refusals(dst.fd_meta(fd, e) + (set_local(fd, got.get("Metadata") or {}) if got else []))  # fails the file
        return e

    def _head(self, e: Entry) -> dict | None:
        """The HEAD of an S3 object (None elsewhere): its metadata, and its size, which opens it without the
        HEAD s3fs would make again."""
        return head_object(self.fs, self.path(e.rel)) if has_metadata(self.spec.src_protocol) else None

    def _open(self, e: Entry, got: dict | None):
        return self.fs.open(self.path(e.rel), "rb", **({"size": got["ContentLength"]} if got else {}))

    def object_metadata(self, e: Entry) -> tuple[dict[str, str], Refused]:
        """The S3 metadata of ``e`` as it is (S3 to S3), none from other back ends."""
        return (head(self.fs, self.path(e.rel)), []) if has_metadata(self.spec.src_protocol) else ({}, [])

    def xattrs_onto(self, e: Entry, fd: int) -> Refused:
        """The object metadata of ``e`` as ``user.*`` attributes of the local file ``fd`` (``operators.objmeta``)."""
        got = self._head(e) if self.spec.xattrs else None
        return set_local(fd, got.get("Metadata") or {}) if got else []

    def read_range(self, e: Entry, dfd: int, offset: int, length: int) -> None:
        src = self.path(e.rel)
        pos, end = offset, offset + length
        while pos < end:
            data = self.fs.cat_file(src, start=pos, end=min(end, pos + STREAM_BLOCK))
            if not data:
                break
            view = memoryview(data)
            done = 0
            while done < len(data):
                done += os.pwrite(dfd, view[done:], pos + done)
            pos += len(data)

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str, keep: bool) -> Refused:
        """Stream ``e`` to ``target`` on ``fs`` (``keep``: with its S3 metadata as it is)."""
        got = self._head(e) if keep else None
        meta = (got or {}).get("Metadata")
        with self._open(e, got) as f, fs.open(target, "wb", **({"Metadata": meta} if meta else {})) as g:
            shutil.copyfileobj(f, g, STREAM_BLOCK)
        return []


Source = LocalSource | FsspecSource


def source_of(spec: CopySpec) -> Source:
    return LocalSource(spec) if spec.src_local else FsspecSource(spec)


__all__ = ["STREAM_BLOCK", "FsspecSource", "LocalSource", "Source", "fs_of", "source_of"]
