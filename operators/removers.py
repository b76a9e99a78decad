"""Where removing happens: one backend per kind of file system, chosen once per task.

A backend lists a tree while removing it (:meth:`tree_lister`, a ``walk`` Lister), unlinks a
batch of manifest rows (:meth:`unlink`) and removes a batch of directories (:meth:`rmdirs`).
:class:`LocalRemover` works relative to open directory descriptors on local and mounted file
systems (its tree lister is ``tree_listing.TreeLister`` with an unlink per batch: the seam a native
core can replace); :class:`FsspecRemover` deletes through fsspec, in bulk requests.
"""

from __future__ import annotations

import errno
import os
import stat as st
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Generic, TypeVar

from .names import decode, join, to_bytes
from .prune import DROP
from .ratelimit import take_ops
from .remote_scan import FLAT_PROTOCOLS, FsspecLister
from .rm_counts import CHANGED, FAILED, NONEMPTY, RmCounts
from .rows import Row, dir_row, error_row, row_from_stat, type_of_mode, with_error
from .safety import resolve_under
from .tree_listing import TreeLister
from .walk import DirItem, Listing

if TYPE_CHECKING:
    from .prune import Prune
    from .remove import RemoveSpec

BATCH = 64  # entries per pool job: a few syscalls each, so jobs stay cheap to schedule
S3_BATCH = 1000  # keys per bulk delete request

P = TypeVar("P", bytes, str)  # where an entry is: a local path, or a URL

# one manifest row as the driver ships it: (path, path_raw, type, size, mtime ns)
Entry = tuple[str, bytes | None, str, int | None, int | None]


class _Remover(Generic[P]):
    """How manifest rows are removed, whatever the file system: each is looked at again (unless
    changes are ignored) and skipped when it changed since the scan, then the rest go at once."""

    spec: RemoveSpec

    def unlink(self, entries: list[Entry]) -> RmCounts:
        """Remove a batch of non-directory manifest rows, skipping those that changed since the scan."""
        counts = RmCounts()
        found: list[tuple[bytes, P, int]] = []
        for entry in entries:
            rel = to_bytes(entry[0], entry[1])
            where = self.locate(rel)
            size = entry[3]
            if not self.spec.ignore_changes:
                _, now = counts.tried(rel, self.look, where)
                if now is None:
                    continue
                kind, size_now, mtime_now = now
                why = _changed(entry, kind, size_now, mtime_now)
                if why:
                    counts.problem(rel, CHANGED, why)
                    continue
                size = size_now if size_now is not None else size
            found.append((rel, where, size or 0))
        gone = [(rel, size) for rel, _, size in found] if self.spec.dry_run else self.unlink_now(found, counts)
        for rel, size in gone:
            counts.removed_files += 1
            counts.bytes += size
            if self.spec.dry_run:
                counts.sample(rel, self.spec.sample_limit)
        return counts

    def locate(self, rel: bytes) -> P:
        """Where ``rel`` is (checked to stay below the root)."""
        raise NotImplementedError

    def look(self, where: P) -> tuple[str, int | None, int | None]:
        """(type, size, mtime in ns or None) of what is there now; FileNotFoundError when nothing is."""
        raise NotImplementedError

    def unlink_now(self, found: list[tuple[bytes, P, int]], counts: RmCounts) -> list[tuple[bytes, int]]:
        """Remove ``(rel, where, size)`` each; ``(rel, size)`` of those removed, problems into ``counts``."""
        raise NotImplementedError


class LocalRemover(_Remover[bytes]):
    """Removing on a local or mounted file system; symlinks are never followed."""

    def __init__(self, spec: RemoveSpec) -> None:
        self.spec = spec

    def tree_lister(self) -> LocalTreeRemover:
        return LocalTreeRemover(self.spec.root_bytes, self.spec.dry_run, self.spec.prune)

    def locate(self, rel: bytes) -> bytes:
        return resolve_under(self.spec.root_bytes, rel)

    def look(self, path: bytes) -> tuple[str, int | None, int | None]:
        s = os.lstat(path)
        return type_of_mode(s.st_mode), s.st_size, s.st_mtime_ns

    def unlink_now(self, found: list[tuple[bytes, bytes, int]], counts: RmCounts) -> list[tuple[bytes, int]]:
        return [(rel, size) for rel, path, size in found if counts.tried(rel, os.unlink, path)[0]]

    def rmdirs(self, rels: list[bytes], check: bool) -> RmCounts:
        """Remove a batch of directories of one depth level; ``check``: only if still directories."""
        spec = self.spec
        counts = RmCounts()
        root = spec.root_bytes
        for rel in rels:
            full = resolve_under(root, rel) if rel else root
            if check and not spec.ignore_changes:
                _, s = counts.tried(rel, os.lstat, full)
                if s is None:
                    continue
                if not st.S_ISDIR(s.st_mode):
                    counts.problem(rel, CHANGED, "no longer a directory")
                    continue
            if spec.dry_run:
                counts.removed_dirs += 1
                counts.sample(rel, spec.sample_limit)
                continue
            try:
                os.rmdir(full)
                counts.removed_dirs += 1
            except FileNotFoundError:
                counts.skipped_missing += 1
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    counts.problem(rel, NONEMPTY, "directory not empty: left in place")
                elif exc.errno == errno.ENOTDIR:
                    counts.problem(rel, CHANGED, "no longer a directory")
                else:
                    counts.problem(rel, FAILED, exc)
        return counts


class FsspecRemover(_Remover[str]):
    """Removing through fsspec (object stores, sftp, ...)."""

    def __init__(self, spec: RemoveSpec) -> None:
        self.spec = spec
        self.fs = spec.filesystem()

    def tree_lister(self) -> FsspecTreeRemover:
        return FsspecTreeRemover(self.spec)

    def locate(self, rel: bytes) -> str:
        resolve_under(self.spec.root_bytes, rel)  # refuses '..' and absolute paths
        return self.spec.remote(rel)

    def look(self, url: str) -> tuple[str, int | None, int | None]:
        info = self.fs.info(url)
        return {"file": "file", "directory": "directory"}.get(info.get("type"), "other"), info.get("size"), None

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


class LocalTreeRemover(TreeLister):
    """A ``walk`` Lister that lists like the scan and unlinks each batch of what it lists (only lists,
    for a dry run): directories go on by their ``d_type``, never through a symlink, root included."""

    follow_root = False
    dirs_by_type = True
    small_batch = large_batch = BATCH
    spread = 0

    def __init__(self, root: bytes, dry_run: bool, prune: Prune | None = None) -> None:
        super().__init__(root)
        self.dry_run = dry_run
        self.prune = prune if prune is not None and prune.active else None
        self.kept: set[bytes] = set()  # directories holding a non-directory the prune keeps in place

    def subdir(self, child: bytes, entry: os.DirEntry) -> DirItem:
        """With ``--one-file-system``, the directory's device (one more lstat) for the walk's prune."""
        if self.prune is None or self.prune.device is None:
            return child, dir_row(child)
        try:
            return child, dir_row(child, entry.stat(follow_symlinks=False).st_dev)
        except OSError:
            return child, dir_row(child)  # gone or unreadable: opening it tells

    def open_failed(self, rel: bytes, exc: OSError, listing: Listing) -> None:
        if isinstance(exc, FileNotFoundError):
            listing.vanished = True
        elif exc.errno in (errno.ELOOP, errno.ENOTDIR):
            listing.error = OSError(exc.errno, "no longer a directory (not followed)")
        else:
            listing.error = exc

    def batch(self, dir_fd: int, rel: bytes, names: list[tuple[bytes, bool]]) -> tuple[list[Row], list[DirItem]]:
        if self.prune is None:
            return self.unlink_batch(dir_fd, rel, [name for name, _ in names])
        go = []
        for name, _ in names:  # never unlinked: the walk's prune would see the row only after
            if self.prune.decide(decode(join(rel, name))[0], False) == DROP:
                self.kept.add(rel)
            else:
                go.append(name)
        return self.unlink_batch(dir_fd, rel, go)

    def unlink_batch(self, fd: int, rel: bytes, names: list[bytes]) -> tuple[list[Row], list[DirItem]]:
        rows: list[Row] = []
        subdirs: list[DirItem] = []
        for name in names:
            path = join(rel, name)
            take_ops()
            try:
                s = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                rows.append(error_row(path, "other", exc))
                continue
            if st.S_ISDIR(s.st_mode):  # d_type was unknown, or it was replaced since the listing
                subdirs.append((path, dir_row(path, s.st_dev)))
                continue
            row = row_from_stat(path, s)
            if not self.dry_run:
                try:
                    os.unlink(name, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    row = with_error(row, exc)
            rows.append(row)
        return rows, subdirs


class FsspecTreeRemover:
    """A ``walk`` Lister over fsspec: lists like a scan, deletes each listing's keys in bulk."""

    def __init__(self, spec: RemoveSpec) -> None:
        tree = spec.prune is not None and spec.prune.needs_tree_walk  # prune prefixes instead of listing them
        self.lister = FsspecLister(spec.protocol, spec.root, spec.storage_options, flat=False if tree else None)
        self.dry_run = spec.dry_run
        self.prune = spec.prune if spec.prune is not None and spec.prune.active else None
        self.kept: set[bytes] = set()

    def root_error_row(self, error: BaseException) -> Row:
        return self.lister.root_error_row(error)

    def close(self) -> None:
        self.lister.close()

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        listing = self.lister.list_dir(item, pool)
        files = [r for r in listing.rows if r[2] != "directory"]
        if self.prune is not None:
            keep = []
            for r in files:
                if self.prune.decide(r[0], False) == DROP:
                    self.kept.add(r[0].rpartition("/")[0].encode("utf-8", "surrogateescape"))
                else:
                    keep.append(r)
            files = keep
        dirs = [r for r in listing.rows if r[2] == "directory"]
        listing.rows = dirs
        for start in range(0, len(files), S3_BATCH):
            listing.pending.append(pool.submit(self.rm_batch, files[start : start + S3_BATCH]))
        return listing

    def rm_batch(self, rows: list[Row]) -> tuple[list[Row], list[DirItem]]:
        if self.dry_run or not rows:
            return rows, []
        take_ops(len(rows))
        try:
            self.lister.fs.rm([self.lister.full(r[0]) for r in rows])
        except FileNotFoundError:
            pass
        except Exception as exc:  # one bulk request: its failure is every key's
            return [with_error(r, exc) for r in rows], []
        return rows, []


def _changed(entry: Entry, kind: str, size: int | None, mtime_ns: int | None) -> str | None:
    _, _, want_kind, want_size, want_mtime = entry
    if kind != want_kind:
        return f"type {want_kind} -> {kind}"
    if want_size is not None and size is not None and want_size != size:
        return f"size {want_size} -> {size}"
    # DuckDB may hand timestamps back at microsecond precision: compare at that precision
    if want_mtime is not None and mtime_ns is not None and want_mtime // 1000 != mtime_ns // 1000:
        return "mtime differs from the manifest"
    return None
