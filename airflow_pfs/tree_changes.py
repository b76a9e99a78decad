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

The manifest is untrusted input like any state pfs reads back: every directory row is checked as a
manifest row is (no ``..``, nothing absolute: exit 2 otherwise), no symlink is ever followed (each
watched directory's ancestors are ``lstat``ed, new subtrees are walked through directory fds
opened with ``O_NOFOLLOW``), the baseline is read in batches, and the watch set is capped
(:data:`MAX_DIRS`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from dask_pfs.errors import IncompleteManifestError, PfsError
from dask_pfs.manifests.manifest import open_manifest
from dask_pfs.manifests.query import run_query, select_sql
from dask_pfs.manifests.root import check_root
from dask_pfs.manifests.sql import connect
from operators.names import UnsafePathError, check_relative, join
from operators.safety import AncestorCheck
from operators.schema import MARKER_NAME

MAX_SAMPLES = 10
MAX_DIRS = int(os.environ.get("PFS_WATCH_MAX_DIRS", 10_000_000))  # directories watched at most (memory)
BATCH = 50_000  # baseline rows read at a time
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
    # the marker's root must be the directory that was scanned: an edited `root` (pointing the watcher, and the
    # paths its events name, at another tree) does not match the recorded identity and is refused
    check_root(m.info, manifest, destructive=True)
    started = datetime.fromisoformat(m.info["started"]).timestamp() if m.info.get("started") else marker_stamp(manifest)
    if started is None:  # the marker went since it was opened: a rescan is rewriting the manifest
        return None
    sql = select_sql(m, where="type = 'directory'", select="path, path_raw, epoch_us(mtime)")
    rows = run_query(connect(m), sql).fetch_record_batch(BATCH)
    baseline = Baseline(manifest, m.root, int(started * 1_000_000))
    for batch in rows:
        cols = batch.to_pydict()
        for path, raw, mtime in zip(*cols.values(), strict=True):
            rel = raw if raw is not None else path.encode("utf-8")
            try:
                check_relative(rel)
            except UnsafePathError as exc:
                raise PfsError(f"{manifest}: a directory row with an unsafe path ({exc}); not watching it") from None
            if mtime is not None:
                _watch(baseline, rel, mtime)
    return baseline


def _watch(baseline: Baseline, rel: bytes, mtime: int) -> None:
    if len(baseline.dirs) >= MAX_DIRS and rel not in baseline.dirs:
        raise PfsError(f"{baseline.root}: more than {MAX_DIRS:,} directories to watch (PFS_WATCH_MAX_DIRS)")
    baseline.dirs[rel] = mtime


class TreeGoneError(PfsError):
    """The watched root is not there (or cannot be read) right now: perhaps a brief rename."""


def find_changes(baseline: Baseline) -> Changes:
    """Stat every watched directory; record what changed into ``baseline`` (so each change is
    reported once) and say what it was."""
    root = os.fsencode(baseline.root)
    result = Changes()
    root_mtime = _mtime_us(lambda: os.stat(root, follow_symlinks=False))
    if root_mtime is None or root_mtime == UNKNOWN:
        raise TreeGoneError(f"{baseline.root}: the watched tree is gone (or cannot be read)")
    result.checked += 1
    safe = AncestorCheck(root)  # one lstat per directory on the way, per pass: no link is followed
    if root_mtime > baseline.started_us:
        baseline.started_us = root_mtime
        _note(result, ROOT)
        _adopt_new(root, ROOT, baseline)
    for rel, recorded in list(baseline.dirs.items()):
        result.checked += 1
        mtime = None if safe.ancestor_problem(rel) else _mtime_us(partial(safe.lstat, rel))
        if mtime in (recorded, UNKNOWN):
            continue
        _note(result, rel)
        if mtime is None:
            del baseline.dirs[rel]
            continue
        baseline.dirs[rel] = mtime
        _adopt_new(root, rel, baseline)
    return result


def _mtime_us(lstat: Callable[[], os.stat_result]) -> int | None:
    """The directory's mtime in microseconds (``lstat()``: relative to its parent's descriptor, so a path
    past 4,096 bytes is watched as a short one is); None when it is gone or is no longer a directory."""
    try:
        st = lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return UNKNOWN
    return st.st_mtime_ns // 1000 if stat.S_ISDIR(st.st_mode) else None


def _open_below(root: bytes, rel: bytes) -> int | None:
    """A directory fd for ``root/rel``, every component below the root opened with ``O_NOFOLLOW``
    (None when something on the way is gone, a link or not a directory)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError:
        return None
    for name in rel.split(b"/") if rel else ():
        try:
            child = os.open(name, flags | os.O_NOFOLLOW, dir_fd=fd)
        except OSError:
            child = None
        os.close(fd)
        if child is None:
            return None
        fd = child
    return fd


def _adopt_new(root: bytes, rel: bytes, baseline: Baseline) -> None:
    """Watch the directories below a changed one that are not watched yet (new subtrees), walked
    depth first through directory fds, one directory's names at a time; links are never followed."""
    fd = _open_below(root, rel)
    if fd is None:
        return
    stack: list[tuple[int, bytes, list[bytes]]] = [(fd, rel, _new_subdirs(fd, rel, baseline))]
    try:
        while stack:
            fd, top, names = stack[-1]
            if not names:
                os.close(fd)
                stack.pop()
                continue
            name = names.pop()
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a link since it was listed
            sub = join(top, name)
            stack.append((child, sub, _new_subdirs(child, sub, baseline)))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _new_subdirs(fd: int, top: bytes, baseline: Baseline) -> list[bytes]:
    """Names of the subdirectories of ``fd`` that are not watched yet, now watched."""
    new = []
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return []
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        name = os.fsencode(entry.name)
        rel = join(top, name)
        if rel in baseline.dirs:
            continue  # watched already: its own mtime says whether it changed
        _watch(baseline, rel, st.st_mtime_ns // 1000)
        new.append(name)
    return new


def _note(result: Changes, rel: bytes) -> None:
    result.changed += 1
    if len(result.samples) < MAX_SAMPLES:
        result.samples.append(os.fsdecode(rel) or ".")
