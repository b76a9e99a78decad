"""``remove``: a live tree, or exactly the rows of a (filtered) manifest.

Tree mode streams: walk tasks (``runtime.walk_frontier``) list a bounded slice of directories,
unlink what they list at once and hand back unlisted subdirectories as frontier; directories whose
subtree a task finished are removed inside it, the rest by the driver at the end, deepest level
first.  Manifest mode streams the selection in Arrow batches: every selected row is checked
(relative, no symlinked ancestor) before the first unlink, then non-directories go in chunks, then
directories level by level, deepest first.  The driver holds counters, a bounded frontier and the
directories left for the last pass; problems go straight to a Parquet log.

Every finished chunk is journaled (``dask_pfs.remove.journal``): ``resume=True`` after a killed
driver skips the manifest chunks an earlier run finished; in tree mode what was removed is
simply gone, so the resumed walk finds only what is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.errors import PfsError
from dask_pfs.manifests.frames import takes_selection
from dask_pfs.manifests.manifest import open_manifest, selection_options
from dask_pfs.manifests.root import check_root
from dask_pfs.manifests.sql import Filter
from dask_pfs.options import PRUNE_KEY, job_options, named, named_flag
from dask_pfs.remove.job import CHUNK, Removal, RemoveResult, RemoveTuning
from dask_pfs.runtime.limits import Limits, concurrency_report
from dask_pfs.runtime.progress import Reporter, default_reporter
from dask_pfs.runtime.submitter import job_client
from dask_pfs.urls import Location
from operators.scan.prune import Prune

if TYPE_CHECKING:
    from distributed import Client


@job_options("exclude", "include", "max_depth", "one_file_system", "max_ops_per_second", "max_bandwidth")
@takes_selection("manifest")
def remove(
    url: str | os.PathLike | None = None,
    client: Client | None = None,
    *,
    manifest: str | os.PathLike | None = None,
    where: str | Filter | None = None,
    max_entries: int | str | None = None,
    cluster: ClusterOptions | None = None,
    dry_run: bool = False,
    force: bool = False,
    ignore_changes: bool = False,
    threads: int | None = None,
    progress: Reporter | None = None,
    log: str | os.PathLike | None = None,
    confirm: Callable[[str], bool] | None = None,
    storage_options: dict | None = None,
    show: int = 20,
    tuning: RemoveTuning | None = None,
    limits: Limits | None = None,
    resume: bool = False,
    journal: str | os.PathLike | bool | None = None,
    chunk_files: int = CHUNK,
    prune: Prune | None = None,
    allow_other_root: bool = False,
) -> RemoveResult:
    """Remove the tree ``url``, or the rows of ``manifest`` selected by ``where`` and/or ``selection``
    (a frame of manifest rows: Dask, pandas, pyarrow, DuckDB, or a saved Parquet path; ``dask_pfs.manifests.frames``).

    Raises :class:`PfsError` (nothing removed) for a missing target, a refused target (``/``,
    the home directory, a mount point, a bucket, unless ``force``), an unsafe manifest row, or
    when ``confirm(message)`` returns false.  ``confirm`` is called after every check and
    before the first unlink.  ``show`` bounds the paths a dry run lists.

    ``where`` is one SQL condition over the manifest's columns (``dask_pfs.manifests.sql``: never a
    statement or a subquery).  ``max_entries`` (a count, or ``"5%"`` of the manifest's rows)
    refuses a larger selection, dry runs included, before anything is removed or written.

    ``journal``: where finished chunks are recorded (default: see ``dask_pfs.remove.journal``;
    False: nowhere; dry runs keep none); ``resume`` goes on with the interrupted run it describes,
    with that run's ``chunk_files`` (rows per unlink or rmdir task), so chunk ids match.

    ``prune`` (tree mode; ``operators.scan.prune``) leaves entries in place: excluded ones, those below
    ``max_depth`` or on another file system are not listed or unlinked, and their directories stay.

    With ``manifest``, its marker must name an absolute root that is the very tree it was scanned
    from (``dask_pfs.manifests.root``); ``allow_other_root`` lifts that (a restored copy, a remount).
    """
    if (url is None) == (manifest is None):
        raise PfsError("give either a URL or ", named("manifest"), ", not both")
    selection, cap = selection_options(manifest, where, max_entries)
    if prune is not None and manifest is not None:
        raise PfsError(named_flag(PRUNE_KEY), " prune a tree walk; with ", named("manifest"), ", ", named("where"))
    t0 = time.monotonic()
    job = Removal(
        dry_run=dry_run,
        force=force,
        ignore_changes=ignore_changes,
        threads=threads,
        progress=default_reporter(progress),
        confirm=confirm,
        show=show,
        tuning=tuning or RemoveTuning(),
        resume=resume,
        journal=journal,
        chunk=max(1, chunk_files),
        prune=prune,
    )
    try:
        if manifest is not None:
            m = open_manifest(os.fspath(manifest), storage_options=storage_options)
            check_root(m.info, m.url, destructive=True, allow_other=allow_other_root)
            ready = job.prepare_manifest(os.fspath(manifest), selection, cap, log, storage_options)
        else:
            assert url is not None  # exactly one of them, checked above
            ready = job.prepare_tree(os.fspath(url), log, storage_options)
        if not ready:  # done without a cluster (a single file or link, or nothing left to resume)
            return job.result(time.monotonic() - t0)
        assert job.spec is not None  # set by prepare_*
        here = (Location(job.spec.root, job.spec.protocol, job.spec.root),)  # a small job: the driver alone
        with job_client(client, cluster, threads, limits, here) as c:
            job.run(c)
            concurrency = concurrency_report(c, threads)
    except PfsError:
        job.drop_fresh_journal()  # refused or not confirmed: nothing was removed, nothing to resume
        raise
    finally:
        job.close()
    return job.finish(time.monotonic() - t0, concurrency)


__all__ = ["RemoveResult", "RemoveTuning", "remove"]
