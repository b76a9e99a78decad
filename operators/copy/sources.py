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
from operators.copy.kernel import copy_range, is_sparse, pwrite_all
from operators.copy.spec import CopySpec, Entry, local_path, remote_path, with_stat
from operators.core.dirfd import OpenDirs
from operators.objmeta import (
    STANDARD_ATTRIBUTES,
    Refused,
    has_metadata,
    head,
    head_object,
    local_attrs,
    object_metadata,
    set_local,
    to_metadata,
)
from operators.stores import is_store, store_at

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
        if self._dirs is None:
            self._dirs = OpenDirs(os.fsencode(self.spec.src_root))
        with self._dirs.parent(rel) as held:
            yield held

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
            pos = pwrite_all(dfd, data, pos)

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str, keep: bool) -> Refused:
        """Stream ``e`` to ``target`` on ``fs`` (``keep``: with its S3 metadata as it is)."""
        got = self._head(e) if keep else None
        meta = (got or {}).get("Metadata")
        with self._open(e, got) as f, fs.open(target, "wb", **({"Metadata": meta} if meta else {})) as g:
            shutil.copyfileobj(f, g, STREAM_BLOCK)
        return []

    def read_bytes(self, e: Entry, offset: int, length: int) -> bytes:
        """``[offset, offset+length)`` of ``e`` (a multipart upload's part)."""
        return self.fs.cat_file(self.path(e.rel), start=offset, end=offset + length)


class ObstoreSource:
    """An object store read on ``obstore`` (S3, GCS, Azure: ``operators.stores``): a whole object as one
    streamed GET, a big one's ranges as ranged GETs (one per range task, streamed), never through fsspec."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.store, self.key = store_at(spec.src_protocol, spec.src_root, spec.src_options)
        self.keeps_metadata = has_metadata(spec.src_protocol)

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.src_root, rel)

    def close(self) -> None:
        pass  # the store is shared by the process (operators.stores): nothing of this task's to release

    def _key(self, e: Entry) -> str:
        rel = os.fsdecode(e.rel)
        return f"{self.key}/{rel}" if self.key and rel else self.key or rel

    def fresh(self, e: Entry, follow: bool = False) -> Entry:
        return e  # the manifest's metadata: nothing cheaper to ask

    def kind_now(self, e: Entry) -> str | None:
        return None  # object stores have no directories to forge

    def kind_followed(self, e: Entry) -> str:
        return "file"

    def device(self, e: Entry) -> int | None:
        return None

    def _metadata(self, attributes: dict) -> dict[str, str]:
        return {str(k): str(v) for k, v in attributes.items() if k not in STANDARD_ATTRIBUTES}

    def fill(self, dst: LocalDestination, e: Entry, fd: int) -> Entry:
        """Download ``e`` into the new local file open as ``fd`` (one GET, streamed: bounded memory), with
        its mode and, with ``--xattrs``, its S3 metadata as ``user.*`` attributes."""
        import obstore  # an object store's copy only: not in a local copy's start-up

        got = obstore.get(self.store, self._key(e))
        pos = 0
        for chunk in got.stream(min_chunk_size=STREAM_BLOCK):  # straight to fd: no file object (5 syscalls a file)
            pos = pwrite_all(fd, chunk, pos)
        meta = self._metadata(got.attributes) if self.spec.xattrs and self.keeps_metadata else {}
        refusals(dst.fd_meta(fd, e) + (set_local(fd, meta) if meta else []))  # fails the file
        return e

    def object_metadata(self, e: Entry) -> tuple[dict[str, str], Refused]:
        """The S3 metadata of ``e`` as it is (S3 to S3), none from other back ends."""
        return (object_metadata(self.store, self._key(e)), []) if self.keeps_metadata else ({}, [])

    def xattrs_onto(self, e: Entry, fd: int) -> Refused:
        """The object metadata of ``e`` as ``user.*`` attributes of the local file ``fd``."""
        if not (self.spec.xattrs and self.keeps_metadata):
            return []
        return set_local(fd, object_metadata(self.store, self._key(e)))

    def read_range(self, e: Entry, dfd: int, offset: int, length: int) -> None:
        """``[offset, offset+length)`` of ``e`` into the same offsets of ``dfd``: one ranged GET, streamed."""
        if length <= 0:
            return
        import obstore  # an object store's copy only: not in a local copy's start-up

        got = obstore.get(self.store, self._key(e), options={"range": (offset, offset + length)})
        pos = offset
        for chunk in got.stream(min_chunk_size=STREAM_BLOCK):
            pos = pwrite_all(dfd, chunk, pos)
        if pos != offset + length:
            raise OSError(f"{self.path(e.rel)}: read {pos - offset} of {length} bytes at {offset}; the object changed")

    def read_bytes(self, e: Entry, offset: int, length: int) -> bytes:
        """``[offset, offset+length)`` of ``e`` (a multipart upload's part): one ranged GET."""
        if length <= 0:
            return b""
        import obstore

        return bytes(obstore.get_range(self.store, self._key(e), start=offset, end=offset + length))

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str, keep: bool) -> Refused:
        """Stream ``e`` to ``target`` on an fsspec file system (``keep``: with its S3 metadata as it is)."""
        import obstore  # an object store's copy only: not in a local copy's start-up

        got = obstore.get(self.store, self._key(e))
        meta = self._metadata(got.attributes) if keep and self.keeps_metadata else {}
        with fs.open(target, "wb", **({"Metadata": meta} if meta else {})) as g:
            for chunk in got.stream(min_chunk_size=STREAM_BLOCK):
                g.write(chunk)
        return []


Source = LocalSource | FsspecSource | ObstoreSource


def source_of(spec: CopySpec) -> Source:
    if spec.src_local:
        return LocalSource(spec)
    return ObstoreSource(spec) if is_store(spec.src_protocol) else FsspecSource(spec)


__all__ = ["STREAM_BLOCK", "FsspecSource", "LocalSource", "ObstoreSource", "Source", "fs_of", "source_of"]
