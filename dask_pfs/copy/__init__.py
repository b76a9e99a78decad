"""``copy``: scan (or read) a manifest, then copy it in phases on a Dask cluster.

The package splits the job by concern: ``target`` (``cp -r``/rsync semantics, where the journal
lives), ``rows`` (the DuckDB queries that select each phase's rows), ``phases`` (the job and its
phases), ``bigfiles`` (byte ranges and multipart uploads), ``streaming`` (copying while the scan
walks).  This module ties them together.

Existing destination files: identical ones (same size and mtime; size only on object stores)
are skipped; by default a file that exists and differs is a failure (exit code 1), with
``update`` it is replaced, with ``ignore_existing`` nothing that exists is touched (identical or
not), and ``overwrite`` rewrites every file.  ``skip_existing`` is the deprecated name of ``update``.

Resume: every finished file chunk and byte range is recorded in a journal
(``operators.journal``; ``DST/.pfs-journal-<id>/`` for local destinations), together with the
scan's manifest and the token naming the temp files.  ``resume=True`` after a crash reuses that
manifest (same rows, same chunks) and skips what the journal lists, including the finished
ranges of a big file.  The journal is deleted when a run ends without failures.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
import uuid
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.copy import owners
from dask_pfs.copy.group import group_of
from dask_pfs.copy.phases import CopyJob
from dask_pfs.copy.streaming import Streamer
from dask_pfs.copy.target import live_target, manifest_target
from dask_pfs.errors import PfsError
from dask_pfs.manifests.caps import Cap
from dask_pfs.manifests.check import check_parts
from dask_pfs.manifests.frames import takes_selection
from dask_pfs.manifests.manifest import Manifest, Selection, has_marker, open_manifest, selection_options
from dask_pfs.manifests.root import check_root
from dask_pfs.manifests.sql import Filter
from dask_pfs.options import PRUNE_KEY, job_options, journal_options, named, named_flag, of_job, renamed
from dask_pfs.runtime.job_logs import default_log
from dask_pfs.runtime.journals import check_options, job_token, nothing_to_resume, plain, read_job, records
from dask_pfs.runtime.limits import Limits, concurrency_report
from dask_pfs.runtime.locking import writer_lock
from dask_pfs.runtime.progress import Reporter, default_reporter
from dask_pfs.runtime.results import JobResult
from dask_pfs.runtime.submitter import job_client
from dask_pfs.scan.engine import scan_tree
from dask_pfs.urls import Location, make_root, resolve
from operators.copy.plan import ChunkLimits
from operators.copy.tasks import CopySpec
from operators.journal import canonical
from operators.mounts import is_network
from operators.scan.prune import Prune

if TYPE_CHECKING:
    from distributed import Client

MiB = 1 << 20
SPLIT_SIZE = 256 * MiB
NO_SPLIT = 1 << 62


@dataclass(kw_only=True)
class CopyResult(JobResult):
    """``counts``: files, bytes, dirs, symlinks, hardlinks, skipped, failed; ``log``: the failure log."""

    source: str
    destination: str
    manifest: str | None = None  # the scan of SRC, when it outlives the call (--manifest-out, a kept journal)
    phases: dict = field(default_factory=dict)  # seconds per phase (scan, check, dirs, files, links, meta)
    ranges: int = 0  # byte-range tasks of big files (split over several tasks)
    streamed: int = 0  # files, symlinks and special files copied while the scan was still walking
    selected: int | None = None  # manifest mode: rows the where-clause selected (what max_entries caps)

    @property
    def failures(self) -> int:
        """``failed``, by its name in copy's first API."""
        return self.failed

    @property
    def failure_samples(self) -> list[tuple[str, str]]:
        return self.samples

    @property
    def failure_log(self) -> str | None:
        return self.log


def default_split_size(spec: CopySpec) -> int:
    """256 MiB ranges when either end is network storage or an object store (parallel streams pay
    there); whole files from one local disk to another, where ranges in parallel only make the disk
    seek between competing streams (44 MB/s for 16 ranges against 83 MB/s for one stream here)."""
    local_disks = spec.src_local and spec.dst_local and not (is_network(spec.src_root) or is_network(spec.dst_root))
    return NO_SPLIT if local_disks else SPLIT_SIZE


@renamed(failure_log="log")
@job_options("exclude", "include", "max_depth", "one_file_system", "max_ops_per_second", "max_bandwidth")
@takes_selection("manifest")
def copy(
    src: str | os.PathLike | None,
    dst: str | os.PathLike,
    client: Client | None = None,
    *,
    manifest: str | os.PathLike | None = None,
    where: str | Filter | None = None,
    max_entries: int | str | None = None,
    cluster: ClusterOptions | None = None,
    overwrite: bool = False,
    update: bool = False,
    ignore_existing: bool = False,
    skip_existing: bool | None = None,
    follow_symlinks: bool = False,
    preserve: bool = False,
    xattrs: bool = True,
    owner: bool | None = None,
    chown: str | None = None,
    numeric_ids: bool = False,
    inplace: bool = False,
    threads: int | None = None,
    progress: Reporter | None = None,
    chunk_files: int = 500,
    chunk_bytes: int = 256 * MiB,
    split_size: int | None = None,
    part_size: int = 8 * MiB,
    storage_options: dict | None = None,
    dst_storage_options: dict | None = None,
    manifest_out: str | os.PathLike | None = None,
    log: str | os.PathLike | None = None,
    resume: bool = False,
    journal: str | os.PathLike | bool | None = None,
    limits: Limits | None = None,
    stream: bool | None = None,
    prune: Prune | None = None,
    allow_other_root: bool = False,
) -> CopyResult:
    """Copy ``src`` (scanned first) or the rows of ``manifest`` to ``dst`` (``dask_pfs.copy.target``).

    ``selection``: a frame of manifest rows (Dask, pandas, pyarrow, DuckDB, or a saved Parquet path;
    ``dask_pfs.manifests.frames``) to copy, alone or with ``where``.

    ``split_size``: files bigger than this are copied in byte ranges of this size by parallel tasks;
    None picks :func:`default_split_size` (256 MiB, or no split from one local disk to another).
    ``part_size``: parts of the multipart upload a big file becomes on S3 (at least 5 MiB; a range
    task uploads ``split_size // part_size`` of them).
    ``inplace`` writes files (not the ranges of big ones) straight to their names: faster where a
    rename is costly (GlusterFS: ~4x fewer files/s with temp names), but a reader or a killed run
    can see a partial file under its real name; its mtime is never set, so a rerun with
    ``update`` replaces it.

    Raises :class:`PfsError` (exit code 2, destination untouched) for refused requests: missing
    source, unsafe manifest paths, a destination inside the source, conflicting options, a
    ``where`` that is more than one SQL condition (``dask_pfs.manifests.sql``), a selection larger than
    ``max_entries`` (a count, or ``"5%"`` of the manifest's rows).
    ``journal``: where to record finished chunks (default: see the module docstring; False: none);
    ``resume`` continues the interrupted run that journal describes.
    ``stream`` copies while scanning where it can (``dask_pfs.copy.streaming``); False keeps the
    phases strictly one after the other; None (default): streamed unless either end is a network or FUSE
    mount, where the phased copy measured 16-32 % faster (docs/performance.md, issue 30).
    ``prune`` leaves entries out of the scan of ``src`` (``operators.scan.prune``: excludes, includes,
    a maximum depth, one file system).
    ``allow_other_root``: copy a manifest's rows from a root that is not the tree it was scanned
    from (``dask_pfs.manifests.root``; refused, exit 2, otherwise).
    ``log``: the Parquet file listing the entries that failed (``failure_log``, its old name, is deprecated).
    ``xattrs``: extended attributes and ACLs (``operators.copy.attrs``); ``owner``, ``chown``, ``numeric_ids``
    (``preserve``: ``owner=True``): ownership as ``dask_pfs.copy.owners`` says.
    """
    arguments = dict(locals())
    given = {o.name: arguments[o.name] for o in of_job("copy")}  # every option of copy (dask_pfs.options)
    t0 = time.monotonic()
    kept_manifest = os.fspath(manifest_out or manifest or "") or None  # what outlives the call (not a temp scan)
    if skip_existing is not None:
        warnings.warn("copy(skip_existing=...) is deprecated: use update=...", DeprecationWarning, stacklevel=3)
        update = update or skip_existing
    on_exist = on_exist_of(overwrite, update, ignore_existing)
    owner, chown_ids = owners.resolve(preserve, owner, chown)
    if src is None and manifest is None:
        raise PfsError("give a source or ", named("manifest"))
    selection, cap = selection_options(manifest, where, max_entries)
    where_text = str(selection) if selection else None
    selected = None
    if prune is not None and manifest is not None:
        raise PfsError(
            named_flag(PRUNE_KEY), " choose what a scan of SRC keeps; with ", named("manifest"), " select rows with ",
            named("where"),
        )  # fmt: skip
    progress = default_reporter(progress)  # a notebook's live display, a terminal's bar, else none
    # everything that can refuse the request runs before a cluster is started or anything is written
    m: Manifest | None = None
    if manifest is None:
        target = live_target(os.fspath(src), os.fspath(dst), storage_options, dst_storage_options, resume)  # type: ignore[arg-type]
    else:
        m = open_manifest(manifest, storage_options=storage_options)
        check_parts(m)  # a damaged part: exit 2 before anything is copied
        selected = _selected(m, selection, cap)
        root = os.fspath(src) if src is not None else m.root
        check_root(m.info, m.url, root, destructive=False, allow_other=allow_other_root)  # dask_pfs.manifests.root
        target = manifest_target(root, os.fspath(dst), storage_options, dst_storage_options)
    if stream is None:
        stream = target.streams_by_default
    group = group_of(m, target.dst, selection) if m is not None else None
    # one writer per destination (dask_pfs.runtime.locking), or the parts of one manifest's copy (copy.group)
    with writer_lock(target.dst, "copy into", group) as held:
        live = manifest is None
        what = (
            os.fspath(src) if src is not None else "",
            os.fspath(manifest) if manifest else "",
            (where_text or "") if prune is None else json.dumps(prune.describe()),
            target.dst.url,
        )
        jr = target.journal(journal, what)
        prior = read_job(jr) if jr is not None and resume else {}
        if resume and not prior:
            nothing_to_resume(f"copy to {target.dst.url}")
        if jr is not None and not resume and jr.exists:
            logging.getLogger("pfs").info("%s: an earlier run's journal; starting over (resume=True goes on)", jr.path)
            jr.remove()
        # what binds a resume: dask_pfs.options (each option says so), as this run uses it
        bound = journal_options(
            "copy",
            given | {"manifest": manifest_identity(m), "where": where_text, "update": update, "stream": stream},
            prune.describe() if prune else None,
        )
        if prior:
            if prior.get("job") != "cp" or prior.get("dst") != target.dst.url:
                raise PfsError(f"{jr.path}: the journal of another job; not resuming it")  # type: ignore[union-attr]
            check_options(prior, bound, "copy")
        # temp names come from what the job is, never from a file in the destination
        # the parts of one fan-out share theirs (``copy.group``: the manifest's identity and the destination)
        token = group or (job_token(*what) if jr is not None else uuid.uuid4().hex[:12])
        own_scan = os.fspath(manifest_out) if manifest_out else os.path.join(jr.path, "manifest") if jr else None
        if manifest is None and prior and own_scan and has_marker(own_scan):
            manifest = own_scan  # the interrupted run's scan: same rows, same chunks
            m = open_manifest(manifest)
        elif jr is not None and manifest is None and manifest_out is None:
            manifest_out = own_scan
        # a resumed run streams again when the first did: the same chunks get the same ids (see streaming)
        streaming = stream and live and (bool(prior.get("streamed")) if prior else target.streamable(manifest_out))
        journal_job = {
            "job": "cp",
            "dst": target.dst.url,
            "streamed": streaming,
            "where": where_text,
            "options": plain(bound),
        }

        def begin_journal() -> None:
            """Start a fresh journal once nothing can refuse the job any more (it lives in DST); once."""
            if jr is not None and not prior and not jr.exists:
                if target.make_root:
                    make_root(target.dst)
                jr.start(journal_job)

        if manifest is None:
            begin_journal()  # the scan below writes its manifest into the journal
        with ExitStack() as stack:
            here = (target.src, target.dst)  # a small job runs on the driver alone (dask_pfs.runtime.here)
            client = stack.enter_context(job_client(client, cluster, threads, limits, here))

            def new_job(rows_root: Location, streamed: bool) -> CopyJob:
                spec = CopySpec(
                    src_protocol=rows_root.protocol,
                    src_root=rows_root.path,
                    dst_protocol=target.dst.protocol,
                    dst_root=target.dst.path,
                    token=token,
                    on_exist=on_exist,
                    check_existing=not target.fresh,
                    owner=owner,
                    chown=chown_ids,
                    make_parents=streamed,
                    **{o.name: given[o.name] for o in of_job("copy") if o.task},  # as given (dask_pfs.options)
                    threads=threads,
                    src_options=rows_root.storage_options,
                    dst_options=target.dst.storage_options,
                ).pinned()  # a source root replaced from now on is refused by the core
                chunking = ChunkLimits(chunk_files, chunk_bytes, split_size or default_split_size(spec), part_size)
                log_file = os.fspath(log) if log else default_log("cp", rows_root.url, target.dst.url)
                done = records(jr) if jr is not None and prior else {}
                shared = held if group is not None else None
                made = CopyJob(client, spec, target, selection, chunking, progress, jr, done, log_file, shared)
                stack.callback(made.close)
                return made

            job = new_job(target.src, streamed=True) if streaming else None
            streamer = None
            phases: dict[str, float] = {}
            if manifest is None:
                if manifest_out is None:
                    manifest_out = os.path.join(stack.enter_context(tempfile.TemporaryDirectory(prefix="pfs-cp-")), "m")
                if job is not None:
                    streamer = Streamer(job, os.fspath(manifest_out))
                    stack.callback(streamer.close)
                t_scan = time.monotonic()
                scan_tree(
                    client,
                    target.src.url,
                    os.fspath(manifest_out),
                    progress,
                    threads=threads,
                    storage_options=storage_options,
                    resume=bool(prior),  # killed while scanning: finish that scan (its own journal)
                    on_parts=streamer.on_parts if streamer else None,
                    prune=prune,
                )
                m = open_manifest(manifest_out)
                phases["scan"] = round(time.monotonic() - t_scan, 3)
            assert m is not None
            if job is not None:
                t_drain = time.monotonic()
                if streamer is None:  # resumed after the scan had finished
                    streamer = Streamer(job, m.url)
                    stack.callback(streamer.close)
                streamer.finish(m)
                phases["streamed"] = round(time.monotonic() - t_drain, 3)  # copying still left when the scan ended
            else:
                rows_root = resolve(
                    os.fspath(src) if manifest is not None and src is not None else m.root, storage_options
                )
                job = new_job(rows_root, streamed=False)
            try:
                job.run(m, begin_journal)
            finally:
                if jr is not None:
                    jr.close()
            lost = job.unaccounted() if prior else 0
            if lost:  # a resume must account for every selected entry before its journal goes
                job.fail([("", "failed", f"resume: {lost} selected entries were neither copied nor journaled")])
            kept = target.end_journal(jr, job.failed)
            counts = job.counts()
            return CopyResult(
                source=target.src.url,
                destination=target.named,
                counts=counts,
                failed=job.failed,
                samples=job.problems.samples,
                log=job.problems.close(),
                seconds=round(time.monotonic() - t0, 3),
                manifest=kept_manifest or (m.url if kept else None),  # a clean run removed its journal
                tasks=job.sub.tasks,
                phases=phases | job.phases,
                resumed=job.resumed,
                journal=kept,
                concurrency=concurrency_report(client, threads),
                ranges=job.big.ranges,
                streamed=job.streamed_files,
                selected=selected,
            )


def on_exist_of(overwrite: bool, update: bool, ignore_existing: bool) -> str:
    """``CopySpec.on_exist`` of the options, which exclude each other (PfsError when two are set)."""
    chosen = [named(name, True) for name, on in (("overwrite", overwrite), ("update", update),
                                                 ("ignore_existing", ignore_existing)) if on]  # fmt: skip
    if len(chosen) > 1:
        raise PfsError(chosen[0], " and ", chosen[1], " exclude each other")
    return "overwrite" if overwrite else "skip" if update else "ignore" if ignore_existing else "error"


def _selected(m: Manifest, selection: Filter | None, cap: Cap | None) -> int:
    """Rows ``selection`` takes from ``m``; over ``cap``, PfsError before anything is written."""
    with Selection(m, selection) as sel:
        n, total = sel.share()
    if cap is not None:
        cap.check(n, total, "the selection has")
    return n


def manifest_identity(m: Manifest | None) -> str | None:
    """A given manifest, by its URL and a digest of its completion marker (a rescan changes it)."""
    if m is None:
        return None
    return f"{m.url}#{hashlib.sha256(canonical(m.info)).hexdigest()[:16]}"


__all__ = ["NO_SPLIT", "SPLIT_SIZE", "CopyResult", "MiB", "copy", "default_split_size", "on_exist_of"]
