"""Removing through fsspec (object stores, sftp, ...): manifest rows looked at again and removed in bulk
requests, and a tree lister that deletes each listing's keys as it goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.remove.backends import Entry, EntryRemover, Found, ListingTreeRemover, pooled
from operators.remove.counts import FAILED, NONEMPTY, RmCounts
from operators.rows import Row, etag_of, with_error
from operators.safety import resolve_under
from operators.scan.remote import FLAT_PROTOCOLS, FsspecLister

if TYPE_CHECKING:
    from operators.remove.tasks import RemoveSpec

S3_BATCH = 1000  # keys per bulk delete request


class FsspecRemover(EntryRemover[str]):
    """Removing through fsspec (object stores, sftp, ...)."""

    def __init__(self, spec: RemoveSpec) -> None:
        self.spec = spec
        self.fs = spec.filesystem()

    def unlink_chunk(self, entries: list[Entry]) -> RmCounts:
        return pooled(self.spec, self.unlink, entries)

    def rmdir_chunk(self, rels: list[bytes], check: bool) -> RmCounts:
        return pooled(self.spec, lambda batch: self.rmdirs(batch, check), rels)

    def tree_lister(self) -> FsspecTreeRemover:
        return FsspecTreeRemover(self.spec)

    def locate(self, rel: bytes) -> str:
        resolve_under(self.spec.root_bytes, rel)  # refuses '..' and absolute paths
        return self.spec.remote(rel)

    def look(self, url: str) -> Found:
        info = self.fs.info(url)  # object stores report no mtime, inode or ctime here: not compared
        kind = {"file": "file", "directory": "directory"}.get(info.get("type"), "other")
        return kind, info.get("size"), None, None, None, etag_of(info) if kind == "file" else None

    def unlink_now(self, found: list[tuple[bytes, str, int]], counts: RmCounts) -> list[tuple[bytes, int]]:
        """One bulk request: its failure is every key's."""
        try:
            self.fs.rm([url for _, url, _ in found])
        except FileNotFoundError:
            pass
        except Exception as exc:
            for rel, _, _ in found:
                counts.problem(rel, FAILED, exc)
            return []
        return [(rel, size) for rel, _, size in found]

    def rmdirs(self, rels: list[bytes], check: bool) -> RmCounts:
        """Remove a batch of (empty) directories; object stores have none to remove."""
        spec = self.spec
        counts = RmCounts()
        if spec.protocol in FLAT_PROTOCOLS:
            return counts  # object stores: a "directory" is a key prefix and goes with its last key
        fs = self.fs
        for rel in rels:
            if spec.dry_run:
                counts.removed_dirs += 1
                continue
            try:
                fs.rmdir(spec.remote(rel))
                counts.removed_dirs += 1
            except FileNotFoundError:
                counts.skipped_missing += 1
            except OSError as exc:
                counts.problem(rel, NONEMPTY if fs.exists(spec.remote(rel)) else FAILED, exc)
        return counts


class FsspecTreeRemover(ListingTreeRemover):
    """A ``walk`` Lister over fsspec: lists like a scan, deletes each listing's keys in bulk."""

    batch = S3_BATCH

    def __init__(self, spec: RemoveSpec) -> None:
        tree = spec.prune is not None and spec.prune.needs_tree_walk  # prune prefixes instead of listing them
        super().__init__(
            spec, FsspecLister(spec.protocol, spec.root, spec.storage_options, flat=False if tree else None)
        )

    def delete(self, rows: list[Row]) -> list[Row]:
        try:
            self.lister.fs.rm([self.lister.full(r[0]) for r in rows])
        except FileNotFoundError:
            pass
        except Exception as exc:  # one bulk request: its failure is every key's
            return [with_error(r, exc) for r in rows]
        return rows
