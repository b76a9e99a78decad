"""Where a copy reads: a local tree (descriptors, kernel-side copies) or one read through fsspec.

One class per kind of storage, chosen once per task from the spec (:func:`source_of`); the
destinations (``copy_local_destination``, ``copy_fsspec_destination``) ask a source for an
entry's fresh metadata, its bytes or a byte range.
"""

from __future__ import annotations

import os
import shutil
import stat as st
from typing import TYPE_CHECKING

from operators.copy.attrs import refusals
from operators.copy.kernel import copy_range, is_sparse
from operators.copy.spec import CopySpec, Entry, local_path, remote_path, with_stat
from operators.objmeta import Refused, has_metadata, head, head_object, local_attrs, set_local, to_metadata

if TYPE_CHECKING:
    import fsspec

    from operators.copy.local_destination import LocalDestination

STREAM_BLOCK = 16 << 20


def fs_of(protocol: str, options: dict) -> fsspec.AbstractFileSystem:
    import fsspec  # only for a remote side: a local copy never imports it (issue 43)

    return fsspec.filesystem(protocol, **options)


class LocalSource:
    """A local or mounted tree; files opened relative to their open parent directory."""

    local = True

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec

    def path(self, rel: bytes) -> bytes:
        return local_path(self.spec.src_root, rel)

    def fresh(self, e: Entry, follow: bool = False) -> Entry:
        """``e`` with the metadata the source has now (the manifest's when it cannot be read)."""
        try:
            return with_stat(e, os.stat(self.path(e.rel), follow_symlinks=follow))
        except OSError:
            return e

    def kind_now(self, e: Entry) -> str | None:
        """What the source holds at ``e`` now, not following a link (None: nothing, or unreadable)."""
        try:
            mode = os.lstat(self.path(e.rel)).st_mode
        except OSError:
            return None
        if st.S_ISDIR(mode):
            return "directory"
        return "file" if st.S_ISREG(mode) else "symlink" if st.S_ISLNK(mode) else "other"

    def kind_followed(self, e: Entry) -> str:
        s = os.stat(self.path(e.rel))
        return "file" if st.S_ISREG(s.st_mode) else "directory" if st.S_ISDIR(s.st_mode) else "other"

    def device(self, e: Entry) -> int | None:
        return os.lstat(self.path(e.rel)).st_rdev

    def read_range(self, e: Entry, dfd: int, offset: int, length: int) -> None:
        """Copy ``[offset, offset+length)`` of ``e`` to the same offsets of ``dfd``."""
        sfd = os.open(self.path(e.rel), os.O_RDONLY | (0 if self.spec.follow_symlinks else os.O_NOFOLLOW))
        try:
            s = os.fstat(sfd)
            copy_range(sfd, dfd, offset, length, is_sparse(s), (s.st_dev, 0))
        finally:
            os.close(sfd)

    def object_metadata(self, e: Entry) -> tuple[dict[str, str], Refused]:
        """The S3 metadata that carries the ``user.*`` attributes of ``e`` (``operators.objmeta``), and the
        attributes it cannot carry."""
        try:
            return to_metadata(local_attrs(self.path(e.rel), self.spec.follow_symlinks))
        except OSError as exc:
            return {}, [(b"xattrs", exc.errno or 0)]

    def send(self, fs: fsspec.AbstractFileSystem, e: Entry, target: str, keep: bool) -> Refused:
        """Upload ``e`` to ``target`` on ``fs`` (``keep``: its ``user.*`` attributes as the object's S3
        metadata); returns the attributes S3 cannot carry."""
        meta, refused = self.object_metadata(e) if keep else ({}, [])
        fs.put_file(os.fsdecode(self.path(e.rel)), target, **({"Metadata": meta} if meta else {}))
        return refused


class FsspecSource:
    """A tree read through fsspec (object stores, sftp, ...); whole files or byte ranges."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.fs = fs_of(spec.src_protocol, spec.src_options)

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.src_root, rel)

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
