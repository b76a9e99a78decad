"""Listing local and mounted file systems (NFS, Lustre, CephFS, GlusterFS) with scandir + lstat.

Everything is bytes, so names that are not valid UTF-8 survive exactly.  Symlinks are never
followed: ``lstat`` decides what is a directory, so a link to a directory (or a link loop) is
recorded as a symlink and not descended into.
"""

from __future__ import annotations

import os
import stat as st
from concurrent.futures import ThreadPoolExecutor

from .names import join
from .ratelimit import take_ops
from .rows import Row, error_row, row_from_stat
from .walk import DirItem, Listing

STAT_BATCH = 256


class LocalLister:
    def __init__(self, root: str | bytes) -> None:
        self.root = os.fsencode(root).rstrip(b"/") or b"/"

    def full(self, rel: bytes) -> bytes:
        if not rel:
            return self.root
        return self.root + rel if self.root == b"/" else self.root + b"/" + rel

    def root_error_row(self, error: BaseException) -> Row:
        return error_row(b".", "directory", error)

    def list_dir(self, item: DirItem, pool: ThreadPoolExecutor) -> Listing:
        rel = item[0]
        assert isinstance(rel, bytes)
        listing = Listing(item)
        batch: list[tuple[bytes, bool]] = []
        try:
            with os.scandir(self.full(rel)) as it:
                for entry in it:
                    batch.append((entry.name, entry.is_dir(follow_symlinks=False)))
                    if len(batch) >= STAT_BATCH:
                        listing.pending.append(pool.submit(self.stat_batch, rel, batch))
                        batch = []
        except FileNotFoundError:
            listing.vanished = True
        except NotADirectoryError:
            listing.vanished = True  # replaced by a file since its parent was listed
        except OSError as exc:
            listing.error = exc
        listing.rows, listing.subdirs = self.stat_batch(rel, batch)
        return listing

    def stat_batch(self, rel: bytes, names: list[tuple[bytes, bool]]) -> tuple[list[Row], list[DirItem]]:
        rows: list[Row] = []
        subdirs: list[DirItem] = []
        base = self.full(rel)
        for name, looked_like_dir in names:
            path = join(rel, name)
            full = base + b"/" + name if base != b"/" else b"/" + name
            take_ops()
            try:
                s = os.lstat(full)
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
                    target = os.readlink(full)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    rows.append(error_row(path, "symlink", exc))
                    continue
            rows.append(row_from_stat(path, s, target))
        return rows, subdirs
