"""A destination on an object store written on ``obstore`` (S3, GCS, Azure Blob: ``operators.stores``).

One PUT per object makes it appear whole and at once: no temp name, nothing to rename.  A file bigger
than ``PART`` goes up as one multipart upload that ``obstore`` streams from the file (``PARTS`` parts in
flight) and aborts when a part (or the source) fails, so a failed file leaves no parts behind.  From the
same bucket (one store: same protocol, bucket and options) an object is copied by the store itself
(``obstore.copy``: S3 CopyObject, atomic too); from another store a small object comes through memory, a
big one through a temp file.  On S3 a big file of a
job is instead split across range tasks (``operators.copy.multipart``, on s3fs: its journaled upload
ids let a resumed run reuse the parts already sent).
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import obstore

from operators.copy.attrs import refusals
from operators.copy.destination import Destination
from operators.copy.sources import STREAM_BLOCK, LocalSource, ObstoreSource, Source
from operators.copy.spec import CopySpec, Entry, remote_path
from operators.objmeta import has_metadata
from operators.ratelimit import take_ops
from operators.safety import AncestorCheck
from operators.stores import store_at

PART = 8 << 20  # bytes of a multipart upload's part (the AWS CLI's default)
PARTS = 4  # parts of one upload in flight
LISTED = 1000  # keys a prefix may hold for its existing objects to be known from one listing, not a HEAD each
PREFIXES = 64  # prefixes listed so by one chunk at most


class ObstoreDestination(Destination):
    """A tree written as objects on ``obstore``."""

    local = False

    def __init__(self, spec: CopySpec) -> None:
        self.spec = spec
        self.has_dirs = False
        self.store, self.key = store_at(spec.dst_protocol, spec.dst_root, spec.dst_options)
        self._levels: dict[str, dict[str, int] | None] = {}  # prefix -> its objects' sizes (None: too many)
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def path(self, rel: bytes) -> str:
        return remote_path(self.spec.dst_root, rel)

    def _key(self, rel: bytes) -> str:
        name = os.fsdecode(rel)
        return f"{self.key}/{name}" if self.key and name else self.key or name

    def ancestors(self) -> AncestorCheck | None:
        return None

    def make_dir(self, e: Entry) -> bool:
        return True  # keys need no directories

    def set_meta(self, src: Source, e: Entry) -> None:
        """Nothing: objects keep no source metadata but their S3 user metadata (written with them)."""

    def same(self, e: Entry) -> bool | None:
        """What the destination holds at ``e``'s key, by size (object stores keep no source mtime): from
        one listing of its prefix per chunk (:meth:`_listed`) where that holds at most ``LISTED`` keys,
        else one HEAD, so a chunk of 100 files into one prefix costs one request, not 100."""
        key = self._key(e.out_rel)
        level = self._listed(key.rpartition("/")[0]) if _plain(key) else None
        if level is not None:
            size = level.get(key)
            return None if size is None else size == e.size
        try:
            meta = obstore.head(self.store, key)
        except FileNotFoundError:
            return None
        return meta["size"] == e.size

    def _listed(self, prefix: str) -> dict[str, int] | None:
        """``{key: size}`` of every object below ``prefix``, listed once by this chunk's first file there
        (the others wait for it); None when it holds more than ``LISTED`` keys or could not be listed."""
        with self._lock:
            lock = self._locks.setdefault(prefix, threading.Lock())
        with lock:
            if prefix not in self._levels:
                self._levels[prefix] = self._list(prefix) if len(self._levels) < PREFIXES else None
            return self._levels[prefix]

    def _list(self, prefix: str) -> dict[str, int] | None:
        got: dict[str, int] = {}
        try:
            for page in obstore.list(self.store, prefix or None, chunk_size=LISTED):
                take_ops()
                if len(got) + len(page) > LISTED:
                    return None
                got.update((m["path"], m["size"]) for m in page)
        except Exception:
            return None  # each file asks on its own (HEAD), with its own error
        return got

    def make_parent(self, e: Entry) -> bool:
        return False

    def _payload(self, src: Source, e: Entry) -> tuple[Any, Any]:
        """What ``obstore.put`` reads: a local file by its path (obstore reads it itself, in parts when big),
        another store's object through a temp file, an fsspec file as an open file; and what to close after."""
        if isinstance(src, LocalSource):
            return Path(os.fsdecode(src.path(e.rel))), None
        if isinstance(src, ObstoreSource):
            if (e.size or 0) <= PART:  # one GET into memory, one PUT
                return obstore.get(src.store, src._key(e)).bytes(), None
            # obstore cannot read one store from inside a put to another (a request made from its own runtime
            # waits for good): a big object goes through a temp file, bounded memory, then up as a local file
            spool = tempfile.NamedTemporaryFile(prefix="pfs-objcopy-")  # noqa: SIM115 (closed by write_file)
            for chunk in obstore.get(src.store, src._key(e)).stream(min_chunk_size=STREAM_BLOCK):
                spool.write(chunk)
            spool.flush()
            return Path(spool.name), spool
        f = src.fs.open(src.path(e.rel), "rb")
        return f, f

    def write_file(self, src: Source, e: Entry) -> None:
        """One PUT, or one multipart upload over ``PART`` bytes (aborted by obstore when it fails).  With
        ``--xattrs`` on S3 the object's metadata carries the source's ``user.*`` attributes; what it cannot
        carry fails the file once it is written (a counted, logged failure)."""
        if isinstance(src, ObstoreSource) and src.store is self.store:
            # the same bucket with the same options (operators.stores makes one store of them): the store copies
            # it (S3 CopyObject, with its metadata as it is), no byte through this host, whole and at once
            obstore.copy(self.store, src._key(e), self._key(e.out_rel))
            return
        keep = self.spec.xattrs and has_metadata(self.spec.dst_protocol)
        meta, refused = src.object_metadata(e) if keep else ({}, [])
        payload, held = self._payload(src, e)
        try:
            obstore.put(
                self.store,
                self._key(e.out_rel),
                payload,
                attributes=meta or None,
                chunk_size=PART,
                max_concurrency=PARTS,
            )
        finally:
            if held is not None:
                held.close()
        refusals(refused)

    def symlink(self, src: Source, e: Entry) -> str:
        return "skip"  # object stores have no symlinks

    def special(self, src: Source, e: Entry) -> str | BaseException:
        return "skip"


def _plain(key: str) -> bool:
    """Whether a listing names ``key`` as it is (obstore's paths have no empty, ``.`` or ``..`` segment)."""
    return bool(key) and all(part not in ("", ".", "..") for part in key.split("/"))


__all__ = ["LISTED", "PART", "PARTS", "ObstoreDestination"]
