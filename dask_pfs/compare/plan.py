"""The sync plan: two manifests joined on exact path bytes, one action per path, as Parquet.

DuckDB does the FULL OUTER JOIN straight from the part files on a locked connection
(``dask_pfs.manifests.sql.connect``: it can read the two manifests and write nothing), and pyarrow streams
the result to ``plan.parquet`` batch by batch, so planning a hundred-million-entry tree needs
disk, not memory.  Paths reach SQL only as parameters or through ``sql.sql_str``.  Actions:

* ``new``: only in the source;  ``extra``: only in the destination;
* ``changed``: a file whose size or mtime differ (``checksum=True``: size or content hash;
  object-store destinations keep no source mtime, so there size only), a symlink whose
  target differs, or a directory whose mtime or mode differ (its metadata is set again);
* ``type-changed``: a file became a directory or the reverse (the destination entry, and
  everything below it, is removed before the copy: ``remove_first``);
* ``unchanged``; ``error``: either side could not be read (never acted on).

``_plan.json`` beside it holds the counts and what the plan was made from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from dask_pfs.errors import PfsError
from dask_pfs.manifests.frames import KEY
from dask_pfs.manifests.manifest import Manifest
from dask_pfs.manifests.sql import Filter, connect, sql_str, write_parquet
from operators.journal import write_atomic

PLAN_FILE = "plan.parquet"
PLAN_INFO = "_plan.json"
ACTIONS = ("new", "changed", "type-changed", "unchanged", "extra", "error")
COPY_ACTIONS = ("new", "changed", "type-changed")
# never part of a destination's contents: journals and temp files of pfs runs
IGNORED_DST = "NOT (starts_with(path, '.pfs-journal-') OR contains(name, '.pfs-tmp-'))"


@dataclass(frozen=True)
class Plan:
    """A written plan: where it is and how many rows each action has."""

    path: str  # the plan directory
    counts: dict
    info: dict

    @property
    def file(self) -> str:
        return os.path.join(self.path, PLAN_FILE)

    def keys_sql(self, condition: str) -> str:
        """A subquery of the exact path bytes of the plan rows matching ``condition``."""
        return f"(SELECT key FROM read_parquet({sql_str(self.file)}) WHERE {condition})"

    def where(self, condition: str) -> Filter:
        """A manifest filter selecting the rows of the plan that match ``condition`` (pfs's own SQL:
        its subquery reads the plan file, which the engine's locked connection is allowed to)."""
        return Filter(f"{KEY} IN {self.keys_sql(condition)}", reads=(self.file,))


def plan_sql(src_rel: str, dst_rel: str, *, checksum: bool, compare_mtime: bool) -> str:
    cols = f"{KEY} AS k, path, path_raw, type, size, mtime, mode, checksum, link_target, error"
    if checksum:
        differs = "s.size IS DISTINCT FROM d.size OR s.checksum IS DISTINCT FROM d.checksum"
    elif compare_mtime:
        differs = "s.size IS DISTINCT FROM d.size OR s.mtime IS DISTINCT FROM d.mtime"
    else:
        differs = "s.size IS DISTINCT FROM d.size"
    return (
        f"WITH s AS (SELECT {cols} FROM {src_rel} AS m), "
        f"d AS (SELECT {cols} FROM {dst_rel} AS m WHERE {IGNORED_DST}), "
        "j AS (SELECT coalesce(s.k, d.k) AS key, coalesce(s.path, d.path) AS path, "
        "coalesce(s.path_raw, d.path_raw) AS path_raw, s.type AS src_type, d.type AS dst_type, "
        "s.size AS size, d.size AS dst_size, s.mtime AS mtime, d.mtime AS dst_mtime, "
        "s.checksum AS checksum, d.checksum AS dst_checksum, coalesce(s.error, d.error) AS error, "
        "CASE WHEN s.k IS NOT NULL AND s.error IS NOT NULL THEN 'error' "
        "WHEN d.k IS NULL THEN 'new' "
        "WHEN d.error IS NOT NULL THEN 'error' "
        "WHEN s.k IS NULL THEN 'extra' "
        "WHEN s.type <> d.type THEN 'type-changed' "
        f"WHEN s.type = 'file' AND ({differs}) THEN 'changed' "
        "WHEN s.type = 'symlink' AND s.link_target IS DISTINCT FROM d.link_target THEN 'changed' "
        f"WHEN s.type = 'directory' AND {'true' if compare_mtime else 'false'} "
        "AND (s.mtime IS DISTINCT FROM d.mtime OR s.mode IS DISTINCT FROM d.mode) THEN 'changed' "
        "ELSE 'unchanged' END AS action FROM s FULL OUTER JOIN d ON s.k = d.k), "
        # destination directories replaced by a file: everything below them goes first
        "tc AS (SELECT path FROM j WHERE action = 'type-changed' AND dst_type = 'directory') "
        "SELECT *, action = 'type-changed' OR (action = 'extra' AND EXISTS "
        "(SELECT 1 FROM tc WHERE starts_with(j.path, tc.path || '/'))) AS remove_first "
        "FROM j ORDER BY path"
    )


def write_plan(
    src: Manifest, dst: Manifest, out: str, *, checksum: bool, compare_mtime: bool, info: dict | None = None
) -> Plan:
    """Join the two manifests and write ``out/plan.parquet`` and ``out/_plan.json``."""
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, PLAN_FILE)
    tmp = os.path.join(out, f".{PLAN_FILE}.tmp")
    con = connect(src, dst, reads=[target])
    sql = plan_sql(src.relation_sql(), dst.relation_sql(), checksum=checksum, compare_mtime=compare_mtime)
    try:
        write_parquet(con, sql, tmp)
    except PfsError as exc:
        raise PfsError(f"sync plan failed: {exc}") from None
    os.replace(tmp, target)
    rows = con.execute(
        "SELECT action, count(*), coalesce(sum(size) FILTER (WHERE src_type = 'file'), 0), "
        "count(*) FILTER (WHERE remove_first) FROM read_parquet(?) GROUP BY action",
        [target],
    ).fetchall()
    counts = {a: 0 for a in ACTIONS} | {"copy_bytes": 0, "remove_first": 0}
    for action, n, nbytes, first in rows:
        counts[action] = int(n)
        counts["remove_first"] += int(first)
        if action in COPY_ACTIONS:
            counts["copy_bytes"] += int(nbytes)
    info = {**(info or {}), "checksum": checksum, "compare_mtime": compare_mtime, "counts": counts}
    write_atomic(os.path.join(out, PLAN_INFO), json.dumps(info, indent=1, default=str).encode())
    return Plan(out, counts, info)


def count(p: Plan, condition: str) -> int:
    """Rows of the plan matching ``condition`` (pfs's own condition over the plan's columns)."""
    con = connect(reads=[p.file])
    return int(con.execute(f"SELECT count(*) FROM read_parquet(?) WHERE {condition}", [p.file]).fetchall()[0][0])


def read_plan(out: str) -> Plan | None:
    """A plan written earlier (complete: both files there), or None."""
    try:
        with open(os.path.join(out, PLAN_INFO)) as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return None
    if not os.path.exists(os.path.join(out, PLAN_FILE)):
        return None
    return Plan(out, info["counts"], info)
