"""Listing S3, GCS and Azure Blob through ``obstore`` (``operators.stores``): flat, paged, split by prefix.

An object store has no directories, only keys; a listing without a delimiter returns every key below a
prefix in key order, 1,000 a request, which is all a scan needs.  So:

* the root is listed flat first: a tree of at most two pages is done in one or two requests (as
  ``rclone lsf -R`` does); a bigger one is listed again with a delimiter: its objects are rows and each
  top-level prefix becomes an item of the walk (a "directory"), so prefixes are listed concurrently,
  across tasks and workers;
* an item is listed flat, one page (``PAGE`` keys) per step of the walk (``Listing.more``), so a task's
  memory holds a page, not a prefix.  The directories between the item and each key are implied by the
  keys: each gets one row (size 0, no times), as s3fs's ``find(withdirs=True)`` makes them;
* a top-level prefix (``SPLIT_DEPTH``) of more than two pages is split too: listed once with a delimiter,
  its objects become rows and its own prefixes items of their own, listed concurrently.  The boundaries
  are the prefixes; deeper prefixes, and one of millions of keys without any ``/`` below it, are one
  sequential stream each (a split by key range, ``start-after``, needs boundaries this listing does not
  know yet: not done);
* with ``tree`` (``--exclude``/``--max-depth``: prune must see each directory before its contents) every
  item is listed with a delimiter, one level at a time, as a file system is walked.

A failed listing of a prefix is that prefix's error (its row carries it); the rest of the scan goes on.
Keys ending in ``/`` (folder markers some consoles write) are directories, not files.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

import obstore

from operators.checksum import checksum_object
from operators.objmeta import object_metadata
from operators.ratelimit import take_ops
from operators.rows import Row, error_row, row_from_info
from operators.scan.walk import DirItem, Listing
from operators.stores import store_at

PAGE = 1000  # keys a listing request returns (S3's and GCS's maximum, Azure's 5,000)
SPLIT_DEPTH = 1  # items at most this deep are split by their prefixes when one page does not hold them


def file_row(rel: str, meta: Any) -> Row:
    """The row of an object (its ``ObjectMeta``): the same values s3fs's info gives a file."""
    return row_from_info(rel, {"type": "file", "size": meta["size"], "mtime": meta["last_modified"]})


def dir_row(rel: str) -> Row:
    """The row of a directory implied by a prefix."""
    return row_from_info(rel, {"type": "directory", "size": 0})


class ObstoreLister:
    """The walk's lister (``operators.scan.walk.Lister``) for a root on an object store."""

    def __init__(self, protocol: str, root: str, storage_options: dict | None = None, tree: bool = False) -> None:
        self.protocol = protocol
        self.root = root.rstrip("/")
        self.store, self.key = store_at(protocol, self.root, storage_options)
        self.tree = tree

    def full(self, rel: str) -> str:
        """The key of ``rel`` (relative to the root) in its bucket."""
        return "/".join(p for p in (self.key, rel) if p)

    def rel(self, key: str) -> str:
        return key[len(self.key) + 1 :] if self.key else key

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(".", "directory", error)

    def close(self) -> None:
        """Nothing to release: the store is shared by the process (``operators.stores``)."""

    def checksum(self, rel: str, algorithm: str) -> str:
        """The checksum of the object ``rel``, streamed (``operators.checksum``'s algorithms)."""
        return checksum_object(self.store, self.full(rel), algorithm)

    def metadata(self, rel: str) -> dict[str, str]:
        """The user metadata of the object ``rel`` (``operators.objmeta``)."""
        return object_metadata(self.store, self.full(rel))

    def stat(self, rel: str) -> Row:
        """The row of the object ``rel`` (a root that is one object)."""
        key = self.full(rel)
        return file_row(key.rpartition("/")[2], obstore.head(self.store, key))

    # listing ---------------------------------------------------------------

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        rel = item[0]
        assert isinstance(rel, str)
        if self.tree:
            return self._level(item)
        return self._flat(item)

    def _level(self, item: DirItem) -> Listing:
        """One level, with a delimiter: objects as rows, prefixes as items."""
        rel = str(item[0])
        listing = Listing(item)
        prefix = self.full(rel)
        try:
            got = obstore.list_with_delimiter(self.store, prefix or None)
        except FileNotFoundError:
            listing.vanished = bool(rel)
            if not rel:
                listing.error = FileNotFoundError(f"{self.root} not found")
            return listing
        except Exception as exc:
            listing.error = exc
            return listing
        take_ops(1 + (len(got["objects"]) + len(got["common_prefixes"])) // PAGE)
        for meta in got["objects"]:
            path = self.rel(meta["path"])
            if path and path != rel and not meta["path"].endswith("/"):
                listing.rows.append(file_row(path, meta))
        for p in got["common_prefixes"]:
            path = self.rel(p.rstrip("/"))
            if path and path != rel:
                listing.subdirs.append((path, dir_row(path)))
        return listing

    def _flat(self, item: DirItem) -> Listing:
        """The first page of a prefix listed flat; the rest as further steps, or a split into its prefixes."""
        rel = str(item[0])
        seen: set[str] = {rel}
        try:
            pages = iter(obstore.list(self.store, self.full(rel), chunk_size=PAGE))
            first = next(pages, None)
            second = next(pages, None) if first is not None and len(first) >= PAGE else None
        except Exception as exc:
            listing = Listing(item)
            listing.error = exc
            return listing
        take_ops(1 + (second is not None))
        if second is not None and rel.count("/") + 1 <= SPLIT_DEPTH:
            return self._level(item)  # more than a page: its prefixes are the boundaries of a concurrent listing
        return self._step(item, rel, seen, [p for p in (first, second) if p is not None], pages)

    def _step(self, item: DirItem, rel: str, seen: set[str], got: list[Any], pages: Iterator[Any]) -> Listing:
        listing = Listing(item)
        for page in got:
            self._rows(page, rel, seen, listing.rows)
        try:
            nxt = next(pages, None)
        except Exception as exc:
            listing.error = exc  # the prefix's error: what was listed of it stays
            return listing
        if nxt is not None:
            take_ops()
            listing.final = False
            listing.more = lambda: self._step(item, rel, seen, [nxt], pages)
        return listing

    def _rows(self, page: Any, rel: str, seen: set[str], out: list[Row]) -> None:
        for meta in page:
            key: str = meta["path"]
            path = self.rel(key.rstrip("/"))
            parent = path.rpartition("/")[0]
            missing = []
            while parent and parent not in seen:  # the directories this key implies, outermost last
                missing.append(parent)
                seen.add(parent)
                parent = parent.rpartition("/")[0]
            out.extend(dir_row(d) for d in reversed(missing))
            if key.endswith("/"):
                if path not in seen:
                    seen.add(path)
                    out.append(dir_row(path))
            elif path != rel:
                out.append(file_row(path, meta))


__all__ = ["PAGE", "SPLIT_DEPTH", "ObstoreLister", "dir_row", "file_row"]
