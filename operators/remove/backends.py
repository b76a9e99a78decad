"""Where removing happens: one backend per kind of file system, chosen once per task.

A backend lists a tree while removing it (:meth:`tree_lister`, a ``walk`` Lister), unlinks a
chunk of manifest rows (:meth:`unlink_chunk`) and removes a chunk of directories
(:meth:`rmdir_chunk`).  :class:`LocalRemover` hands whole chunks (and each listed directory) to
the native core (``operators._native``, ``native/src/remove.rs``), which works relative to open
directory descriptors without the interpreter lock and keeps many operations in flight on its own
threads (``operators.core.concurrency.fanned``); ``operators.remove.fsspec.FsspecRemover`` deletes
through fsspec, in bulk requests, batches spread over the process's pool (on :class:`EntryRemover`
and :func:`pooled`, shared here).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Generic, TypeVar

import operators._native as _native
from operators.core.concurrency import fanned
from operators.core.dirfd import OpenDirs
from operators.names import check_relative, decode, join, to_bytes
from operators.ratelimit import ops_capped, take_ops
from operators.remove.counts import CHANGED, FAILED, NONEMPTY, RmCounts
from operators.root_identity import host_pin
from operators.rows import Row, dir_row, error_row
from operators.scan.prune import DROP, Prune
from operators.scan.walk import DirItem, Listing, open_listing

if TYPE_CHECKING:
    from operators.remove.tasks import RemoveSpec

BATCH = 64  # entries per pool job: a few syscalls each, so jobs stay cheap to schedule

P = TypeVar("P", bytes, str)  # where an entry is: a local path, or a URL

# one manifest row as the driver ships it: (path, path_raw, type, size, mtime ns, ino, ctime ns, etag);
# ino, ctime and etag may be left off (None: not compared), as for one named file (``rm FILE``)
ENTRY_COLUMNS = ("path", "path_raw", "type", "size", "mtime_us", "ino", "ctime_us", "etag")  # times in us: any year
Entry = (
    tuple[str, bytes | None, str, int | None, int | None]
    | tuple[str, bytes | None, str, int | None, int | None, int | None, int | None]
    | tuple[str, bytes | None, str, int | None, int | None, int | None, int | None, str | None]
)
# what a backend's ``look`` reports of what is there now: (type, size, mtime ns, ino, ctime ns, etag), None: not known
Found = tuple[str, int | None, int | None, int | None, int | None, str | None]


def identity(entry: Entry) -> tuple[int | None, int | None]:
    """(ino, ctime ns) of a row, None where it does not say."""
    return (entry[5], entry[6]) if len(entry) > 5 else (None, None)


def entry_etag(entry: Entry) -> str | None:
    """The entity tag the manifest has for a row (a store's object scanned at schema v3), None where it has none."""
    return entry[7] if len(entry) > 7 else None


class EntryRemover(Generic[P]):
    """How manifest rows are removed, whatever the file system: each is looked at again (unless
    changes are ignored) and skipped when it changed since the scan, then the rest go at once."""

    spec: RemoveSpec

    def unlink(self, entries: list[Entry]) -> RmCounts:
        """Remove a batch of non-directory manifest rows, skipping those that changed since the scan."""
        counts = RmCounts()
        found: list[tuple[bytes, P, int]] = []
        for entry in entries:
            rel = to_bytes(entry[0], entry[1])
            where = self.locate(rel)
            size = entry[3]
            if not self.spec.ignore_changes:
                _, now = counts.tried(rel, self.look, where)
                if now is None:
                    continue
                why = _changed(entry, *now)
                if why:
                    counts.problem(rel, CHANGED, why)
                    continue
                size = now[1] if now[1] is not None else size
            found.append((rel, where, size or 0))
        gone = [(rel, size) for rel, _, size in found] if self.spec.dry_run else self.unlink_now(found, counts)
        for rel, size in gone:
            counts.removed_files += 1
            counts.bytes += size
            if self.spec.dry_run:
                counts.sample(rel, self.spec.sample_limit)
        return counts

    def locate(self, rel: bytes) -> P:
        """Where ``rel`` is (checked to stay below the root)."""
        raise NotImplementedError

    def look(self, where: P) -> Found:
        """(type, size, mtime ns, ino, ctime ns, etag; None: not reported) of what is there now;
        FileNotFoundError when nothing is."""
        raise NotImplementedError

    def unlink_now(self, found: list[tuple[bytes, P, int]], counts: RmCounts) -> list[tuple[bytes, int]]:
        """Remove ``(rel, where, size)`` each; ``(rel, size)`` of those removed, problems into ``counts``."""
        raise NotImplementedError


class LocalRemover:
    """Removing on a local or mounted file system, in the native core (``operators._native``):
    whole chunks per call, relative to directory descriptors, symlinks never followed."""

    def __init__(self, spec: RemoveSpec) -> None:
        self.spec = spec

    def tree_lister(self) -> LocalTreeRemover:
        return LocalTreeRemover(self.spec)

    def unlink_chunk(self, entries: list[Entry]) -> RmCounts:
        """Remove non-directory manifest rows, skipping those that changed since the scan."""
        spec = self.spec
        rels = [check_relative(to_bytes(e[0], e[1])) for e in entries]  # refuses '..' and absolute paths
        kinds = bytes(KIND_CODES.get(e[2], 255) for e in entries)
        sizes, mtimes = [e[3] for e in entries], [e[4] for e in entries]
        root_id = host_pin(spec.root, spec.root_id)  # this host's mount of the job's root (operators.root_identity)
        ids = [identity(e) for e in entries]
        inos, ctimes = [i for i, _ in ids], [c for _, c in ids]
        counts = RmCounts()
        for lo, hi in _spans(len(rels)):

            def call(fan: int, lo: int = lo, hi: int = hi) -> _native.RmBatch:
                return _native.rm_unlink_rels(
                    spec.root_bytes,
                    rels[lo:hi],
                    kinds[lo:hi],
                    sizes[lo:hi],
                    mtimes[lo:hi],
                    not spec.ignore_changes,
                    spec.dry_run,
                    fan,
                    spec.sample_limit,
                    root_id=root_id,
                    inos=inos[lo:hi],
                    ctimes=ctimes[lo:hi],
                )

            _add_batch(counts, rels[lo:hi], fanned(spec.threads, hi - lo, call), spec.sample_limit, dirs=False)
        return counts

    def rmdir_chunk(self, rels: list[bytes], check: bool) -> RmCounts:
        """Remove directories of one depth level (``b""``: the root); ``check``: only if still directories."""
        spec = self.spec
        rels = [check_relative(rel) if rel else rel for rel in rels]
        root_id = host_pin(spec.root, spec.root_id)
        counts = RmCounts()
        for lo, hi in _spans(len(rels)):

            def call(fan: int, lo: int = lo, hi: int = hi) -> _native.RmBatch:
                return _native.rm_rmdir_rels(
                    spec.root_bytes,
                    rels[lo:hi],
                    check and not spec.ignore_changes,
                    spec.dry_run,
                    fan,
                    spec.sample_limit,
                    root_id=root_id,
                )

            _add_batch(counts, rels[lo:hi], fanned(spec.threads, hi - lo, call), spec.sample_limit, dirs=True)
        return counts


KIND_CODES = {"file": 0, "directory": 1, "symlink": 2, "other": 3}  # as operators._native reads them
STATUSES = (FAILED, CHANGED, NONEMPTY)  # the core's status codes, in order


def _spans(n: int) -> Iterator[tuple[int, int]]:
    """Slices of a chunk, one native call each: the whole chunk, or ``BATCH`` entries at a time with
    their tokens taken first when an ops/s cap is set (so the cap paces the batch, not the chunk)."""
    if not ops_capped():
        if n:
            yield 0, n
        return
    for lo in range(0, n, BATCH):
        hi = min(n, lo + BATCH)
        take_ops(hi - lo)
        yield lo, hi


def _problem(errno_: int, message: str | None) -> BaseException | str:
    return message if message else OSError(errno_, os.strerror(errno_))


def _add_batch(counts: RmCounts, rels: list[bytes], result: _native.RmBatch, limit: int, dirs: bool) -> None:
    """Fold what ``rm_unlink_rels``/``rm_rmdir_rels`` returned into ``counts``."""
    removed, nbytes, missing, problems, samples = result
    if dirs:
        counts.removed_dirs += removed
    else:
        counts.removed_files += removed
        counts.bytes += nbytes
    counts.skipped_missing += missing
    for index, status, errno_, message in problems:
        counts.problem(rels[index], STATUSES[status], _problem(errno_, message))
    for index in samples:
        counts.sample(rels[index], limit)


class LocalTreeRemover:
    """A ``walk`` Lister that empties each directory it lists of everything but directories, in the
    native core (``rm_clear_dir``, one call per directory), and hands the directories to the walk,
    which opens them relative to their parent with ``O_NOFOLLOW`` (root included): a directory
    swapped for a symlink is never followed.  Counts and problems gather in :attr:`counts`.

    With a prune, or an ops/s cap, Python lists the directory (the prune decides per name; the cap
    is paced per ``BATCH``) and the core removes the names it is given.
    """

    def __init__(self, spec: RemoveSpec) -> None:
        self.spec = spec
        self._open = OpenDirs(spec.root_bytes, follow_root=False)
        self.prune = spec.prune if spec.prune is not None and spec.prune.active else None
        self.want_dev = self.prune is not None and self.prune.device is not None  # --one-file-system
        self.kept: set[bytes] = set()  # directories holding a non-directory the prune keeps in place
        self.counts = RmCounts()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the directories kept open for relative opens (the end of a task)."""
        self._open.close()

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(b".", "directory", error)

    def open_failed(self, rel: bytes, exc: OSError, listing: Listing) -> None:
        if isinstance(exc, FileNotFoundError):
            listing.vanished = True
        elif exc.errno in (errno.ELOOP, errno.ENOTDIR):
            listing.error = OSError(exc.errno, "no longer a directory (not followed)")
        else:
            listing.error = exc

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        listing, rel, handle = open_listing(self._open, item, self.open_failed)
        if handle is None:
            return listing
        try:
            if self.prune is None and not ops_capped():
                self._clear(handle.fd, rel, None, listing)
            else:
                names = self._names(handle.fd, rel, listing)
                for lo in range(0, len(names), BATCH):
                    take_ops(min(BATCH, len(names) - lo))
                    self._clear(handle.fd, rel, names[lo : lo + BATCH], listing)
        finally:
            handle.release()
        return listing

    def _names(self, fd: int, rel: bytes, listing: Listing) -> list[bytes]:
        """The non-directories of ``fd`` the prune lets go (directories go to the walk by ``d_type``)."""
        names = []
        try:
            with os.scandir(fd) as it:  # names come back as str (surrogateescape) from a descriptor
                for entry in it:
                    name = os.fsencode(entry.name)
                    if entry.is_dir(follow_symlinks=False):
                        listing.subdirs.append(self._subdir(fd, rel, name))
                    elif self.prune is not None and self.prune.decide(decode(join(rel, name))[0], False) == DROP:
                        self.kept.add(rel)  # never unlinked: the walk's prune would see the row only after
                    else:
                        names.append(name)
        except FileNotFoundError:
            listing.vanished = True
        except OSError as exc:
            listing.error = exc
        return names

    def _subdir(self, fd: int, rel: bytes, name: bytes) -> DirItem:
        """A directory to walk, with its device for ``--one-file-system`` (one more lstat)."""
        child = join(rel, name)
        if not self.want_dev:
            return child, dir_row(child)
        try:
            return child, dir_row(child, os.stat(name, dir_fd=fd, follow_symlinks=False).st_dev)
        except OSError:
            return child, dir_row(child)  # gone or unreadable: opening it tells

    def _clear(self, fd: int, rel: bytes, names: list[bytes] | None, listing: Listing) -> None:
        spec = self.spec
        result = fanned(
            spec.threads,
            len(names) if names is not None else None,
            lambda fan: _native.rm_clear_dir(fd, spec.dry_run, self.want_dev, fan, spec.sample_limit, names),
            count=lambda r: r[1],
        )
        list_errno, seen, removed, nbytes, subdirs, problems, samples = result
        if list_errno == errno.ENOENT:
            listing.vanished = True
        elif list_errno:
            listing.error = OSError(list_errno, os.strerror(list_errno))
        for name, dev in subdirs:
            child = join(rel, name)
            listing.subdirs.append((child, dir_row(child, dev if self.want_dev else None)))
        # (entries, files, symlinks, other, bytes, errors, pruned, directories) for the walk's tally and budget
        listing.counts.append(((seen - len(subdirs), removed, 0, 0, nbytes, len(problems), 0, 0), []))
        with self._lock:
            counts = self.counts
            counts.removed_files += removed
            counts.bytes += nbytes
            for name, errno_ in problems:
                counts.problem(join(rel, name), FAILED, OSError(errno_, os.strerror(errno_)))
            for name in samples:
                counts.sample(join(rel, name), spec.sample_limit)


def unpruned(prune: Prune | None, files: list[Row], kept: set[bytes]) -> list[Row]:
    """The listed non-directory rows a tree remover may delete: those ``prune`` does not keep in place
    (the directories of the kept ones go into ``kept``, never removed).  Every listing remover's one filter."""
    if prune is None:
        return files
    keep = []
    for r in files:
        if prune.decide(r[0], False) == DROP:
            kept.add(str(r[0]).rpartition("/")[0].encode("utf-8", "surrogateescape"))
        else:
            keep.append(r)
    return keep


class ListingTreeRemover:
    """A ``walk`` Lister for a store: lists like a scan (``lister``) and deletes each listing's keys in bulk as it
    goes, page by page.  What the obstore and fsspec tree removers share (the prune filter, the batches, the dry
    run, the ops cap); a subclass says how one batch of keys is deleted (:meth:`delete`) and its size (``batch``)."""

    batch = 1000  # keys per bulk delete request (S3's DeleteObjects maximum)

    def __init__(self, spec: RemoveSpec, lister) -> None:
        self.lister = lister
        self.dry_run = spec.dry_run
        self.prune = spec.prune if spec.prune is not None and spec.prune.active else None
        self.kept: set[bytes] = set()
        self.counts = RmCounts()  # nothing here: removed keys come back as rows

    def root_error_row(self, error: BaseException) -> Row:
        return self.lister.root_error_row(error)

    def close(self) -> None:
        self.lister.close()

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        listing = self.lister.list_dir(item, pool)
        self._take(listing, pool)
        return listing

    def _take(self, listing: Listing, pool: Executor) -> None:
        """Queue the deletion of the listing's objects (and of each further page's, as the walk asks)."""
        files = unpruned(self.prune, [r for r in listing.rows if r[2] != "directory"], self.kept)
        listing.rows = [r for r in listing.rows if r[2] == "directory"]
        for start in range(0, len(files), self.batch):
            listing.pending.append(pool.submit(self.rm_batch, files[start : start + self.batch]))
        more = listing.more
        if more is not None:

            def next_page() -> Listing:
                got = more()
                self._take(got, pool)
                return got

            listing.more = next_page

    def rm_batch(self, rows: list[Row]) -> tuple[list[Row], list[DirItem]]:
        if self.dry_run or not rows:
            return rows, []
        take_ops(len(rows))
        return self.delete(rows), []

    def delete(self, rows: list[Row]) -> list[Row]:
        """Delete the keys of ``rows``; the rows back, each that failed with its error."""
        raise NotImplementedError


def pooled(spec: RemoveSpec, fn: Callable[[list], RmCounts], items: list) -> RmCounts:
    """``fn`` over ``items`` in batches of ``BATCH`` on the process's pool, the counts added up."""

    def one(batch: list) -> RmCounts:
        take_ops(len(batch))
        return fn(batch)

    counts = RmCounts()
    pool = spec.pool()
    for job in [pool.submit(one, items[i : i + BATCH]) for i in range(0, len(items), BATCH)]:
        counts.add(job.result(), spec.sample_limit)
    return counts


def _changed(
    entry: Entry,
    kind: str,
    size: int | None,
    mtime_ns: int | None,
    ino: int | None = None,
    ctime_ns: int | None = None,
    etag: str | None = None,
) -> str | None:
    """The identity rule on what another file system reported: the core's (``Expect::differs``: type, size,
    mtime, inode, ctime, each where both sides know it), then the entity tag where the row and the store both
    have one: an object rewritten with the same size within the same second (a store's last-modified has
    seconds) has another tag, so it is not the object the scan saw.  A row without one (a schema v1/v2
    manifest, a backend without tags) is judged by the rest alone."""
    want = (KIND_CODES.get(entry[2], 255), entry[3], entry[4], *identity(entry))
    why = _native.rm_identity_changed(want, (KIND_CODES.get(kind, 255), size, mtime_ns, ino, ctime_ns))
    if why is None:
        was = entry_etag(entry)
        if was is not None and etag is not None and _tag(was) != _tag(etag):
            return f"etag {was} -> {etag}: replaced since the scan"
    return why


def _tag(etag: str) -> str:
    """An entity tag without its quotes and weak mark (``W/"x"`` and ``x`` are the same tag): a store may quote
    it in a listing and not in a HEAD's header, or the reverse."""
    etag = etag.strip()
    if etag.startswith("W/"):
        etag = etag[2:]
    return etag.strip('"')
