"""``pfs verify``: compare two trees (or manifests) by content, out of core in DuckDB.

Each side is a live tree, scanned with checksums, or a manifest from an earlier scan.  A
manifest whose selected files carry no checksum of the wanted algorithm gets a checksum pass
(the rows in chunks on the cluster, each chunk written as a part of a derived manifest), so
verify never trusts size and mtime: a flipped byte with the same size and mtime is found.
The two sides are joined on exact path bytes (``coalesce(path_raw, encode(path))``); rows that
differ go to a Parquet report, counts to the result.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

import duckdb
import pyarrow as pa

from operators.checksum import DEFAULT, check_algorithm, checksum_table
from operators.parts import part_name
from operators.remote_scan import FLAT_PROTOCOLS

from . import sql as pfs_sql
from .cluster import ClusterOptions, connect, total_task_slots
from .errors import PfsError
from .frames import takes_selection
from .manifest import Manifest, open_manifest, prepare_output, write_marker
from .progress import NullProgress, Reporter
from .urls import resolve

KEY = "coalesce(path_raw, encode(path))"
CHUNK_ROWS = 2000
STATUSES = ("missing", "extra", "different", "error")


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


@dataclass
class VerifyResult:
    source: str
    destination: str
    counts: dict  # same, missing, extra, different, error, files, bytes
    report: str | None
    seconds: float
    samples: list[tuple[str, str]] = field(default_factory=list)  # (path, status)

    @property
    def differences(self) -> int:
        return sum(self.counts.get(s, 0) for s in STATUSES)

    @property
    def exit_code(self) -> int:
        return 1 if self.differences else 0

    def summary(self) -> dict:
        return {**asdict(self), "exit_code": self.exit_code}


def scan_side(
    client, url: str, out: str, *, checksum: str | None, threads, storage_options, progress, prune=None
) -> Side:
    from .scan import scan

    result = scan(
        url,
        out,
        client,
        threads=threads,
        overwrite=True,
        storage_options=storage_options,
        progress=progress,
        checksum=checksum,
        prune=prune,
    )
    return Side(open_manifest(out), result.root, storage_options or {}, result.errors)


def scan_sides(client, jobs: list[tuple[str, str, dict | None] | None], **kwargs) -> list[Side | None]:
    """Scan several trees at once on one cluster; each job is ``(url, out, storage_options)`` or None."""
    with ThreadPoolExecutor(max(1, len(jobs))) as pool:
        futs = [
            pool.submit(scan_side, client, job[0], job[1], storage_options=job[2], **kwargs) if job else None
            for job in jobs
        ]
        return [f.result() if f is not None else None for f in futs]


def manifest_side(url: str, root: str | None, storage_options: dict | None) -> Side:
    m = open_manifest(url)
    return Side(m, root or m.root, storage_options or {}, int((m.info.get("counts") or {}).get("errors", 0)))


def _reads(where: str | pfs_sql.Filter | None) -> tuple[str, ...]:
    """The files pfs's own filter reads besides the manifests (a selection's), for the locked connection."""
    return where.reads if isinstance(where, pfs_sql.Filter) else ()


def missing_checksums(side: Side, where: str | pfs_sql.Filter | None, algorithm: str) -> int:
    cond = f"({where})" if where else "TRUE"
    sql = (
        f"SELECT count(*) FROM {side.manifest.relation_sql()} AS m WHERE {cond} AND type = 'file' "
        f"AND error IS NULL AND (checksum IS NULL OR NOT starts_with(checksum, '{algorithm}:'))"
    )
    try:
        return int(pfs_sql.connect(side.manifest, reads=_reads(where)).execute(sql).fetchall()[0][0])
    except duckdb.Error as exc:  # the first query with the where-clause: a bad column, a missing function
        raise PfsError(f"--where: {str(exc).splitlines()[0]}") from None


def with_checksums(
    client, side: Side, where: str | pfs_sql.Filter | None, algorithm: str, out: str, progress: Reporter
) -> Side:
    """``side`` unchanged if its selected files all have checksums, else a checksummed copy of the rows."""
    if missing_checksums(side, where, algorithm) == 0:
        return side
    prepare_output(out, True)
    loc = resolve(side.root, side.storage_options)
    cond = f"({where})" if where else "TRUE"
    reader = (
        pfs_sql.connect(side.manifest, reads=_reads(where))
        .sql(f"SELECT * FROM {side.manifest.relation_sql()} AS m WHERE {cond} ORDER BY path")
        .to_arrow_reader(CHUNK_ROWS)
    )
    from distributed import as_completed

    limit = total_task_slots(client) * 2
    pending = as_completed(loop=client.loop)
    inflight, parts, errors, done = 0, [], 0, {"files": 0, "bytes": 0}
    run = uuid.uuid4().hex[:8]

    def take(fut) -> None:
        nonlocal inflight, errors
        files, nbytes, failures = fut.result()
        fut.release()
        inflight -= 1
        errors += len(failures)
        done["files"] += files
        done["bytes"] += nbytes
        progress.update({"entries": done["files"], "bytes": done["bytes"], "errors": errors})

    progress.start(f"checksum {side.root}")
    try:
        for i, batch in enumerate(reader):
            while inflight >= limit:
                take(next(pending))
            name = part_name(f"sum{i:07d}", 0)
            table = pa.Table.from_batches([batch])
            pending.add(
                client.submit(
                    checksum_table,
                    loc.protocol,
                    loc.path,
                    loc.storage_options,
                    table,
                    out,
                    name,
                    algorithm,
                    key=f"pfs-sum-{run}-{i}",
                    pure=False,
                    retries=2,
                )
            )
            parts.append(name)
            inflight += 1
        for fut in pending:
            take(fut)
    finally:
        progress.stop()
    write_marker(out, {"root": side.root, "derived_from": side.manifest.url, "where": where, "checksum": algorithm})
    return Side(open_manifest(out), side.root, side.storage_options, side.scanned_errors + errors)


def compare_sql(src: Side, dst: Side, where: str | pfs_sql.Filter | None) -> str:
    """One row per path on either side with its status (missing/extra/different/error/same)."""
    cond = f"({where})" if where else "TRUE"
    if src.flat or dst.flat:
        cond += " AND type <> 'directory'"  # object stores have no empty directories to compare
    cols = f"{KEY} AS k, path, path_raw, type, size, mtime, checksum, link_target, error"
    return (
        f"WITH s AS (SELECT {cols} FROM {src.manifest.relation_sql()} AS m WHERE {cond}), "
        f"d AS (SELECT {cols} FROM {dst.manifest.relation_sql()} AS m WHERE {cond}) "
        "SELECT coalesce(s.path, d.path) AS path, coalesce(s.path_raw, d.path_raw) AS path_raw, "
        "CASE WHEN d.k IS NULL THEN 'missing' WHEN s.k IS NULL THEN 'extra' "
        "WHEN s.error IS NOT NULL OR d.error IS NOT NULL THEN 'error' "
        "WHEN s.type <> d.type THEN 'different' "
        "WHEN s.type = 'file' AND (s.size IS DISTINCT FROM d.size OR s.checksum IS DISTINCT FROM d.checksum) "
        "THEN 'different' "
        "WHEN s.type = 'symlink' AND s.link_target IS DISTINCT FROM d.link_target THEN 'different' "
        "ELSE 'same' END AS status, "
        "s.type AS src_type, d.type AS dst_type, s.size AS src_size, d.size AS dst_size, "
        "s.mtime AS src_mtime, d.mtime AS dst_mtime, s.checksum AS src_checksum, d.checksum AS dst_checksum, "
        "coalesce(s.error, d.error) AS error "
        "FROM s FULL OUTER JOIN d ON s.k = d.k"
    )


@takes_selection(None)
def verify(
    src: str | os.PathLike | None = None,
    dst: str | os.PathLike | None = None,
    *,
    src_manifest: str | os.PathLike | None = None,
    dst_manifest: str | os.PathLike | None = None,
    where: str | pfs_sql.Filter | None = None,
    algorithm: str = DEFAULT,
    report: str | os.PathLike | None = None,
    client=None,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    progress: Reporter | None = None,
    storage_options: dict | None = None,
    dst_storage_options: dict | None = None,
    samples: int = 20,
) -> VerifyResult:
    """Compare ``src`` and ``dst`` by content; a side may be given as a manifest instead.

    ``where`` (one DuckDB condition over manifest columns, ``dask_pfs.sql``) and ``selection`` (a frame of
    manifest rows, ``dask_pfs.frames``) select rows on both sides.  With a
    manifest and a URL for the same side, the manifest's rows are read below the URL.  Rows
    that are not the same go to the Parquet ``report`` (default: a file in the temp dir).
    """
    t0 = time.monotonic()
    try:
        algorithm = check_algorithm(algorithm)
    except ValueError as exc:
        raise PfsError(str(exc)) from None
    if (src is None and src_manifest is None) or (dst is None and dst_manifest is None):
        raise PfsError("give SRC and DST (trees), or --src-manifest / --dst-manifest")
    where = pfs_sql.where_filter(where)  # a user's clause is checked; a selection's filter is pfs's own
    progress = progress or NullProgress()
    src, dst = (os.fspath(x) if x is not None else None for x in (src, dst))
    sides: list[Side | None] = [
        manifest_side(os.fspath(src_manifest), src, storage_options) if src_manifest else None,
        manifest_side(os.fspath(dst_manifest), dst, dst_storage_options) if dst_manifest else None,
    ]
    run = uuid.uuid4().hex[:8]
    report = os.fspath(report) if report else os.path.join(tempfile.gettempdir(), f"pfs-verify-{run}.parquet")
    with ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="pfs-verify-"))
        if client is None:
            client = stack.enter_context(connect(cluster or ClusterOptions.from_env(threads=threads)))
        jobs = [
            None if sides[0] else (src, os.path.join(work, "src"), storage_options),
            None if sides[1] else (dst, os.path.join(work, "dst"), dst_storage_options),
        ]
        scanned = scan_sides(client, jobs, checksum=algorithm, threads=threads, progress=NullProgress())
        sides = [s or t for s, t in zip(sides, scanned, strict=True)]
        s_side, d_side = (
            with_checksums(client, side, where, algorithm, os.path.join(work, f"{label}-sums"), progress)
            for side, label in zip(sides, ("src", "dst"), strict=True)
        )
        con = pfs_sql.connect(s_side.manifest, d_side.manifest, reads=_reads(where))
        sql = compare_sql(s_side, d_side, where)
        try:
            rows = con.execute(f"SELECT status, count(*), sum(src_size) FROM ({sql}) GROUP BY status").fetchall()
            counts = {s: 0 for s in ("same", *STATUSES)}
            for status, n, _ in rows:
                counts[status] = int(n)
            counts["files"] = int(con.execute(f"SELECT count(*) FROM ({sql}) WHERE src_type = 'file'").fetchall()[0][0])
            counts["bytes"] = int(
                con.execute(f"SELECT coalesce(sum(src_size), 0) FROM ({sql}) WHERE src_type = 'file'").fetchall()[0][0]
            )
            differ = sum(counts[s] for s in STATUSES)
            wrote = None
            if differ:
                pfs_sql.write_parquet(con, f"SELECT * FROM ({sql}) WHERE status <> 'same' ORDER BY path", report)
                wrote = report
            sample_rows = con.execute(
                f"SELECT path, status FROM ({sql}) WHERE status <> 'same' ORDER BY path LIMIT {int(samples)}"
            ).fetchall()
        except Exception as exc:  # duckdb.Error: a bad --where
            raise PfsError(f"verify query failed: {str(exc).splitlines()[0]}") from None
    return VerifyResult(
        source=s_side.root,
        destination=d_side.root,
        counts=counts,
        report=wrote,
        seconds=round(time.monotonic() - t0, 3),
        samples=[(p, s) for p, s in sample_rows],
    )


__all__ = ["Side", "VerifyResult", "compare_sql", "scan_sides", "verify", "with_checksums"]
