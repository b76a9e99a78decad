"""Writing into a destination tree only through directory descriptors opened from its pinned root.

The one rule for every create, chmod/chown, utimes, rename and unlink pfs does in a destination:
it happens relative to the descriptor of the entry's parent directory, opened from the root one
component at a time with ``O_NOFOLLOW`` (``operators.core.dirfd.OpenDirs``).  A symlink planted in the
destination (``dst/a -> /elsewhere``) is then an error for that entry (``ELOOP``/``ENOTDIR``), never
followed: nothing outside the root is created, chmod'ed or touched.  Directory metadata is set with
``fchown``/``fchmod``/``futimens`` on the directory itself, opened ``O_NOFOLLOW | O_DIRECTORY``
relative to its parent.  The root is opened once and kept (pinned): a root swapped for a link
mid-job does not move the job.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat as st
from collections.abc import Callable, Iterator

from operators.copy.spec import is_temp_name
from operators.core.dirfd import OPEN_DIR, OpenDirs

DIR_NOFOLLOW = OPEN_DIR | os.O_NOFOLLOW


class PlantedLinkError(OSError):
    """A component of a destination path is a symlink (or not a directory): never followed."""


def _explain(rel: bytes, exc: OSError, itself: bool = False) -> OSError:
    """ELOOP/ENOTDIR while opening down to ``rel``: say it plainly (a failed entry, not a crash)."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        where = f"destination {os.fsdecode(rel)!r}" if itself else f"a destination directory above {os.fsdecode(rel)!r}"
        return PlantedLinkError(exc.errno, f"{where} is a symlink or not a directory; not followed")
    return exc


def _writable(parent: int, name: bytes, s: os.stat_result) -> None:
    """An existing directory of ours that we may not write (a read-only one an earlier run settled):
    owner-writable for now, like one this run makes; its real mode comes last."""
    if s.st_uid != os.geteuid() or os.access(name, os.W_OK | os.X_OK, dir_fd=parent, effective_ids=True):
        return
    fd = os.open(name, DIR_NOFOLLOW, dir_fd=parent)
    try:
        os.fchmod(fd, st.S_IMODE(s.st_mode) | 0o700)
    finally:
        os.close(fd)


class PinnedRoot:
    """A destination root opened once; everything below it reached through :class:`OpenDirs`."""

    def __init__(self, root: bytes | str) -> None:
        self.root = os.fsencode(root)
        self.dirs = OpenDirs(self.root)

    def close(self) -> None:
        self.dirs.close()

    @contextlib.contextmanager
    def parent(self, rel: bytes) -> Iterator[tuple[int, bytes]]:
        """``(descriptor of rel's parent, rel's last name)``, held while the caller acts on the name."""
        with self.dirs.parent(rel, explain=lambda exc: _explain(rel, exc)) as held:
            yield held

    @contextlib.contextmanager
    def proc_path(self, rel: bytes) -> Iterator[bytes]:
        """``/proc/self/fd/<parent>/<name>``: a path for APIs that take only paths (fsspec's
        ``get_file``), resolved through the held parent so no component can be swapped."""
        with self.parent(rel) as (fd, name):
            yield b"/proc/self/fd/%d/%s" % (fd, name)

    @contextlib.contextmanager
    def directory(self, rel: bytes) -> Iterator[int]:
        """The directory ``rel`` itself (``b""``: the root), opened ``O_NOFOLLOW | O_DIRECTORY``."""
        if not rel:
            fd = os.open(self.root, OPEN_DIR)
        else:
            with self.parent(rel) as (pfd, name):
                try:
                    fd = os.open(name, DIR_NOFOLLOW, dir_fd=pfd)
                except OSError as exc:
                    raise _explain(rel, exc, itself=True) from None
        try:
            yield fd
        finally:
            os.close(fd)

    def make_dir(self, rel: bytes, mode: int = 0o700) -> bool:
        """Create the directory ``rel`` (True), or accept an existing real one (False); a symlink or a
        file there is an error.  Missing parents are made first, from the top down, each relative to the
        one above (a loop, up to the first that exists, then down: 10,000 missing levels need no stack)."""
        if not rel:
            return False  # the root: opened (so there) when the job pinned it
        try:
            return self._make_one(rel, mode)
        except FileNotFoundError:
            if b"/" not in rel:
                raise
        ends = []  # where each missing ancestor's path ends, deepest first: up to the first that exists
        end = rel.rfind(b"/")
        while end > 0:
            try:
                self._make_one(rel[:end], mode)
                break
            except FileNotFoundError:
                ends.append(end)
                end = rel.rfind(b"/", 0, end)
        for end in reversed(ends):
            self._make_one(rel[:end], mode)
        return self._make_one(rel, mode)

    def _make_one(self, rel: bytes, mode: int) -> bool:
        """``make_dir`` of ``rel`` whose parent exists (FileNotFoundError otherwise)."""
        with self.parent(rel) as (fd, name):
            try:
                os.mkdir(name, mode, dir_fd=fd)
                return True
            except FileExistsError:
                s = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if st.S_ISLNK(s.st_mode):
                    raise PlantedLinkError(
                        errno.ELOOP, f"destination {os.fsdecode(rel)!r} is a symlink, not a directory; not followed"
                    ) from None
                if not st.S_ISDIR(s.st_mode):
                    raise FileExistsError(errno.EEXIST, f"exists and is not a directory: {os.fsdecode(rel)}") from None
                _writable(fd, name, s)
                return False

    def make_parents(self, rel: bytes, mode: int = 0o700) -> None:
        """Make sure the parent directories of ``rel`` exist (each made relative to the one above)."""
        parent_rel = rel.rpartition(b"/")[0]
        if parent_rel:
            self.make_dir(parent_rel, mode)

    def dir_meta(
        self,
        rel: bytes,
        *,
        mode: int | None,
        times_ns: tuple[int, int] | None,
        owner: tuple[int, int] | None = None,
        attrs: Callable[[int], list[tuple[bytes, int]]] | None = None,
    ) -> list[tuple[bytes, int]]:
        """Ownership, mode, extended attributes (``attrs(fd)``) and times of the directory ``rel``, on
        its own descriptor; returns what the destination refused of the owner and the attributes."""
        refused: list[tuple[bytes, int]] = []
        with self.directory(rel) as fd:
            if owner is not None:
                try:
                    os.fchown(fd, *owner)  # before chmod: chown clears set-id bits
                except OSError as exc:
                    refused.append((b"owner %d:%d" % owner, exc.errno or 0))
            if mode is not None:
                os.fchmod(fd, st.S_IMODE(mode))
            if attrs is not None:
                refused += attrs(fd)
            if times_ns is not None:
                os.utime(fd, ns=times_ns)
        return refused

    def remove_stale_temps(self, rel: bytes, token: str) -> int:
        """Delete the temp files of the job ``token`` names (``.NAME.pfs-tmp-<token>``) that its killed
        parts left in the directory ``rel``.

        Only this job's: a name like ``.mine.pfs-tmp-old`` may be a user's file, or another job's
        temp file that job still needs; neither is this job's to remove."""
        if not token:
            raise ValueError("a job's token names the temp files it may remove")
        removed = 0
        with self.directory(rel) as fd:
            for name in os.listdir(fd):
                raw = os.fsencode(name)
                if not is_temp_name(raw, token):
                    continue
                with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                    if not st.S_ISDIR(os.stat(raw, dir_fd=fd, follow_symlinks=False).st_mode):
                        os.unlink(raw, dir_fd=fd)
                        removed += 1
        return removed

    def unlink_quietly(self, rel: bytes) -> None:
        with contextlib.suppress(OSError), self.parent(rel) as (fd, name):
            os.unlink(name, dir_fd=fd)

    def rename(self, old: bytes, new: bytes) -> None:
        """Rename ``old`` to ``new`` (both relative to the root), neither through a link."""
        with self.parent(old) as (ofd, oname), self.parent(new) as (nfd, nname):
            os.rename(oname, nname, src_dir_fd=ofd, dst_dir_fd=nfd)


__all__ = ["DIR_NOFOLLOW", "PinnedRoot", "PlantedLinkError"]
