"""Listing a local tree in Python (scandir) and handing each batch of names to a subclass: the
tree remover's walk (``operators.removers.LocalTreeRemover``) until rm moves onto the compiled core.
The scan lists on the core (``operators.local_scan``).

Everything is bytes, so names that are not valid UTF-8 survive exactly.  Symlinks are never
followed.  Each directory is opened once, relative to its parent while that is still open, and its
entries are handled relative to it (``operators.dirfd``: why, with measurements).
The first entries of a directory go out in small batches, so even a lone directory (a deep
chain, a narrow frontier) spreads its work over many threads; later ones in large batches.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import Executor

from .dirfd import OpenDirs
from .names import join
from .rows import Row, dir_row, error_row
from .walk import DirItem, Listing

SMALL_BATCH = 8  # stats per job for a directory's first SPREAD entries
SPREAD = 256
STAT_BATCH = 256  # stats per job after that: fewer, larger jobs for big directories


class TreeLister:
    """Lists a directory relative to its open descriptor and hands its entries to :meth:`batch`
    in jobs on the pool (a subclass says what a batch does).

    Class attributes say how a subclass differs: ``follow_root`` (the scan follows a root that is
    a symlink, like ``find -H``; a remover never does), ``dirs_by_type`` (queue directories the
    listing's ``d_type`` names without a stat of their own), and the batch sizes.
    """

    follow_root = True
    dirs_by_type = False
    small_batch = SMALL_BATCH
    spread = SPREAD
    large_batch = STAT_BATCH

    def __init__(self, root: str | bytes) -> None:
        self.root = os.fsencode(root).rstrip(b"/") or b"/"
        self._open = OpenDirs(self.root, follow_root=self.follow_root)

    def close(self) -> None:
        """Close the directories kept open for relative lookups (the end of a task)."""
        self._open.close()

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(b".", "directory", error)

    def open_failed(self, rel: bytes, exc: OSError, listing: Listing) -> None:
        """A directory could not be opened: gone, or replaced by a file or a symlink (never followed),
        is a vanished directory; anything else is its error."""
        if isinstance(exc, FileNotFoundError | NotADirectoryError) or (rel and exc.errno == errno.ELOOP):
            listing.vanished = True
        else:
            listing.error = exc

    def list_dir(self, item: DirItem, pool: Executor) -> Listing:
        rel = item[0]
        assert isinstance(rel, bytes)
        listing = Listing(item)
        try:
            handle = self._open.open(rel)
        except OSError as exc:
            self.open_failed(rel, exc, listing)
            return listing
        batch: list[tuple[bytes, bool]] = []
        seen = 0
        try:
            with os.scandir(handle.fd) as it:  # names come back as str (surrogateescape) from a descriptor
                for entry in it:
                    name = os.fsencode(entry.name)
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False  # the stat in the batch decides
                    if is_dir and self.dirs_by_type:
                        listing.subdirs.append(self.subdir(join(rel, name), entry))
                        continue
                    batch.append((name, is_dir))
                    seen += 1
                    if len(batch) >= (self.small_batch if seen <= self.spread else self.large_batch):
                        listing.pending.append(handle.submit(pool, self.batch, rel, batch))
                        batch = []
        except FileNotFoundError:
            listing.vanished = True
        except OSError as exc:
            listing.error = exc
        try:
            rows, subdirs = self.batch(handle.fd, rel, batch)
        finally:
            handle.release()
        listing.rows = rows
        listing.subdirs.extend(subdirs)
        return listing

    def subdir(self, child: bytes, entry: os.DirEntry) -> DirItem:
        """A directory the listing's ``d_type`` names (``dirs_by_type``), queued without a stat."""
        return child, dir_row(child)

    def batch(self, dir_fd: int, rel: bytes, names: list[tuple[bytes, bool]]) -> tuple[list[Row], list[DirItem]]:
        """What is done to a batch of a directory's entries: rows and directories to walk."""
        raise NotImplementedError
