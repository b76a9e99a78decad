"""The two sides a comparison needs (``verify``, ``sync``): complete manifests, with checksums when asked.

A side is a manifest from an earlier scan, or a live tree scanned now (both sides at once on one
cluster).  A manifest whose selected files carry no checksum of the wanted algorithm gets a
checksum pass: its rows in chunks on the cluster, each chunk written as a part of a derived
manifest, so a comparison never trusts size and mtime when content was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import Manifest, Selection, open_manifest, prepare_output, write_marker
from dask_pfs.manifests.root import pinned_root
from dask_pfs.manifests.sql import Filter
from dask_pfs.options import named
from dask_pfs.runtime.progress import NullProgress, Reporter
from dask_pfs.runtime.submitter import Submitter
from dask_pfs.scan.engine import scan_tree
from dask_pfs.urls import resolve
from operators.checksum import checksum_table
from operators.core.pool import CarryingPool
from operators.parts import part_name
from operators.scan.prune import Prune
from operators.scan.remote import FLAT_PROTOCOLS

if TYPE_CHECKING:
    from distributed import Client

CHUNK_ROWS = 2000  # rows per checksum task


@dataclass
class Side:
    """One side of a comparison: a complete manifest and the root its rows are relative to."""

    manifest: Manifest
    root: str
    storage_options: dict = field(default_factory=dict)
    scanned_errors: int = 0

    @property
    def flat(self) -> bool:
        return resolve(self.root, self.storage_options).protocol in FLAT_PROTOCOLS


def manifest_side(url: str, root: str | None, storage_options: dict | None) -> Side:
    """A side from an earlier scan; ``root`` reads its rows below another location than its own root."""
    m = open_manifest(url)
    return Side(m, root or m.root, storage_options or {}, int((m.info.get("counts") or {}).get("errors", 0)))


def scan_sides(
    client: Client,
    sides: list[Side | None],
    jobs: list[tuple[str, str, dict | None] | None],
    checksum: str | None,
    threads: int | None,
    progress: Reporter | None = None,
    prune: Prune | None = None,
    xattrs: bool = False,
) -> list[Side]:
    """Every side: the one given, else its job ``(url, out, storage_options)`` scanned, all at once on
    one cluster (``prune``: what both scans leave out, ``operators.scan.prune``; ``xattrs``: scans
    record attributes, ``operators.xattrs``)."""

    def one(url: str, out: str, options: dict | None) -> Side:
        result = scan_tree(
            client,
            url,
            out,
            progress or NullProgress(),
            threads=threads,
            overwrite=True,
            storage_options=options,
            checksum=checksum,
            prune=prune,
            xattrs=xattrs,
        )
        return Side(open_manifest(out), result.root, options or {}, result.failed)

    with CarryingPool(max(1, len(jobs))) as pool:  # the scans run under the job's stop (dask_pfs.runtime.stopping)
        futs = [pool.submit(one, *job) if job and side is None else None for side, job in zip(sides, jobs, strict=True)]
        done = [side or (f.result() if f is not None else None) for side, f in zip(sides, futs, strict=True)]
    missing = [i for i, side in enumerate(done) if side is None]
    if missing:
        raise ValueError(f"sides {missing}: neither a manifest nor a tree to scan")
    return [side for side in done if side is not None]


def require_xattrs(sides: list[Side]) -> None:
    """Refuse (exit 2) a manifest scanned without ``--xattrs``: its attributes are unknown, not absent."""
    for side in sides:
        if not side.manifest.has_xattrs:
            raise PfsError(
                f"{side.manifest.url}: scanned without ",
                named("xattrs", True),
                ", so its attributes are unknown (scan it again with ",
                named("xattrs", True),
                ", or compare the tree itself)",
            )


def with_checksums(
    client: Client,
    side: Side,
    where: str | Filter | None,
    algorithm: str,
    out: str,
    progress: Reporter,
    allow_other: bool = False,
) -> Side:
    """``side`` unchanged if its selected files all have checksums, else a checksummed copy of the rows,
    read from the very tree they were scanned from (``dask_pfs.manifests.root.pinned_root``; ``allow_other``:
    the one there when the pass starts)."""
    with Selection(side.manifest, where) as sel:
        return _checksummed(client, side, sel, algorithm, out, progress, allow_other)


def _checksummed(
    client: Client, side: Side, sel: Selection, algorithm: str, out: str, progress: Reporter, allow_other: bool
) -> Side:
    missing = "type = 'file' AND error IS NULL AND (checksum IS NULL OR NOT starts_with(checksum, ?))"
    if sel.count(missing, [f"{algorithm}:"]) == 0:
        return side
    loc = resolve(side.root, side.storage_options)
    # the tree the rows were scanned from, or refused; and another one renamed into its place meanwhile is not read
    pinned = pinned_root(side.manifest.info, side.manifest.url, loc.path, allow_other) if loc.is_local else None
    prepare_output(out, True)
    done = {"entries": 0, "bytes": 0, "errors": 0}

    def fold(result: tuple[int, int, list]) -> None:
        files, nbytes, failures = result
        done["entries"] += files
        done["bytes"] += nbytes
        done["errors"] += len(failures)
        progress.update(dict(done))

    progress.start(f"checksum {side.root}")
    try:
        with Submitter(client, "sum") as sub:
            for i, batch in enumerate(sel.batches(sel.sql(order="path"), CHUNK_ROWS)):
                table = pa.Table.from_batches([batch])
                name = part_name(f"sum{i:07d}", 0)
                args = (loc.protocol, loc.path, loc.storage_options, table, out, name, algorithm, None, pinned)
                sub.submit(checksum_table, *args, then=fold)
            sub.drain()
    finally:
        progress.stop()
    info = {"root": side.root, "derived_from": side.manifest.url, "where": sel.where, "checksum": algorithm}
    write_marker(out, {**info, "options": {"xattrs": side.manifest.has_xattrs}})  # the rows keep their attributes
    return Side(open_manifest(out), side.root, side.storage_options, side.scanned_errors + done["errors"])
