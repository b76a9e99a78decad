"""Removing entries: the engine-free work of one ``pfs rm`` task.

Three kinds of task, all returning counters and a bounded list of problems, never rows:

- :func:`remove_tree_chunk` walks a bounded slice of a live tree (``operators.walk``) and unlinks
  every non-directory as soon as its directory is listed.  Directories whose whole subtree was
  handled inside the task are removed there, deepest first; the others go back to the driver.
- :func:`unlink_entries` removes non-directory manifest rows, skipping entries that changed
  since the scan (``lstat`` type, size, mtime) unless told to ignore changes.
- :func:`rmdir_entries` removes directories (one depth level at a time, driven from outside);
  a directory that is still not empty is left and counted, not failed.

A tree walk may be pruned (``operators.prune``): what it leaves out is never unlinked, never
listed below, and the directories holding it are not removed (nor counted as left non-empty).

Symlinks are never followed: non-directories are unlinked (a link goes, its target stays),
directories are opened with ``O_NOFOLLOW`` before listing and entries are unlinked relative
to that descriptor, so a directory swapped for a link mid-run is not descended into.
"""

from __future__ import annotations

import errno
import os
import stat as st
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import fsspec

from .concurrency import in_flight_cap
from .dirfd import OpenDirs
from .names import decode, join, to_bytes
from .pool import get_pool
from .prune import DROP, STOP, Prune
from .ratelimit import take_ops
from .remote_scan import FLAT_PROTOCOLS, FsspecLister
from .rows import Row, describe_error, error_row, row_from_stat, with_error
from .safety import resolve_under
from .schema import ROW_COLUMNS
from .walk import Budget, DirItem, Listing, walk

BATCH = 64  # entries per pool job: a few syscalls each, so jobs stay cheap to schedule
S3_BATCH = 1000  # keys per bulk delete request
SAMPLES = 20

# status values in the failure log
FAILED, CHANGED, NONEMPTY = "failed", "changed", "nonempty"
_DEV = ROW_COLUMNS.index("dev")


@dataclass(frozen=True)
class RemoveSpec:
    """What every task of one run shares."""

    protocol: str  # "file" for local paths and mounts
    root: str  # path within the file system, no protocol
    storage_options: dict = field(default_factory=dict)
    threads: int | None = None
    dry_run: bool = False
    ignore_changes: bool = False
    sample_limit: int = SAMPLES
    prune: Prune | None = None  # tree mode: what the walk leaves in place

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    @property
    def root_bytes(self) -> bytes:
        return os.fsencode(self.root).rstrip(b"/") or b"/"

    def pool(self) -> ThreadPoolExecutor:
        return get_pool(self.threads, ((self.protocol, self.root),))

    def filesystem(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem(self.protocol, **self.storage_options)

    def remote(self, rel: bytes) -> str:
        return f"{self.root.rstrip('/')}/{rel.decode('utf-8', 'surrogateescape')}" if rel else self.root


@dataclass
class RmCounts:
    """Counters of one task (or of a whole run, once added up); ``problems`` is bounded per task."""

    removed_files: int = 0  # every non-directory: files, symlinks, sockets...
    removed_dirs: int = 0
    bytes: int = 0
    failed: int = 0
    skipped_changed: int = 0
    skipped_missing: int = 0
    skipped_nonempty: int = 0
    problems: list[tuple[bytes, str, str]] = field(default_factory=list)  # (path, status, error)
    samples: list[bytes] = field(default_factory=list)  # dry run: what would go

    COUNTERS = (
        "removed_files",
        "removed_dirs",
        "bytes",
        "failed",
        "skipped_changed",
        "skipped_missing",
        "skipped_nonempty",
    )

    def problem(self, rel: bytes, status: str, error: BaseException | str) -> None:
        if status == FAILED:
            self.failed += 1
        elif status == CHANGED:
            self.skipped_changed += 1
        else:
            self.skipped_nonempty += 1
        self.problems.append((rel, status, describe_error(error)))

    def sample(self, rel: bytes, limit: int) -> None:
        if len(self.samples) < limit:
            self.samples.append(rel)

    def add(self, other: RmCounts, sample_limit: int = SAMPLES) -> None:
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems)
        room = sample_limit - len(self.samples)
        if room > 0:
            self.samples.extend(other.samples[:room])

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.COUNTERS}


# ---------------------------------------------------------------- tree mode


def dir_row(rel: bytes, dev: int | None = None) -> Row:
    """A directory's row when only its name (and, for --one-file-system, its device) is known: the
    walk reports it once it is listed."""
    values: list = [None] * len(ROW_COLUMNS)
    values[0], values[1] = decode(rel)
    values[2] = "directory"
    values[_DEV] = dev
    return tuple(values)


class LocalTreeRemover:
    """A ``walk`` Lister that unlinks what it lists (or only lists, for a dry run)."""

    def __init__(self, root: bytes, dry_run: bool, prune: Prune | None = None) -> None:
        self.root = root
        self.dry_run = dry_run
        self.prune = prune if prune is not None and prune.active else None
        self.kept: set[bytes] = set()  # directories holding a non-directory the prune keeps in place
        self._open = OpenDirs(root, follow_root=False)

    def close(self) -> None:
        """Close the directories kept open for relative lookups (the end of a task)."""
        self._open.close()

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(b".", "directory", error)

    def list_dir(self, item: DirItem, pool: ThreadPoolExecutor) -> Listing:
        rel = item[0]
        assert isinstance(rel, bytes)
        listing = Listing(item)
        try:
            handle = self._open.open(rel)
        except FileNotFoundError:
            listing.vanished = True
            return listing
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                exc = OSError(exc.errno, "no longer a directory (not followed)")
            listing.error = exc
            return listing
        batch: list[bytes] = []
        try:
            with os.scandir(handle.fd) as it:
                for entry in it:
                    name = os.fsencode(entry.name)
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False  # lstat in the batch decides
                    if is_dir:
                        child = join(rel, name)
                        listing.subdirs.append((child, dir_row(child, self._device_of(entry))))
                        continue
                    if self.prune is not None and self.prune.decide(decode(join(rel, name))[0], False) == DROP:
                        self.kept.add(rel)  # never unlinked (the walk's prune would only see it after)
                        continue
                    batch.append(name)
                    if len(batch) >= BATCH:
                        listing.pending.append(handle.submit(pool, self.unlink_batch, rel, batch))
                        batch = []
        except OSError as exc:
            listing.error = exc
        try:
            listing.rows, more = self.unlink_batch(handle.fd, rel, batch)
        finally:
            handle.release()
        listing.subdirs.extend(more)
        return listing

    def _device_of(self, entry: os.DirEntry) -> int | None:
        """A subdirectory's st_dev, only when the prune stops at other file systems (one more lstat)."""
        if self.prune is None or self.prune.device is None:
            return None
        try:
            return entry.stat(follow_symlinks=False).st_dev
        except OSError:
            return None  # gone or unreadable: opening it tells

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
        tree = spec.prune is not None and spec.prune.needs_tree_walk
        self.lister = FsspecLister(spec.protocol, spec.root, spec.storage_options, flat=False if tree else None)
        self.dry_run = spec.dry_run
        self.prune = spec.prune if spec.prune is not None and spec.prune.active else None
        self.kept: set[bytes] = set()

    def root_error_row(self, error: BaseException) -> Row:
        return self.lister.root_error_row(error)

    def close(self) -> None:
        self.lister.close()

    def list_dir(self, item: DirItem, pool: ThreadPoolExecutor) -> Listing:
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


@dataclass
class TreeChunkResult:
    counts: RmCounts
    left_dirs: list[bytes]  # listed here, but some of their subtree was not: the driver removes them later
    frontier: list[DirItem]
    entries: int
    seconds: float
    kept_dirs: list[bytes] = field(default_factory=list)  # hold what the prune left: never removed


def remove_tree_chunk(spec: RemoveSpec, items: list[DirItem], budget: Budget) -> TreeChunkResult:
    """Walk below ``items`` within ``budget``, unlinking as it goes; remove the subtrees it finished."""
    start = time.monotonic()
    pool = spec.pool()
    lister = LocalTreeRemover(spec.root_bytes, spec.dry_run, spec.prune) if spec.is_local else FsspecTreeRemover(spec)
    counts = RmCounts()
    dirs: list[bytes] = []
    failed_dirs: list[bytes] = []

    def rel_of(row: Row) -> bytes:
        return to_bytes(row[0], row[1]) if spec.is_local else row[0].encode("utf-8", "surrogateescape")

    def on_pruned(row: Row, decision: str) -> None:
        rel = rel_of(row)
        lister.kept.add(rel if decision == STOP else rel.rpartition(b"/")[0])

    def emit(buf) -> None:
        rows, buf.rows = buf.rows, []
        for row in rows:
            rel = rel_of(row)
            if row[-1] is not None:
                counts.problem(rel, FAILED, row[-1])
                if row[2] == "directory":
                    failed_dirs.append(rel)
            elif row[2] == "directory":
                dirs.append(rel)
            else:
                counts.removed_files += 1
                counts.bytes += row[3] or 0
                if spec.dry_run:
                    counts.sample(rel, spec.sample_limit)

    try:
        tally, frontier = walk(
            lister, items, pool, in_flight_cap(spec.threads), budget, emit, prune=spec.prune, on_pruned=on_pruned
        )
    finally:
        lister.close()
    kept = ancestors(lister.kept)
    blocked = set()
    for rel in [r for r, _ in frontier] + failed_dirs:
        rel = rel if isinstance(rel, bytes) else rel.encode("utf-8", "surrogateescape")
        while rel and rel not in blocked:
            blocked.add(rel)
            rel = rel.rpartition(b"/")[0]
    done = [d for d in dirs if d not in blocked and d not in kept]
    left = [d for d in dirs if d in blocked and d not in failed_dirs and d not in kept]
    counts.add(rmdir_levels(spec, done, pool), spec.sample_limit)
    return TreeChunkResult(counts, left, frontier, tally.entries, time.monotonic() - start, sorted(kept))


def ancestors(rels: set[bytes]) -> set[bytes]:
    """``rels`` and every directory above them, up to the root (``b""``)."""
    out: set[bytes] = set()
    for rel in rels:
        while rel not in out:
            out.add(rel)
            if not rel:
                break
            rel = rel.rpartition(b"/")[0]
    return out


# ---------------------------------------------------------------- directories


def rmdir_levels(spec: RemoveSpec, rels: list[bytes], pool: ThreadPoolExecutor | None = None) -> RmCounts:
    """Remove directories deepest level first, each level in parallel on the pool."""
    pool = pool or spec.pool()
    counts = RmCounts()
    by_depth: dict[int, list[bytes]] = {}
    for rel in rels:
        by_depth.setdefault(rel.count(b"/") + 1 if rel else 0, []).append(rel)
    for depth in sorted(by_depth, reverse=True):
        level = by_depth[depth]
        jobs = [pool.submit(_rmdir_batch, spec, level[i : i + BATCH], False) for i in range(0, len(level), BATCH)]
        for job in jobs:
            counts.add(job.result(), spec.sample_limit)
    return counts


def rmdir_entries(spec: RemoveSpec, rels: list[bytes], check: bool = True) -> RmCounts:
    """Remove a chunk of directories of one depth level (manifest mode and the driver's last pass)."""
    pool = spec.pool()
    counts = RmCounts()
    jobs = [pool.submit(_rmdir_batch, spec, rels[i : i + BATCH], check) for i in range(0, len(rels), BATCH)]
    for job in jobs:
        counts.add(job.result(), spec.sample_limit)
    return counts


def _rmdir_batch(spec: RemoveSpec, rels: list[bytes], check: bool) -> RmCounts:
    counts = RmCounts()
    take_ops(len(rels))
    if not spec.is_local:
        return _rmdir_remote(spec, rels, counts)
    root = spec.root_bytes
    for rel in rels:
        full = resolve_under(root, rel) if rel else root
        if check and not spec.ignore_changes:
            try:
                s = os.lstat(full)
            except FileNotFoundError:
                counts.skipped_missing += 1
                continue
            except OSError as exc:
                counts.problem(rel, FAILED, exc)
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


def _rmdir_remote(spec: RemoveSpec, rels: list[bytes], counts: RmCounts) -> RmCounts:
    if spec.protocol in FLAT_PROTOCOLS:
        return counts  # object stores: a "directory" is a key prefix and goes with its last key
    fs = spec.filesystem()
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


# ---------------------------------------------------------------- manifest mode

# one manifest row as the driver ships it: (path, path_raw, type, size, mtime ns)
Entry = tuple[str, bytes | None, str, int | None, int | None]


def unlink_entries(spec: RemoveSpec, entries: list[Entry]) -> RmCounts:
    """Remove a chunk of non-directory manifest rows; rows that changed since the scan are skipped."""
    pool = spec.pool()
    counts = RmCounts()
    func = _unlink_local if spec.is_local else _unlink_remote
    jobs = [pool.submit(func, spec, entries[i : i + BATCH]) for i in range(0, len(entries), BATCH)]
    for job in jobs:
        counts.add(job.result(), spec.sample_limit)
    return counts


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


def _unlink_local(spec: RemoveSpec, entries: list[Entry]) -> RmCounts:
    from .rows import type_of_mode

    counts = RmCounts()
    take_ops(len(entries))
    root = spec.root_bytes
    for entry in entries:
        rel = to_bytes(entry[0], entry[1])
        full = resolve_under(root, rel)
        size = entry[3]
        if not spec.ignore_changes:
            try:
                s = os.lstat(full)
            except FileNotFoundError:
                counts.skipped_missing += 1
                continue
            except OSError as exc:
                counts.problem(rel, FAILED, exc)
                continue
            why = _changed(entry, type_of_mode(s.st_mode), s.st_size, s.st_mtime_ns)
            if why:
                counts.problem(rel, CHANGED, why)
                continue
            size = s.st_size
        if spec.dry_run:
            counts.sample(rel, spec.sample_limit)
        else:
            try:
                os.unlink(full)
            except FileNotFoundError:
                counts.skipped_missing += 1
                continue
            except OSError as exc:
                counts.problem(rel, FAILED, exc)
                continue
        counts.removed_files += 1
        counts.bytes += size or 0
    return counts


def _unlink_remote(spec: RemoveSpec, entries: list[Entry]) -> RmCounts:
    counts = RmCounts()
    take_ops(len(entries))
    fs = spec.filesystem()
    go: list[tuple[bytes, str, int]] = []
    for entry in entries:
        rel = to_bytes(entry[0], entry[1])
        resolve_under(spec.root_bytes, rel)  # refuses '..' and absolute paths
        url = spec.remote(rel)
        size = entry[3] or 0
        if not spec.ignore_changes:
            try:
                info = fs.info(url)
            except FileNotFoundError:
                counts.skipped_missing += 1
                continue
            except Exception as exc:
                counts.problem(rel, FAILED, exc)
                continue
            kind = {"file": "file", "directory": "directory"}.get(info.get("type"), "other")
            why = _changed((*entry[:4], None), kind, info.get("size"), None)
            if why:
                counts.problem(rel, CHANGED, why)
                continue
        go.append((rel, url, size))
    if go and not spec.dry_run:
        try:
            fs.rm([url for _, url, _ in go])
        except FileNotFoundError:
            pass
        except Exception as exc:
            for rel, _, _ in go:
                counts.problem(rel, FAILED, exc)
            return counts
    for rel, _, size in go:
        counts.removed_files += 1
        counts.bytes += size
        if spec.dry_run:
            counts.sample(rel, spec.sample_limit)
    return counts


def text_of(rel: bytes) -> tuple[str, bytes | None]:
    """``(path, path_raw)`` as the manifest and the failure log store them."""
    return decode(rel)
