"""Where a ``pfs rm`` job keeps its journal, and how a manifest-mode job cuts its frozen selection.

Manifest mode: the rows ``--where`` selects are copied once, when the job starts, into
``selection.parquet`` in the journal (non-directories in path order, then directories deepest
first), so a resumed run cuts exactly the same chunks even when the condition depends on the
clock (``mtime < now() - INTERVAL 90 DAY``).  Chunk ids: ``f<n>`` the n-th chunk of
non-directories, ``d<depth>.<n>`` the n-th chunk of directories at that depth.

Tree mode: what is removed is gone, so a resumed run simply walks what is left (an entry that
vanished is skipped, never failed); the journal only names the job and counts the chunks an
earlier run finished.  It cannot live in the tree it removes: it goes to the cache directory.
See docs/journal.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator

import pyarrow as pa

from dask_pfs.errors import PfsError
from dask_pfs.manifests.caps import Cap
from dask_pfs.manifests.manifest import Selection, locked
from dask_pfs.manifests.spread import spread_order
from dask_pfs.manifests.sql import file_table
from dask_pfs.options import named
from dask_pfs.runtime.journals import cache_dir, ident, journal_dir, open_journal, read_job, records, same_job
from dask_pfs.urls import Location, resolve
from operators.journal import Journal, file_digest
from operators.remove.tasks import batch_rels

SELECTION = "selection.parquet"
# the order chunks are cut in: non-directories by path, then directories deepest level first
# files first, a few of every directory at a time (``manifests.spread``), then directories deepest first
SELECTION_ORDER = f"type = 'directory', CASE WHEN type = 'directory' THEN -depth ELSE 0 END, {spread_order()}"


def tree_journal(loc: Location, journal: str | os.PathLike | bool | None) -> Journal | None:
    """The journal of ``pfs rm URL``; None when switched off or when it would lie inside the tree."""
    if journal is False:
        return None
    path = cache_dir(ident("rm", loc.url)) if journal is None or journal is True else os.fspath(journal)
    if loc.is_local:
        tree = os.path.realpath(loc.path).rstrip("/") + "/"
        if (os.path.realpath(path).rstrip("/") + "/").startswith(tree):
            logging.getLogger("pfs").warning("%s: the journal would be inside the tree it removes: none kept", path)
            return None
    return open_journal(path)


def manifest_journal(manifest: str, where: str | None, journal: str | os.PathLike | bool | None) -> Journal | None:
    """``MANIFEST/.pfs-journal-<id>`` for a writable local manifest, else one in the cache directory."""
    if journal is False:
        return None
    if journal is not None and journal is not True:
        return open_journal(journal)
    loc = resolve(manifest)
    job_id = ident("rm", loc.url, where or "")
    if loc.is_local and not os.access(loc.path, os.W_OK):
        return open_journal(cache_dir(job_id))
    return open_journal(journal_dir(loc, job_id))


def manifest_job(
    url: str,
    where: str | None,
    root: str,
    journal: str | os.PathLike | bool | None,
    resume: bool,
    sel: Selection,
    chunk: int,
    cap: Cap | None,
) -> tuple[Journal, Selection, dict[str, dict], int, bool] | None:
    """The journal of ``pfs rm --manifest``: (journal, selection, finished chunks, rows per chunk,
    started now); None without a journal.  A resumed run takes the frozen selection (checked by
    :func:`frozen`; ``cap`` applies to it: it is what will run), else the selection is frozen now."""
    jr = manifest_journal(url, where, journal)
    if jr is None:
        return None
    job = {"job": "rm", "mode": "manifest", "manifest": url, "where": where, "root": root}
    prior = read_job(jr) if resume and same_job(jr, job) else {}
    old = frozen(jr, prior, sel) if prior else None
    if old is not None:
        totals = old.totals()
        if cap is not None:
            cap.check(totals["entries"] + totals["dirs"], sel.share()[1], "the frozen selection has")
        return jr, old, records(jr), int(prior.get("chunk_files") or chunk), False  # the same cuts, the same ids
    jr.start({**job, "chunk_files": chunk})
    new, digest = freeze(sel, jr)
    jr.rewrite_job({**job, "chunk_files": chunk, "selection": digest})
    return jr, new, {}, chunk, True


# a row whose name, parent or depth is not what its path says: damage (``operators.safety.row_damage`` for one
# row; this is the same test over a whole selection, in DuckDB, before anything is removed)
ROW_DAMAGE = (
    "name IS DISTINCT FROM (CASE WHEN parent = '' THEN path ELSE substr(path, length(parent) + 2) END) "
    "OR contains(name, '/') OR (parent <> '' AND NOT starts_with(path, parent || '/')) "
    "OR depth IS DISTINCT FROM length(path) - length(replace(path, '/', '')) + 1"
)

# what a removal ships of each non-directory row: the path, and what the identity rule compares
# (``operators.remove.backends.Entry``; the rule itself is the core's ``Expect::differs``)
# A name of a hard-link group (nlink > 1) is matched without its ctime: removing another name of the group
# (the same job, or sync --delete of a group the source no longer has) changes the ctime of the names left;
# its inode number still says whether it is the entry the manifest saw.  An object's entity tag (etag, schema
# v3; null in older manifests, whose views add it: ``manifests.relations``) tells a version the size and the
# last-modified second do not.
IDENTITY_COLUMNS = (
    "path, path_raw, type, size, epoch_us(mtime) AS mtime_us, ino, "
    "CASE WHEN nlink > 1 THEN NULL ELSE epoch_us(ctime) END AS ctime_us, etag"
)


def files_sql(sel: Selection) -> str:
    """The selection's files to unlink, a few of every directory at a time (``manifests.spread``); a frozen
    selection is stored in that order already.  Times in microseconds (the manifest's precision):
    ``epoch_ns`` of a time past 2262 overflows."""
    order = spread_order() if sel.manifest is not None else None
    return sel.sql(IDENTITY_COLUMNS, "error IS NULL AND type <> 'directory'", order)


# what removing checks (IDENTITY_COLUMNS, ROW_DAMAGE)
FROZEN_COLUMNS = "path, path_raw, name, parent, type, size, mtime, ino, ctime, nlink, depth, error, etag"


def freeze(sel: Selection, jr: Journal) -> tuple[Selection, str]:
    """Write the selected rows (without scan errors) to the journal's ``selection.parquet``; the new
    selection and the file's digest (for ``job.json``)."""
    final = os.path.join(jr.path, SELECTION)
    rows = sel.sql(FROZEN_COLUMNS, also="error IS NULL", order=SELECTION_ORDER)
    sel.write(rows, final)  # pyarrow writes (the where-clause's connection cannot), through the one writer
    return Selection.of_file(final), file_digest(final)


def frozen(jr: Journal, job: dict, sel: Selection) -> Selection | None:
    """The selection an earlier run froze, or None (it was killed before the file was complete).

    Read back only if it is the file that run wrote (its digest is in the signed ``job.json``) and
    a subset of the rows ``sel`` (the manifest and ``--where``) selects now: else exit 2."""
    path = os.path.join(jr.path, SELECTION)
    if not job.get("selection") or not os.path.lexists(path):
        return None
    if os.path.islink(path) or file_digest(path) != job["selection"]:
        raise PfsError(f"{path}: not the selection this job froze (changed since); delete {jr.path} to start over")
    import duckdb  # imported when used, as everywhere in the engine (start-up time)

    try:
        strays = _not_selected(sel, path)
    except duckdb.Error as exc:  # columns missing: an older pfs's, or not pfs's
        first = str(exc).strip().splitlines()[0]
        raise PfsError(f"{path}: not a selection this pfs froze ({first}); delete {jr.path} to start over") from None
    if strays:
        raise PfsError(
            f"{path}: {strays} frozen rows are not rows the manifest and ",
            named("where"),
            f" select now; refusing to resume (delete {jr.path} to start over)",
        )
    return Selection.of_file(path)


def _not_selected(sel: Selection, path: str) -> int:
    """Rows of the frozen file ``path`` that ``sel`` does not select, with the same columns (all the
    removal reads: what it acts on, what the identity rule compares, what the damage check reads)."""
    assert sel.manifest is not None
    con = locked(sel.manifest, reads=[path, *(sel.filter.reads if sel.filter else ())])
    sql = (
        f"SELECT count(*) FROM {file_table(path)} AS f ANTI JOIN "
        f"({sel.sql('path, path_raw, name, parent, type, size, mtime, ino, ctime, depth, etag', also='error IS NULL')})"
        " AS s ON f.path = s.path AND f.path_raw IS NOT DISTINCT FROM s.path_raw AND f.type = s.type "
        "AND f.size IS NOT DISTINCT FROM s.size AND f.mtime IS NOT DISTINCT FROM s.mtime AND f.depth = s.depth "
        "AND f.name = s.name AND f.parent = s.parent "
        "AND f.ino IS NOT DISTINCT FROM s.ino AND f.ctime IS NOT DISTINCT FROM s.ctime "
        "AND f.etag IS NOT DISTINCT FROM s.etag"
    )
    return int(con.execute(sql).fetchall()[0][0])


def exact(batches: Iterable[pa.RecordBatch], n: int) -> Iterator[pa.Table]:
    """Re-cut a stream of record batches into tables of exactly ``n`` rows (the last may be short)."""
    buf: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        while batch.num_rows:
            take = min(n - size, batch.num_rows)
            buf.append(batch.slice(0, take))
            size += take
            batch = batch.slice(take)
            if size == n:
                yield pa.Table.from_batches(buf)
                buf, size = [], 0
    if size:
        yield pa.Table.from_batches(buf)


def levels(batches: Iterable[pa.RecordBatch], n: int) -> Iterator[tuple[int, list[bytes]]]:
    """Cut a depth-descending stream of directory rows into ``(depth, rels)`` chunks.

    Each chunk holds at most ``n`` rows of one depth, cut at the same rows whatever the
    reader's batch sizes (chunk ids must not depend on them).
    """
    depth, rels = -1, list[bytes]()
    for batch in batches:
        for d, rel in zip(batch.column("depth").to_pylist(), batch_rels(batch), strict=True):
            if rels and (d != depth or len(rels) >= n):
                yield depth, rels
                rels = []
            depth = d
            rels.append(rel)
    if rels:
        yield depth, rels
