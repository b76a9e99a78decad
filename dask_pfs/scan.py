"""The scan driver: spread a tree walk over a Dask cluster and finish a manifest.

The driver holds only the frontier (directories not yet walked) and counters.  Each task
walks a bounded slice (``operators.scan_task.scan_chunk``), writes its own Parquet parts and
hands back the directories it did not reach; the driver re-splits them over free task slots,
so unbalanced trees (one huge directory, a 200-deep chain) keep every worker busy.

Every finished task is journaled (``dask_pfs.scan_journal``); ``resume=True`` after a killed
driver keeps the parts of finished tasks and walks only the frontier they left.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

import fsspec
from distributed import Client, as_completed

from operators.journal import Journal
from operators.parts import part_name, write_part
from operators.prune import Prune
from operators.rows import row_from_info, row_from_stat, rows_to_table
from operators.scan_task import ChunkResult, ScanSpec, scan_chunk
from operators.walk import DirItem, Tally

from . import scan_journal as sj
from .cluster import ClusterOptions, connect, dashboard_link, total_task_slots
from .errors import PfsError
from .frontier import WalkTuning, next_slice
from .limits import Limits, concurrency_report, job_limits
from .manifest import has_marker, prepare_output, remove_manifest_files, write_marker
from .progress import NullProgress, Reporter
from .urls import Location, pruned_at, resolve


@dataclass
class ScanResult:
    manifest: str
    root: str
    counts: dict
    seconds: float
    tasks: int
    error_samples: list[str] = field(default_factory=list)
    concurrency: dict = field(default_factory=dict)  # {"mode": "auto", "settled": n} or {"mode": "fixed", ...}
    resumed: int = 0  # tasks an interrupted run had finished (their parts were kept, not rescanned)

    @property
    def errors(self) -> int:
        return self.counts.get("errors", 0)

    @property
    def exit_code(self) -> int:
        return 1 if self.errors else 0

    def summary(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


ScanTuning = WalkTuning  # the scan driver's task sizes


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
    on_dashboard=None,
    checksum: str | None = None,
    limits: Limits | None = None,
    resume: bool = False,
    on_parts: Callable[[list[str]], None] | None = None,
    prune: Prune | None = None,
) -> ScanResult:
    """Scan ``url`` into a manifest directory ``out``; return counts and timings.

    ``client=None`` uses ``cluster`` (or ``PFS_SCHEDULER``), else an embedded LocalCluster.
    Raises :class:`PfsError` (nothing written) when the root is missing or ``out`` already
    holds a manifest and ``overwrite`` is false.  ``checksum`` (``xxh3``, ``sha256``, ``md5``)
    fills the checksum column of every file (``operators.checksum``).

    ``resume`` finishes the interrupted scan of ``url`` into ``out`` that the journal describes
    (walking only what its finished tasks left), returns a complete manifest's summary as it is,
    and otherwise scans afresh, replacing an incomplete manifest.

    ``on_parts`` is called on the driver with each finished task's parts, which the manifest keeps,
    while the walk goes on (``dask_pfs.copy`` starts copying them).

    ``prune`` leaves entries out of the walk (``operators.prune``: gitignore-style excludes and
    includes, a maximum depth, one file system); directories it leaves out are never listed.
    """
    if checksum is not None:
        from operators.checksum import check_algorithm

        try:
            checksum = check_algorithm(checksum)
        except ValueError as exc:
            raise PfsError(str(exc)) from None
    if resume and overwrite:
        raise PfsError("--resume and --overwrite exclude each other")
    if limits is None and cluster is not None:
        limits = cluster.limits
    started = datetime.now(UTC)
    t0 = time.monotonic()
    loc = resolve(url, storage_options)
    out = os.fspath(out)
    root_kind, root_row = _probe_root(loc)
    prune = pruned_at(loc, prune)
    pruning = prune.describe() if prune is not None else None
    jr = sj.scan_journal(loc.url, out, out_storage_options) if root_kind == "directory" else None
    if resume and has_marker(out, out_storage_options):
        return _complete(loc, out, out_storage_options, jr)
    prior = sj.load(jr, loc.url, checksum, _root_item(loc), pruning) if resume and jr is not None else None
    if prior is not None and not _parts_present(out, prior.parts, out_storage_options):
        logging.getLogger("pfs").warning("%s: parts the journal names are gone; scanning afresh", out)
        prior = None
    if prior is None:
        prepare_output(out, overwrite or resume, out_storage_options)  # resume: an incomplete scan, no journal
    if root_kind == "file":
        # A single file: the manifest root is its directory, and it holds one row.
        parent = os.path.dirname(loc.path.rstrip("/")) or "/"
        if checksum and root_row[2] == "file":
            from operators.checksum import checksum_local, checksum_remote, fill_rows

            one = [root_row]
            fill_rows(
                one,
                lambda _: (
                    checksum_local(loc.path, checksum)
                    if loc.is_local
                    else checksum_remote(loc.filesystem(), loc.path, checksum)
                ),
            )
            root_row = one[0]
        part = write_part(rows_to_table([root_row]), out, part_name("0000000", 0), out_storage_options)
        tally = Tally()
        tally.count(root_row)
        root_url = parent if loc.is_local else f"{loc.protocol}://{parent}"
        return _finish(loc, out, root_url, tally, [part], 0, started, t0, {"threads": threads}, out_storage_options)
    spec = ScanSpec(
        protocol=loc.protocol,
        root=loc.path,
        out_url=out,
        storage_options=loc.storage_options,
        out_storage_options=out_storage_options or {},
        threads=threads,
        checksum=checksum,
        prune=prune,
    )
    progress = progress or NullProgress()
    args = (spec, loc, out, tuning or ScanTuning(), progress, started, t0, on_dashboard, limits, jr, prior, on_parts)
    if client is None:
        with connect(cluster or ClusterOptions.from_env(threads=threads)) as own, job_limits(own, limits):
            return _run(own, *args)
    with job_limits(client, limits):
        return _run(client, *args)


def _root_item(loc: Location) -> DirItem:
    return (b"" if loc.is_local else "", None)


def _parts_present(out: str, parts: list[str], out_storage_options: dict | None) -> bool:
    """Every part a journal names is still in ``out`` (a journal in the cache can outlive its output)."""
    fs, path = fsspec.core.url_to_fs(out, **(out_storage_options or {}))
    try:
        names = {os.path.basename(p.rstrip("/")) for p in fs.ls(path.rstrip("/"), detail=False)}
    except FileNotFoundError:
        return False
    return set(parts) <= names


def _complete(loc: Location, out: str, out_storage_options: dict | None, jr: Journal | None) -> ScanResult:
    """``resume`` over a finished scan: its summary, nothing scanned (a leftover journal is dropped)."""
    fs, path = fsspec.core.url_to_fs(out, **(out_storage_options or {}))
    with fs.open(f"{path.rstrip('/')}/_manifest.json", "r") as f:
        info = json.load(f)
    if info.get("scanned_url") not in (None, loc.url):
        raise PfsError(
            f"{out} already holds a complete manifest of {info['scanned_url']}: nothing to resume "
            "(pass --overwrite to replace it)"
        )
    if jr is not None:
        jr.remove()
    counts = info.get("counts") or {}
    tasks = int(info.get("tasks") or 0)
    return ScanResult(out, info.get("root"), counts, 0.0, 0, info.get("errors") or [], {}, resumed=tasks)


def _probe_root(loc: Location) -> tuple[str, tuple | None]:
    """``("directory", None)`` or ``("file", row)``; PfsError when the root is missing."""
    if loc.is_local:
        try:
            s = os.stat(loc.path)  # the root itself may be a symlink (like find -H); nothing below is followed
        except FileNotFoundError:
            raise PfsError(f"{loc.url}: no such file or directory") from None
        except OSError as exc:
            raise PfsError(f"{loc.url}: {exc.strerror}") from None
        if os.path.isdir(loc.path):
            return "directory", None
        name = os.fsencode(os.path.basename(loc.path.rstrip("/")))
        ls = os.lstat(loc.path)
        target = os.readlink(loc.path) if os.path.islink(loc.path) else None
        return "file", row_from_stat(name, ls if target is not None else s, os.fsencode(target) if target else None)
    fs = loc.filesystem()
    try:
        info = fs.info(loc.path)
    except FileNotFoundError:
        raise PfsError(f"{loc.url}: no such file or directory") from None
    except OSError as exc:
        raise PfsError(f"{loc.url}: {exc}") from None
    if info.get("type") == "directory":
        return "directory", None
    return "file", row_from_info(os.path.basename(loc.path.rstrip("/")), info)


def _run(
    client: Client,
    spec: ScanSpec,
    loc: Location,
    out: str,
    tuning: ScanTuning,
    progress: Reporter,
    started: datetime,
    t0: float,
    on_dashboard,
    limits: Limits | None = None,
    journal: Journal | None = None,
    prior: sj.Resumed | None = None,
    on_parts: Callable[[list[str]], None] | None = None,
) -> ScanResult:
    link = dashboard_link(client)
    if on_dashboard and link:
        on_dashboard(link)
    run_id = uuid.uuid4().hex[:8]
    attempt = prior.attempt if prior else 0
    frontier: deque[DirItem] = deque(prior.frontier if prior else [_root_item(loc)])
    tally = Tally()
    parts: list[str] = []
    if prior is not None:
        tally.add(prior.tally)
        parts.extend(prior.parts)
    elif journal is not None:
        sj.start(journal, loc.url, out, spec.checksum, spec.prune.describe() if spec.prune else None)
    given: dict[str, tuple[str, list]] = {}  # in-flight task key -> (task id, directories it was given)
    slots = total_task_slots(client)
    max_inflight = slots * tuning.inflight_per_slot
    tasks = 0
    inflight = 0
    pending = as_completed(loop=client.loop)

    def submit() -> None:
        nonlocal tasks, inflight
        while frontier and inflight < max_inflight:
            items, budget = next_slice(frontier, inflight, max_inflight, slots, tuning)
            task_id = sj.task_id(attempt, tasks)
            fut = client.submit(
                scan_chunk,
                spec,
                items,
                task_id,
                budget,
                key=f"pfs-scan-{run_id}-{task_id}",
                pure=False,
                retries=2,
            )
            pending.add(fut)
            given[fut.key] = (task_id, [item[0] for item in items])
            tasks += 1
            inflight += 1

    progress.start(f"scan {loc.url}")
    if prior is not None:
        progress.update(tally.as_dict())
    try:
        submit()
        for fut in pending:
            result: ChunkResult = fut.result()
            fut.release()
            inflight -= 1
            task_id, dirs = given.pop(fut.key)
            if journal is not None:
                sj.record(journal, task_id, dirs, result)  # durable before its frontier is acted on
            tally.add(result.tally)
            parts.extend(result.parts)
            frontier.extend(result.frontier)
            progress.update(tally.as_dict())
            submit()
            if on_parts is not None and result.parts:
                on_parts(result.parts)  # after the next tasks are out: the walk does not wait on it
    except BaseException:
        pending.clear()
        raise
    finally:
        if journal is not None:
            journal.close()
        progress.stop()
    resumed = prior.tasks if prior else 0
    options = {
        "threads": spec.threads,
        "workers": len(client.nthreads()),
        "task_slots": slots,
        "run_id": run_id,
        "checksum": spec.checksum,
        "prune": spec.prune.describe() if spec.prune else None,
        "concurrency": concurrency_report(client, spec.threads),
        "limits": asdict(limits) if limits else None,
        "resumed_tasks": resumed,
    }
    res = _finish(loc, out, loc.url, tally, parts, tasks + resumed, started, t0, options, spec.out_storage_options)
    if journal is not None:
        journal.remove()  # after the marker: a kill in between leaves a journal that resume drops
    res.tasks, res.resumed = tasks, resumed
    return res


def _finish(
    loc: Location,
    out: str,
    root_url: str,
    tally: Tally,
    parts: list[str],
    tasks: int,
    started: datetime,
    t0: float,
    options: dict,
    out_storage_options: dict | None,
) -> ScanResult:
    # Parts from attempts that died (a killed worker) are not in ``parts``: remove them, then mark complete.
    remove_manifest_files(out, keep=set(parts), storage_options=out_storage_options)
    seconds = time.monotonic() - t0
    counts = tally.as_dict()
    write_marker(
        out,
        {
            "root": root_url,
            "scanned_url": loc.url,
            "protocol": loc.protocol,
            "options": options,
            "counts": counts,
            "errors": tally.error_samples,
            "parts": len(parts),
            "tasks": tasks,
            "started": started.isoformat(),
            "finished": datetime.now(UTC).isoformat(),
            "seconds": round(seconds, 3),
        },
        out_storage_options,
    )
    return ScanResult(out, root_url, counts, seconds, tasks, tally.error_samples, options.get("concurrency") or {})
