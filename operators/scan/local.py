"""Scanning local and mounted file systems (NFS, Lustre, CephFS, GlusterFS) on the compiled core.

Each directory is opened once, relative to its parent while that is still open
(``operators.core.dirfd``: why, with measurements), and handed to the core (``operators._native``,
``native/src/scan.rs``), which lists it and ``fstatat``s its entries relative to its descriptor
without the interpreter lock, writing their rows as Arrow columns into the task's :class:`Sink`.
Python sees one call per step of a directory (up to :data:`STEP_ENTRIES` entries) and one tuple
per subdirectory, never an object per file.

Everything is bytes, so names that are not valid UTF-8 survive exactly (``path_raw``).  Symlinks
are never followed: ``lstat`` decides what is a directory, so a link to a directory (or a link
loop) is recorded as a symlink and not descended into.

On a network mount a step's stats fan out over the core's own threads (:data:`NETWORK_WIDTH` per
step, in chunks of :data:`NETWORK_CHUNK`), so the operations in flight are many times the Python
threads the auto-tuned pool runs (with ``--threads N``, as many as the process's N permits have
free, ``operators.core.inflight``), when they are round trips: chunks the kernel answers from its
cache (a FUSE or NFS client right after READDIRPLUS) stay on the step's thread, cheaper than a
hand-off.  On a local disk a step stays on its thread unless the directory is big.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import Executor
from functools import partial

import operators._native as _native
from operators.core.concurrency import fixed_threads
from operators.core.dirfd import OpenDirs
from operators.core.inflight import permits
from operators.mounts import is_network
from operators.ratelimit import ops_capped, take_ops
from operators.rows import Row, error_row
from operators.scan.prune import DROP, Prune
from operators.scan.walk import DirItem, Listing, open_listing

STEP_ENTRIES = 65_536  # entries per core call: a huge directory is written out as it goes
LOCAL_CHUNK, LOCAL_WIDTH = 1024, 2  # local disk: only a big directory spreads over a second thread
NETWORK_CHUNK, NETWORK_WIDTH = 4, 16  # network mount: up to 16 stats in flight per Python job
# Local disk: a step walks on below its directory, depth first, until this many entries are written,
# so a tree of small directories costs one Python job per few thousand entries, not one per directory.
# Not on a network mount (there the walk spreads directories over many jobs in flight) nor with a
# prune (the walk decides which directories are entered).
DESCEND = 4096
CAPPED_CHUNK = 1  # under an ops/s cap: a token per entry before its stat, as evenly as the Python path paced them


class LocalLister:
    """A ``walk`` Lister on the core: rows go to :attr:`sink` (the walk's ``RowBuffer`` takes them),
    directories come back to the walk as ``DirItem``s with their row.

    ``prune`` drops non-directories by path in the core's steps (directories are the walk's to
    decide, before they are listed).
    """

    def __init__(self, root: str | bytes, prune: Prune | None = None, threads: int | None = None) -> None:
        self.permits = permits(fixed) if (fixed := fixed_threads(threads)) else None  # --threads N: the bound
        self.root = os.fsencode(root).rstrip(b"/") or b"/"
        self._open = OpenDirs(self.root, follow_root=True)  # a root that is a symlink is followed (find -H)
        self.sink = _native.Sink()
        network = is_network(os.fsdecode(self.root))
        self.chunk, self.width = (NETWORK_CHUNK, NETWORK_WIDTH) if network else (LOCAL_CHUNK, LOCAL_WIDTH)
        self.descend = 0 if network or (prune is not None and prune.active) else DESCEND
        self._keep = _keeper(prune) if prune is not None and prune.needs_tree_walk else None

    def close(self) -> None:
        """Close the directories kept open for relative lookups (the end of a task)."""
        self._open.close()

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(b".", "directory", error)

    def open_failed(self, rel: bytes, exc: OSError, listing: Listing) -> None:
        """Gone, or replaced by a file or a symlink (never followed): a vanished directory."""
        if isinstance(exc, FileNotFoundError | NotADirectoryError) or (rel and exc.errno == errno.ELOOP):
            listing.vanished = True
        else:
            listing.error = exc

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        listing, rel, handle = open_listing(self._open, item, self.open_failed)
        if handle is None:
            return listing
        try:
            scan = _native.DirScan(handle.fd, rel)
        except OSError as exc:
            listing.error = exc
            return listing
        finally:
            handle.release()
        return self._step(scan, listing)

    def _step(self, scan: _native.DirScan, listing: Listing) -> Listing:
        """One core call on ``scan``; a directory not done goes on in a job the walk submits once it
        has taken this step's rows (``Listing.more``), so steps never run ahead of the part writes."""
        # under an ops/s cap the walk is paced, not CPU-bound: no descent, so a step (and with it a
        # task's or the driver's slice) never runs for thousands of capped operations past its budget
        capped = ops_capped()
        take, chunk = (take_ops, min(self.chunk, CAPPED_CHUNK)) if capped else (None, self.chunk)
        descend = 0 if capped else self.descend
        try:
            if self.permits is None:
                step = scan.step(self.sink, STEP_ENTRIES, chunk, self.width, take, self._keep, descend)
            else:  # the step's stats within the process's --threads bound, beside every other job's
                with self.permits.holding(self.width) as width:
                    step = scan.step(self.sink, STEP_ENTRIES, chunk, width, take, self._keep, descend)
        except OverflowError:
            # the sink's columns are near 2 GiB (int32 offsets): nothing was written and the core kept
            # the entries it listed; the walk takes the sink's rows before it runs ``more``
            listing.final = False
            listing.more = partial(self._step, scan, Listing(listing.item))
            return listing
        counts, samples, subdirs, err, done = step
        listing.counts.append((counts, samples))
        listing.subdirs.extend(subdirs)
        if err == errno.ENOENT:
            listing.vanished = True
        elif err:
            listing.error = OSError(err, os.strerror(err))
        if not done:
            listing.final = False  # the directory's own row comes with its last step
            listing.more = partial(self._step, scan, Listing(listing.item))
        return listing


def _keeper(prune: Prune):
    """What the core asks of a prune for a chunk of non-directories: keep each path or not."""

    def keep(paths: list[str]) -> list[bool]:
        return [prune.decide(p, False) != DROP for p in paths]

    return keep
