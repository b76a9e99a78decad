"""Removing on S3, GCS and Azure Blob through ``obstore`` (``operators.stores``), as scan and cp reach them.

Manifest rows (``rm --manifest``) are each looked at again with a HEAD (unless changes are ignored) and
kept when the object is not the one the scan saw: the identity rule is the one every backend uses
(``operators.remove.backends._changed``), on the size, last-modified time and entity tag (ETag) the store
reports, the values the scan wrote.  Times are compared to the whole second on both sides: a HEAD's
``Last-Modified`` header has seconds only, while a listing may have milliseconds (GCS's does), and the
same object must not look replaced.  So the tag is what tells an object rewritten with the same size within
the same second; a row without one (a manifest of schema v1 or v2) is judged on size and time alone.

The rest go in bulk deletes (S3's DeleteObjects; one request an object on GCS and Azure, which ``obstore``
keeps many of in flight); a bulk request that fails is retried one object at a time, so that each object
gets its own error and the others still go.

A tree (``rm URL``) is listed by the scan's lister (``operators.scan.objstore.ObstoreLister``) and each
listing's keys are deleted as they come.  An object store has no directories: a prefix goes with its last
key, so there is nothing to ``rmdir``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import obstore

from operators.remove.backends import Entry, EntryRemover, Found, ListingTreeRemover, pooled
from operators.remove.counts import FAILED, RmCounts
from operators.rows import Row, _ns, with_error
from operators.safety import resolve_under
from operators.scan.objstore import ObstoreLister
from operators.stores import store_at

if TYPE_CHECKING:
    from operators.remove.tasks import RemoveSpec

DELETE_BATCH = 1000  # keys per bulk delete (S3's DeleteObjects maximum)
SECOND = 1_000_000_000  # ns: what a HEAD's Last-Modified resolves


def _to_second(entry: Entry) -> Entry:
    """The manifest row with its mtime (ns) down to the whole second, as a HEAD reports it."""
    mtime = entry[4]
    if mtime is None or mtime % SECOND == 0:
        return entry
    return (*entry[:4], mtime - mtime % SECOND, *entry[5:])


def delete_keys(store: Any, keys: Sequence[str]) -> dict[str, BaseException]:
    """Delete ``keys``; ``{key: error}`` of those that failed (a missing key is not a failure: it is gone).

    One bulk call first; if it fails as a whole, one call per key, so an error is the object's own."""
    if not keys:
        return {}
    try:
        obstore.delete(store, list(keys))
        return {}
    except FileNotFoundError:
        pass  # some key was gone already: find out which of the others failed, one by one
    except Exception:  # a bulk failure says nothing about which key: ask each
        pass
    failed: dict[str, BaseException] = {}
    for key in keys:
        try:
            obstore.delete(store, key)
        except FileNotFoundError:
            pass
        except Exception as exc:  # the object's own error, reported per object
            failed[key] = exc
    return failed


class ObstoreRemover(EntryRemover[str]):
    """Removing on an object store (``operators.remove.tasks.RemoveSpec.remover``)."""

    def __init__(self, spec: RemoveSpec) -> None:
        self.spec = spec
        self.store, self.key = store_at(spec.protocol, spec.root, spec.storage_options)

    def unlink_chunk(self, entries: list[Entry]) -> RmCounts:
        return pooled(self.spec, self.unlink, [_to_second(e) for e in entries])

    def rmdir_chunk(self, rels: list[bytes], check: bool) -> RmCounts:
        return RmCounts()  # a "directory" is a key prefix and goes with its last key

    def tree_lister(self) -> ObstoreTreeRemover:
        return ObstoreTreeRemover(self.spec)

    def locate(self, rel: bytes) -> str:
        resolve_under(self.spec.root_bytes, rel)  # refuses '..' and absolute paths
        name = rel.decode("utf-8", "surrogateescape")
        return f"{self.key}/{name}" if self.key else name

    def look(self, key: str) -> Found:
        meta = obstore.head(self.store, key)  # FileNotFoundError when it is gone
        mtime = _ns(meta["last_modified"])
        return "file", meta["size"], None if mtime is None else mtime - mtime % SECOND, None, None, meta.get("e_tag")

    def unlink_now(self, found: list[tuple[bytes, str, int]], counts: RmCounts) -> list[tuple[bytes, int]]:
        failed = delete_keys(self.store, [key for _, key, _ in found])
        gone = []
        for rel, key, size in found:
            if key in failed:
                counts.problem(rel, FAILED, failed[key])
            else:
                gone.append((rel, size))
        return gone


class ObstoreTreeRemover(ListingTreeRemover):
    """A ``walk`` Lister that lists like a scan (on obstore) and deletes each listing's keys in bulk as it goes."""

    batch = DELETE_BATCH

    def __init__(self, spec: RemoveSpec) -> None:
        tree = spec.prune is not None and spec.prune.needs_tree_walk  # prune prefixes instead of listing them
        super().__init__(spec, ObstoreLister(spec.protocol, spec.root, spec.storage_options, tree=tree))

    def delete(self, rows: list[Row]) -> list[Row]:
        failed = delete_keys(self.lister.store, [self.lister.full(r[0]) for r in rows])
        return [with_error(r, failed[k]) if (k := self.lister.full(r[0])) in failed else r for r in rows]


__all__ = ["DELETE_BATCH", "ObstoreRemover", "ObstoreTreeRemover", "delete_keys"]
