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

from dask_pfs.manifests.manifest import Selection
from dask_pfs.runtime.journals import cache_dir, ident, journal_dir
from dask_pfs.urls import Location, resolve
from operators.journal import Journal
from operators.remove.tasks import batch_rels

SELECTION = "selection.parquet"
# the order chunks are cut in: non-directories by path, then directories deepest level first
SELECTION_ORDER = "type = 'directory', CASE WHEN type = 'directory' THEN -depth ELSE 0 END, path, path_raw"


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
    return Journal(path)


def manifest_journal(manifest: str, where: str | None, journal: str | os.PathLike | bool | None) -> Journal | None:
    """``MANIFEST/.pfs-journal-<id>`` for a writable local manifest, else one in the cache directory."""
    if journal is False:
        return None
    if journal is not None and journal is not True:
        return Journal(os.fspath(journal))
    loc = resolve(manifest)
    job_id = ident("rm", loc.url, where or "")
    if loc.is_local and not os.access(loc.path, os.W_OK):
        return Journal(cache_dir(job_id))
    return Journal(journal_dir(loc, job_id))


def freeze(sel: Selection, jr: Journal) -> Selection:
    """Write the selected rows (without scan errors) to the journal's ``selection.parquet``; the new selection."""
    final = os.path.join(jr.path, SELECTION)
    tmp = f"{final}.tmp"
    rows = sel.sql("path, path_raw, type, size, mtime, depth, error", also="error IS NULL", order=SELECTION_ORDER)
    sel.write(rows, tmp)  # pyarrow writes: the connection the where-clause runs on cannot
    os.replace(tmp, final)
    return Selection.of_file(final)


def frozen(jr: Journal) -> Selection | None:
    """The selection an earlier run froze, or None (it was killed before the file was complete)."""
    path = os.path.join(jr.path, SELECTION)
    return Selection.of_file(path) if os.path.exists(path) else None


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
