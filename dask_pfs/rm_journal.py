"""Where a ``pfs rm`` job keeps its journal, and the frozen selection of a manifest-mode job.

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

import hashlib
import logging
import os

from operators.journal import Journal

from .manifest import JOURNAL_PREFIX
from .sql import write_parquet
from .urls import Location, resolve

SELECTION = "selection.parquet"
# the order chunks are cut in: non-directories by path, then directories deepest level first
SELECTION_ORDER = "type = 'directory', CASE WHEN type = 'directory' THEN -depth ELSE 0 END, path, path_raw"


def cache_dir(ident: str) -> str:
    """``~/.cache/pfs/journals/<id>`` (``$XDG_CACHE_HOME``), as for copies to object stores."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "pfs", "journals", ident)


def _ident(*parts: str) -> str:
    return hashlib.sha1("\0".join(("rm", *parts)).encode()).hexdigest()[:12]


def tree_journal(loc: Location, journal: str | os.PathLike | bool | None) -> Journal | None:
    """The journal of ``pfs rm URL``; None when switched off or when it would lie inside the tree."""
    if journal is False:
        return None
    path = cache_dir(_ident(loc.url)) if journal in (None, True) else os.fspath(journal)
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
    if journal not in (None, True):
        return Journal(os.fspath(journal))
    loc = resolve(manifest)
    ident = _ident(loc.url, where or "")
    if loc.is_local and os.access(loc.path, os.W_OK):
        return Journal(os.path.join(loc.path, f"{JOURNAL_PREFIX}{ident}"))
    return Journal(cache_dir(ident))


def freeze(con, relation: str, cond: str, jr: Journal) -> str:
    """Write the selected rows (without scan errors) to the journal's ``selection.parquet``; its path."""
    final = os.path.join(jr.path, SELECTION)
    tmp = f"{final}.tmp"
    write_parquet(  # pyarrow writes: the connection the where-clause runs on cannot
        con,
        f"SELECT path, path_raw, type, size, mtime, depth, error FROM {relation} AS m "
        f"WHERE {cond} AND error IS NULL ORDER BY {SELECTION_ORDER}",
        tmp,
    )
    os.replace(tmp, final)
    return final


def frozen(jr: Journal) -> str | None:
    """The selection an earlier run froze, or None (it was killed before the file was complete)."""
    path = os.path.join(jr.path, SELECTION)
    return path if os.path.exists(path) else None
