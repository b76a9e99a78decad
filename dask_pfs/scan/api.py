"""``scan``: a tree into a Parquet manifest (the engine is ``dask_pfs.scan.engine``; docs/journal.md for resume)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.options import job_options, renamed
from dask_pfs.runtime.limits import Limits
from dask_pfs.runtime.locking import writer_lock
from dask_pfs.runtime.progress import Reporter, default_reporter
from dask_pfs.runtime.submitter import job_client
from dask_pfs.scan.engine import ScanResult, ScanTuning, TreeScan
from dask_pfs.urls import Location, resolve
from operators.scan.prune import Prune

if TYPE_CHECKING:
    from distributed import Client


@renamed(url="src")
@job_options("exclude", "include", "max_depth", "one_file_system", "max_ops_per_second", "max_bandwidth")
def scan(
    src: str | os.PathLike,
    out: str | os.PathLike,
    client: Client | None = None,
    *,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    overwrite: bool = False,
    storage_options: dict | None = None,
    out_storage_options: dict | None = None,
    progress: Reporter | None = None,
    tuning: ScanTuning | None = None,
    on_dashboard: Callable[[str], None] | None = None,
    checksum: str | None = None,
    limits: Limits | None = None,
    resume: bool = False,
    on_parts: Callable[[list[str]], None] | None = None,
    prune: Prune | None = None,
    xattrs: bool = False,
) -> ScanResult:
    """Scan ``src`` (a tree: a path or URL) into a manifest directory ``out``; return counts and timings.
    (``url``, the old name of ``src``, is deprecated.)

    ``client`` (positional after the locations, as in every driver): None uses ``cluster`` (or
    ``PFS_SCHEDULER``), else the driver walks the tree itself and a local cluster starts only for a
    scan that lasts (``dask_pfs.runtime.here``).
    Raises :class:`PfsError` (nothing written) when the root is missing or ``out`` already
    holds a manifest and ``overwrite`` is false.  ``checksum`` (``xxh3``, ``sha256``, ``md5``)
    fills the checksum column of every file (``operators.checksum``).  ``xattrs`` fills the
    ``xattrs`` and ``has_acl`` columns of every entry (``operators.xattrs``; local and mounted trees).

    ``resume`` finishes the interrupted scan of ``src`` into ``out`` that the journal describes
    (walking only what its finished tasks left), returns a complete manifest's summary as it is,
    and otherwise scans afresh, replacing an incomplete manifest.

    ``on_parts`` is called on the driver with each finished task's parts, which the manifest keeps,
    while the walk goes on.

    ``prune`` leaves entries out of the walk (``operators.scan.prune``: gitignore-style excludes and
    includes, a maximum depth, one file system); directories it leaves out are never listed.

    With neither ``client`` nor a cluster to connect to, the driver walks the tree itself first
    (``dask_pfs.scan.driver_walk``), and a tree it finishes within ``PFS_ALONE_SECONDS`` (10 s) is done
    without any cluster (unless a dashboard or ``workers`` are asked for).

    Progress: with ``progress=None``, a live line and the summary in a Jupyter notebook, the bar on a
    terminal, nothing in a pipe (``dask_pfs.runtime.progress.default_reporter``).

    An output directory inside the tree is left out of it (an anchored ``--exclude``): a manifest
    never lists its own parts or journal.
    """
    prune = without_output(
        resolve(os.fspath(src), storage_options), resolve(os.fspath(out), out_storage_options), prune
    )
    with writer_lock(resolve(os.fspath(out), out_storage_options), "scan into"):  # dask_pfs.runtime.locking
        job = TreeScan(
            src,
            out,
            threads=threads,
            overwrite=overwrite,
            storage_options=storage_options,
            out_storage_options=out_storage_options,
            checksum=checksum,
            resume=resume,
            prune=prune,
            xattrs=xattrs,
        )
        if job.done is not None:
            return job.done
        progress = default_reporter(progress)  # a notebook's live display, a terminal's bar, else none
        limits = limits or (cluster.limits if cluster else None)
        if client is None:
            cluster = cluster or ClusterOptions.from_env(threads=threads)
            if cluster.embedded and not cluster.dashboard_asked:  # a dashboard asked for needs the cluster
                job.start_here(limits, progress)
                if job.done is not None:
                    return job.done
        # a tree the driver walked for 10 s already gets the cluster, unless the caps set its pace
        here = (job.loc,) if job.head is None or job.capped else ()
        with job_client(client, cluster, threads, limits, here) as c:
            return job.run(c, progress, tuning, on_dashboard, limits, on_parts)


def without_output(root: Location, out: Location, prune: Prune | None) -> Prune | None:
    """``prune`` plus an exclude of ``out`` when it lies inside the local tree ``root``."""
    if not (root.is_local and out.is_local):
        return prune
    top, inner = os.path.realpath(root.path), os.path.realpath(out.path)
    if os.path.commonpath([top, inner]) != top or top == inner:
        return prune
    rel = os.path.relpath(inner, top).replace(os.sep, "/")
    pattern = "/" + re.sub(r"([*?\[\]\\!#])", r"\\\1", rel) + "/"  # gitignore: anchored, literal
    prune = prune or Prune()
    return replace(prune, exclude=(*prune.exclude, pattern))


__all__ = ["ScanResult", "ScanTuning", "scan"]
