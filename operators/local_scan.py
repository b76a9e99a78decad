"""Listing local and mounted file systems (NFS, Lustre, CephFS, GlusterFS) with scandir + lstat.

Everything is bytes, so names that are not valid UTF-8 survive exactly.  Symlinks are never
followed: ``lstat`` decides what is a directory, so a link to a directory (or a link loop) is
recorded as a symlink and not descended into.

Each directory is opened once, relative to its parent while that is still open, and its entries
are stat-ed relative to it (``operators.dirfd``: why, with measurements).
The first entries of a directory go out in small batches, so even a lone directory (a deep
chain, a narrow frontier) spreads its stats over many threads; later ones in large batches.
"""

from __future__ import annotations

import errno
import os
import stat as st
from concurrent.futures import ThreadPoolExecutor

from .checksum import OPEN_FILE, checksum_and_close
from .dirfd import OpenDirs
from .names import join
from .ratelimit import take_ops
from .rows import Row, error_row, row_from_stat
from .walk import DirItem, Listing

SMALL_BATCH = 8  # stats per job for a directory's first SPREAD entries
SPREAD = 256
STAT_BATCH = 256  # stats per job after that: fewer, larger jobs for big directories


class LocalLister:
    def __init__(self, root: str | bytes) -> None:
        self.root = os.fsencode(root).rstrip(b"/") or b"/"
        self._open = OpenDirs(self.root)

    def close(self) -> None:
        """Close the directories kept open for relative lookups (the end of a task)."""
        self._open.close()

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(b".", "directory", error)

    def list_dir(self, item: DirItem, pool: ThreadPoolExecutor) -> Listing:
        rel = item[0]
        assert isinstance(rel, bytes)
        listing = Listing(item)
        try:
            handle = self._open.open(rel)
        except (FileNotFoundError, NotADirectoryError):
            listing.vanished = True  # gone, or replaced by a file since its parent was listed
            return listing
        except OSError as exc:
            if rel and exc.errno == errno.ELOOP:
                listing.vanished = True  # replaced by a symlink: never followed
            else:
                listing.error = exc
            return listing
        batch: list[tuple[bytes, bool]] = []
        seen = 0
        try:
            with os.scandir(handle.fd) as it:  # names come back as str (surrogateescape) from a descriptor
                for entry in it:
                    batch.append((os.fsencode(entry.name), entry.is_dir(follow_symlinks=False)))
                    seen += 1
                    if len(batch) >= (SMALL_BATCH if seen <= SPREAD else STAT_BATCH):
                        listing.pending.append(handle.submit(pool, self.stat_batch, rel, batch))
                        batch = []
        except FileNotFoundError:
            listing.vanished = True
        except OSError as exc:
            listing.error = exc
        try:
            listing.rows, listing.subdirs = self.stat_batch(handle.fd, rel, batch)
        finally:
            handle.release()
        return listing

    def stat_batch(self, dir_fd: int, rel: bytes, names: list[tuple[bytes, bool]]) -> tuple[list[Row], list[DirItem]]:
        """Rows for ``names`` in directory ``rel``, stat-ed relative to its descriptor ``dir_fd``."""
        rows: list[Row] = []
        subdirs: list[DirItem] = []
        for name, looked_like_dir in names:
            path = join(rel, name)
            take_ops()
            try:
                s = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished since the listing: no phantom row
            except OSError as exc:
                rows.append(error_row(path, "directory" if looked_like_dir else "other", exc))
                continue
            if st.S_ISDIR(s.st_mode):
                subdirs.append((path, row_from_stat(path, s)))
                continue
            target = None
            if st.S_ISLNK(s.st_mode):
                try:
                    target = os.readlink(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    rows.append(error_row(path, "symlink", exc))
                    continue
            rows.append(row_from_stat(path, s, target))
        return rows, subdirs

    def checksum(self, rel: bytes, algorithm: str) -> str:
        """A file's checksum, opened relative to its parent directory (kept open, or opened once)."""
        return checksum_and_close(self._open.open_file(rel, OPEN_FILE), algorithm)
