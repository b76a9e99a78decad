"""Listing S3, GCS and Azure Blob through ``obstore`` (``operators.stores``): flat, paged, split by prefix
and by key range.

An object store has no directories, only keys; a listing without a delimiter returns every key below a
prefix in key order, 1,000 a request, which is all a scan needs.  So:

* the root is listed flat first: a tree of at most ``FLAT_PAGES`` pages is done in as many requests,
  one after the other (as ``rclone lsf -R`` does: each split costs requests, and a server that answers a
  page in O(keys of the bucket), as moto does, pays for each); a bigger one is listed again with a
  delimiter: its objects are rows and each top-level prefix becomes an item of the walk (a "directory"),
  so prefixes are listed concurrently, across tasks and workers;
* an item is listed flat, one page (``PAGE`` keys) per step of the walk (``Listing.more``), so a task's
  memory holds a page, not a prefix.  The directories between the item and each key are implied by the
  keys: each gets one row (size 0, no times), as s3fs's ``find(withdirs=True)`` makes them;
* a top-level prefix (``SPLIT_DEPTH``) of more than ``FLAT_PAGES`` pages, most of whose first keys are
  below prefixes of it, is split too: listed once with a delimiter, its objects become rows and its own
  prefixes items of their own, listed concurrently;
* any other prefix of more than ``FLAT_PAGES`` pages (a deeper one, or one whose first pages' keys are
  mostly not below prefixes of it: millions of keys side by side) is split by KEY RANGE (:class:`_Ranges`):
  the rest of it, after the last key listed, is cut at boundaries made from the characters its first
  pages' keys use, and each range ``(lo, hi]`` is listed concurrently from ``lo`` (S3's ``start-after``,
  obstore's ``offset``).  A range that fills a page is cut again the same way while fewer than
  ``MAX_RANGES`` are open, so a bucket of a million keys is listed ``MAX_RANGES`` requests at a time
  after a few round trips.  Rows outside ``(lo, hi]`` are dropped, so ranges never give a row twice,
  whatever the store does with a boundary that is not a key;
* with ``tree`` (``--exclude``/``--max-depth``: prune must see each directory before its contents) every
  item is listed with a delimiter, one level at a time, as a file system is walked.

A failed listing of a prefix is that prefix's error (its row carries it); the rest of the scan goes on.
Keys ending in ``/`` (folder markers some consoles write) are directories, not files.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

import obstore

from operators.checksum import checksum_object
from operators.objmeta import object_metadata
from operators.ratelimit import take_ops
from operators.rows import Row, error_row, http_etag, row_from_info
from operators.scan.walk import DirItem, Listing
from operators.stores import store_at

PAGE = 1000  # keys a listing request returns (S3's and GCS's maximum, Azure's 5,000)
SPLIT_DEPTH = 1  # items at most this deep are split by their prefixes when FLAT_PAGES do not hold them
FLAT_PAGES = 5  # pages listed one after the other before a prefix is split (5,000 keys: ~5 round trips)
MAX_RANGES = 8  # key ranges of one prefix listed at once (more only added CPU: measured 4-8 best at 200k keys)
FANOUT = 16  # ranges one cut makes at most


_NONE12 = (None,) * 12  # atime ... error: nothing an object has


def file_row(rel: str, meta: Any) -> Row:
    """The row of an object (its ``ObjectMeta``), its entity tag appended (``operators.schema.LISTED_COLUMNS``):
    the same values ``row_from_info`` gives a file, built directly: a million-key listing makes a million of them."""
    t, tag = meta["last_modified"], meta.get("e_tag")
    if getattr(t, "tzinfo", None) is None:
        return row_from_info(rel, {"type": "file", "size": meta["size"], "mtime": t, "e_tag": tag})
    ns = int(t.timestamp() * 1_000_000) * 1000
    return (rel, None, "file", meta["size"], ns, *_NONE12, None if tag is None else http_etag(tag))


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
        return self._flat(item, pool)

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

    def _flat(self, item: DirItem, pool: Executor) -> Listing:
        """The first page of a prefix listed flat; the rest as further steps, or a split into its prefixes."""
        rel = str(item[0])
        seen: set[str] = {rel}
        got: list[Any] = []
        try:
            pages = iter(obstore.list(self.store, self.full(rel), chunk_size=PAGE))
            while len(got) < FLAT_PAGES and (not got or len(got[-1]) >= PAGE):
                page = next(pages, None)
                if page is None:
                    break
                got.append(page)
            if len(got) == FLAT_PAGES and len(got[-1]) >= PAGE:  # full: one more tells whether there is more
                page = next(pages, None)
                if page is not None:
                    got.append(page)
        except Exception as exc:
            listing = Listing(item)
            listing.error = exc
            return listing
        take_ops(max(1, len(got)))
        if len(got) > FLAT_PAGES:  # more pages than that: listed concurrently
            prefix = self.full(rel)
            below = [m["path"][len(prefix) :].lstrip("/") for page in got for m in page]
            if rel.count("/") + 1 <= SPLIT_DEPTH and 2 * sum("/" in k for k in below) > len(below):
                return self._level(item)  # most keys are below prefixes: those are the boundaries
            return _Ranges(self, item, rel, seen, below).start(pool, got)
        return self._step(item, rel, seen, got, pages)

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


def _valid(key: str) -> bool:
    """Whether obstore takes ``key`` as a path (an offset): no empty, ``.`` or ``..`` segment, no trailing ``/``."""
    return not key.endswith("/") and all(part not in ("", ".", "..") for part in key.split("/"))


def boundaries(last: str, hi: str | None, alphabet: list[str], start: int, fanout: int = FANOUT) -> list[str]:
    """Where to cut the keys in ``(last, hi]`` (``hi`` None: no end) into ranges listed concurrently.

    At the first position ``q`` (from ``start``, the prefix's length) where some character of
    ``alphabet`` (those the keys listed so far use) is greater than ``last[q]``, each such character
    ``c`` makes the boundary ``last[:q] + c``: a key space like ``k0000000``..``k0999999`` whose first
    pages end at ``k0001999`` is cut at ``k1``..``k9``, ``kk``; those ranges but the first are empty (one
    request each), and the first is cut at ``k01``..``k09``, ``k0k`` after its first page, and so on: a
    few round trips find the positions where the keys differ.  Every boundary is above
    ``last`` and below ``hi``, so the ranges between them cover ``(last, hi]`` exactly; at most
    ``fanout - 1`` of them, evenly spread; none where no character is left (then the range is paged).
    """
    for q in range(start, len(last) + 1):
        base, after = last[:q], last[q] if q < len(last) else ""
        cuts = [base + c for c in alphabet if c > after]
        cuts = [c for c in cuts if (hi is None or c < hi) and _valid(c)]
        if cuts:
            if len(cuts) >= fanout:
                step = len(cuts) / (fanout - 1)
                cuts = [cuts[int(i * step)] for i in range(fanout - 1)]
            return cuts
    return []


class _Ranges:
    """One prefix listed as concurrent key ranges ``(lo, hi]``: their shared state.

    Each range is a job on the walk's pool returning a ``Listing`` step (its rows, its next page as
    ``more``, or the jobs of the ranges it was cut into as ``pending``).  The prefix's own row comes
    once, with the step that closes its last open range, carrying the first error any range met
    (what the other ranges listed stays).  Implied directories are made once across ranges (``seen``).
    """

    def __init__(self, lister: ObstoreLister, item: DirItem, rel: str, seen: set[str], below: list[str]) -> None:
        self.lister = lister
        self.item = item
        self.rel = rel
        self.seen = seen
        self.prefix = lister.full(rel)
        self.alphabet = sorted(set("".join(below)))
        self.lock = threading.Lock()
        self.open = 0
        self.error: BaseException | None = None

    def start(self, pool: Executor, pages: list[Any]) -> Listing:
        """The prefix's first pages as rows; the rest, after their last key, cut into ranges."""
        listing = Listing(self.item, final=False)
        for page in pages:
            self.lister._rows(page, self.rel, self.seen, listing.rows)
        last = pages[-1][-1]["path"]
        hi = self.prefix + "0" if self.prefix else None  # "0" follows "/": past every key of the prefix
        with self.lock:
            self.open = 1
        self._cut(listing, pool, last, hi, whole=True)
        return self._close(listing, None)

    def _cut(self, listing: Listing, pool: Executor, lo: str, hi: str | None, whole: bool = False) -> bool:
        """Cut ``(lo, hi]`` into ranges whose jobs ``listing`` carries; False (nothing submitted) when it
        cannot be cut, unless ``whole``: then it is one range."""
        start = len(self.prefix) + 1 if self.prefix else 0
        cuts = boundaries(lo, hi, self.alphabet, start)
        if not cuts and not whole:
            return False
        highs: list[str | None] = [*cuts, hi]
        with self.lock:
            self.open += len(highs)
        listing.pending.extend(
            pool.submit(self._range, pool, a, b, None) for a, b in zip([lo, *cuts], highs, strict=True)
        )
        return True

    def _close(self, listing: Listing, error: BaseException | None) -> Listing:
        """A range is done: the last one to close brings the prefix's row (with the first error)."""
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.open -= 1
            last = self.open == 0
        if last:
            listing.final = True
            listing.error = self.error
        return listing

    def _range(self, pool: Executor, lo: str, hi: str | None, pages: Iterator[Any] | None) -> Listing:
        """One page of ``(lo, hi]``; then the next page, or (a full first page) a cut of the rest."""
        listing = Listing(self.item, final=False)
        try:
            if pages is None:
                pages = iter(obstore.list(self.lister.store, self.prefix or None, offset=lo, chunk_size=PAGE))
            page = next(pages, None)
        except Exception as exc:
            return self._close(listing, exc)
        take_ops()
        page = page or []
        keep = [m for m in page if lo < m["path"] and (hi is None or m["path"] <= hi)]
        with self.lock:
            self.lister._rows(keep, self.rel, self.seen, listing.rows)
        if len(page) < PAGE or (hi is not None and page[-1]["path"] >= hi) or not keep:
            return self._close(listing, None)
        with self.lock:
            room = self.open < MAX_RANGES
        if room and self._cut(listing, pool, keep[-1]["path"], hi):  # a full page: cut the rest
            return self._close(listing, None)
        listing.more = lambda: self._range(pool, keep[-1]["path"], hi, pages)
        return listing


__all__ = [
    "FANOUT",
    "FLAT_PAGES",
    "MAX_RANGES",
    "PAGE",
    "SPLIT_DEPTH",
    "ObstoreLister",
    "boundaries",
    "dir_row",
    "file_row",
]
