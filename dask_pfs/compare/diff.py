"""``pfs diff OLD NEW``: what changed between two manifests of a tree, or a manifest and the live tree.

The two sides are joined on exact path bytes (``coalesce(path_raw, encode(path))``) with a DuckDB
FULL OUTER JOIN straight from the part files; the rows that differ stream to a Parquet file
(pyarrow, batch by batch: the locked connection writes nothing), so versions of a
hundred-million-entry tree are compared on disk, not in memory.

* ``added``: only in NEW;  ``removed``: only in OLD;
* ``changed``: the type differs; a file's size, mtime (unless ``compare_mtime=False``) or checksum
  (only when both sides have one of the same algorithm); a symlink's target.  ``what`` lists
  which.  A directory's own mtime is not compared: what changed inside it is listed as its entries;
* ``xattrs`` (``xattrs=True``, ``--xattrs``): only the extended attributes (names, value digests) or
  the presence of an ACL differ (``what``: ``xattrs``, ``acl``); both sides need them recorded;
* ``error``: either side could not read the entry, or it lies below a directory one side could
  not read (so an unreadable directory never looks like a deletion).

A side that is not a manifest is scanned first into a temporary one, with the checksum algorithm
and the ``--exclude``/``--include``/... options the other side's manifest was scanned with, so like
is compared with like.  Exit codes (like ``diff``): 0 the same, 1 different, 2 trouble (bad input,
or entries either side could not read).
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb
import pyarrow.parquet as pq

from dask_pfs.clusters.client import ClusterOptions
from dask_pfs.compare.sides import Side, require_xattrs, scan_sides
from dask_pfs.errors import PfsError
from dask_pfs.manifests import sql as pfs_sql
from dask_pfs.manifests.frames import KEY
from dask_pfs.manifests.manifest import Manifest, has_marker, open_manifest
from dask_pfs.options import named
from dask_pfs.runtime.progress import Reporter, default_reporter
from dask_pfs.runtime.results import JobResult
from dask_pfs.runtime.submitter import job_client
from dask_pfs.urls import resolve
from operators.scan.prune import Prune
from operators.schema import PART_PREFIX, PART_SUFFIX

if TYPE_CHECKING:
    from distributed import Client

CHANGES = ("added", "removed", "changed", "xattrs", "error")


@dataclass(kw_only=True)
class DiffResult(JobResult):
    """``counts``: added, removed, changed, unchanged, error; ``failed``: the entries either side
    could not read (``error``); ``samples``: the first ``(path, change)`` pairs; ``log``: the
    Parquet file of the rows that differ, when asked for (``output``)."""

    old: str  # the sides compared as given: a manifest, or the live tree (its scan is temporary, never named)
    new: str
    bytes: dict = field(default_factory=dict)  # of files: added, removed, changed (new size), old, new, delta

    @property
    def output(self) -> str | None:
        """``log``, by its name in diff's first API."""
        return self.log

    @property
    def exit_code(self) -> int:
        """Like ``diff``: 2 trouble (unreadable entries), 1 different, 0 the same."""
        if self.failed:
            return 2
        return 1 if any(self.counts.get(c) for c in ("added", "removed", "changed", "xattrs")) else 0


def diff_sql(old: str, new: str, *, compare_mtime: bool = True, xattrs: bool = False) -> str:
    """One row per path of either side: its change, what changed, and both sides' attributes."""
    cols = f"{KEY} AS k, path, path_raw, type, size, mtime, checksum, link_target, error, xattrs, has_acl"
    attrs = (
        "CASE WHEN o.xattrs IS DISTINCT FROM n.xattrs THEN 'xattrs' END, "
        "CASE WHEN o.has_acl IS DISTINCT FROM n.has_acl THEN 'acl' END, "
        if xattrs
        else ""
    )
    same_algorithm = "split_part(o.checksum, ':', 1) = split_part(n.checksum, ':', 1)"
    what = (
        "list_filter(["
        "CASE WHEN o.type <> n.type THEN 'type' END, "
        "CASE WHEN o.type = 'file' AND n.type = 'file' AND o.size IS DISTINCT FROM n.size THEN 'size' END, "
        + (
            "CASE WHEN o.type = 'file' AND n.type = 'file' AND o.mtime IS DISTINCT FROM n.mtime THEN 'mtime' END, "
            if compare_mtime
            else ""
        )
        + f"CASE WHEN o.type = 'file' AND n.type = 'file' AND {same_algorithm} AND o.checksum <> n.checksum "
        "THEN 'checksum' END, "
        "CASE WHEN o.type = 'symlink' AND n.type = 'symlink' AND o.link_target IS DISTINCT FROM n.link_target "
        f"THEN 'target' END, {attrs}], lambda x: x IS NOT NULL)"
    )
    return (
        f"WITH o AS (SELECT {cols} FROM {old} AS m), n AS (SELECT {cols} FROM {new} AS m), "
        "unread AS (SELECT path FROM o WHERE error IS NOT NULL AND type = 'directory' "
        "UNION SELECT path FROM n WHERE error IS NOT NULL AND type = 'directory'), "
        "j AS (SELECT coalesce(n.path, o.path) AS path, coalesce(n.path_raw, o.path_raw) AS path_raw, "
        "CASE WHEN o.error IS NOT NULL OR n.error IS NOT NULL THEN 'error' WHEN o.k IS NULL THEN 'added' "
        f"WHEN n.k IS NULL THEN 'removed' WHEN len({what}) > 0 AND list_has_all(['xattrs', 'acl'], {what}) "
        f"THEN 'xattrs' WHEN len({what}) > 0 THEN 'changed' ELSE 'unchanged' END AS change, "
        f"CASE WHEN o.k IS NOT NULL AND n.k IS NOT NULL THEN {what} ELSE [] END AS what, "
        "o.type AS old_type, n.type AS new_type, o.size AS old_size, n.size AS new_size, "
        "o.mtime AS old_mtime, n.mtime AS new_mtime, o.checksum AS old_checksum, n.checksum AS new_checksum, "
        "o.link_target AS old_target, n.link_target AS new_target, coalesce(n.error, o.error) AS error "
        "FROM o FULL OUTER JOIN n ON o.k = n.k) "
        "SELECT * REPLACE (CASE WHEN change IN ('added', 'removed') AND EXISTS "
        "(SELECT 1 FROM unread WHERE starts_with(j.path, unread.path || '/')) THEN 'error' ELSE change END "
        "AS change) FROM j"
    )


def diff(
    old: str | os.PathLike,
    new: str | os.PathLike,
    out: str | os.PathLike | None = None,
    *,
    compare_mtime: bool = True,
    checksum: str | None = None,
    client: Client | None = None,
    cluster: ClusterOptions | None = None,
    threads: int | None = None,
    storage_options: dict | None = None,
    progress: Reporter | None = None,
    samples: int = 20,
    xattrs: bool = False,
) -> DiffResult:
    """Compare ``old`` and ``new`` (manifests, or one of them a live tree); see the module docstring.

    ``out``: write the rows that are not unchanged there as Parquet (sorted by path).  ``checksum``:
    the algorithm a live side is scanned with (default: the other side's, if it has one).
    ``xattrs``: compare extended attributes and ACL presence too (a live side is scanned with them;
    a manifest side must have them).
    Raises :class:`PfsError` (exit code 2) for a missing side or an incomplete manifest.
    """
    t0 = time.monotonic()
    names = (os.fspath(old), os.fspath(new))
    _check_output(out)
    given = [_manifest_or_none(name, storage_options) for name in names]
    _check_checksum(checksum, given, names)
    with ExitStack() as stack:
        if any(m is None for m in given):
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix="pfs-diff-"))
            known = next((m for m in given if m is not None), None)
            options = (known.info.get("options") or {}) if known else {}
            prune = Prune.from_description(options["prune"]) if options.get("prune") else None
            jobs = [None if m else (name, os.path.join(work, label), storage_options)
                    for m, name, label in zip(given, names, ("old", "new"), strict=True)]  # fmt: skip
            live = tuple(resolve(n, storage_options) for m, n in zip(given, names, strict=True) if m is None)
            client = stack.enter_context(job_client(client, cluster, threads, here=live))
            known_sides = [Side(m, m.root) if m else None for m in given]
            sides = scan_sides(client, known_sides, jobs, checksum or options.get("checksum"), threads,
                               progress=default_reporter(progress), prune=prune, xattrs=xattrs)  # fmt: skip
            given = [s.manifest for s in sides]
        assert given[0] is not None and given[1] is not None
        if xattrs:
            require_xattrs([Side(m, m.root) for m in (given[0], given[1])])
        result = _compare(given[0], given[1], out, compare_mtime, samples, xattrs)
    result.old, result.new = names  # not the temporary scan of a live side, gone by now
    result.seconds = round(time.monotonic() - t0, 3)
    return result


def _check_output(out: str | os.PathLike | None) -> None:
    """A local ``-o`` goes into an existing directory: a typo in it is refused, not created."""
    if out is None or "://" in os.fspath(out):
        return
    parent = os.path.dirname(os.path.abspath(os.fspath(out)))
    if not os.path.isdir(parent):
        raise PfsError(f"{out}: directory {parent} does not exist")


def _check_checksum(checksum: str | None, given: list[Manifest | None], names: tuple[str, str]) -> None:
    """``checksum`` asked while a manifest side has none of that algorithm: the comparison would
    silently fall back to size and mtime, so refuse and say what to do."""
    if not checksum:
        return
    for m, name in zip(given, names, strict=True):
        has = ((m.info.get("options") or {}).get("checksum") if m is not None else checksum) or None
        if has != checksum:
            raise PfsError(
                f"{name} has no {checksum} checksums (scanned with {has or 'no checksum'}): rescan it with ",
                named("checksum", checksum),
                ", or leave ",
                named("checksum"),
                " out to compare size and mtime",
            )


def _manifest_or_none(name: str, storage_options: dict | None) -> Manifest | None:
    """The manifest ``name`` is, or None for a live tree (a directory that holds no manifest)."""
    if has_marker(name, storage_options):
        return open_manifest(name, storage_options=storage_options)
    import fsspec  # only for a diff against a live tree or a place that is not a manifest

    fs, path = fsspec.core.url_to_fs(name, **(storage_options or {}))
    if not fs.exists(path):
        raise PfsError(f"{name}: no such manifest or directory")
    if fs.isdir(path) and fs.glob(f"{path.rstrip('/')}/{PART_PREFIX}*{PART_SUFFIX}"):
        open_manifest(name, storage_options=storage_options)  # parts, no marker: an interrupted scan, refused
    return None


def _compare(old: Manifest, new: Manifest, out, compare_mtime: bool, samples: int, xattrs: bool = False) -> DiffResult:
    con = pfs_sql.connect(old, new)  # reads the two manifests and nothing else
    sql = diff_sql(old.relation_sql(), new.relation_sql(), compare_mtime=compare_mtime, xattrs=xattrs)
    try:
        counted = con.execute(
            "SELECT change, count(*), "
            "coalesce(sum(new_size) FILTER (WHERE new_type = 'file'), 0), "
            f"coalesce(sum(old_size) FILTER (WHERE old_type = 'file'), 0) FROM ({sql}) GROUP BY change"
        ).fetchall()
        differing = f"SELECT * FROM ({sql}) WHERE change <> 'unchanged' ORDER BY path"
        wrote = None
        if out is not None:
            wrote = os.fspath(out)
            # streamed: pyarrow writes what DuckDB sorts out of core, through the one writer (temp + rename)
            pfs_sql.write_parquet(con, differing, wrote)
            batch = next(pq.ParquetFile(wrote).iter_batches(max(samples, 1), columns=["path", "change"]), None)
            first = [(r["path"], r["change"]) for r in batch.to_pylist()][:samples] if batch is not None else []
        else:
            first = con.execute(f"SELECT path, change FROM ({differing}) LIMIT ?", [int(samples)]).fetchall()
    except duckdb.Error as exc:
        raise PfsError(f"diff failed: {str(exc).splitlines()[0]}") from None
    counts = {c: 0 for c in (*CHANGES, "unchanged") if xattrs or c != "xattrs"}  # asked for: counted
    sizes = {"added": 0, "removed": 0, "changed": 0, "old": 0, "new": 0}
    for change, n, new_bytes, old_bytes in counted:
        counts[change] = int(n)
        sizes["new"] += int(new_bytes)
        sizes["old"] += int(old_bytes)
        if change in ("added", "changed"):
            sizes[change] = int(new_bytes)
        elif change == "removed":
            sizes[change] = int(old_bytes)
    sizes["delta"] = sizes["new"] - sizes["old"]
    return DiffResult(
        old=old.url,
        new=new.url,
        counts=counts,
        failed=counts["error"],
        bytes=sizes,
        log=wrote,
        samples=[(p, c) for p, c in first],
    )
