"""Has a tree changed since its last manifest?  A cheap answer: stat its directories.

Creating, removing or renaming an entry updates its directory's mtime, so comparing each
directory's mtime with the one the manifest recorded finds new and removed files without listing
a single directory that did not change (one ``stat`` per directory; files are never visited).
The root, which has no row, counts as changed when its mtime is later than the scan's start.
What this does not see: a file rewritten in place under the same name (its directory's mtime
stays), which a new scan (or ``pfs verify``) finds.

Directories created since the manifest are walked once when their parent changes and watched
from then on, so a second landing inside them is seen before any rescan.

Local (mounted) trees only: object stores have no directory mtimes.  No Airflow imports: the
trigger calls this from a thread.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from datetime import datetime

from dask_pfs.errors import IncompleteManifestError, PfsError
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.query import run_query, select_sql
from dask_pfs.manifests.sql import connect
from operators.schema import MARKER_NAME

MAX_SAMPLES = 10
ROOT = b""
UNKNOWN = -1  # a directory that cannot be stat'ed (unreadable parent): nothing to compare


@dataclass
class Baseline:
    """Directory mtimes (microseconds) by path below the root, as of the last manifest and the
    changes seen since."""

    manifest: str
    root: str
    started_us: int
    dirs: dict[bytes, int] = field(default_factory=dict)


@dataclass
class Changes:
    changed: int = 0  # directories whose entries changed, appeared or went away
    checked: int = 0
    samples: list[str] = field(default_factory=list)


def marker_stamp(manifest: str) -> float | None:
    """When the manifest's completion marker was written (None: no complete manifest yet)."""
    try:
        return os.stat(os.path.join(manifest, MARKER_NAME)).st_mtime
    except FileNotFoundError:
        return None


def load_baseline(manifest: str) -> Baseline | None:
    """The directories of the manifest's tree and their recorded mtimes; None without a complete
    manifest.  Raises PfsError for a manifest of a tree that is not on a local file system."""
    if "://" in manifest:
        raise PfsError(f"{manifest}: the tree watcher reads local manifests of local trees (give a path)")
    if not os.path.isdir(manifest):
        return None  # not written yet
    try:
        m = open_manifest(manifest)
    except IncompleteManifestError:  # a rescan is rewriting it: its marker comes last
        return None
    if m.info.get("protocol") not in (None, "file", "local") or "://" in (m.root or ""):
        raise PfsError(f"{manifest}: {m.root} is not on a local file system (object stores have no directory mtimes)")
    started = datetime.fromisoformat(m.info["started"]).timestamp() if m.info.get("started") else marker_stamp(manifest)
    if started is None:  # the marker went since it was opened: a rescan is rewriting the manifest
        return None
    sql = select_sql(m, where="type = 'directory'", select="path, path_raw, epoch_us(mtime)")
    rows = run_query(connect(m), sql).fetchall()
    dirs = {(raw if raw is not None else os.fsencode(path)): mtime for path, raw, mtime in rows if mtime is not None}
    return Baseline(manifest, m.root, int(started * 1_000_000), dirs)


def find_changes(baseline: Baseline) -> Changes:
    """Stat every watched directory; record what changed into ``baseline`` (so each change is
    reported once) and say what it was."""
    root = os.fsencode(baseline.root)
    result = Changes()
    root_mtime = _mtime_us(root)
    if root_mtime is None or root_mtime == UNKNOWN:
        raise PfsError(f"{baseline.root}: the watched tree is gone (or cannot be read)")
    result.checked += 1
    if root_mtime > baseline.started_us:
        baseline.started_us = root_mtime
        _note(result, ROOT)
        _adopt_new(root, root, baseline)
    for rel, recorded in list(baseline.dirs.items()):
        result.checked += 1
        path = root + b"/" + rel
        mtime = _mtime_us(path)
        if mtime in (recorded, UNKNOWN):
            continue
        _note(result, rel)
        if mtime is None:
            del baseline.dirs[rel]
            continue
        baseline.dirs[rel] = mtime
        _adopt_new(root, path, baseline)
    return result


def _mtime_us(path: bytes) -> int | None:
    """The directory's mtime in microseconds; None when it is gone or is no longer a directory."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return UNKNOWN
    return st.st_mtime_ns // 1000 if stat.S_ISDIR(st.st_mode) else None


def _adopt_new(root: bytes, path: bytes, baseline: Baseline) -> None:
    """Watch the directories below a changed one that are not watched yet (new subtrees)."""
    for top, subdirs, _ in os.walk(path, followlinks=False):
        new = []
        for name in subdirs:
            child = top + b"/" + name
            rel = child[len(root) + 1 :]
            if rel in baseline.dirs:
                continue  # watched already: its own mtime says whether it changed
            mtime = _mtime_us(child)
            if mtime is not None and mtime != UNKNOWN:
                baseline.dirs[rel] = mtime
                new.append(name)
        subdirs[:] = new  # descend into new directories only


def _note(result: Changes, rel: bytes) -> None:
    result.changed += 1
    if len(result.samples) < MAX_SAMPLES:
        result.samples.append(os.fsdecode(rel) or ".")
