"""A destination written through fsspec: object stores (one PUT per file, atomic, no temp name) or
sftp-like back ends (a temp name and a rename)."""

from __future__ import annotations

import os

from operators.copy.attrs import refusals
from operators.copy.destination import Destination
from operators.copy.sources import Source, fs_of
from operators.copy.spec import CopySpec, Entry, remote_path, temp_of
from operators.objmeta import Refused, has_metadata
from operators.safety import AncestorCheck


def object_metadata(spec: CopySpec, src: Source, e: Entry) -> tuple[dict[str, str], Refused]:
    """The metadata an S3 object written from ``e`` in parts gets, and the attributes it cannot carry (none
    unless the destination is S3 and attributes are kept)."""
    if not (spec.xattrs and has_metadata(spec.dst_protocol)):
        return {}, []
    return src.object_metadata(e)


class FsspecDestination(Destination):
    """A tree written through fsspec: object stores (one PUT per file) or sftp-like back ends."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.has_dirs = spec.dst_has_dirs
        self.fs = fs_of(spec.dst_protocol, spec.dst_options)

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.dst_root, rel)

    def ancestors(self) -> AncestorCheck | None:
        return None

    def make_dir(self, e: Entry) -> bool:
        self.fs.makedirs(self.path(e.out_rel), exist_ok=True)
        return True

    def set_meta(self, src: Source, e: Entry) -> None:
        """Nothing: fsspec back ends keep no source metadata."""

    def same(self, e: Entry) -> bool | None:
        try:
            info = self.fs.info(self.path(e.out_rel))
        except FileNotFoundError:
            return None
        return info.get("type") == "file" and info.get("size") == e.size  # object stores keep no source mtime

    def make_parent(self, e: Entry) -> bool:
        return False

    def write_file(self, src: Source, e: Entry) -> None:
        """One PUT (or a multipart upload s3fs completes at close) is atomic: no temp name there.  On S3
        the object's metadata carries the source's ``user.*`` attributes (``operators.objmeta``); what it
        cannot carry fails the file once it is written (a counted, logged failure)."""
        dst = self.path(e.out_rel)
        target = os.fsdecode(temp_of(os.fsencode(dst), self.spec.token)) if self.has_dirs else dst
        refused = src.send(self.fs, e, target, self.spec.xattrs and has_metadata(self.spec.dst_protocol))
        if target != dst:
            self.fs.mv(target, dst)
        refusals(refused)

    def symlink(self, src: Source, e: Entry) -> str:
        if not self.has_dirs:
            return "skip"  # object stores have no symlinks
        raise NotImplementedError("symlinks on this destination")

    def special(self, src: Source, e: Entry) -> str | BaseException:
        return "skip"


__all__ = ["FsspecDestination", "object_metadata"]
