"""Copy tasks: directories, chunks of files, byte ranges of big files, hard links, metadata.

Engine-free: the driver (``dask_pfs.copy``) ships these functions to workers; how each end reads
or writes is ``operators.copy.sources`` and the destinations (``copy.local_destination``: every
write relative to a descriptor below the pinned root, ``operators.copy.pinned``;
``copy.fsspec_destination``).  Every file is written under a temporary name and renamed into
place once its data and metadata are complete, so a reader never sees a partial file under its
real name and a killed task leaves only temp files, which the next run's directory phase removes
(:func:`make_dirs`).  Per-entry failures are returned, never raised, so one bad file does not
fail (and retry) a chunk of 500; whole-task failures (a dead worker) are retried by the engine,
which is safe because every task is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from operators.copy.destination import Destination
from operators.copy.fsspec_destination import FsspecDestination
from operators.copy.local_destination import LocalDestination
from operators.copy.sources import source_of
from operators.copy.spec import TEMP_MARK, CopySpec, Entry, Outcome, temp_name
from operators.core.pool import get_pool
from operators.stores import is_store

if TYPE_CHECKING:
    from operators.copy.obstore_destination import ObstoreDestination

T = TypeVar("T")

__all__ = [
    "TEMP_MARK",
    "CopySpec",
    "Entry",
    "Outcome",
    "copy_files",
    "copy_part",
    "existing_verdict",
    "finish_file",
    "link_files",
    "make_dirs",
    "set_dir_meta",
    "temp_name",
]


def destination_of(spec: CopySpec) -> LocalDestination | ObstoreDestination | FsspecDestination:
    if spec.dst_local:
        return LocalDestination(spec)
    if is_store(spec.dst_protocol):  # obstore: imported only for a job that writes to a store
        from operators.copy.obstore_destination import ObstoreDestination

        return ObstoreDestination(spec)
    return FsspecDestination(spec)


def _each(spec: CopySpec, items: list[T], fn: Callable[[T], object]) -> list[object]:
    """``fn`` over ``items`` on the process's I/O pool; an exception is returned as the item's result."""

    def one(item: T) -> object:
        try:
            return fn(item)
        except Exception as exc:
            return exc

    return list(get_pool(spec.threads, spec.storage).map(one, items))


# ---------------------------------------------------------------- directories


def make_dirs(spec: CopySpec, dirs: list[Entry]) -> Outcome:
    """Create directories (owner-writable; their real modes come last) and remove stale temp files.

    A directory that already existed may hold temp files of an interrupted run: they go now,
    before any file task of this run starts, so this run's own temp files are never touched.
    """
    out = Outcome()
    if not spec.dst_has_dirs:
        return out
    dst, src = destination_of(spec), source_of(spec)

    def make(e: Entry) -> bool:
        if src.kind_now(e) not in ("directory", None):  # a row that says directory for a file (forged)
            raise NotADirectoryError(f"the manifest says directory, the source holds a {src.kind_now(e)}; not made")
        return dst.make_dir(e)

    try:
        results = _each(spec, dirs, make)
    finally:
        dst.close()
        src.close()
    for e, result in zip(dirs, results, strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
        elif result or not spec.check_existing:
            out.dirs += 1  # made (into a new destination, all were: a streamed copy makes a file's parents first)
        else:
            out.dirs_existing += 1  # a real directory already there (never one reached through a link)
    return out


def set_dir_meta(spec: CopySpec, dirs: list[Entry]) -> Outcome:
    """Modes, ownership and times of directories: after everything inside them was written."""
    out = Outcome()
    if not spec.dst_local:
        return out
    src, dst = source_of(spec), LocalDestination(spec)
    try:
        results = _each(spec, dirs, lambda e: dst.set_meta(src, e))
    finally:
        dst.close()
        src.close()
    for e, result in zip(dirs, results, strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
    return out


# ---------------------------------------------------------------- files


def copy_files(spec: CopySpec, entries: list[Entry]) -> Outcome:
    """Copy a chunk of files, symlinks and special files concurrently on the process's I/O pool."""
    out = Outcome()
    dst = destination_of(spec)
    entries = _safe(dst, entries, out)
    src = source_of(spec)
    try:
        results = dst.copy_batch(src, entries, get_pool(spec.threads, spec.storage))
    finally:
        dst.close()
        src.close()
    for e, result in zip(entries, results, strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
        elif result == "skip":
            out.skipped += 1
        elif result == "symlink":
            out.symlinks += 1
        else:
            out.files += 1
            out.bytes += e.size or 0
    return out


def _safe(dst: Destination, entries: list[Entry], out: Outcome) -> list[Entry]:
    """Into an existing destination, drop entries whose parent directories there are symlinks now."""
    check = dst.ancestors()
    if check is None:
        return entries
    kept = []
    for e in entries:
        problem = check.ancestor_problem(e.out_rel)
        if problem is None:
            kept.append(e)
        else:
            out.fail(e.out_rel, f"destination {problem}; not written")
    return kept


def existing_verdict(spec: CopySpec, e: Entry) -> str:
    """``"copy"``, ``"skip"`` (identical file there) or an error message (exists and differs)."""
    dst = destination_of(spec)
    try:
        return dst.verdict(e)
    finally:
        dst.close()


# ---------------------------------------------------------------- big files in ranges (local destinations)


def copy_part(spec: CopySpec, e: Entry, offset: int, length: int) -> str:
    """Copy one byte range of a big file into its temp file at the same offset (local destinations).

    Idempotent: a retry rewrites the same bytes.  Returns ``"copied"``, ``"skip"`` or an error
    message when the destination already exists.
    """
    dst, src = LocalDestination(spec), source_of(spec)
    try:
        if spec.check_existing:
            check = dst.ancestors()
            problem = check.ancestor_problem(e.out_rel) if check is not None else None
            if problem is not None:
                return f"destination {problem}; not written"
            verdict = dst.verdict(e)
            if verdict != "copy":
                return verdict
        dst.write_range(src, e, offset, length)
    finally:
        dst.close()
        src.close()
    return "copied"


def finish_file(spec: CopySpec, e: Entry, *parts: str) -> Outcome:
    """Runs once every range of ``e`` is in its temp file: size, metadata, then the rename."""
    out = Outcome()
    verdicts = set(parts)
    if verdicts != {"copied"}:
        problems = sorted(v for v in verdicts if v not in ("copied", "skip"))
        if problems:
            out.fail(e.out_rel, problems[0])
        else:  # ranges found the file in place and up to date: all of them, or those left after a resume
            out.skipped += 1  # whose earlier run journaled the others, then renamed the file before it was killed
        return out
    dst, src = LocalDestination(spec), source_of(spec)
    try:
        dst.finish(src, e)
        out.files += 1
        out.bytes += e.size or 0
    except Exception as exc:
        out.fail(e.out_rel, exc)
    finally:
        dst.close()
        src.close()
    return out


# ---------------------------------------------------------------- hard links


def link_files(spec: CopySpec, pairs: list[tuple[Entry, bytes]]) -> Outcome:
    """Recreate hard links: each ``(entry, first)`` links ``entry`` to the already copied ``first``."""
    out = Outcome()
    dst = LocalDestination(spec)
    kept = {e.rel for e in _safe(dst, [p[0] for p in pairs], out)}
    pairs = [p for p in pairs if p[0].rel in kept]
    try:
        results = _each(spec, pairs, lambda p: dst.link(*p))
    finally:
        dst.close()
    for (e, _), result in zip(pairs, results, strict=True):
        if isinstance(result, BaseException):
            out.fail(e.out_rel, result)
        elif result == "skip":
            out.skipped += 1
        else:
            out.hardlinks += 1
    return out
