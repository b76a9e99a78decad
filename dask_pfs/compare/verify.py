"""``verify``: compare two trees (or manifests) by content, out of core in DuckDB.

Each side is a live tree, scanned with checksums, or a manifest from an earlier scan, checksummed
where it lacks them (``dask_pfs.compare.sides``), so verify never trusts size and mtime: a flipped byte
with the same size and mtime is found.
The two sides are joined on exact path bytes (``coalesce(path_raw, encode(path))``); rows that
differ go to a Parquet report, counts to the result.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.compare.sides import Side, manifest_side, require_xattrs, scan_sides, with_checksums
from dask_pfs.errors import PfsError
from dask_pfs.manifests.frames import KEY, takes_selection
from dask_pfs.manifests.sql import Filter, where_filter, write_parquet
from dask_pfs.manifests.sql import connect as locked
from dask_pfs.manifests.sql_probe import probe
from dask_pfs.options import job_options, named, renamed
from dask_pfs.runtime.progress import Reporter, default_reporter
from dask_pfs.runtime.results import JobResult
from dask_pfs.runtime.submitter import job_client
from dask_pfs.scan.engine import check_checksum
from dask_pfs.urls import Location, resolve
from operators.checksum import DEFAULT

if TYPE_CHECKING:
    from distributed import Client

    from operators.ratelimit import Limits

STATUSES = ("missing", "extra", "different", "xattrs", "error")
# ``--xattrs``: attribute names and value digests (or ACL presence) differ while contents are the same
XATTRS_DIFFER = "(s.xattrs IS DISTINCT FROM d.xattrs OR s.has_acl IS DISTINCT FROM d.has_acl)"


@dataclass(kw_only=True)
class VerifyResult(JobResult):
    """``counts``: same, missing, extra, different, error (unreadable on either side), and the
    source's files and bytes; ``failed``: the entries that are not the same; ``samples``:
    ``(path, status)``; ``log``: the Parquet report of every entry that is not the same."""

    source: str
    destination: str

    @property
    def report(self) -> str | None:
        """``log``, by its name in verify's first API."""
        return self.log

    def summary(self) -> dict:
        """With ``report`` (= ``log``): the Parquet file of differences, None when nothing differs."""
        return {**super().summary(), "report": self.log}


def compare_sql(src: Side, dst: Side, where: Filter | None, xattrs: bool = False) -> str:
    """One row per path on either side with its status (missing/extra/different/xattrs/error/same)."""
    cond = f"({where})" if where else "TRUE"
    if src.flat or dst.flat:
        cond += " AND type <> 'directory'"  # object stores have no empty directories to compare
    cols = f"{KEY} AS k, path, path_raw, type, size, mtime, checksum, link_target, error, xattrs, has_acl"
    attrs = (
        "list_transform(s.xattrs, lambda x: x.name) AS src_xattrs, "
        "list_transform(d.xattrs, lambda x: x.name) AS dst_xattrs, "
        "s.has_acl AS src_acl, d.has_acl AS dst_acl, "
        if xattrs
        else ""
    )
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
        + (f"WHEN {XATTRS_DIFFER} THEN 'xattrs' " if xattrs else "")
        + "ELSE 'same' END AS status, "
        "s.type AS src_type, d.type AS dst_type, s.size AS src_size, d.size AS dst_size, "
        "s.mtime AS src_mtime, d.mtime AS dst_mtime, s.checksum AS src_checksum, d.checksum AS dst_checksum, "
        f"{attrs}coalesce(s.error, d.error) AS error "
        "FROM s FULL OUTER JOIN d ON s.k = d.k"
    )


@renamed(report="log")
@job_options("max_ops_per_second", "max_bandwidth")
@takes_selection(None)
def verify(
    src: str | os.PathLike | None = None,
    dst: str | os.PathLike | None = None,
    client: Client | None = None,
    *,
    src_manifest: str | os.PathLike | None = None,
    dst_manifest: str | os.PathLike | None = None,
    where: str | Filter | None = None,
    checksum: str = DEFAULT,
    log: str | os.PathLike | None = None,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    limits: Limits | None = None,
    progress: Reporter | None = None,
    storage_options: dict | None = None,
    dst_storage_options: dict | None = None,
    samples: int = 20,
    xattrs: bool = False,
) -> VerifyResult:
    """Compare ``src`` and ``dst`` by content (``checksum``: the algorithm); a side may be given as
    a manifest instead.

    ``where`` (one DuckDB condition over manifest columns, ``dask_pfs.manifests.sql``) and ``selection`` (a frame of
    manifest rows, ``dask_pfs.manifests.frames``) select rows on both sides.  With a
    manifest and a URL for the same side, the manifest's rows are read below the URL.  Rows
    that are not the same go to the Parquet ``log`` (default: a file in the temp dir; ``report``, its old
    name, is deprecated).
    ``xattrs`` also compares each entry's extended attributes (names and value digests) and ACL
    presence (status ``xattrs``); trees are scanned with them, manifests must have them.
    """
    t0 = time.monotonic()
    algorithm = check_checksum(checksum) or DEFAULT
    if (src is None and src_manifest is None) or (dst is None and dst_manifest is None):
        raise PfsError("give SRC and DST (trees), or ", named("src_manifest"), " / ", named("dst_manifest"))
    selected = where_filter(where)  # a user's clause is checked; a selection's filter is pfs's own
    progress = default_reporter(progress)
    src, dst = (os.fspath(x) if x is not None else None for x in (src, dst))
    sides: list[Side | None] = [
        manifest_side(os.fspath(src_manifest), src, storage_options) if src_manifest else None,
        manifest_side(os.fspath(dst_manifest), dst, dst_storage_options) if dst_manifest else None,
    ]
    run = uuid.uuid4().hex[:8]
    report = os.fspath(log) if log else os.path.join(tempfile.gettempdir(), f"pfs-verify-{run}.parquet")
    with (
        tempfile.TemporaryDirectory(prefix="pfs-verify-") as work,
        job_client(
            client, cluster, threads, limits, here=_where(sides, (src, dst), (storage_options, dst_storage_options))
        ) as client,
    ):
        jobs = [
            (src, os.path.join(work, "src"), storage_options) if src is not None else None,
            (dst, os.path.join(work, "dst"), dst_storage_options) if dst is not None else None,
        ]
        s_side, d_side = (
            with_checksums(client, side, selected, algorithm, os.path.join(work, f"{label}-sums"), progress)
            for side, label in zip(
                scan_sides(client, sides, jobs, algorithm, threads, xattrs=xattrs), ("src", "dst"), strict=True
            )
        )
        if xattrs:
            require_xattrs([s_side, d_side])
        counts, wrote, sample_rows = _compare(s_side, d_side, selected, report, samples, xattrs)
    return VerifyResult(
        source=s_side.root,
        destination=d_side.root,
        counts=counts,
        failed=sum(counts.get(s, 0) for s in STATUSES),
        log=wrote,
        seconds=round(time.monotonic() - t0, 3),
        samples=[(p, s) for p, s in sample_rows],
    )


def _compare(s_side: Side, d_side: Side, where: Filter | None, report: str, samples: int, xattrs: bool = False):
    """Counts per status, the report written (None when everything is the same), the first differences."""
    # the where-clause runs only on a locked connection (which may read a selection's file too)
    con = locked(s_side.manifest, d_side.manifest, reads=where.reads if where else ())
    sql = compare_sql(s_side, d_side, where, xattrs)
    ms = (s_side.manifest, d_side.manifest)
    if where is not None and where.user and all(m.is_local for m in ms):  # first in a bounded child
        tables = {name: files for m in ms for name, files in m.tables().items()}
        probe(f"SELECT count(*) FROM ({sql})", [m.local_dir for m in ms], where.reads, tables)
    try:
        rows = con.execute(f"SELECT status, count(*), sum(src_size) FROM ({sql}) GROUP BY status").fetchall()
        counts = {s: 0 for s in ("same", *STATUSES) if xattrs or s != "xattrs"}  # asked for: counted
        for status, n, _ in rows:
            counts[status] = int(n)
        counts["files"] = int(con.execute(f"SELECT count(*) FROM ({sql}) WHERE src_type = 'file'").fetchall()[0][0])
        counts["bytes"] = int(
            con.execute(f"SELECT coalesce(sum(src_size), 0) FROM ({sql}) WHERE src_type = 'file'").fetchall()[0][0]
        )
        wrote = None
        if sum(counts.get(s, 0) for s in STATUSES):
            write_parquet(con, f"SELECT * FROM ({sql}) WHERE status <> 'same' ORDER BY path", report)
            wrote = report
        sample_rows = con.execute(
            f"SELECT path, status FROM ({sql}) WHERE status <> 'same' ORDER BY path LIMIT ?", [int(samples)]
        ).fetchall()
    except duckdb.Error as exc:  # a bad --where
        raise PfsError(f"verify query failed: {str(exc).splitlines()[0]}") from None
    return counts, wrote, sample_rows


def _where(
    sides: list[Side | None], urls: tuple[str | None, ...], options: tuple[dict | None, ...]
) -> tuple[Location, ...]:
    """Both sides' roots: where the job reads (``dask_pfs.runtime.here`` runs a small one on the driver alone)."""
    roots = [url if url is not None else side.root if side else None for side, url in zip(sides, urls, strict=True)]
    return tuple(resolve(r, o) for r, o in zip(roots, options, strict=True) if r is not None)


__all__ = ["VerifyResult", "compare_sql", "verify"]
