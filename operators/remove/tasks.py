"""Removing entries: the engine-free work of one ``pfs rm`` task.

Three kinds of task, all returning counters and a bounded list of problems, never rows:

- :func:`remove_tree_chunk` walks a bounded slice of a live tree (``operators.scan.walk``) and unlinks
  every non-directory as soon as its directory is listed.  Directories whose whole subtree was
  handled inside the task are removed there, deepest first; the others go back to the driver.
- :func:`unlink_entries` removes non-directory manifest rows, skipping entries that are not the
  ones the scan saw (type, size, mtime, inode, ctime from the ``lstat`` made anyway: the core's
  ``Expect::differs``; on an object store also the entity tag: ``operators.remove.backends._changed``)
  unless told to ignore changes.
- :func:`rmdir_entries` removes directories (one depth level at a time, driven from outside);
  a directory that is still not empty is left and counted, not failed.

A tree walk may be pruned (``operators.scan.prune``): what it leaves out is never unlinked, never
listed below, and the directories holding it are not removed (nor counted as left non-empty).

Symlinks are never followed: non-directories are unlinked (a link goes, its target stays),
directories are opened with ``O_NOFOLLOW`` before listing and entries are unlinked relative
to that descriptor, so a directory swapped for a link mid-run is not descended into.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import pyarrow as pa

from operators.core.concurrency import in_flight_cap
from operators.core.pool import get_pool
from operators.names import to_bytes
from operators.remove.backends import ENTRY_COLUMNS, Entry, LocalRemover
from operators.remove.counts import FAILED, SAMPLES, RmCounts
from operators.remove.fsspec import FsspecRemover
from operators.root_identity import RootIdentity, host_pin, job_pin
from operators.rows import Row, error_of
from operators.safety import check_paths, row_damage
from operators.scan.prune import STOP, Prune
from operators.scan.walk import Budget, DirItem, walk
from operators.stores import is_store

if TYPE_CHECKING:
    import fsspec

    from operators.remove.objstore import ObstoreRemover


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
    root_id: RootIdentity | None = None  # the local root's identity when the job started: every host refuses another

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")

    @property
    def root_bytes(self) -> bytes:
        return os.fsencode(self.root).rstrip(b"/") or b"/"

    def pool(self) -> Executor:
        return get_pool(self.threads, ((self.protocol, self.root),))

    def filesystem(self) -> fsspec.AbstractFileSystem:
        import fsspec  # only for a remote tree: a local rm never imports it (issue 43)

        return fsspec.filesystem(self.protocol, **self.storage_options)

    def remote(self, rel: bytes) -> str:
        return f"{self.root.rstrip('/')}/{rel.decode('utf-8', 'surrogateescape')}" if rel else self.root

    def pinned(self) -> RemoveSpec:
        """This spec with the root's identity now (the job starting): from then on the core refuses
        another directory renamed into the root's place."""
        return replace(self, root_id=job_pin(self.root, self.is_local))

    def here(self) -> RemoveSpec:
        """This spec on this host: ``--one-file-system``'s device is this host's own mount of the root
        (a device number is per host: ``operators.root_identity``), checked against the job's root."""
        if self.prune is None or self.prune.device is None or self.root_id is None:
            return self
        pinned = host_pin(self.root, self.root_id)
        return replace(self, prune=replace(self.prune, device=pinned[0])) if pinned else self

    def remover(self) -> LocalRemover | ObstoreRemover | FsspecRemover:
        """The backend for this file system (``operators.remove.backends``): S3, GCS and Azure on obstore."""
        if self.is_local:
            return LocalRemover(self)
        if is_store(self.protocol):
            from operators.remove.objstore import ObstoreRemover  # ~20 ms of obstore: only a job on a store pays it

            return ObstoreRemover(self)
        return FsspecRemover(self)


# ---------------------------------------------------------------- tree mode


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
    spec = spec.here()
    pool = spec.pool()
    remover = spec.remover()
    lister = remover.tree_lister()
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
            if (error := error_of(row)) is not None:
                counts.problem(rel, FAILED, error)
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
    counts.add(lister.counts, spec.sample_limit)  # what the lister removed without rows (the native core)
    kept = ancestors(lister.kept)
    blocked = set()
    for rel in [r for r, _ in frontier] + failed_dirs:
        rel = rel if isinstance(rel, bytes) else rel.encode("utf-8", "surrogateescape")
        while rel and rel not in blocked:
            blocked.add(rel)
            rel = rel.rpartition(b"/")[0]
    done = [d for d in dirs if d not in blocked and d not in kept]
    left = [d for d in dirs if d in blocked and d not in failed_dirs and d not in kept]
    by_depth: dict[int, list[bytes]] = {}
    for rel in done:
        by_depth.setdefault(rel.count(b"/") + 1 if rel else 0, []).append(rel)
    for depth in sorted(by_depth, reverse=True):  # deepest level first, each level in parallel
        counts.add(remover.rmdir_chunk(by_depth[depth], False), spec.sample_limit)
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


# ---------------------------------------------------------------- manifest mode (and the driver's last pass)


def rmdir_entries(spec: RemoveSpec, rels: list[bytes], check: bool = True) -> RmCounts:
    """Remove a chunk of directories of one depth level (manifest mode and the driver's last pass)."""
    return spec.remover().rmdir_chunk(rels, check)


def unlink_entries(spec: RemoveSpec, entries: list[Entry]) -> RmCounts:
    """Remove a chunk of non-directory manifest rows; rows that changed since the scan are skipped."""
    return spec.remover().unlink_chunk(entries)


# ---------------------------------------------------------------- manifest rows as the driver ships them


# the columns the safety pass ships: name, parent and depth are checked in SQL before (``ROW_DAMAGE``)
CONSISTENT = ("path", "path_raw")


ALL_CONSISTENT = ("path", "path_raw", "name", "parent", "depth")  # what ``row_damage`` compares


def batch_rels(batch: pa.RecordBatch | pa.Table) -> list[bytes]:
    """Exact path bytes of an Arrow batch (or table) with ``path`` and ``path_raw`` columns."""
    paths, raws = batch.column("path").to_pylist(), batch.column("path_raw").to_pylist()
    return [raw if raw is not None else path.encode("utf-8") for path, raw in zip(paths, raws, strict=True)]


@dataclass
class Checked:
    """What the safety pass found in one batch: rows that could act outside the root, rows that
    disagree with their own path (a damaged manifest), each counted with a few samples."""

    refused: int = 0
    samples: list[tuple[bytes, str]] = field(default_factory=list)
    damaged: int = 0
    damage: list[tuple[bytes, str]] = field(default_factory=list)


def check_batch(spec: RemoveSpec, batch: pa.RecordBatch) -> Checked:
    """The safety pass over one Arrow batch of (path, path_raw): every row stays below the root and
    its raw bytes are its path's (``operators.safety.row_damage``; a batch carrying name, parent or
    depth has them checked too)."""
    rels = batch_rels(batch)
    out = Checked(*check_paths(spec.root_bytes, rels, spec.is_local))
    n = batch.num_rows
    cols = {c: batch.column(c).to_pylist() if c in batch.schema.names else [None] * n for c in ALL_CONSISTENT}
    for rel, *row in zip(rels, *cols.values(), strict=True):
        if row[1] is None and row[2] is None and row[3] is None and row[4] is None:
            continue  # a UTF-8 path, and nothing else to compare: the common case, no work
        why = row_damage(*row)
        if why is not None:
            out.damaged += 1
            if len(out.damage) < SAMPLES:
                out.damage.append((rel, why))
    return out


def unlink_batch(spec: RemoveSpec, batch: pa.RecordBatch | pa.Table) -> RmCounts:
    """The unlink pass over one Arrow batch of manifest rows (path, path_raw, type, size, mtime us,
    ino, ctime us, etag: ``dask_pfs.remove.journal.IDENTITY_COLUMNS``)."""
    cols = [batch.column(n).to_pylist() for n in ENTRY_COLUMNS]
    for i in (4, 6):  # microseconds, any year, to the entries' ns
        cols[i] = [None if us is None else us * 1000 for us in cols[i]]
    return unlink_entries(spec, list(zip(*cols, strict=True)))


__all__ = ["RemoveSpec", "RmCounts", "TreeChunkResult", "check_batch", "remove_tree_chunk", "unlink_batch"]
