"""The sync plan: two manifests joined on exact path bytes, one action per path, as Parquet.

DuckDB does the FULL OUTER JOIN straight from the part files on a locked connection
(``dask_pfs.manifests.sql.connect``: it can read the two manifests and write nothing), and pyarrow streams
the result to ``plan.parquet`` batch by batch, so planning a hundred-million-entry tree needs
disk, not memory.  Paths reach SQL only as parameters or as relations ``sql.connect`` named.  Actions:

* ``new``: only in the source;  ``extra``: only in the destination;
* ``changed``: a file whose size or mtime differ (``checksum=True``: size or content hash;
  object-store destinations keep no source mtime, so there size only), a symlink whose
  target differs, or a directory whose mtime or mode differ (its metadata is set again); on a
  POSIX destination also a file or special file whose mode differs, a symlink, FIFO, socket or device
  whose mtime differs,
  and (``owners``: the copy keeps owners, or sets them with ``--chown``) any entry whose owner or
  group differs from what the copy gives it (``rsync -a`` sets such metadata in place; pfs copies
  the entry again); with ``xattrs``, any entry whose extended attributes (names, value digests) or
  ACL presence differ; on a POSIX destination also every name of a source hard-link group whose
  destination names are not one inode (files that became hard links: linked as ``rsync -aH`` does);
* ``type-changed``: a file became a directory or the reverse (the destination entry, and
  everything below it, is removed before the copy: ``remove_first``);
* ``unchanged``; ``error``: either side could not be read (never acted on).

``_plan.json`` beside it holds the counts and what the plan was made from.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass

from dask_pfs.errors import PfsError
from dask_pfs.manifests.frames import KEY
from dask_pfs.manifests.manifest import MARKER_NAME, Manifest, open_manifest, remove_manifest_files, write_marker
from dask_pfs.manifests.sql import Filter, connect, file_table, literal, write_parquet
from dask_pfs.options import PRUNE_KEY, named, named_flag
from dask_pfs.places import local_path
from dask_pfs.urls import Location
from operators.core import outputs
from operators.journal import write_atomic

PLAN_FILE = "plan.parquet"
PLAN_INFO = "_plan.json"
ACTIONS = ("new", "changed", "type-changed", "unchanged", "extra", "error")
COPY_ACTIONS = ("new", "changed", "type-changed")
COPY_CONDITION = "action IN ('new', 'changed', 'type-changed')"  # COPY_ACTIONS, as pfs's own SQL
# named like pfs's own entries in a destination: journals and temp files of pfs runs.  Such a destination row
# is left out of the plan (neither compared, nor deleted as an extra) only when the source has no entry of
# that path: a source file named like one copies, and then compares, as any other (a sync reaches its steady
# state), and a user's file so named, or another job's temp file, is never deleted for its name.
PFS_NAMES = "(starts_with(path, '.pfs-journal-') OR contains(name, '.pfs-tmp-'))"


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
        """A subquery of the exact path bytes of the plan rows matching ``condition`` (the plan file is a
        relation of the connection, named by ``sql.file_table``: see :meth:`where`)."""
        return f"(SELECT key FROM {file_table(self.file)} WHERE {condition})"

    def where(self, condition: str) -> Filter:
        """A manifest filter selecting the rows of the plan that match ``condition`` (pfs's own SQL:
        its subquery reads the plan file, which the engine's locked connection is allowed to)."""
        return Filter(f"{KEY} IN {self.keys_sql(condition)}", reads=(self.file,))


def plan_sql(
    src_rel: str,
    dst_rel: str,
    *,
    checksum: bool,
    compare_mtime: bool,
    xattrs: bool = False,
    owners: tuple[int | None, int | None] | None = None,
) -> tuple[str, dict[str, int]]:
    """The plan's SQL and the values of its parameters.  ``owners``: None when the copy keeps no owners;
    else the uid and gid the copy gives every entry (None: the source entry's own, ``--chown`` values
    otherwise, passed as parameters), compared with the destination's."""
    params: dict[str, int] = {}
    cols = f"{KEY} AS k, path, path_raw, type, size, mtime, mode, uid, gid, checksum, link_target, error, xattrs, "
    cols += "has_acl, dev, ino, nlink"
    xattrs_differ = "s.xattrs IS DISTINCT FROM d.xattrs" if xattrs else "false"
    acl_differs = "s.has_acl IS DISTINCT FROM d.has_acl" if xattrs else "false"
    attrs = f"WHEN {xattrs_differ} OR {acl_differs} THEN 'changed' "
    if checksum:
        differs = "s.size IS DISTINCT FROM d.size OR s.checksum IS DISTINCT FROM d.checksum"
    elif compare_mtime:
        differs = "s.size IS DISTINCT FROM d.size OR s.mtime IS DISTINCT FROM d.mtime"
    else:
        differs = "s.size IS DISTINCT FROM d.size"
    meta = "false"
    if compare_mtime:  # a POSIX destination: modes (a symlink's is always 0777), the mtime of what has no size
        meta = (
            "(s.type <> 'directory' AND s.mode IS DISTINCT FROM d.mode) "
            "OR (s.type NOT IN ('directory', 'file') AND s.mtime IS DISTINCT FROM d.mtime)"
        )
        if owners is not None:
            given = []
            for col, owner in zip(("uid", "gid"), owners, strict=True):
                if owner is None:
                    given.append(f"s.{col}")
                else:
                    params[f"chown_{col}"] = int(owner)
                    given.append(f"${'chown_' + col}::BIGINT")
            meta += f" OR {given[0]} IS DISTINCT FROM d.uid OR {given[1]} IS DISTINCT FROM d.gid"
    sql = (
        f"WITH s AS (SELECT {cols} FROM {src_rel} AS m), "
        f"d AS (SELECT {cols} FROM {dst_rel} AS m WHERE NOT ({PFS_NAMES} AND {KEY} NOT IN (SELECT k FROM s))), "
        f"{_broken_links_sql(compare_mtime)}, "
        "j AS (SELECT coalesce(s.k, d.k) AS key, coalesce(s.path, d.path) AS path, "
        "coalesce(s.path_raw, d.path_raw) AS path_raw, s.type AS src_type, d.type AS dst_type, "
        "s.size AS size, d.size AS dst_size, s.mtime AS mtime, d.mtime AS dst_mtime, "
        "s.checksum AS checksum, d.checksum AS dst_checksum, coalesce(s.error, d.error) AS error, "
        f"s.k IS NOT NULL AND d.k IS NOT NULL AND ({xattrs_differ}) AS xattrs_differ, "
        f"s.k IS NOT NULL AND d.k IS NOT NULL AND ({acl_differs}) AS acl_differs, "
        "CASE WHEN s.k IS NOT NULL AND s.error IS NOT NULL THEN 'error' "
        "WHEN d.k IS NULL THEN 'new' "
        "WHEN d.error IS NOT NULL THEN 'error' "
        "WHEN s.k IS NULL THEN 'extra' "
        "WHEN s.type <> d.type THEN 'type-changed' "
        "WHEN bl.dev IS NOT NULL THEN 'changed' "
        f"WHEN s.type = 'file' AND ({differs}) THEN 'changed' "
        "WHEN s.type = 'symlink' AND s.link_target IS DISTINCT FROM d.link_target THEN 'changed' "
        f"WHEN {meta} THEN 'changed' "
        f"WHEN s.type = 'directory' AND {'true' if compare_mtime else 'false'} "
        "AND (s.mtime IS DISTINCT FROM d.mtime OR s.mode IS DISTINCT FROM d.mode) THEN 'changed' "
        + (attrs if xattrs else "")
        + "ELSE 'unchanged' END AS action FROM s FULL OUTER JOIN d ON s.k = d.k "
        "LEFT JOIN bl ON s.dev = bl.dev AND s.ino = bl.ino), "
        # destination directories replaced by a file: everything below them goes first
        "tc AS (SELECT path FROM j WHERE action = 'type-changed' AND dst_type = 'directory') "
        "SELECT *, action = 'type-changed' OR (action = 'extra' AND EXISTS "
        "(SELECT 1 FROM tc WHERE starts_with(j.path, tc.path || '/'))) AS remove_first "
        "FROM j ORDER BY path"
    )
    return sql, params


def _broken_links_sql(posix: bool) -> str:
    """``bl``: the source's hard-link groups (names of one inode, any type but directories) whose
    destination names are not all there as one inode: every name of such a group is copied again, so
    the copy links them as ``rsync -aH`` does (a group's first name copied, the others linked to it),
    also when the files were separate before and have not changed otherwise (a destination name whose
    inode the destination manifest does not know, one ``--update-dst-manifest`` wrote, counts as
    linked: never copied again for that alone).  Empty for a
    destination without hard links (an object store)."""
    if not posix:
        return "bl AS (SELECT NULL::UBIGINT AS dev, NULL::UBIGINT AS ino WHERE false)"
    return (
        "bl AS (SELECT s.dev, s.ino FROM s LEFT JOIN d ON s.k = d.k "
        "WHERE s.type <> 'directory' AND s.nlink > 1 AND s.error IS NULL AND s.ino IS NOT NULL "
        "GROUP BY s.dev, s.ino HAVING count(*) > 1 AND (count(d.k) < count(*) "
        "OR count(DISTINCT d.ino) > 1 OR count(DISTINCT d.dev) > 1))"
    )


def write_plan(
    src: Manifest,
    dst: Manifest,
    out: str,
    *,
    checksum: bool,
    compare_mtime: bool,
    info: dict | None = None,
    xattrs: bool = False,
    owners: tuple[int | None, int | None] | None = None,
) -> Plan:
    """Join the two manifests and write ``out/plan.parquet`` and ``out/_plan.json`` (``owners``: see
    :func:`plan_sql`)."""
    outputs.open_dir(out, create=True).close()  # checked (the one writer): refused before any work
    target = os.path.join(out, PLAN_FILE)
    con = connect(src, dst, reads=[target])
    sql, params = plan_sql(
        src.relation_sql(),
        dst.relation_sql(),
        checksum=checksum,
        compare_mtime=compare_mtime,
        xattrs=xattrs,
        owners=owners,
    )
    try:
        write_parquet(con, sql, target, params=params)  # the one writer: a random temp name renamed onto plan.parquet
    except PfsError as exc:
        raise PfsError(f"sync plan failed: {exc}") from None
    rows = con.execute(
        "SELECT action, count(*), coalesce(sum(size) FILTER (WHERE src_type = 'file'), 0), "
        "count(*) FILTER (WHERE remove_first) FROM read_parquet(?) GROUP BY action",
        [literal(target)],  # written after the connection was made: no relation of its own
    ).fetchall()
    counts = {a: 0 for a in ACTIONS} | {"copy_bytes": 0, "remove_first": 0}
    for action, n, nbytes, first in rows:
        counts[action] = int(n)
        counts["remove_first"] += int(first)
        if action == "extra":  # extras removed before a copy anyway: not deletions --delete decides on
            counts["extra_remove_first"] = int(first)
        if action in COPY_ACTIONS:
            counts["copy_bytes"] += int(nbytes)
    info = {**(info or {}), "checksum": checksum, "compare_mtime": compare_mtime, "xattrs": xattrs, "counts": counts}
    write_atomic(os.path.join(out, PLAN_INFO), json.dumps(info, indent=1, default=str).encode())
    return Plan(out, counts, info)


def count(p: Plan, condition: str) -> int:
    """Rows of the plan matching ``condition`` (pfs's own condition over the plan's columns)."""
    con = connect(reads=[p.file])
    return int(con.execute(f"SELECT count(*) FROM {file_table(p.file)} WHERE {condition}").fetchall()[0][0])


def extras_removed_first(p: Plan) -> int:
    """Extra entries the plan removes before a copy anyway (in the way of a new one): not deletions, which
    ``--delete`` decides on.  Counted with the plan; a plan written before that is queried (a connection)."""
    known = p.counts.get("extra_remove_first")
    if known is not None:
        return int(known)
    return count(p, "action = 'extra' AND remove_first") if p.counts.get("extra") else 0


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


def emptied_dirs(p: Plan, deleted: bool) -> str:
    """A condition over the plan: source directories otherwise unchanged that lose entries (the extras
    ``--delete`` removes, with ``deleted``, and what ``remove_first`` clears), so the copy sets their mtime
    from the source again, as ``rsync --delete`` leaves it (the removal itself moved it to now)."""
    gone = "remove_first" + (" OR action = 'extra'" if deleted else "")
    parents = (
        f"SELECT regexp_replace(path, '/[^/]*$', '') FROM {file_table(p.file)} WHERE ({gone}) AND contains(path, '/')"
    )
    return f"(action = 'unchanged' AND src_type = 'directory' AND path IN ({parents}))"


def count_new_bytes(p: Plan) -> int:
    """Bytes the copy of ``new`` files would move (a dry run's summary)."""
    sql = f"SELECT coalesce(sum(size), 0) FROM {file_table(p.file)} WHERE action = 'new' AND src_type = 'file'"
    return int(connect(reads=[p.file]).execute(sql).fetchall()[0][0])


def check_plan(p: Plan, s_loc: Location, d_loc: Location, src_m: str, dst_m: str, options: dict) -> None:
    """A plan read back names this sync's own source, destination and manifests, and was made with
    this run's ``--checksum`` and pruning options (exit 2 otherwise): what it would copy from or
    remove through is never taken from the file, and a resume never acts on another comparison."""
    names = {"algorithm": named("checksum"), "prune": named_flag(PRUNE_KEY), "preserve_xattrs": named("xattrs")}
    for key, value in options.items():
        if key == "preserve_xattrs" and key not in p.info:  # a plan of a pfs before attributes: none compared
            continue
        if json.loads(json.dumps(p.info.get(key))) != json.loads(json.dumps(value)):
            raise PfsError(
                "the interrupted sync ran with ",
                names[key],
                f" {json.dumps(p.info.get(key))}, this run with {json.dumps(value)}: resume with the same ",
                names[key],
                " (or start over without ",
                named("resume", True),
                ")",
            )
    want = {"src": s_loc.url, "dst": d_loc.url}
    for key, value in want.items():
        if p.info.get(key) != value:
            raise PfsError(f"{p.path}: the plan of another sync ({key} {p.info.get(key)!r}); not resuming it")
    for key, path in (("src_manifest", src_m), ("dst_manifest", dst_m)):
        if local_path(str(p.info.get(key, ""))) != local_path(path):
            raise PfsError(f"{p.path}: the plan names {key} {p.info.get(key)!r}, not {path}; not resuming it")


def update_manifest(p: Plan, src_m: str, dst_m: str, dst_url: str, deleted: bool, xattrs: bool = False) -> None:
    """Rewrite the destination manifest from the plan: what the destination holds after the sync.

    Copied entries take the source's row (same size, mtime, mode) with ``ino``, ``dev``, ``ctime``
    and ``etag`` unknown (null: the copy's own, not the source's, which a later delete would take for
    another version); unchanged entries keep the destination's row; extras stay unless
    they were deleted.  ``xattrs``: the copy kept attributes, so the copied rows' attributes are
    the destination's too (the manifest records them when both manifests did).
    """
    s, d = open_manifest(src_m), open_manifest(dst_m)
    name = "part-sync-0000000-0000.parquet"
    part = os.path.join(d.local_dir, name)
    outputs.open_dir(d.local_dir).close()  # checked (the one writer) before anything there changes
    con = connect(s, d, reads=[p.file, part])
    kept = "action = 'unchanged'" + ("" if deleted else " OR (action = 'extra' AND NOT remove_first)")
    sql = (
        "SELECT * REPLACE (NULL::UBIGINT AS ino, NULL::UBIGINT AS dev, NULL::TIMESTAMPTZ AS ctime, "
        "NULL::VARCHAR AS etag) "
        f"FROM {s.relation_sql()} AS m WHERE {p.where(COPY_CONDITION)} "
        f"UNION ALL SELECT * FROM {d.relation_sql()} AS m "
        f"WHERE {p.where(kept)} ORDER BY path"
    )
    with contextlib.suppress(FileNotFoundError):  # the marker goes first: readers see an incomplete manifest
        os.unlink(os.path.join(d.local_dir, MARKER_NAME))
    write_parquet(con, sql, part)  # pyarrow writes (the locked connection cannot), through the one writer
    remove_manifest_files(dst_m, keep={name})  # the old parts (the new one was read from them)
    counts = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE type = 'file'), count(*) FILTER (WHERE type = 'directory'), "
        "coalesce(sum(size) FILTER (WHERE type = 'file'), 0) FROM read_parquet(?)",
        [literal(part)],
    ).fetchall()[0]
    info = {
        "root": dst_url,
        "updated_from_plan": p.path,
        "counts": {"entries": counts[0], "files": counts[1], "directories": counts[2], "bytes": counts[3]},
        "errors": [],
        "options": {"xattrs": xattrs and s.has_xattrs and d.has_xattrs},
    }
    write_marker(dst_m, info)
    with open(os.path.join(p.path, "_plan.json")) as f:
        pinfo = json.load(f)
    pinfo["dst_manifest_updated"] = True
    write_atomic(os.path.join(p.path, "_plan.json"), json.dumps(pinfo, indent=1).encode())
