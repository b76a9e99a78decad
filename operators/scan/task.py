"""One scan task: walk a bounded slice of the tree and write its rows as Parquet parts.

This is the function the engine ships to workers.  It returns only counters, the names of
the parts it wrote and the directories it did not get to, never rows, so the driver's
memory does not grow with the tree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import pyarrow as pa

from operators.checksum import Sums, checksum_local_files, checksum_many, checksum_remote, fill_table
from operators.core.concurrency import in_flight_cap
from operators.core.pool import get_pool
from operators.names import to_bytes
from operators.objmeta import fill_object_xattrs, has_metadata
from operators.parts import part_name, release_arrow_memory, write_parts
from operators.root_identity import RootIdentity, check_root
from operators.rows import ROW_COLUMNS, RowBuffer
from operators.scan.local import LocalLister
from operators.scan.prune import Prune
from operators.scan.remote import FsspecLister
from operators.scan.walk import Budget, DirItem, Tally, walk
from operators.scan.writer import PartWriter
from operators.stores import is_store
from operators.xattrs import fill_xattrs

_DEV = ROW_COLUMNS.index("dev")


@dataclass(frozen=True)
class ScanSpec:
    """Where to scan and where to write; the same for every task of a scan."""

    protocol: str  # "file" takes the scandir fast path
    root: str  # path within the file system, no protocol
    out_url: str
    storage_options: dict = field(default_factory=dict)
    out_storage_options: dict = field(default_factory=dict)
    threads: int | None = None
    flush_rows: int = 100_000  # a part's rows; a task holds two at most (operators.scan.writer)
    checksum: str | None = None  # algorithm: fill the checksum column of files (operators.checksum)
    prune: Prune | None = None  # what the walk leaves out (--exclude, --include, --max-depth, -x)
    xattrs: bool = False  # fill the xattrs/has_acl columns (operators.xattrs; S3: operators.objmeta)
    root_id: RootIdentity | None = None  # a local root's identity when the scan began (operators.root_identity)

    def lister(self):
        if self.protocol in ("file", "local"):
            return LocalLister(self.root, self.prune, self.threads)
        tree = self.prune is not None and self.prune.needs_tree_walk  # prune prefixes instead of listing them
        if is_store(self.protocol):  # S3, GCS, Azure: obstore (operators.stores), imported only for them
            from operators.scan.objstore import ObstoreLister

            return ObstoreLister(self.protocol, self.root, self.storage_options, tree=tree)
        return FsspecLister(self.protocol, self.root, self.storage_options, flat=False if tree else None)


@dataclass
class ChunkResult:
    task_id: str
    parts: list[str]
    tally: Tally
    frontier: list[DirItem]
    seconds: float


def one_numbering(table: pa.Table, here: tuple[int, int] | None, job: RootIdentity | None) -> pa.Table:
    """Rows of the root's file system with the job's device number, not this host's: a device number is
    per host (``operators.root_identity``), and a manifest's ``(dev, ino)`` groups hard links (cp) across
    rows that different hosts scanned.  Entries of other file systems below the root keep this host's."""
    if here is None or job is None or here[0] == job.dev:
        return table
    import pyarrow.compute as pc  # only on another host's mount: ~30 ms of every 1-file command otherwise

    i = table.schema.get_field_index("dev")
    col = table.column(i)
    ours = pc.equal(col, pa.scalar(here[0], col.type))
    return table.set_column(i, table.schema.field(i), pc.if_else(ours, pa.scalar(job.dev, col.type), col))


def frontier_numbering(
    frontier: list[DirItem], here: tuple[int, int] | None, job: RootIdentity | None
) -> list[DirItem]:
    """The directories handed back with their rows in the job's device numbering too: the task that walks
    one (maybe on another host) writes the directory's own row from it (:func:`one_numbering`)."""
    if here is None or job is None or here[0] == job.dev:
        return frontier
    fix = lambda row: row[:_DEV] + (job.dev,) + row[_DEV + 1 :] if row is not None and row[_DEV] == here[0] else row  # noqa: E731
    return [(path, fix(row)) for path, row in frontier]


def scan_chunk(spec: ScanSpec, items: list[DirItem], task_id: str, budget: Budget) -> ChunkResult:
    """Walk below ``items`` within ``budget``; write parts named after ``task_id``."""
    start = time.monotonic()
    here = check_root(spec.root, spec.root_id)  # an unmounted root would list as empty
    if here is not None and spec.prune is not None and spec.prune.device is not None:
        spec = replace(spec, prune=replace(spec.prune, device=here[0]))  # -x: this host's device of the root
    parts: list[str] = []
    lister = spec.lister()
    on_store = is_store(spec.protocol)  # an ObstoreLister (ScanSpec.lister): obstore is imported for stores only
    if isinstance(lister, LocalLister):  # a step's descent stays a small share of the task's budget
        lister.descend = min(lister.descend, budget.max_entries // 16)
    sum_failures: list[str] = []

    algorithm = spec.checksum or ""  # only called when there is one

    def sums_of(files: list[tuple[str, bytes | None, int | None]]) -> Sums:
        if isinstance(lister, LocalLister):  # the core, in one call per part
            return checksum_local_files(lister.root, [to_bytes(p, raw) for p, raw, _ in files], algorithm,
                                        [size for _, _, size in files], root_id=spec.root_id)  # fmt: skip
        if on_store:
            return checksum_many(files, lambda f: lister.checksum(f[0], algorithm))
        return checksum_many(files, lambda f: checksum_remote(lister.fs, lister.full(f[0]), algorithm))

    def write(buf: RowBuffer) -> None:
        if len(buf):
            table = one_numbering(buf.take_table(), here, spec.root_id)
            if spec.checksum:
                table, failed = fill_table(table, sums_of)
                sum_failures.extend(failed)
            if spec.xattrs and isinstance(lister, LocalLister):
                table, failed = fill_xattrs(table, lister.root, spec.threads)
                sum_failures.extend(failed)
            elif spec.xattrs and has_metadata(spec.protocol):  # S3 user metadata as user.* (operators.objmeta)
                assert on_store  # S3 is listed on obstore
                table, failed = fill_object_xattrs(table, lister.metadata, spec.threads)
                sum_failures.extend(failed)
            seq = len(parts)  # a big flush is written as several parts at once (operators.parts.write_parts)
            parts.extend(
                write_parts(table, spec.out_url, lambda i: part_name(task_id, seq + i), spec.out_storage_options)
            )
            del table
            release_arrow_memory()

    # a part's checksums and attributes read the tree: they stay on the walk's thread, within its bounds
    writer = PartWriter(write) if not (spec.checksum or spec.xattrs) else None
    cap = in_flight_cap(spec.threads)
    pool = get_pool(spec.threads, ((spec.protocol, spec.root),))
    try:
        emit = writer.submit if writer is not None else write
        tally, frontier = walk(lister, items, pool, cap, budget, emit, spec.flush_rows, spec.prune)
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    finally:
        lister.close()
    if writer is not None:
        writer.close()
    check_root(spec.root, spec.root_id)  # unmounted meanwhile: what this task listed may be incomplete
    tally.errors += len(sum_failures)
    tally.error_samples.extend(sum_failures[: max(0, 5 - len(tally.error_samples))])
    frontier = frontier_numbering(frontier, here, spec.root_id)
    return ChunkResult(task_id, parts, tally, frontier, time.monotonic() - start)
