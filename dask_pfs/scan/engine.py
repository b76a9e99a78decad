"""The scan engine: a live tree into a manifest, walked by tasks on a given Dask client.

Every job that needs the manifest of a live tree goes through here: ``pfs scan``, ``cp`` (the
source, streaming its parts to the copy as they come), ``verify`` and ``sync`` (both sides).

The driver holds only the frontier (directories not yet walked) and counters
(``runtime.walk_frontier``).  Each task walks a bounded slice (``operators.scan.task.scan_chunk``),
writes its own Parquet parts and hands back the directories it did not reach, which are re-split
over free task slots, so unbalanced trees (one huge directory, a 200-deep chain) keep every worker
busy.  Every finished task is journaled (``dask_pfs.scan.journal``); ``resume`` after a killed
driver keeps the parts of finished tasks and walks only the frontier they left.

A fresh local scan on an embedded cluster is walked in the driver's own process first
(:meth:`TreeScan.start_here`, ``dask_pfs.scan.driver_walk``: slices journaled as tasks ``0000000``...)
before any cluster exists: a tree done within ``scan_here.DRIVER_SECONDS`` is finished there, with
the same parts, marker and journal a cluster run writes, and never pays for the scheduler and
worker processes; a bigger one hands the cluster its frontier.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from dask_pfs.clusters.client import dashboard_link
from dask_pfs.errors import PfsError
from dask_pfs.manifests.manifest import has_marker, prepare_output, remove_manifest_files, write_marker
from dask_pfs.options import PRUNE_KEY, named, named_flag
from dask_pfs.runtime.journals import nothing_to_resume
from dask_pfs.runtime.limits import Limits, concurrency_report
from dask_pfs.runtime.progress import NullProgress, Reporter
from dask_pfs.runtime.results import JobResult
from dask_pfs.runtime.submitter import Submitter, WalkTuning, new_run_id, walk_frontier
from dask_pfs.scan import journal as sj
from dask_pfs.scan.driver_walk import HereResult, walk_here
from dask_pfs.scan.single_file import scan_file
from dask_pfs.urls import Location, probe, pruned_at, resolve
from operators import ratelimit
from operators.checksum import check_algorithm
from operators.core import localfs
from operators.core.concurrency import report as process_concurrency
from operators.core.concurrency import summarize
from operators.mounts import is_network
from operators.root_identity import identify
from operators.scan.prune import Prune
from operators.scan.task import ChunkResult, ScanSpec, scan_chunk
from operators.scan.walk import Budget, DirItem, Tally
from operators.xattrs import XATTRS_LOCAL, readable

if TYPE_CHECKING:
    from distributed import Client

    from operators.journal import Journal

ScanTuning = WalkTuning  # the scan's task sizes


@dataclass(kw_only=True)
class ScanResult(JobResult):
    """``counts``: entries, files, directories, symlinks, other, bytes, errors (entries that could
    not be read: ``failed``; they are rows of the manifest, with their error)."""

    manifest: str
    root: str

    @property
    def errors(self) -> int:
        """``failed``, by its name in scan's first API."""
        return self.failed


def check_checksum(checksum: str | None) -> str | None:
    """The checksum algorithm's canonical name; PfsError for an unknown one."""
    if checksum is None:
        return None
    try:
        return check_algorithm(checksum)
    except ValueError as exc:
        raise PfsError(str(exc)) from None


class TreeScan:
    """One scan, prepared without a cluster: everything that can refuse it runs in the constructor.

    ``done`` is already the result when nothing needs a cluster (a single file, or ``resume`` of
    a complete manifest); else :meth:`run` walks the tree on a client.
    """

    def __init__(
        self,
        url: str | os.PathLike,
        out: str | os.PathLike,
        *,
        threads: int | None = None,
        overwrite: bool = False,
        storage_options: dict | None = None,
        out_storage_options: dict | None = None,
        checksum: str | None = None,
        resume: bool = False,
        prune: Prune | None = None,
        xattrs: bool = False,
    ) -> None:
        checksum, self.xattrs = check_checksum(checksum), xattrs
        if resume and overwrite:
            raise PfsError(named("resume", True), " and ", named("overwrite", True), " exclude each other")
        self.started = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.loc = loc = resolve(url, storage_options)
        self.out = out = os.fspath(out)
        self.out_options = out_storage_options
        self.done: ScanResult | None = None
        self.prior: sj.Resumed | None = None
        self.head: HereResult | None = None  # what start_here walked in this process
        self.capped = False  # start_here's walk waited on the job's caps: no cluster for the rest
        self.shown: Reporter | None = None  # the progress start_here began (run goes on with it)
        root = probe(loc, follow=True)  # the root may be a symlink (like find -H); nothing below is followed
        if not root.exists or (xattrs and not readable(loc.protocol)):
            raise PfsError(f"{loc.url}: " + ("no such file or directory" if not root.exists else XATTRS_LOCAL))
        self.prune = prune = pruned_at(loc, prune)
        pruning = prune.describe() if prune is not None else None
        self.journal = sj.scan_journal(loc.url, out, out_storage_options) if root.kind == "directory" else None
        if resume and has_marker(out, out_storage_options):
            self.done = self._complete(checksum, pruning)
            return
        if resume and self.journal is not None:
            self.prior = sj.load(self.journal, loc.url, checksum, _root_item(loc), pruning, xattrs)
        if self.prior is not None and not _parts_present(out, self.prior.parts, out_storage_options):
            logging.getLogger("pfs").warning("%s: parts the journal names are gone; scanning afresh", out)
            self.prior = None
        elif resume and self.prior is None:
            nothing_to_resume(f"scan of {loc.url} into {out}")
        if self.prior is None:
            prepare_output(out, overwrite or resume, out_storage_options)  # resume: an incomplete scan, no journal
        if root.kind != "directory":
            self.done = self._single_file(checksum, threads)
            return
        self.spec = ScanSpec(
            protocol=loc.protocol,
            root=loc.path,
            out_url=out,
            storage_options=loc.storage_options,
            out_storage_options=out_storage_options or {},
            threads=threads,
            checksum=checksum,
            prune=prune,
            xattrs=xattrs,
            root_id=identify(loc.path).for_job() if loc.is_local else None,  # a task on an unmounted root fails
        )

    def start_here(self, limits: Limits | None = None, progress: Reporter | None = None) -> None:
        """Walk a fresh local scan in this process (``dask_pfs.scan.driver_walk``), before any cluster.

        A tree done within ``scan_here.DRIVER_SECONDS`` is finished here (:attr:`done`: manifest,
        marker and journal as a cluster run leaves them); else :meth:`run` goes on from the frontier
        left.  Only for a driver that would start an embedded cluster (the tree is mounted here).
        """
        spec, journal = self.spec, self.journal
        if self.done is not None or self.prior is not None or spec.protocol not in ("file", "local"):
            return
        if is_network(self.loc.path):
            # a process that opened files on hung network storage cannot even exit until it answers:
            # there the driver touches nothing but the root, and the workers walk (dask_pfs.clusters.stall)
            return
        if journal is not None:
            self._start_journal(journal)
        self.shown = progress = progress or NullProgress()
        progress.start(f"scan {self.loc.url}")
        ratelimit.configure(limits)  # the job's caps, whole, for the one process working
        walked = time.monotonic()
        try:
            self.head = head = walk_here(spec, _root_item(self.loc), journal, progress)
        except BaseException:
            progress.stop()
            raise
        finally:
            # the caps, not this process's cores, set the pace: a cluster would bring workers that only wait
            self.capped = limits is not None and ratelimit.throttled_seconds() >= 0.1 * (time.monotonic() - walked)
            ratelimit.configure(None)
        if head.frontier:
            return
        progress.stop()
        options = self._options(workers=0, slots=0, run_id=new_run_id(), resumed=0, limits=limits)
        options["concurrency"] = summarize({"driver": process_concurrency()})
        if journal is not None:
            journal.close()
        self.done = self._finish(self.loc.url, head.tally, head.parts, head.tasks, options)
        if journal is not None:
            journal.remove()

    def _start_journal(self, journal: Journal) -> None:
        """``job.json`` of this scan: the options a ``--resume`` must repeat (``dask_pfs.scan.journal``)."""
        spec = self.spec
        sj.start(
            journal, self.loc.url, self.out, spec.checksum, spec.prune.describe() if spec.prune else None, spec.xattrs
        )

    def _options(self, *, workers: int, slots: int, run_id: str, resumed: int, limits: Limits | None) -> dict:
        """The manifest's ``options``: how the scan ran."""
        spec = self.spec
        return {
            "threads": spec.threads,
            "workers": workers,
            "task_slots": slots,
            "run_id": run_id,
            "checksum": spec.checksum,
            "xattrs": spec.xattrs,
            "prune": spec.prune.describe() if spec.prune else None,
            "concurrency": {},
            "limits": asdict(limits) if limits else None,
            "resumed_tasks": resumed,
        }

    def run(
        self,
        client: Client,
        progress: Reporter | None = None,
        tuning: ScanTuning | None = None,
        on_dashboard: Callable[[str], None] | None = None,
        limits: Limits | None = None,
        on_parts: Callable[[list[str]], None] | None = None,
    ) -> ScanResult:
        """Walk the tree on ``client``; ``on_parts`` gets each finished task's parts while the walk goes on."""
        if self.done is not None:
            return self.done
        link = dashboard_link(client)
        if on_dashboard and link:
            on_dashboard(link)
        progress = self.shown or progress or NullProgress()
        tuning = tuning or _tuning(client)
        spec, journal, prior, head = self.spec, self.journal, self.prior, self.head
        attempt = prior.attempt if prior else 0
        tally = Tally()
        parts: list[str] = []
        if prior is not None:
            tally.add(prior.tally)
            parts.extend(prior.parts)
        elif head is not None:  # start_here walked the first tasks (and started the journal)
            tally.add(head.tally)
            parts.extend(head.parts)
        elif journal is not None:
            self._start_journal(journal)

        def task(items: list[DirItem], budget: Budget, n: int) -> tuple[Callable, tuple]:
            return scan_chunk, (spec, items, sj.task_id(attempt, n), budget)

        def fold(result: ChunkResult, items: list[DirItem], n: int) -> list[DirItem]:
            if journal is not None:
                sj.record(journal, result.task_id, [i[0] for i in items], result)  # durable before its frontier
            tally.add(result.tally)
            parts.extend(result.parts)
            progress.update(tally.as_dict())
            return result.frontier

        def after(result: ChunkResult) -> None:
            if on_parts is not None and result.parts:
                on_parts(result.parts)  # after the next tasks are out: the walk does not wait on it

        frontier = deque(prior.frontier if prior else head.frontier if head else [_root_item(self.loc)])
        if self.shown is None:  # else start_here's bar goes on
            progress.start(f"scan {self.loc.url}")
        if prior is not None or head is not None:
            progress.update(tally.as_dict())
        try:
            with Submitter(client, "scan", per_slot=tuning.inflight_per_slot) as sub:
                sub.tasks = head.tasks if head is not None else 0  # tasks ran here: numbers (and parts) go on
                walk_frontier(sub, frontier, tuning, task, fold, after)
        finally:
            if journal is not None:
                journal.close()
            progress.stop()
        resumed = prior.tasks if prior else 0
        options = self._options(
            workers=len(client.nthreads()), slots=sub.slots, run_id=sub.run, resumed=resumed, limits=limits
        )
        options["concurrency"] = concurrency_report(client, spec.threads)
        res = self._finish(self.loc.url, tally, parts, sub.tasks + resumed, options)
        if journal is not None:
            journal.remove()  # after the marker: a kill in between leaves a journal that resume drops
        res.tasks, res.resumed = sub.tasks, resumed
        return res

    def _single_file(self, checksum: str | None, threads: int | None) -> ScanResult:
        """A single file (``dask_pfs.scan.single_file``): the manifest root is its directory, one row."""
        root_url, tally, part = scan_file(self.loc, self.out, self.out_options, checksum, self.xattrs)
        return self._finish(root_url, tally, [part], 0, {"threads": threads, "xattrs": self.xattrs})

    def _complete(self, checksum: str | None, pruning: dict | None) -> ScanResult:
        """``resume`` over a finished scan: its summary, nothing scanned (a leftover journal is dropped);
        refused (exit 2) when it was made with other options than this run's."""
        fs, path = localfs.url_to_fs(self.out, **(self.out_options or {}))
        with fs.open(f"{path.rstrip('/')}/_manifest.json", "r") as f:
            info = json.load(f)
        if info.get("scanned_url") not in (None, self.loc.url):
            raise PfsError(
                f"{self.out} already holds a complete manifest of {info['scanned_url']}: nothing to resume (pass ",
                named("overwrite", True),
                " to replace it)",
            )
        made = info.get("options") or {}
        made_xattrs = bool(made.get("xattrs"))  # a manifest from before --xattrs has none
        for name, was, value in (
            (named("checksum"), made.get("checksum"), checksum),
            (named_flag(PRUNE_KEY), made.get("prune"), pruning),
            (named("xattrs"), made_xattrs, self.xattrs),
        ):
            if was != value:
                raise PfsError(
                    f"{self.out} is a complete scan made with ",
                    name,
                    f" {json.dumps(was)}, not {json.dumps(value)}: nothing to resume (pass ",
                    named("overwrite", True),
                    " to scan again with it)",
                )
        if self.journal is not None:
            self.journal.remove()
        warnings.warn(
            f"{self.out}: already a complete scan of {self.loc.url}: nothing was rescanned (its counts are that "
            f"scan's; {named('overwrite', True)} scans the tree again)",
            UserWarning,
            stacklevel=2,
        )
        counts, errors = info.get("counts") or {}, info.get("errors") or []
        seconds = float(info.get("seconds") or 0.0)  # what the scan took: a rate over ~0 s would be nonsense
        return _result(self.out, info.get("root"), counts, errors, seconds, resumed=int(info.get("tasks") or 0))

    def _finish(self, root_url: str, tally: Tally, parts: list[str], tasks: int, options: dict) -> ScanResult:
        # Parts from attempts that died (a killed worker) are not in ``parts``: remove them, then mark complete.
        remove_manifest_files(self.out, keep=set(parts), storage_options=self.out_options)
        seconds = time.monotonic() - self.t0
        write_marker(
            self.out,
            {
                "root": root_url,
                "scanned_url": self.loc.url,
                "protocol": self.loc.protocol,
                "options": options,
                "counts": tally.as_dict(),
                "errors": tally.error_samples,
                "parts": len(parts),
                "part_names": sorted(posixpath.basename(p) for p in parts),  # a missing one is named
                "tasks": tasks,
                "started": self.started.isoformat(),
                "finished": datetime.now(UTC).isoformat(),
                "seconds": round(seconds, 3),
            },
            self.out_options,
        )
        concurrency = options.get("concurrency") or {}
        return _result(self.out, root_url, tally.as_dict(), tally.error_samples, seconds, tasks, concurrency)


def scan_tree(client: Client, url: str, out: str, progress: Reporter | None = None, **options) -> ScanResult:
    """Scan ``url`` into ``out`` on ``client``: the entry other jobs make their manifests through
    (``options``: :class:`TreeScan`'s, and ``on_parts``)."""
    on_parts = options.pop("on_parts", None)
    return TreeScan(url, out, **options).run(client, progress, on_parts=on_parts)


def _result(
    out: str,
    root: str,
    counts: dict,
    errors: list[str],
    seconds: float,
    tasks: int = 0,
    concurrency: dict | None = None,
    resumed: int = 0,
) -> ScanResult:
    """``errors``: "path: error" lines, as tasks report them and the marker keeps them."""
    return ScanResult(
        manifest=out,
        root=root,
        counts=counts,
        failed=int(counts.get("errors", 0)),
        samples=[(path, error) for path, _, error in (line.partition(": ") for line in errors)],
        seconds=seconds,
        tasks=tasks,
        concurrency=concurrency or {},
        resumed=resumed,
    )


def _tuning(client: Client) -> ScanTuning:
    """Task sizes.  On the driver's helper processes (a network mount, ``HereClient``) short first tasks
    spread nothing (the same two processes take the frontier back) and each costs a hand-off through the
    driver: the first task gets the full second (docs/performance.md, issue 30)."""
    from dask_pfs.runtime.here import HereClient

    if isinstance(client, HereClient) and client.processes:
        return ScanTuning(first_seconds=ScanTuning.max_seconds)
    return ScanTuning()


def _root_item(loc: Location) -> DirItem:
    return (b"" if loc.is_local else "", None)


def _parts_present(out: str, parts: list[str], out_storage_options: dict | None) -> bool:
    """Every part a journal names is still in ``out`` (a journal in the cache can outlive its output)."""
    fs, path = localfs.url_to_fs(out, **(out_storage_options or {}))
    try:
        names = {os.path.basename(p.rstrip("/")) for p in fs.ls(path.rstrip("/"), detail=False)}
    except FileNotFoundError:
        return False
    return set(parts) <= names
