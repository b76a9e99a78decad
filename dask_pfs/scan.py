"""The scan driver: spread a tree walk over a Dask cluster and finish a manifest.

The driver holds only the frontier (directories not yet walked) and counters.  Each task
walks a bounded slice (``operators.scan_task.scan_chunk``), writes its own Parquet parts and
hands back the directories it did not reach; the driver re-splits them over free task slots,
so unbalanced trees (one huge directory, a 200-deep chain) keep every worker busy.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from distributed import Client, as_completed

from operators.parts import part_name, write_part
from operators.rows import row_from_info, row_from_stat, rows_to_table
from operators.scan_task import ChunkResult, ScanSpec, scan_chunk
from operators.walk import DirItem, Tally

from .cluster import ClusterOptions, connect, dashboard_link, total_task_slots
from .errors import PfsError
from .frontier import WalkTuning, next_slice
from .limits import Limits, concurrency_report, job_limits
from .manifest import prepare_output, remove_manifest_files, write_marker
from .progress import NullProgress, Reporter
from .urls import Location, resolve


@dataclass
class ScanResult:
    manifest: str
    root: str
    counts: dict
    seconds: float
    tasks: int
    error_samples: list[str] = field(default_factory=list)
    concurrency: dict = field(default_factory=dict)  # {"mode": "auto", "settled": n} or {"mode": "fixed", ...}

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
) -> ScanResult:
    """Scan ``url`` into a manifest directory ``out``; return counts and timings.

    ``client=None`` uses ``cluster`` (or ``PFS_SCHEDULER``), else an embedded LocalCluster.
    Raises :class:`PfsError` (nothing written) when the root is missing or ``out`` already
    holds a manifest and ``overwrite`` is false.  ``checksum`` (``xxh3``, ``sha256``, ``md5``)
    fills the checksum column of every file (``operators.checksum``).
    """
    if checksum is not None:
        from operators.checksum import check_algorithm

        try:
            checksum = check_algorithm(checksum)
        except ValueError as exc:
            raise PfsError(str(exc)) from None
    if limits is None and cluster is not None:
        limits = cluster.limits
    started = datetime.now(UTC)
    t0 = time.monotonic()
    loc = resolve(url, storage_options)
    out = os.fspath(out)
    root_kind, root_row = _probe_root(loc)
    prepare_output(out, overwrite, out_storage_options)
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
    )
    progress = progress or NullProgress()
    if client is None:
        with connect(cluster or ClusterOptions.from_env(threads=threads)) as own, job_limits(own, limits):
            return _run(own, spec, loc, out, tuning or ScanTuning(), progress, started, t0, on_dashboard, limits)
    with job_limits(client, limits):
        return _run(client, spec, loc, out, tuning or ScanTuning(), progress, started, t0, on_dashboard, limits)


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
) -> ScanResult:
    link = dashboard_link(client)
    if on_dashboard and link:
        on_dashboard(link)
    run_id = uuid.uuid4().hex[:8]
    root_item: DirItem = (b"" if loc.is_local else "", None)
    frontier: deque[DirItem] = deque([root_item])
    tally = Tally()
    parts: list[str] = []
    slots = total_task_slots(client)
    max_inflight = slots * tuning.inflight_per_slot
    tasks = 0
    inflight = 0
    pending = as_completed(loop=client.loop)

    def submit() -> None:
        nonlocal tasks, inflight
        while frontier and inflight < max_inflight:
            items, budget = next_slice(frontier, inflight, max_inflight, slots, tuning)
            task_id = f"{tasks:07d}"
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
            tasks += 1
            inflight += 1

    progress.start(f"scan {loc.url}")
    try:
        submit()
        for fut in pending:
            result: ChunkResult = fut.result()
            fut.release()
            inflight -= 1
            tally.add(result.tally)
            parts.extend(result.parts)
            frontier.extend(result.frontier)
            progress.update(tally.as_dict())
            submit()
    except BaseException:
        pending.clear()
        raise
    finally:
        progress.stop()
    options = {
        "threads": spec.threads,
        "workers": len(client.nthreads()),
        "task_slots": slots,
        "run_id": run_id,
        "checksum": spec.checksum,
        "concurrency": concurrency_report(client, spec.threads),
        "limits": asdict(limits) if limits else None,
    }
    return _finish(loc, out, loc.url, tally, parts, tasks, started, t0, options, spec.out_storage_options)


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
