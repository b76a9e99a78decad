"""``scan``: a tree into a Parquet manifest (the engine is ``dask_pfs.scanning``; docs/journal.md for resume)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from operators.prune import Prune

from .cluster import ClusterOptions
from .limits import Limits
from .locking import writer_lock
from .progress import Reporter
from .runtime import job_client
from .scanning import ScanResult, ScanTuning, TreeScan
from .urls import resolve

if TYPE_CHECKING:
    from distributed import Client


def scan(
    url: str | os.PathLike,
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
) -> ScanResult:
    """Scan ``url`` into a manifest directory ``out``; return counts and timings.

    ``client`` (positional after the locations, as in every driver): None uses ``cluster`` (or
    ``PFS_SCHEDULER``), else an embedded LocalCluster.
    Raises :class:`PfsError` (nothing written) when the root is missing or ``out`` already
    holds a manifest and ``overwrite`` is false.  ``checksum`` (``xxh3``, ``sha256``, ``md5``)
    fills the checksum column of every file (``operators.checksum``).

    ``resume`` finishes the interrupted scan of ``url`` into ``out`` that the journal describes
    (walking only what its finished tasks left), returns a complete manifest's summary as it is,
    and otherwise scans afresh, replacing an incomplete manifest.

    ``on_parts`` is called on the driver with each finished task's parts, which the manifest keeps,
    while the walk goes on.

    ``prune`` leaves entries out of the walk (``operators.prune``: gitignore-style excludes and
    includes, a maximum depth, one file system); directories it leaves out are never listed.

    With neither ``client`` nor a cluster to connect to (an embedded cluster), the driver walks the
    tree itself before the cluster starts (``dask_pfs.scan_here``), and a tree it finishes within
    ``scan_here.DRIVER_SECONDS`` is done without one (unless a dashboard is asked for).
    """
    with writer_lock(resolve(os.fspath(out), out_storage_options), "scan into"):  # dask_pfs.locking
        job = TreeScan(
            url,
            out,
            threads=threads,
            overwrite=overwrite,
            storage_options=storage_options,
            out_storage_options=out_storage_options,
            checksum=checksum,
            resume=resume,
            prune=prune,
        )
        if job.done is not None:
            return job.done
        limits = limits or (cluster.limits if cluster else None)
        if client is None:
            cluster = cluster or ClusterOptions.from_env(threads=threads)
            if cluster.embedded and not cluster.dashboard_asked:  # a dashboard asked for needs the cluster
                job.start_here(limits, progress)
                if job.done is not None:
                    return job.done
        here = (job.loc,) if job.head is None else ()  # a tree the driver walked for 10 s already gets the cluster
        with job_client(client, cluster, threads, limits, here) as c:
            return job.run(c, progress, tuning, on_dashboard, limits, on_parts)


__all__ = ["ScanResult", "ScanTuning", "scan"]
